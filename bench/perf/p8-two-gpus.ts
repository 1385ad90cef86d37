/**
 * P8: two GPUs, a context on each (the pipelines are the "two GPUs" scenario's, bench/scenarios/two-gpus.ts) (the runner's `secondGpu`: the host's other GPU where it has two,
 * else a second device of the same adapter, and the metric says which). `copyPeer` GB/s vs one
 * device's read-back and upload alone; a chunked compute pipeline split over both vs one; a
 * two-stage pipeline (stage 1 on A, copyPeer, stage 2 on B) vs its slowest part run alone.
 */
import type { Context } from 'webgpu-streams';
import { COMPUTE_INTENSIVE_TOL, computeIntensiveStep, rng } from '../reference';
import { checkBytes, checkElementwise, type Check } from '../scenarios/common';
import { freeLane, hostOwned, lane, memorySource, readBack, split, stages, timed, type Lane } from '../scenarios/two-gpus';
import { metric, num, round, seedOf, skippedMetric, type PerfGroup, type PerfGroupResult, type PerfOptions } from './common';

interface Params {
  peerBytes: number;
  chunks: number;
  chunkElements: number;
  /** computeIntensive iterations per element: the split pipeline's and each stage's. */
  iterations: number;
  /** Timed runs per figure (the median), after one untimed. */
  repeats: number;
}
const FULL: Params = { peerBytes: 256 << 20, chunks: 16, chunkElements: 4 << 20, iterations: 32768, repeats: 3 };
const QUICK: Params = { peerBytes: 16 << 20, chunks: 4, chunkElements: 1 << 14, iterations: 16, repeats: 1 };

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
    const p = opts.quick ? QUICK : FULL;
    const seed = seedOf(opts);
    const progress = opts.progress ?? (() => {});
    const other = await opts.secondGpu.create();
    const where = `A: ${ctx.adapterInfo.device || ctx.adapterInfo.description || ctx.adapterInfo.vendor}; B: ${opts.secondGpu.what}`;
    const r = rng(seed);
    try {
      // copyPeer vs read-back on A and upload on B alone, same bytes.
      progress('P8: copyPeer', 0.05);
      const bytes = new Uint8Array(r.u32Array(p.peerBytes / 4).buffer);
      const src = ctx.alloc(p.peerBytes, { label: 'p8.src' }), dst = other.alloc(p.peerBytes, { label: 'p8.dst' });
      const sa = ctx.createStream({ label: 'p8.a' }), sb = other.createStream({ label: 'p8.b' });
      sa.upload(bytes, src);
      await sa.synchronize();
      const back = new Uint8Array(p.peerBytes);
      // Each after one untimed run of its own (staging allocated, pipelines warm). The bounds are
      // copyPeer's two sides alone: read-back in 8 MiB pieces into memory; uploadFrom from memory.
      // Every figure: the median of `repeats` runs after one untimed run.
      const warmTimed = async (fn: () => Promise<unknown>): Promise<number> => {
        await fn();
        const t: number[] = [];
        for (let i = 0; i < p.repeats; i++) t.push(await timed(fn));
        return t.sort((x, y) => x - y)[t.length >> 1]!;
      };
      const peerMs = await warmTimed(async () => {
        sb.copyPeer(src, dst);
        await sb.synchronize();
      });
      const readMs = await warmTimed(() => readBack(sa, src, back, 8 << 20));
      const upMs = await warmTimed(async () => {
        sb.uploadFrom(memorySource(bytes), dst);
        await sb.synchronize();
      });
      // The host copy copyPeer makes (read-back mapping into pinned staging), alone: one JS memcpy.
      const memcpyMs = await warmTimed(async () => back.set(bytes));
      back.fill(0); // what the check below reads must come from B
      sb.copyPeer(src, dst);
      sb.download(dst, back);
      await sb.synchronize();
      const peerChecks: Check[] = [checkBytes(`${p.peerBytes >> 20} MiB copied from A to B`, back, bytes)];
      src.destroy();
      dst.destroy();
      const gbs = (ms: number): number => p.peerBytes / 1e6 / ms;
      const peerRatio = gbs(peerMs) / Math.min(gbs(readMs), gbs(upMs));

      // The split pipeline: the same chunks on one GPU (two streams), then on both.
      progress('P8: split pipeline', 0.35);
      const inputs = Array.from({ length: p.chunks }, () => r.f32Array(p.chunkElements, -1, 1));
      const [la, lb] = [lane(ctx, inputs, 'p8.A'), lane(other, inputs, 'p8.B')];
      const [c0, cn] = [0, p.chunks - 1];
      const oneMs = await warmTimed(() => split([la], p.chunks, p.chunkElements, p.iterations));
      const kernelsMs = await warmTimed(() => split([la], p.chunks, p.chunkElements, p.iterations, 'kernels'));
      await hostOwned([la, lb]);
      for (const out of [...la.pinOut, ...lb.pinOut]) out.f32.fill(Number.NaN);
      const twoMs = await warmTimed(() => split([la, lb], p.chunks, p.chunkElements, p.iterations));
      await hostOwned([la, lb]);
      const cost = p.iterations;
      const laneOf = (c: number): Lane => (c % 2 === 0 ? la : lb);
      const splitChecks = [c0, cn].map((c) => checkElementwise(`split chunk ${c} (on ${c % 2 === 0 ? 'A' : 'B'})`, laneOf(c).pinOut[c]!.f32, p.chunkElements, (i) => computeIntensiveStep(inputs[c]![i]!, p.iterations), { costPerElement: cost, tol: COMPUTE_INTENSIVE_TOL }));
      const gpuBound = kernelsMs / oneMs;

      // The two-stage pipeline, and each of its parts alone.
      progress('P8: two-stage pipeline', 0.65);
      for (const out of lb.pinOut) out.f32.fill(Number.NaN);
      const stagesMs = await warmTimed(() => stages(la, lb, p.chunks, p.chunkElements, p.iterations));
      await hostOwned([lb]);
      const stageChecks = [c0, cn].map((c) => checkElementwise(`stage chunk ${c}`, lb.pinOut[c]!.f32, p.chunkElements, (i) => computeIntensiveStep(computeIntensiveStep(inputs[c]![i]!, p.iterations), p.iterations), { costPerElement: 2 * cost, tol: COMPUTE_INTENSIVE_TOL }));
      const aMs = await warmTimed(() => stages(la, lb, p.chunks, p.chunkElements, p.iterations, 'a'));
      const peerPartMs = await warmTimed(() => stages(la, lb, p.chunks, p.chunkElements, p.iterations, 'peer'));
      const bMs = await warmTimed(() => stages(la, lb, p.chunks, p.chunkElements, p.iterations, 'b'));
      const slowest = Math.max(aMs, peerPartMs, bMs);
      freeLane(la);
      freeLane(lb);

      const chunkMiB = (p.chunkElements * 4) / (1 << 20);
      return {
        metrics: [
          metric(ctx, {
            id: 'P8.peer', name: names.peer, value: peerRatio, unit: 'ratio', target: `>= ${TARGET_PEER.toFixed(2)}`, meets: peerRatio >= TARGET_PEER,
            detail: `${where}. ${p.peerBytes >> 20} MiB: copyPeer ${num(gbs(peerMs))} GB/s; alone: read-back on A ${num(gbs(readMs))} GB/s (8 MiB pieces into memory), uploadFrom memory on B ${num(gbs(upMs))} GB/s; host memcpy ${num(gbs(memcpyMs))} GB/s (one thread)`,
            figures: { seed, bytes: p.peerBytes, peerMs: round(peerMs), readMs: round(readMs), uploadMs: round(upMs), memcpyMs: round(memcpyMs), secondGpu: opts.secondGpu.what },
            checks: peerChecks, seed,
          }),
          metric(ctx, {
            id: 'P8.split', name: names.split, value: oneMs / twoMs, unit: 'x', target: `>= ${TARGET_SPLIT.toFixed(2)} when GPU-bound`, meets: oneMs / twoMs >= TARGET_SPLIT,
            detail: `${where}. Medians of ${p.repeats} after one untimed run. ${p.chunks} chunks of ${num(chunkMiB)} MiB, computeIntensive x${p.iterations}: one GPU ${num(oneMs)} ms, two ${num(twoMs)} ms; kernels alone on one GPU ${num(kernelsMs)} ms = ${num(gpuBound)} of the one-GPU run (${gpuBound >= 0.8 ? 'GPU-bound' : 'host- or transfer-bound'})`,
            figures: { seed, chunks: p.chunks, chunkElements: p.chunkElements, iterations: p.iterations, oneMs: round(oneMs), twoMs: round(twoMs), kernelsMs: round(kernelsMs), gpuBoundFraction: round(gpuBound) },
            checks: splitChecks, seed,
          }),
          metric(ctx, {
            id: 'P8.stages', name: names.stages, value: slowest / stagesMs, unit: 'ratio', target: `>= ${TARGET_STAGES.toFixed(2)}`, meets: slowest / stagesMs >= TARGET_STAGES,
            detail: `${where}. ${p.chunks} chunks: pipeline ${num(stagesMs)} ms; alone: stage 1 on A ${num(aMs)} ms, copyPeer ${num(peerPartMs)} ms, stage 2 on B ${num(bMs)} ms`,
            figures: { seed, stagesMs: round(stagesMs), stageAMs: round(aMs), peerMs: round(peerPartMs), stageBMs: round(bMs) },
            checks: stageChecks, seed,
          }),
        ],
        tables: [],
      };
    } finally {
      await other.synchronize().catch(() => undefined);
      other.destroy();
    }
  },
};
