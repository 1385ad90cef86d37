/**
 * P8: two GPUs, a context on each: the "two GPUs" scenario (bench/scenarios/two-gpus.ts) at full
 * size, judged. The runner's `secondGpu` is the host's other GPU where it has two, else a second
 * device of the same adapter, and the metrics say which. `copyPeer` against its two sides alone; the
 * chunked pipeline split over both against one GPU; the two-stage pipeline against its slowest part.
 */
import type { Context } from 'webgpu-streams';
import type { Variant } from '../schema';
import type { Check } from '../scenarios/common';
import { twoGpus } from '../scenarios/two-gpus';
import { metric, num, round, seedOf, skippedMetric, type PerfGroup, type PerfGroupResult, type PerfOptions } from './common';

export const TARGET_PEER = 0.8;
export const TARGET_SPLIT = 1.7;
export const TARGET_STAGES = 0.8;

export const twoGpusGroup: PerfGroup = {
  id: 'two-gpus',
  title: 'P8: two GPUs (copyPeer, a split pipeline, a two-stage pipeline)',
  metrics: ['P8.peer', 'P8.split', 'P8.stages'],
  async run(ctx: Context, opts: PerfOptions): Promise<PerfGroupResult> {
    const names = { peer: 'copyPeer / min(read-back on A, upload on B)', split: 'split pipeline speedup: two GPUs vs one', stages: 'two-stage pipeline vs its slowest part alone' };
    if (!opts.secondGpu) {
      const why = 'the runner gave no second GPU context (PerfOptions.secondGpu)';
      return { metrics: [skippedMetric(ctx, 'P8.peer', names.peer, 'ratio', `>= ${TARGET_PEER}`, why), skippedMetric(ctx, 'P8.split', names.split, 'x', `>= ${TARGET_SPLIT}`, why), skippedMetric(ctx, 'P8.stages', names.stages, 'ratio', `>= ${TARGET_STAGES}`, why)], tables: [] };
    }
    const seed = seedOf(opts);
    const r = await twoGpus.run(ctx, { quick: opts.quick, secondGpu: opts.secondGpu, params: { seed }, ...(opts.progress ? { progress: opts.progress } : {}) });
    const v = (name: string): Variant => r.variants.find((x) => x.name === name)!;
    const [read, up, peer, one, two, st] = ['read-back on A', 'upload on B', 'copyPeer', '1 GPU', '2 GPUs', 'stages'].map(v) as [Variant, Variant, Variant, Variant, Variant, Variant];
    const checks: Check[] = [{ ok: r.verification.ok, detail: r.verification.detail.replace(/ \(seed \d+\)$/, ''), ...(r.verification.mismatch ? { mismatch: r.verification.mismatch } : {}) }];
    const p = r.params;
    const where = `A: ${ctx.adapterInfo.device || ctx.adapterInfo.description || ctx.adapterInfo.vendor}; B: ${opts.secondGpu.what}. Medians of ${p.repeats} after ${p.warmup} untimed`;
    const peerRatio = peer.gbps! / Math.min(read.gbps!, up.gbps!);
    const split = one.time.median / two.time.median;
    const gpuBound = one.ideal! / one.time.median; // the one-GPU run's ideal is its kernels alone
    const ms = (x: Variant): number => x.time.median;
    const e = st.extra!;
    return {
      metrics: [
        metric(ctx, {
          id: 'P8.peer', name: names.peer, value: peerRatio, unit: 'ratio', target: `>= ${TARGET_PEER.toFixed(2)}`, meets: peerRatio >= TARGET_PEER,
          detail: `${where}. ${Number(p.peerBytes) >> 20} MiB: copyPeer ${num(peer.gbps!)} GB/s; alone: read-back on A ${num(read.gbps!)} GB/s (8 MiB pieces into memory), uploadFrom memory on B ${num(up.gbps!)} GB/s; host memcpy ${num(Number(peer.extra!.hostMemcpyGBps))} GB/s (one thread)`,
          figures: { seed, bytes: p.peerBytes!, peerMs: round(ms(peer)), readMs: round(ms(read)), uploadMs: round(ms(up)), hostMemcpyGBps: peer.extra!.hostMemcpyGBps!, secondGpu: opts.secondGpu.what },
          checks, seed,
        }),
        metric(ctx, {
          id: 'P8.split', name: names.split, value: split, unit: 'x', target: `>= ${TARGET_SPLIT.toFixed(2)} when GPU-bound`, meets: split >= TARGET_SPLIT,
          // The target is for GPU-bound work; elsewhere (one shared device, SwiftShader) it is not judged.
          ...(gpuBound >= 0.8 ? {} : { skipped: `not judged: not GPU-bound (the kernels alone are ${num(gpuBound)} of the one-GPU run, under 0.8), and the target is for GPU-bound work` }),
          detail: `${where}. ${p.chunks} chunks of ${num((Number(p.chunkElements) * 4) / (1 << 20))} MiB, computeIntensive x${p.iterations}: one GPU ${num(ms(one))} ms, two ${num(ms(two))} ms; kernels alone on one GPU ${num(one.ideal!)} ms = ${num(gpuBound)} of the one-GPU run (${gpuBound >= 0.8 ? 'GPU-bound' : 'host- or transfer-bound'})`,
          figures: { seed, chunks: p.chunks!, chunkElements: p.chunkElements!, iterations: p.iterations!, oneMs: round(ms(one)), twoMs: round(ms(two)), kernelsMs: round(one.ideal!), gpuBoundFraction: round(gpuBound) },
          checks, seed,
        }),
        metric(ctx, {
          id: 'P8.stages', name: names.stages, value: st.ideal! / ms(st), unit: 'ratio', target: `>= ${TARGET_STAGES.toFixed(2)}`, meets: st.ideal! / ms(st) >= TARGET_STAGES,
          detail: `${where}. ${p.chunks} chunks: pipeline ${num(ms(st))} ms; alone: stage 1 on A ${num(Number(e.stage1AloneMs))} ms, copyPeer ${num(Number(e.copyPeerAloneMs))} ms, stage 2 on B ${num(Number(e.stage2AloneMs))} ms`,
          figures: { seed, stagesMs: round(ms(st)), stageAMs: e.stage1AloneMs!, peerMs: e.copyPeerAloneMs!, stageBMs: e.stage2AloneMs! },
          checks, seed,
        }),
      ],
      tables: [],
    };
  },
};
