/**
 * What the scenarios share: the scenario shape, sleep-kernel calibration, GPU/wall timing of a
 * stream's work, sampled verification against the CPU references, trace capture and number
 * formatting. No DOM, no Node imports: the page, headless Chromium and Node/Dawn all run this.
 */
import type { Progress, ScenarioResult, Span, Variant, Timing } from '../schema';
import type { Context, Stream, DeviceBuffer, GpuEvent, RandomAccessSource } from 'webgpu-streams';
import type { WeightsSpec } from '../weights-spec';
import { WORKGROUP_SIZE, dispatchSize, type Tolerance } from '../reference';
import { median, spread } from '../stats';
import { isSoftwareAdapter } from '../device';

/** Options every scenario takes. */
export interface ScenarioOptions {
  /** Tiny sizes and few repeats (CI on SwiftShader). */
  quick: boolean;
  progress?: Progress;
  /** Where "weights from storage" reads its file. @default the page's server (HTTP byte ranges) */
  storage?: WeightsStorage;
  /** A context on a second GPU ("two GPUs", P8). @default a second device of the same adapter */
  secondGpu?: SecondGpu;
}

/** How a runner opens a context on its second GPU, and what that is, for the verdicts. */
export interface SecondGpu {
  create(): Promise<Context>;
  what: string;
}

/** Fills `into` from `src` at byte `at`, read after read (a read may return fewer bytes). */
export async function readAt(src: RandomAccessSource, into: Uint8Array, at: number): Promise<void> {
  for (let got = 0; got < into.byteLength; ) {
    const n = await src.read(into.subarray(got), at + got);
    if (n <= 0) throw new Error(`the source ended at byte ${at + got}, before ${into.byteLength - got} more bytes`);
    got += n;
  }
}

/** Where the "weights from storage" scenario reads its synthetic weights file (bench/weights-file.ts). */
export interface WeightsStorage {
  /** Opens the file of `spec`, `parallel` reads at once. */
  open(spec: WeightsSpec, parallel: number): Promise<RandomAccessSource & { close?(): Promise<void> }>;
  /** Where, for the verdicts: 'a file (Node)', "HTTP byte ranges from the page's server". */
  readonly where: string;
}

/** One benchmark scenario: a plain async function of a context and options. */
export interface Scenario<P extends object = Record<string, never>> {
  id: string;
  title: string;
  description: string;
  /** `params` overrides the quick/full defaults (tests use it to shrink sizes further). */
  run(ctx: Context, opts: ScenarioOptions & { params?: Partial<P> }): Promise<ScenarioResult>;
}

/**
 * A scenario's parameters: the quick or full defaults, then `opts.params`. Full sizes on a
 * software adapter (SwiftShader runs GPU work on the CPU) keep the sizes but run one warm-up and
 * at most three repeats, so a full run there finishes in minutes.
 */
export function resolveParams<P extends { warmup: number; repeats: number }>(
  ctx: Context,
  opts: ScenarioOptions & { params?: Partial<P> },
  full: P,
  quick: P,
): P {
  const base = opts.quick ? quick : full;
  const soft = !opts.quick && isSoftwareAdapter(ctx.adapterInfo);
  return { ...base, ...(soft ? { warmup: Math.min(base.warmup, 1), repeats: Math.min(base.repeats, 3) } : {}), ...opts.params };
}

export const MiB = 1024 * 1024;

/** Workgroup grid of a built-in kernel over `n` elements. */
export function grid(n: number, kernel: keyof typeof WORKGROUP_SIZE): [number, number] {
  return dispatchSize(n, WORKGROUP_SIZE[kernel]);
}

/** `1.23 ms`, `45.6 ms`, `0.012 ms`. */
export function ms(x: number): string {
  if (!Number.isFinite(x)) return `${x} ms`;
  const a = Math.abs(x);
  return `${a >= 100 ? x.toFixed(0) : a >= 10 ? x.toFixed(1) : a >= 0.1 ? x.toFixed(2) : x.toFixed(3)} ms`;
}

/** `2.5x` */
export function times(x: number): string {
  return `${x >= 10 ? x.toFixed(1) : x.toFixed(2)}x`;
}

/** `12.3 GB/s` (n/a where a transfer was too short to time) */
export function gbs(x: number): string {
  if (!Number.isFinite(x)) return 'n/a GB/s';
  return `${x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2)} GB/s`;
}

/** `4 MiB`, `256 KiB`, `1.5 MiB` */
export function bytesText(b: number): string {
  if (b >= MiB) return `${+(b / MiB).toFixed(2)} MiB`;
  if (b >= 1024) return `${+(b / 1024).toFixed(2)} KiB`;
  return `${b} B`;
}

/** Rounds a number for the result JSON (3 significant decimals are plenty for ms and GB/s). */
export function round(x: number, digits = 4): number {
  if (!Number.isFinite(x)) return x;
  const p = 10 ** digits;
  return Math.round(x * p) / p;
}

/** The run's noise around `base`: 5% of its median, or the spread of its samples or `other`'s (stats' spread), the larger. */
export function noiseOf(base: Timing, other: Timing): number {
  return Math.max(0.05 * base.median, spread(base.samples), spread(other.samples));
}

/**
 * Fills `speedup` and `efficiency` of a variant against its baseline variant (by name). Efficiency,
 * (t_base - t) / (t_base - t_ideal), is left out (shown as n/a) where the possible gain t_base -
 * t_ideal is within the run's noise (5% of t_base, or the spread of either variant's samples: see
 * stats' spread): a ratio over noise reads as -970%; and where the variant took longer than its
 * baseline: no share of the gain to rate (its speedup, below 1x, says by how much). Speedup is left
 * out where a median is not positive.
 */
export function compare(variants: Variant[]): Variant[] {
  for (const v of variants) {
    if (!v.baseline) continue;
    const base = variants.find((b) => b.name === v.baseline);
    if (!base) continue;
    const tb = base.time.median;
    const t = v.time.median;
    if (tb > 0 && t > 0 && Number.isFinite(tb) && Number.isFinite(t)) v.speedup = round(tb / t);
    const ideal = v.ideal;
    const noise = noiseOf(base.time, v.time);
    if (ideal !== null && v.speedup !== undefined && tb - ideal > noise && t <= tb) v.efficiency = round((tb - t) / (tb - ideal));
  }
  return variants;
}

/** Measures GPU time of work enqueued on one stream: timestamps via timing events when the device has them, else wall time. */
export class StreamTimer {
  readonly gpu: boolean;
  #begin: GpuEvent | null = null;
  #end: GpuEvent | null = null;

  constructor(
    readonly ctx: Context,
    readonly stream: Stream,
  ) {
    this.gpu = ctx.features.timestampQuery;
    if (this.gpu) {
      this.#begin = ctx.createEvent({ timing: true, label: `${stream.label}.t0` });
      this.#end = ctx.createEvent({ timing: true, label: `${stream.label}.t1` });
    }
  }

  /** Runs `enqueue` on the stream, waits for it, returns ms (GPU timestamps, or wall time). */
  async time(enqueue: () => void): Promise<number> {
    const t0 = performance.now();
    if (this.#begin) this.stream.record(this.#begin);
    enqueue();
    if (this.#end) this.stream.record(this.#end);
    await this.stream.synchronize();
    const wall = performance.now() - t0;
    if (this.#begin && this.#end) return this.#begin.elapsedTime(this.#end);
    return wall;
  }
}

/** Round trip of a 4-byte copy between two buffers on a stream (submit + completion), median of a few, ms. */
export async function roundTrip(stream: Stream, a: DeviceBuffer, b: DeviceBuffer, n = 5): Promise<number> {
  const samples: number[] = [];
  for (let i = 0; i < n + 1; i++) {
    const t0 = performance.now();
    stream.copy(a, b, { size: 4 });
    await stream.synchronize();
    if (i > 0) samples.push(performance.now() - t0);
  }
  return median(samples);
}

/** Outcome of one check. */
export interface Check {
  ok: boolean;
  detail: string;
  mismatch?: string;
}

/** Element budget for CPU reference work per check: above it, a deterministic sample is checked. */
const CPU_BUDGET = 4e7;

/**
 * Compares `actual[i]` with `expectedAt(i)` for i < n. When the CPU reference would cost more
 * than a budget (`n * costPerElement` steps), checks a deterministic sample: the first and last
 * 1024 elements and an even stride through the rest, and says so.
 */
export function checkElementwise(
  what: string,
  actual: ArrayLike<number>,
  n: number,
  expectedAt: (i: number) => number,
  opts: { costPerElement?: number; tol?: Tolerance } = {},
): Check {
  if (actual.length !== n) return { ok: false, detail: what, mismatch: `${what}: length ${actual.length}, want ${n}` };
  const cost = Math.max(1, opts.costPerElement ?? 1);
  const maxChecked = Math.max(4096, Math.floor(CPU_BUDGET / cost));
  const sampled = n > maxChecked;
  const stride = sampled ? Math.ceil((n - 2048) / (maxChecked - 2048)) : 1;
  let checked = 0;
  let bad = 0;
  let first = '';
  const check = (i: number): void => {
    checked++;
    const want = expectedAt(i);
    const got = actual[i]!;
    if (!matches(got, want, opts.tol)) {
      if (!bad) first = `index ${i}: got ${got}, want ${want}`;
      bad++;
    }
  };
  if (!sampled) for (let i = 0; i < n; i++) check(i);
  else {
    for (let i = 0; i < 1024; i++) check(i);
    for (let i = 1024; i < n - 1024; i += stride) check(i);
    for (let i = n - 1024; i < n; i++) check(i);
  }
  const detail = `${what}${sampled ? ` (${checked} of ${n} elements sampled)` : ''}`;
  return bad ? { ok: false, detail, mismatch: `${what}: ${first} [${bad} of ${checked} checked differ]` } : { ok: true, detail };
}

function matches(got: number, want: number, tol: Tolerance | undefined): boolean {
  if (Number.isNaN(want) || Number.isNaN(got)) return Number.isNaN(want) && Number.isNaN(got);
  if (got === want) return true;
  if (!tol) return false;
  return Math.abs(got - want) <= Math.max(tol.abs, tol.rel * Math.abs(want));
}

/** Exact comparison of two byte ranges; reports the first differing byte. */
export function checkBytes(what: string, actual: Uint8Array, expected: Uint8Array): Check {
  if (actual.length !== expected.length) return { ok: false, detail: what, mismatch: `${what}: length ${actual.length}, want ${expected.length}` };
  // Compare 32 bits at a time where aligned (fast on 64 MiB), then find the byte.
  const words = actual.byteOffset % 4 === 0 && expected.byteOffset % 4 === 0 ? actual.length >>> 2 : 0;
  const a32 = new Uint32Array(actual.buffer, actual.byteOffset, words);
  const e32 = new Uint32Array(expected.buffer, expected.byteOffset, words);
  let from = words * 4;
  for (let i = 0; i < words; i++) {
    if (a32[i] !== e32[i]) {
      from = i * 4;
      break;
    }
  }
  for (let i = from; i < actual.length; i++) {
    if (actual[i] !== expected[i]) return { ok: false, detail: what, mismatch: `${what}: byte ${i}: got ${actual[i]}, want ${expected[i]}` };
  }
  return { ok: true, detail: what };
}

/** Folds checks into the scenario's verification. */
export function verification(seed: number, checks: Check[]): ScenarioResult['verification'] {
  const failed = checks.filter((c) => !c.ok);
  const detail = `${checks.map((c) => c.detail).join('; ')} (seed ${seed})`;
  return failed.length
    ? { ok: false, detail, mismatch: failed.map((c) => c.mismatch ?? c.detail).join('; ') }
    : { ok: true, detail };
}

/**
 * Collects the trace of representative repeats: the library's op spans from `ctx.trace` (when the
 * context traces) recorded while `fn` runs, plus host spans the scenario adds itself (lane 'host').
 * Each recorded repeat is one segment. Segments from different variants ran seconds apart; in
 * {@link TraceRecorder.result} they are moved next to each other, in order, with a small gap, so
 * a timeline shows them side by side. Times inside a segment are kept as measured.
 */
export class TraceRecorder {
  readonly #segments: { from: number; to: number; host: Span[] }[] = [];
  #current: Span[] | null = null;
  constructor(readonly ctx: Context) {}

  /**
   * Runs `fn` and keeps the spans of what it did. Pass `keep = false` to run without recording.
   * The spans are collected later, in {@link result}; where the device has timestamp queries, the
   * recorded run times every GPU op with them (an empty pass or two per op), so the timeline is measured.
   */
  async record<T>(fn: () => Promise<T>, keep = true): Promise<T> {
    if (!keep) return fn();
    const from = performance.now();
    const host: Span[] = [];
    this.#current = host;
    // The timeline gets GPU timestamps wherever the device has them (only while recording).
    const trace = this.ctx.trace;
    const wasTimed = trace.gpuTimestamps;
    if (this.ctx.features.timestampQuery) trace.gpuTimestamps = true;
    try {
      return await fn();
    } finally {
      trace.gpuTimestamps = wasTimed;
      this.#current = null;
      this.#segments.push({ from, to: performance.now(), host });
    }
  }

  /** A host span (fill, read, wait) while recording. */
  host(kind: Span['kind'], name: string, start: number, end: number = performance.now()): void {
    this.#current?.push({ lane: 'host', kind, name, start, end });
  }

  /** Times a synchronous host step and records it as a span. */
  hostStep<T>(kind: Span['kind'], name: string, fn: () => T): T {
    const t0 = performance.now();
    const r = fn();
    this.host(kind, name, t0, performance.now());
    return r;
  }

  /** Spans sorted by start; segments moved next to each other (see the class comment). */
  result(): Span[] {
    const all = librarySpans(this.ctx, Math.min(Infinity, ...this.#segments.map((g) => g.from)));
    return sideBySide(this.#segments.map((g) => [...all.filter((x) => x.start >= g.from && x.start <= g.to), ...g.host]));
  }
}

/**
 * Places groups of spans one after another in time order, each moved (if it started later) to
 * begin a small gap after the previous one ended; times inside a group are kept. Returns all spans
 * sorted by start.
 */
export function sideBySide(groups: Span[][]): Span[] {
  const segs = groups
    .filter((spans) => spans.length > 0)
    .map((spans) => ({ spans, start: Math.min(...spans.map((x) => x.start)), end: Math.max(...spans.map((x) => x.end)) }))
    .sort((a, b) => a.start - b.start);
  const longest = Math.max(0, ...segs.map((g) => g.end - g.start));
  const gap = Math.max(0.2, 0.1 * longest);
  const out: Span[] = [];
  let cursor = segs[0]?.start ?? 0;
  for (const g of segs) {
    const shift = g.start > cursor + gap ? cursor + gap - g.start : 0;
    for (const x of g.spans) out.push({ ...x, start: x.start + shift, end: x.end + shift });
    cursor = Math.max(cursor, g.end + shift);
  }
  return out.sort((a, b) => a.start - b.start || a.lane.localeCompare(b.lane));
}

/** The library's trace spans that started at or after `from` (ms), as schema spans. */
export function librarySpans(ctx: Context, from: number): Span[] {
  const t = ctx.trace as Context['trace'] | null | undefined;
  if (!t) return [];
  return t.spans(from).map(({ lane, kind, name, start, end, estimated, op }) => ({
    lane,
    kind,
    name,
    start,
    end,
    ...(estimated ? { estimated: true } : {}),
    ...(op !== undefined ? { op } : {}),
  }));
}

/**
 * GPU ms of copying `bytes` into `dst` out of pinned staging on `stream`, in pieces of `piece` bytes
 * from as many distinct upload buffers (one buffer copied again would sit in the GPU's L2): timing
 * events, the least of two runs after one untimed. NaN where the device has no timestamps. On
 * WebGPU's one queue these copies run between the kernels, whatever the streams.
 */
export async function stagingCopyMs(ctx: Context, stream: Stream, dst: DeviceBuffer, bytes: number, piece: number): Promise<number> {
  if (!ctx.features.timestampQuery) return Number.NaN;
  const pins = Array.from({ length: Math.ceil(bytes / piece) }, (_, j) => ctx.allocHost(piece, 'upload', { label: `copy timing ${j}` }));
  const [e0, e1] = [ctx.createEvent({ timing: true }), ctx.createEvent({ timing: true })];
  const once = async (): Promise<number> => {
    for (const pin of pins) await pin.ready();
    e0.record(stream);
    for (let at = 0, j = 0; at < bytes; at += piece, j++) stream.upload(pins[j]!, dst, { dstOffset: at, size: Math.min(piece, bytes - at) });
    e1.record(stream);
    await e1.synchronize();
    return e0.elapsedTime(e1);
  };
  try {
    await once();
    return Math.min(await once(), await once());
  } finally {
    await stream.synchronize();
    for (const pin of pins) pin.destroy();
  }
}

/**
 * Two-slot streaming's bound on WebGPU's one queue, ms: the first layer's load, then every kernel and
 * copy in turn; or every load, then the last layer's kernels and copy (`copyMs`: all layers' copies).
 * `firstLoadMs`: when the first layer was in (default: its share of the loads).
 */
export function oneQueueBoundMs(loadsMs: number, computeMs: number, copyMs: number, layers: number, firstLoadMs = loadsMs / layers): number {
  return Math.max(firstLoadMs + computeMs + copyMs, loadsMs + (computeMs + copyMs) / layers);
}
