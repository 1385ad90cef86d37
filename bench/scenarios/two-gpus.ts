/**
 * Scenario 7: two GPUs, a context on each (docs/MULTI_GPU.md; where the runner has no second GPU,
 * a second device of the same adapter, and the verdicts say so). Chunks go through pinned memory:
 * - copyPeer: bytes of a buffer on A into one on B, against its two sides alone (read-back on A in
 *   8 MiB pieces into memory, uploadFrom from memory on B); ideal: the slower side alone;
 * - 1 GPU / 2 GPUs: a chunked compute pipeline (upload, computeIntensive, download) on A's two
 *   streams, then its chunks split over both devices; ideal of 2 GPUs: half the one-GPU time;
 * - stages: stage 1 on A (upload, kernel), copyPeer to B, stage 2 on B (kernel, download), chunk
 *   by chunk; ideal: the slowest of the three parts, each run alone.
 * Every output is checked against the CPU reference (sampled where the reference is long).
 */
import type { ScenarioResult, Span, Variant } from '../schema';
import type { Context, DeviceBuffer, GpuEvent, PinnedBuffer, RandomAccessSource, Stream } from 'webgpu-streams';
import { createContext } from 'webgpu-streams';
import { COMPUTE_INTENSIVE_TOL, computeIntensiveStep, randomSeed, rng } from '../reference';
import { measure } from '../stats';
import { type Check, type Scenario, type SecondGpu, TraceRecorder, bytesText, checkBytes, checkElementwise, compare, gbs, grid, librarySpans, ms, resolveParams, round, times, verification } from './common';
import { benchKernels } from '../kernels/index';
import { isSoftwareAdapter } from '../device';

export interface TwoGpusParams {
  peerBytes: number;
  chunks: number;
  /** f32 elements per chunk. */
  chunkElements: number;
  /** computeIntensive iterations per element, per stage. */
  iterations: number;
  warmup: number;
  repeats: number;
  seed: number;
}

const FULL: TwoGpusParams = { peerBytes: 256 << 20, chunks: 16, chunkElements: 4 << 20, iterations: 32768, warmup: 1, repeats: 3, seed: 0 };
const QUICK: TwoGpusParams = { peerBytes: 4 << 20, chunks: 4, chunkElements: 1 << 14, iterations: 16, warmup: 1, repeats: 2, seed: 0 };

/** Full runs on a software adapter (SwiftShader runs the kernels on the CPU): 16 MiB, 1 MiB chunks, 64 iterations. */
const SOFTWARE: Partial<TwoGpusParams> = { peerBytes: 16 << 20, chunks: 8, chunkElements: 1 << 18, iterations: 64 };

/**
 * Two streams on a context, each with an input and an output buffer of one chunk, and pinned host
 * memory for every chunk (inputs written once, outputs read back into): the pipelines measure the
 * GPUs and PCIe, not the staging of pageable arrays.
 */
interface Lane {
  ctx: Context;
  streams: Stream[];
  ins: DeviceBuffer[];
  outs: DeviceBuffer[];
  pinIn: PinnedBuffer[];
  pinOut: PinnedBuffer[];
}

function lane(ctx: Context, inputs: Float32Array[], name: string): Lane {
  const bytes = inputs[0]!.byteLength;
  const streams = [0, 1].map((i) => ctx.createStream({ label: `${name}.s${i}` }));
  const pinIn = inputs.map((x, c) => {
    const p = ctx.allocHost(bytes, 'upload', { label: `${name}.in${c}` });
    p.f32.set(x);
    return p;
  });
  const pinOut = inputs.map((_, c) => ctx.allocHost(bytes, 'download', { label: `${name}.out${c}` }));
  const alloc = (what: string): DeviceBuffer[] => streams.map((s) => ctx.alloc(bytes, { label: `${s.label}.${what}` }));
  return { ctx, streams, ins: alloc('in'), outs: alloc('out'), pinIn, pinOut };
}

function freeLane(l: Lane): void {
  for (const b of [...l.ins, ...l.outs]) b.destroy();
  for (const p of [...l.pinIn, ...l.pinOut]) p.destroy();
}

/** Every pinned buffer of the lanes back on the host (a run may reuse them). */
const hostOwned = (lanes: Lane[]): Promise<unknown> => Promise.all(lanes.flatMap((l) => [...l.pinIn, ...l.pinOut].map((p) => p.ready())));

/** Chunk c: upload, computeIntensive, download, on lane c % lanes, stream (c / lanes) % 2; `kernels`: the kernels alone. */
async function split(lanes: Lane[], chunks: number, elements: number, iterations: number, only?: 'kernels'): Promise<void> {
  await hostOwned(lanes);
  for (let c = 0; c < chunks; c++) {
    const l = lanes[c % lanes.length]!, k = Math.floor(c / lanes.length) % 2, s = l.streams[k]!;
    if (only !== 'kernels') s.upload(l.pinIn[c]!, l.ins[k]!);
    s.launch(benchKernels(l.ctx).computeIntensive, { bindings: [l.ins[k]!, l.outs[k]!], workgroups: grid(elements, 'computeIntensive'), constants: { iterations } });
    if (only !== 'kernels') s.download(l.outs[k]!, l.pinOut[c]!);
  }
  await Promise.all(lanes.map((l) => l.ctx.synchronize()));
}

/** Stage 1 on A (upload, kernel), copyPeer to B, stage 2 on B (kernel, download); `part` runs one of them alone. */
async function stages(a: Lane, b: Lane, chunks: number, elements: number, iterations: number, part?: 'a' | 'b' | 'peer'): Promise<void> {
  await hostOwned([a, b]);
  const copied: GpuEvent[] = [];
  const groups = grid(elements, 'computeIntensive');
  for (let c = 0; c < chunks; c++) {
    const k = c % 2, sa = a.streams[k]!, sb = b.streams[k]!;
    // A's output slot is rewritten two chunks later: only once B copied it.
    if (c >= 2) sa.waitEvent(copied[c - 2]!);
    if (part === undefined || part === 'a') {
      sa.upload(a.pinIn[c]!, a.ins[k]!);
      sa.launch(benchKernels(a.ctx).computeIntensive, { bindings: [a.ins[k]!, a.outs[k]!], workgroups: groups, constants: { iterations } });
    }
    const computed = a.ctx.createEvent();
    sa.record(computed);
    sb.waitEvent(computed);
    if (part === undefined || part === 'peer') sb.copyPeer(a.outs[k]!, b.ins[k]!);
    copied[c] = b.ctx.createEvent();
    sb.record(copied[c]!);
    if (part === undefined || part === 'b') {
      sb.launch(benchKernels(b.ctx).computeIntensive, { bindings: [b.ins[k]!, b.outs[k]!], workgroups: groups, constants: { iterations } });
      sb.download(b.outs[k]!, b.pinOut[c]!);
    }
  }
  await Promise.all([a.ctx.synchronize(), b.ctx.synchronize()]);
}

/** Bytes of `data` as a source `uploadFrom` reads, four reads at once (copyPeer's upload side, from memory). */
const memorySource = (data: Uint8Array): RandomAccessSource => ({
  size: data.byteLength,
  parallel: 4,
  read: async (into, at) => (into.set(data.subarray(at, at + into.byteLength)), into.byteLength),
});

/** Reads `src` back into `into` in pieces of `piece` bytes, all enqueued at once (copyPeer's read-back side, into memory). */
async function readBack(s: Stream, src: DeviceBuffer, into: Uint8Array, piece: number): Promise<void> {
  for (let at = 0; at < into.byteLength; at += piece) s.download(src, into.subarray(at, at + piece), { srcOffset: at, size: Math.min(piece, into.byteLength - at) });
  await s.synchronize();
}

/** Where the runner gives no second GPU: a second device of the page's (or Node's) adapter. */
const sameAdapter: SecondGpu = { create: () => createContext({ label: 'second device', trace: true }), what: 'a second device of the same adapter' };

export const twoGpus: Scenario<TwoGpusParams> = {
  id: 'two-gpus',
  title: 'Two GPUs: copyPeer, a split pipeline, a two-stage pipeline',
  description: 'A context per GPU: bytes copied from one to the other with copyPeer, a chunked compute pipeline split over both against one, and a pipeline whose stage 1 runs on A and stage 2 on B.',
  async run(ctx, opts) {
    const t0 = performance.now();
    const soft = !opts.quick && isSoftwareAdapter(ctx.adapterInfo);
    const p = resolveParams(ctx, { ...opts, params: { ...(soft ? SOFTWARE : {}), ...opts.params } }, FULL, QUICK);
    const seed = p.seed || randomSeed();
    const r = rng(seed);
    const progress = opts.progress ?? (() => {});
    const second = opts.secondGpu ?? sameAdapter;
    const other = await second.create();
    const checks: Check[] = [];
    const variants: Variant[] = [];
    const run = (fn: () => Promise<unknown>): Promise<Variant['time']> => measure(async () => void (await fn()), { warmup: p.warmup, repeats: p.repeats });
    let trace: Span[] = [];
    try {
      progress('two-gpus: copyPeer', 0.05);
      const bytes = new Uint8Array(r.u32Array(p.peerBytes / 4).buffer);
      const src = ctx.alloc(p.peerBytes, { label: 'A.src' }), dst = other.alloc(p.peerBytes, { label: 'B.dst' });
      const sa = ctx.createStream({ label: 'A.peer' }), sb = other.createStream({ label: 'B.peer' });
      sa.upload(bytes, src);
      await sa.synchronize();
      const back = new Uint8Array(p.peerBytes);
      const read = await run(() => readBack(sa, src, back, 8 << 20));
      const up = await run(async () => (sb.uploadFrom(memorySource(bytes), dst), sb.synchronize()));
      const peer = await run(async () => (sb.copyPeer(src, dst), sb.synchronize()));
      // The one host copy copyPeer makes (read-back mapping into pinned staging), alone: a JS memcpy.
      const memcpy = await run(async () => back.set(bytes));
      back.fill(0); // what the check reads must come from B
      sb.download(dst, back);
      await sb.synchronize();
      checks.push(checkBytes(`copyPeer: ${bytesText(p.peerBytes)} from A to B`, back, bytes));
      const rate = (t: Variant['time']): number => round(p.peerBytes / 1e6 / t.median);
      variants.push({ name: 'read-back on A', time: read, ideal: null, gbps: rate(read) }, { name: 'upload on B', time: up, ideal: null, gbps: rate(up) });
      variants.push({ name: 'copyPeer', time: peer, ideal: Math.max(read.median, up.median), gbps: rate(peer), extra: { hostMemcpyGBps: rate(memcpy) } });
      src.destroy();
      dst.destroy();

      progress('two-gpus: split pipeline', 0.3);
      const inputs = Array.from({ length: p.chunks }, () => r.f32Array(p.chunkElements, -1, 1));
      const [la, lb] = [lane(ctx, inputs, 'A'), lane(other, inputs, 'B')];
      const cost = p.iterations;
      const checkOut = (what: string, got: Float32Array, c: number, steps: number): Check =>
        checkElementwise(what, got, p.chunkElements, (i) => {
          let x = inputs[c]![i]!;
          for (let s = 0; s < steps; s++) x = computeIntensiveStep(x, p.iterations);
          return x;
        }, { costPerElement: steps * cost, tol: COMPUTE_INTENSIVE_TOL });
      const kernels = await run(() => split([la], p.chunks, p.chunkElements, p.iterations, 'kernels'));
      const one = await run(() => split([la], p.chunks, p.chunkElements, p.iterations));
      await hostOwned([la]);
      checks.push(checkOut(`1 GPU: chunk ${p.chunks - 1}`, la.pinOut[p.chunks - 1]!.f32, p.chunks - 1, 1));
      // The timeline: the last repeat, A's lanes and B's (both on the host's clock).
      const recorder = new TraceRecorder(ctx);
      let from = 0;
      const two = await measure((info) => {
        if (info.last) from = performance.now();
        return recorder.record(() => split([la, lb], p.chunks, p.chunkElements, p.iterations), info.last).then(() => undefined);
      }, { warmup: p.warmup, repeats: p.repeats });
      trace = [...recorder.result(), ...librarySpans(other, from).map((x) => ({ ...x, lane: `B ${x.lane}` }))];
      await hostOwned([la, lb]);
      for (const c of [0, p.chunks - 1]) checks.push(checkOut(`2 GPUs: chunk ${c} (on ${c % 2 ? 'B' : 'A'})`, (c % 2 ? lb : la).pinOut[c]!.f32, c, 1));
      variants.push({ name: '1 GPU', time: one, ideal: kernels.median, extra: { kernelsAloneMs: round(kernels.median) } });
      variants.push({ name: '2 GPUs', time: two, ideal: one.median / 2, baseline: '1 GPU' });

      progress('two-gpus: two-stage pipeline', 0.65);
      const stageA = await run(() => stages(la, lb, p.chunks, p.chunkElements, p.iterations, 'a'));
      const stagePeer = await run(() => stages(la, lb, p.chunks, p.chunkElements, p.iterations, 'peer'));
      const stageB = await run(() => stages(la, lb, p.chunks, p.chunkElements, p.iterations, 'b'));
      for (const out of lb.pinOut) out.f32.fill(Number.NaN);
      const both = await run(() => stages(la, lb, p.chunks, p.chunkElements, p.iterations));
      await hostOwned([lb]);
      for (const c of [0, p.chunks - 1]) checks.push(checkOut(`stages: chunk ${c}`, lb.pinOut[c]!.f32, c, 2));
      const slowest = Math.max(stageA.median, stagePeer.median, stageB.median);
      variants.push({ name: 'stages', time: both, ideal: slowest, extra: { stage1AloneMs: round(stageA.median), copyPeerAloneMs: round(stagePeer.median), stage2AloneMs: round(stageB.median) } });
      freeLane(la);
      freeLane(lb);
    } finally {
      await other.synchronize().catch(() => undefined);
      other.destroy();
    }
    compare(variants);
    const v = (name: string): Variant => variants.find((x) => x.name === name)!;
    const peer = v('copyPeer'), st = v('stages'), twoV = v('2 GPUs');
    const verdicts = [
      `second GPU: ${second.what}`,
      `copyPeer ${gbs(peer.gbps!)}: ${times(peer.ideal! / peer.time.median)} its slower side alone (read-back on A ${gbs(v('read-back on A').gbps!)}, upload on B ${gbs(v('upload on B').gbps!)})`,
      `split pipeline: 2 GPUs ${times(twoV.speedup ?? Number.NaN)} one (ideal 2.00x; the kernels are ${Math.round((v('1 GPU').ideal! / v('1 GPU').time.median) * 100)}% of the one-GPU run)`,
      `two-stage pipeline ${ms(st.time.median)} against its slowest part alone ${ms(st.ideal!)}`,
    ];
    const result: ScenarioResult = { id: 'two-gpus', title: twoGpus.title, params: { ...p, seed, secondGpu: second.what }, variants, verification: verification(seed, checks), verdicts, trace, wallMs: performance.now() - t0 };
    return result;
  },
};
