/**
 * P5: what the library costs over raw WebGPU.
 * - The chunked pipeline written with the library vs the same pipeline by hand on `ctx.device`
 *   (same ring, one submit per chunk, mapAsync right after each submit), same device, same run,
 *   interleaved.
 * - Host cost per enqueued op over 10,000 256-byte copies (enqueue + flush), with the default
 *   `captureStacks: true` and, on a second context, `captureStacks: false`; the raw floor (one
 *   encoder, one submit) for comparison.
 * - The same with the stream sanitizer on (a context with `sanitize: 'throw'`), over 1 and 16
 *   streams and with many buffers holding live accesses, against the same runs with it off (on
 *   and off in alternating rounds, the ratio the median of the rounds' own).
 */
import type { Context, DeviceBuffer, Kernel, PinnedBuffer, Stream } from 'webgpu-streams';
import { createContext } from 'webgpu-streams';
import { grid } from '../scenarios/common';
import type { Check } from '../scenarios/common';
import {
  MiB,
  interleaved,
  median,
  metric,
  num,
  pairedRatio,
  pairedRatioInterval,
  intervalWords,
  randomF32,
  round,
  seedOf,
  sizeText,
  type PerfGroup,
  type PerfGroupResult,
  type PerfMetric,
  type PerfOptions,
} from './common';
import { createNoopDevice, type NoopCommand } from './noop-device';
import { OpBench, type OpCost } from './ops';
import { balancePipeline, checkPipelineOutput, LibPipeline, makePlan, planText, RawPipeline, type ChunkPlan } from './pipeline';
import { benchKernels } from '../kernels/index';

interface Params {
  bytes: number;
  chunks: number;
  ring: number;
  repeats: number;
  ops: number;
  opRepeats: number;
  maxIterations: number;
  probeIterations: number;
  /** One-chunk round trips measured for the per-chunk host cost. */
  chunkRounds: number;
  /** Streams made, used, synchronized and destroyed before P5.sanitizer's last row. */
  churn: number;
}
const FULL: Params = { bytes: 256 * MiB, chunks: 32, ring: 4, repeats: 13, ops: 10_000, opRepeats: 5, maxIterations: 1 << 16, probeIterations: 256, chunkRounds: 300, churn: 2000 };
const QUICK: Params = { bytes: 1 * MiB, chunks: 8, ring: 3, repeats: 3, ops: 10_000, opRepeats: 3, maxIterations: 256, probeIterations: 8, chunkRounds: 40, churn: 200 };

export const TARGET_P5 = 1.05;
export const TARGET_P5_OP_US = 5;
/** Host cost per op with the sanitizer on / off. */
export const TARGET_P5_SANITIZER = 2;

export const libraryCostGroup: PerfGroup = {
  id: 'library-cost',
  title: 'P5: library vs raw WebGPU pipeline; host cost per op',
  metrics: ['P5', 'P5.opCost', 'P5.sanitizer'],
  async run(ctx: Context, opts: PerfOptions): Promise<PerfGroupResult> {
    const p = opts.quick ? QUICK : FULL;
    const seed = seedOf(opts);
    const progress = opts.progress ?? (() => {});
    const bytes = Math.min(p.bytes, ctx.limits.maxBufferSize, ctx.limits.maxStorageBufferBindingSize);
    const n = bytes / 4;
    const metrics: PerfMetric[] = [];
    let pipelineMetric: (() => PerfMetric) | null = null;

    // ------------------------------------------------------------------ pipeline: library vs raw
    {
      progress(`P5: pipeline ${sizeText(bytes)}: balancing`, 0);
      const input = randomF32(seed, n);
      const outLib = new Float32Array(n);
      const outRaw = new Float32Array(n);
      const checks: Check[] = [];
      const basePlan: ChunkPlan = makePlan(n, p.chunks, p.ring, 1);
      const bal = await balancePipeline(ctx, basePlan, input, { probeIterations: p.probeIterations, maxIterations: p.maxIterations });
      const plan: ChunkPlan = { ...basePlan, iterations: bal.iterations };
      const lib = new LibPipeline(ctx, plan, 'lib');
      const raw = new RawPipeline(ctx, plan);
      try {
        progress(`P5: pipeline ${sizeText(bytes)}: library vs raw`, 0.1);
        const cache = new Map<number, number>();
        const samples = await interleaved(
          {
            lib: async ({ last }) => {
              if (last) outLib.fill(Number.NaN);
              const ms = await lib.run(input, outLib);
              if (last) checks.push(checkPipelineOutput('library pipeline', outLib, input, n, plan.iterations, cache));
              return ms;
            },
            raw: async ({ last }) => {
              if (last) outRaw.fill(Number.NaN);
              const ms = await raw.run(input, outRaw);
              if (last) checks.push(checkPipelineOutput('raw pipeline', outRaw, input, n, plan.iterations, cache));
              return ms;
            },
          },
          p.repeats,
          1,
          1, // settle: each variant timed after an untimed run of itself (see interleaved)
          true, // rotate: each first equally often
        );
        const tLib = median(samples.lib);
        const tRaw = median(samples.raw);
        // Paired within rounds, as P1: the host's speed drifts from round to round.
        const ratio = pairedRatio(samples.lib, samples.raw);
        const interval = pairedRatioInterval(samples.lib, samples.raw);
        pipelineMetric = () =>
          metric(ctx, {
            id: 'P5',
            name: 'library pipeline / hand-written raw WebGPU pipeline',
            value: ratio,
            unit: 'ratio',
            target: `<= ${TARGET_P5.toFixed(2)}`,
            meets: ratio <= TARGET_P5,
            detail:
              `${sizeText(bytes)} in ${planText(plan)}, ${plan.iterations} iterations (${bal.note}): ` +
              `library / raw ${num(ratio)} (median of ${p.repeats} rounds, paired${interval ? `, ${intervalWords(interval)}` : ''}; library ${num(tLib)} ms, raw ${num(tRaw)} ms, medians, interleaved, each first equally often)` +
              (chunkCost
                ? `; host time per chunk (enqueue + flush vs unmap + encode + submit + maps, one chunk at a time): library ${num(chunkCost.libUs)} us, raw ${num(chunkCost.rawUs)} us; ` +
                  `the library's own JavaScript on a no-op device: ${num(chunkCost.noopUs)} us per chunk (${num(chunkCost.noopRoundUs)} us with completion and ready())`
                : ''),
            figures: {
              seed,
              bytes,
              chunks: planText(plan),
              ring: plan.ring,
              iterations: plan.iterations,
              libMs: round(tLib),
              rawMs: round(tRaw),
              libOverRawPaired: round(ratio),
              ratioOfMedians: round(tLib / tRaw),
              libSamples: samples.lib.map((x) => round(x, 3)).join(' '),
              rawSamples: samples.raw.map((x) => round(x, 3)).join(' '),
              ...(chunkCost ? { chunkHostLibUs: round(chunkCost.libUs), chunkHostLibEnqueueUs: round(chunkCost.libEnqueueUs), chunkHostLibFlushUs: round(chunkCost.libFlushUs), chunkHostRawUs: round(chunkCost.rawUs), chunkNoopDeviceUs: round(chunkCost.noopUs), chunkNoopDeviceRoundUs: round(chunkCost.noopRoundUs) } : {}),
            },
            checks: chunkCost ? [...checks, ...chunkCost.checks] : checks,
            seed,
          });
      } finally {
        await lib.destroy();
        await raw.destroy();
      }
    }

    // ------------------------------------------------------------------ host cost per chunk
    let chunkCost: ChunkHostCost | null = null;
    {
      progress('P5: host cost of one pipeline chunk, library vs raw', 0.6);
      chunkCost = await chunkHostCost(ctx, seed, p.chunkRounds);
    }

    if (pipelineMetric) metrics.push(pipelineMetric());

    // ------------------------------------------------------------------ host cost per op
    {
      progress(`P5: host cost of ${p.ops} small ops`, 0.7);
      const checks: Check[] = [];
      const bench = new OpBench(ctx, p.ops, seed);
      let withStacks: OpCost;
      let rawFloor: { hostUs: number; completeUs: number; check: Check };
      try {
        withStacks = await bench.measure(p.ops, 1, p.opRepeats);
        checks.push({ ...withStacks.check, detail: `captureStacks on: ${withStacks.check.detail}` });
        rawFloor = await bench.raw(p.ops);
        checks.push(rawFloor.check);
      } finally {
        await bench.destroy();
      }
      let noStacks: OpCost | null = null;
      let why = '';
      if (opts.createContext) {
        progress('P5: host cost without captureStacks (second context)', 0.85);
        const ctx2 = await opts.createContext({ captureStacks: false, label: 'perf captureStacks=false' });
        const b2 = new OpBench(ctx2, p.ops, seed ^ 0x1234);
        try {
          noStacks = await b2.measure(p.ops, 1, p.opRepeats);
          checks.push({ ...noStacks.check, detail: `captureStacks off: ${noStacks.check.detail}` });
        } finally {
          await b2.destroy();
          ctx2.destroy();
        }
      } else why = 'no context factory given: captureStacks=false not measured';
      const fmt = (c: OpCost): string => `${num(c.hostUs)} us/op (enqueue ${num(c.enqueueUs)} + flush ${num(c.flushUs)}; completion ${num(c.completeUs)} us/op)`;
      metrics.push(
        metric(ctx, {
          id: 'P5.opCost',
          name: 'host cost per enqueued op (enqueue + flush), default captureStacks',
          value: withStacks.hostUs,
          unit: 'us/op',
          target: `<= ${TARGET_P5_OP_US}`,
          meets: withStacks.hostUs <= TARGET_P5_OP_US,
          detail:
            `${p.ops} copies of 256 B on one stream: captureStacks on ${fmt(withStacks)}; ` +
            (noStacks ? `captureStacks off ${fmt(noStacks)}; ` : `${why}; `) +
            `raw WebGPU floor (one encoder, one submit) ${num(rawFloor.hostUs)} us/op`,
          figures: {
            seed,
            ops: p.ops,
            stacksOnHostUs: round(withStacks.hostUs),
            stacksOnEnqueueUs: round(withStacks.enqueueUs),
            stacksOnFlushUs: round(withStacks.flushUs),
            stacksOnCompleteUs: round(withStacks.completeUs),
            ...(noStacks
              ? { stacksOffHostUs: round(noStacks.hostUs), stacksOffEnqueueUs: round(noStacks.enqueueUs), stacksOffFlushUs: round(noStacks.flushUs), stacksOffCompleteUs: round(noStacks.completeUs) }
              : {}),
            rawHostUs: round(rawFloor.hostUs),
            rawCompleteUs: round(rawFloor.completeUs),
          },
          checks,
          seed,
        }),
      );
    }
    // ------------------------------------------------------------------ sanitizer cost
    if (opts.createContext) {
      progress('P5: host cost per op with the stream sanitizer on and off', 0.9);
      metrics.push(await sanitizerCost(ctx, opts.createContext, p, seed));
    }
    return { metrics, tables: [] };
  },
};

/**
 * Op cost (enqueue + flush) with the sanitizer on / off on contexts of one device, at 1 and 16
 * streams, and on with `live` other buffers in the sanitizer's shadows (a buffer's accesses are
 * looked up per buffer, so they should cost nothing per op).
 */
async function sanitizerCost(ctx: Context, create: NonNullable<PerfOptions['createContext']>, p: Params, seed: number): Promise<PerfMetric> {
  const off = await create({ label: 'perf sanitize=off', sanitize: false });
  const on = await create({ label: 'perf sanitize=throw', sanitize: 'throw' });
  const onAll = await create({ label: "perf sanitize=throw, captureStacks='all'", sanitize: 'throw', captureStacks: 'all' });
  const live = 1000;
  const checks: Check[] = [];
  const rows: Record<string, OpCost> = {};
  const ratios: Record<number, number> = {};
  const benches = { off: new OpBench(off, p.ops, seed ^ 0x5a), on: new OpBench(on, p.ops, seed ^ 0xa5), onAll: new OpBench(onAll, p.ops, seed ^ 0x3c) };
  const held: DeviceBuffer[] = [];
  try {
    for (const streams of [1, 16]) {
      // On and off in alternating rounds: the ratio is the median of the rounds' own.
      const paired = await benches.on.measurePaired(benches.off, p.ops, streams, p.opRepeats + 4);
      rows[`on${streams}`] = paired.a;
      rows[`off${streams}`] = paired.b;
      ratios[streams] = paired.ratio;
      for (const name of ['off', 'on'] as const) {
        checks.push({ ...rows[`${name}${streams}`]!.check, detail: `sanitizer ${name}, ${streams} stream${streams > 1 ? 's' : ''}: ${rows[`${name}${streams}`]!.check.detail}` });
      }
    }
    rows.onAll = await benches.onAll.measure(p.ops, 1, p.opRepeats);
    checks.push({ ...rows.onAll.check, detail: `sanitizer on with captureStacks 'all': ${rows.onAll.check.detail}` });
    // Other buffers in the sanitizer's shadows: a write to each of `live` buffers.
    const side = on.createStream({ label: 'perf sanitizer live', nonBlocking: true });
    const word = new Uint32Array([7]);
    for (let i = 0; i < live; i++) {
      const b = on.alloc(256, { label: `live${i}` });
      held.push(b);
      side.upload(word, b);
    }
    on.flush();
    rows.onLive = await benches.on.measure(p.ops, 1, p.opRepeats);
    checks.push({ ...rows.onLive.check, detail: `sanitizer on with ${live} other buffers in its shadows: ${rows.onLive.check.detail}` });
    // Streams that came and went: each one's clock entry goes to a later stream, so clocks stay short.
    for (let i = 0; i < p.churn; i++) {
      const t = on.createStream({ label: `perf churn ${i}`, nonBlocking: true });
      t.upload(word, held[i % live]!);
      await t.synchronize();
      t.destroy();
    }
    rows.onChurned = await benches.on.measure(p.ops, 1, p.opRepeats);
    checks.push({ ...rows.onChurned.check, detail: `sanitizer on after ${p.churn} streams came and went: ${rows.onChurned.check.detail}` });
  } finally {
    await benches.off.destroy();
    await benches.on.destroy();
    await benches.onAll.destroy();
    await on.synchronize().catch(() => undefined);
    for (const b of held) b.destroy();
    off.destroy();
    on.destroy();
    onAll.destroy();
  }
  // Judged at the worse of 1 and 16 streams (both paired); the rest is printed beside it.
  const ratio = ratios[1]!;
  const worst = Math.max(ratio, ratios[16]!);
  const us = (c: OpCost): string => `${num(c.hostUs)} us/op`;
  return metric(ctx, {
    id: 'P5.sanitizer',
    name: 'host cost per op, stream sanitizer on / off, the worse of 1 and 16 streams',
    value: worst,
    unit: 'x',
    target: `<= ${TARGET_P5_SANITIZER}`,
    meets: worst <= TARGET_P5_SANITIZER,
    detail:
      `${p.ops} copies of 256 B (enqueue + flush), on and off in ${p.opRepeats + 4} alternating rounds, the median of the rounds' on / off: 1 stream: ${num(ratio)}x (medians on ${us(rows.on1!)}, off ${us(rows.off1!)}); ` +
      `16 streams: ${num(ratios[16]!)}x (on ${us(rows.on16!)}, off ${us(rows.off16!)}); ` +
      `on, with ${live} other buffers in its shadows: ${us(rows.onLive!)} (${num(rows.onLive!.hostUs / rows.on1!.hostUs)}x of on without them); ` +
      `on, after ${p.churn} streams came and went: ${us(rows.onChurned!)} (${num(rows.onChurned!.hostUs / rows.on1!.hostUs)}x of on before them); ` +
      `on with captureStacks 'all' (both call sites in every report): ${us(rows.onAll!)} = ${num(rows.onAll!.hostUs / rows.off1!.hostUs)}x off`,
    figures: {
      seed,
      ops: p.ops,
      offHostUs1: round(rows.off1!.hostUs),
      onHostUs1: round(rows.on1!.hostUs),
      onEnqueueUs1: round(rows.on1!.enqueueUs),
      offHostUs16: round(rows.off16!.hostUs),
      onHostUs16: round(rows.on16!.hostUs),
      ratio16: round(ratios[16]!),
      onLiveHostUs: round(rows.onLive!.hostUs),
      onChurnedHostUs: round(rows.onChurned!.hostUs),
      churnedStreams: p.churn,
      onAllStacksHostUs1: round(rows.onAll!.hostUs),
      liveBuffers: live,
    },
    checks,
    seed,
  });
}

interface ChunkHostCost {
  /** Host time of one chunk through the library: enqueue (upload, launch, download) + flush, us. */
  libUs: number;
  libEnqueueUs: number;
  libFlushUs: number;
  /** The same by hand: encode + submit + the two mapAsync calls, us. */
  rawUs: number;
  /**
   * The library's own JavaScript per chunk, on a device whose calls cost nothing
   * (`noop-device.ts`): enqueue + flush, and the whole round with completion and `ready()`.
   */
  noopUs: number;
  noopRoundUs: number;
  checks: Check[];
}

/** One pipeline chunk through the library, as P5 times it: 64 KiB up, compute_intensive(1), down. */
class LibChunk {
  static readonly elements = 16 * 1024;
  static readonly bytes = LibChunk.elements * 4;
  readonly s: Stream;
  readonly up: PinnedBuffer;
  readonly down: PinnedBuffer;
  readonly din: DeviceBuffer;
  readonly dout: DeviceBuffer;
  readonly workgroups = grid(LibChunk.elements, 'computeIntensive');
  readonly #kernel: Kernel;

  constructor(ctx: Context, label: string) {
    const cb = LibChunk.bytes;
    this.s = ctx.createStream({ label: `${label} chunk`, nonBlocking: true });
    this.up = ctx.allocHost(cb, 'upload', { label: `${label}.up` });
    this.down = ctx.allocHost(cb, 'download', { label: `${label}.down` });
    this.din = ctx.alloc(cb, { label: `${label}.in` });
    this.dout = ctx.alloc(cb, { label: `${label}.out` });
    this.#kernel = benchKernels(ctx).computeIntensive;
  }

  /** Both pinned buffers back on the host. */
  async ready(): Promise<void> {
    await this.up.ready();
    await this.down.ready();
  }

  launch(): void {
    this.s.launch(this.#kernel, { bindings: [this.din, this.dout], workgroups: this.workgroups, constants: { iterations: 1 } });
  }

  /** Enqueues the chunk: upload, kernel, download (not flushed). */
  enqueue(): void {
    this.s.upload(this.up, this.din);
    this.launch();
    this.s.download(this.dout, this.down);
  }

  destroy(): void {
    this.s.destroy();
    for (const b of [this.up, this.down, this.din, this.dout]) b.destroy();
  }
}

/**
 * Host time of one pipeline chunk (64 KiB up, compute_intensive(1), down), one chunk at a time
 * so the GPU is idle while the host works: the library's enqueue + flush vs raw encode + submit +
 * mapAsync. Medians; the last chunk of each is checked.
 */
async function chunkHostCost(ctx: Context, seed: number, rounds: number): Promise<ChunkHostCost> {
  const ce = LibChunk.elements;
  const input = randomF32(seed ^ 0x3c6ef372, ce);
  const chunk = new LibChunk(ctx, 'cost');
  const { up, down } = chunk;
  const raw = new RawPipeline(ctx, makePlan(ce, 1, 1, 1));
  const enq: number[] = [];
  const fl: number[] = [];
  const rawT: number[] = [];
  const checks: Check[] = [];
  const cache = new Map<number, number>();
  try {
    up.f32.set(input);
    for (let i = 0; i < rounds + 10; i++) {
      await chunk.ready();
      const t0 = performance.now();
      chunk.enqueue();
      const t1 = performance.now();
      ctx.flush();
      const t2 = performance.now();
      if (i >= 10) {
        enq.push(t1 - t0);
        fl.push(t2 - t1);
      }
    }
    await down.ready();
    checks.push(checkPipelineOutput('per-chunk cost, library chunk', down.f32, input, ce, 1, cache));
    const out = new Float32Array(ce);
    for (let i = 0; i < rounds + 10; i++) {
      const ms = await raw.encodeOneChunk(input);
      if (i >= 10) rawT.push(ms);
    }
    await raw.readLast(out);
    checks.push(checkPipelineOutput('per-chunk cost, raw chunk', out, input, ce, 1, cache));
  } finally {
    await chunk.s.synchronize().catch(() => undefined);
    chunk.destroy();
    await raw.destroy();
  }
  const e = median(enq) * 1000;
  const f = median(fl) * 1000;
  const noop = await noopChunkCost(rounds);
  checks.push(noop.check);
  return { libUs: e + f, libEnqueueUs: e, libFlushUs: f, rawUs: median(rawT) * 1000, noopUs: noop.us, noopRoundUs: noop.roundUs, checks };
}

/**
 * The same chunk loop on a no-op device: what the library's JavaScript costs per chunk with no
 * driver under it. Checked by what it encoded: per chunk exactly copy(up -> in), dispatch,
 * copy(out -> down), submit.
 */
export async function noopChunkCost(rounds: number): Promise<{ us: number; roundUs: number; check: Check }> {
  const { device, log } = createNoopDevice();
  const ctx = await createContext({ device, timing: false });
  const chunk = new LibChunk(ctx, 'noop');
  const { up, down, din, dout, workgroups } = chunk;
  const times: number[] = [];
  const roundTimes: number[] = [];
  // More rounds than on the GPU: each is a few microseconds. The first fifth warms up the JIT.
  const n = Math.max(200, rounds * 10);
  let bad = '';
  try {
    // A first launch waits for its pipeline's validation (an error scope): let that settle.
    chunk.launch();
    await chunk.s.synchronize();
    for (let i = 0; i < n; i++) {
      const tr = performance.now();
      await chunk.ready();
      log.length = 0;
      const t0 = performance.now();
      chunk.enqueue();
      ctx.flush();
      const t1 = performance.now();
      if (i >= n / 5) {
        times.push(t1 - t0);
        roundTimes.push(t1 - tr);
      }
      if (!bad) {
        const wrong = checkNoopChunk(log, up.buffer, din.buffer, dout.buffer, down.buffer, LibChunk.bytes, workgroups[0]);
        if (wrong) bad = `chunk ${i}: ${wrong}`;
      }
    }
    await down.ready();
  } finally {
    chunk.destroy();
    ctx.destroy();
  }
  const detail = `no-op device: ${n} chunks encoded copy(up -> in), dispatch(${workgroups[0]}), copy(out -> down), submit`;
  return { us: median(times) * 1000, roundUs: median(roundTimes) * 1000, check: bad ? { ok: false, detail, mismatch: bad } : { ok: true, detail } };
}

export function checkNoopChunk(log: NoopCommand[], up: GPUBuffer, din: GPUBuffer, dout: GPUBuffer, down: GPUBuffer, bytes: number, x: number): string {
  const want = ['copy', 'dispatch', 'copy', 'submit'];
  if (log.map((c) => c.kind).join(',') !== want.join(',')) return `encoded ${log.map((c) => c.kind).join(', ') || 'nothing'}, expected ${want.join(', ')}`;
  const [a, d, b] = log as [NoopCommand & { kind: 'copy' }, NoopCommand & { kind: 'dispatch' }, NoopCommand & { kind: 'copy' }];
  if ((a.src as unknown) !== up || (a.dst as unknown) !== din || a.size !== bytes) return 'the upload copied the wrong buffers or size';
  if (d.x !== x) return `dispatched ${d.x} workgroups, expected ${x}`;
  if ((b.src as unknown) !== dout || (b.dst as unknown) !== down || b.size !== bytes) return 'the download copied the wrong buffers or size';
  return '';
}
