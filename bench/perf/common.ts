/**
 * What the perf metrics (issue 4: P1..P6 and the growth tables) share: the metric and table
 * shapes, the options every group takes, interleaved repeats, and small formatting helpers.
 * No DOM and no node: imports, so the page can run the same groups later.
 */
import type { Context, ContextOptions, RandomAccessSource } from 'webgpu-streams';
import type { Progress } from '../schema';
import { measureInterleaved, median, medianInterval, type RunInfo } from '../stats';
import type { Check, SecondGpu } from '../scenarios/common';

export const MiB = 1024 * 1024;

/** Makes a second context on the same adapter (P5 needs one with `captureStacks: false`). */
export type ContextFactory = (options: Omit<ContextOptions, 'gpu' | 'device' | 'keepAlive'>) => Promise<Context>;

/** Options every metric group takes. */
export interface PerfOptions {
  /** Tiny sizes and few repeats (tests and CI on SwiftShader). */
  quick: boolean;
  progress?: Progress;
  /** For groups that need a context with other options. Without it, those parts are skipped. */
  createContext?: ContextFactory;
  /** Seed of the random inputs. @default a fresh one (printed in every verification) */
  seed?: number;
  /** Where the runner can force a full GC and read the heap (Node): retained bytes per queued op. */
  heap?: HeapProbe;
  /** Scratch files and process memory (Node): P7, weights from storage. Without it, P7 is skipped. */
  files?: FileProbe;
  /** A context on a second GPU, and what it is ('the host's second GPU' or a second device of one adapter): P8. */
  secondGpu?: SecondGpu;
}

export type { SecondGpu } from '../scenarios/common';


/** What P7 needs of the runner: a scratch file, opened as `uploadFrom` opens one, and the process's memory. */
export interface FileProbe {
  /** Writes a scratch file piece by piece (each piece may be dropped once written); its path. */
  write(name: string, pieces: Iterable<Uint8Array>): Promise<string>;
  /** Opens it for reading: `openFile` of 'webgpu-streams/node'. */
  open(path: string, parallel: number): Promise<RandomAccessSource & { close(): Promise<void> }>;
  remove(path: string): Promise<void>;
  /** Threads that run file reads at once (Node: libuv's pool, UV_THREADPOOL_SIZE). */
  readThreads: number;
  /** Bytes of JS heap in use and of external memory (ArrayBuffers outside the heap) now. */
  memory(): { heap: number; external: number };
}

/** A full GC and the JS heap in use after it, as a Node runner offers them. */
export interface HeapProbe {
  /** Runs a full, synchronous garbage collection. */
  collect(): void;
  /** Bytes of JS heap in use. */
  used(): number;
}

/** One measured metric with its target. */
export interface PerfMetric {
  /** 'P1', 'P2', 'P2.writeBuffer', 'P3', 'P4', 'P5', 'P5.opCost', 'P5.sanitizer', 'P6', 'P7', 'P7.pipeline', 'P7.memory'. */
  id: string;
  name: string;
  /** NaN when skipped. */
  value: number;
  unit: string;
  /** The target as text: '>= 0.90'. */
  target: string;
  /** Value meets the target and every output behind it was verified. */
  pass: boolean;
  /** Plain-language figures behind the value. */
  detail: string;
  /** The adapter, as one line. */
  device: string;
  /** Every output behind the figures matched its CPU reference. */
  verified: boolean;
  /** What was checked, with the seed; the first mismatch when not verified. */
  verification: string;
  /** The numbers behind the value, for the JSON (ms, GB/s, ratios). */
  figures: Record<string, number | string | boolean>;
  /** Why the metric could not be measured here (then `value` is NaN and `pass` false). */
  skipped?: string;
  /**
   * P1, P2, P4: the bound the metric is measured against in the same run, raw WebGPU on the same
   * work, and the verdict by {@link boundRule}, one row per size (P1) or one row.
   */
  bounded?: BoundedReport;
}

/** Fraction of its bound from this run that a bounded metric (P1, P2, P4) must reach. */
export const BOUND_FRACTION = 0.95;
/** Most library time / raw WebGPU time (median of the pairs of one round) a bounded metric allows. */
export const RAW_SLACK = 1.02;

/** One row of a bounded metric: what was measured, its bound from the same run, raw WebGPU, the verdict. */
export interface BoundedRow {
  /** The size ('16 MiB') where the metric has several; '' otherwise. */
  label: string;
  /** What was measured, in words with its figures: 'pool 9.08 GB/s (28.4 ms)'. */
  measured: string;
  /** The bound from this run in words, with what it is made of; or 'no bound: why'. */
  bound: string;
  /** Fraction of the bound reached (1: at the bound, above 1: past it); null where there is no bound. */
  ofBound: number | null;
  /** Raw hand-written WebGPU on the same work, in words. */
  raw: string;
  /** Library time / raw WebGPU time, the median of the pairs (each round runs both); null where not measured. */
  libOverRaw: number | null;
  /** Its 95% interval (pairedRatioInterval); null below 6 pairs. */
  libOverRawInterval?: RatioInterval | null;
  /** By {@link boundRule}. */
  pass: boolean;
  /** 'PASS: ...' or 'FALL SHORT: ...', the reasons in words. */
  verdict: string;
}

export interface BoundedReport {
  /** The rule, in words. */
  rule: string;
  rows: BoundedRow[];
}

/** What {@link boundRule} judges. */
export interface BoundRuleInput {
  /** Fraction of the bound reached; null, NaN or non-finite where the bound could not be measured (the row's bound says why). */
  ofBound: number | null;
  /** The metric's old target, which judges it where there is no bound: met or not, and in words. */
  fallback: { meets: boolean; text: string };
  /** Library / raw WebGPU, paired; null or NaN where raw WebGPU was not measured. */
  libOverRaw: number | null;
  /** Its 95% interval (pairedRatioInterval), printed beside it: the rule judges the median alone. */
  libOverRawInterval?: RatioInterval | null;
  /** Further conditions (P4: weights memory exactly 2 slots). */
  also?: { meets: boolean; text: string }[];
}

/**
 * The rule of the bounded metrics (P1, P2, P4): PASS when the measurement reaches at least
 * {@link BOUND_FRACTION} of its bound from the same run and the library takes at most
 * {@link RAW_SLACK} x raw hand-written WebGPU on the same work (median of the pairs), and every
 * condition in `also` holds. Where the bound could not be measured, the old target stands in
 * for the first condition, and the verdict says so.
 */
export function boundRule(x: BoundRuleInput): { pass: boolean; verdict: string } {
  const reasons: { ok: boolean; text: string }[] = [];
  // Judged and printed at the precision the report keeps (finiteOrNull(x, 6)), so they agree.
  const ob = x.ofBound === null ? null : round(x.ofBound, 6);
  if (ob !== null && Number.isFinite(ob)) {
    const ok = ob >= BOUND_FRACTION;
    reasons.push({ ok, text: `${ratioText(ob, BOUND_FRACTION)} of bound ${ok ? '>=' : '<'} ${BOUND_FRACTION.toFixed(2)}` });
  } else {
    reasons.push({ ok: x.fallback.meets, text: `no bound, so judged by the old target: ${x.fallback.text}` });
  }
  const lr = x.libOverRaw === null ? null : round(x.libOverRaw, 6);
  if (lr !== null && Number.isFinite(lr) && lr > 0) {
    const ok = lr <= RAW_SLACK;
    reasons.push({ ok, text: `library ${ratioText(lr, RAW_SLACK)}x raw ${ok ? '<=' : '>'} ${RAW_SLACK.toFixed(2)}x${x.libOverRawInterval ? ` (${intervalWords(x.libOverRawInterval)})` : ''}` });
  } else {
    reasons.push({ ok: false, text: 'library / raw WebGPU not measured' });
  }
  for (const a of x.also ?? []) reasons.push({ ok: a.meets, text: a.text });
  const pass = reasons.every((r) => r.ok);
  const shown = pass ? reasons : reasons.filter((r) => !r.ok);
  return { pass, verdict: `${pass ? 'PASS' : 'FALL SHORT'}: ${shown.map((r) => r.text).join('; ')}` };
}

/** The rule in words, for the report. */
export function boundRuleText(extra = ''): string {
  return `PASS when >= ${BOUND_FRACTION.toFixed(2)} of the bound measured in this run and library <= ${RAW_SLACK.toFixed(2)}x raw WebGPU (median of paired runs)${extra}; without a bound, the old target stands in for the first condition`;
}

/**
 * A ratio with 3 decimals, or 4 where 3 would round it onto `threshold` from the other side
 * (0.9496 against 0.95 reads 0.9496, not 0.950).
 */
export function ratioText(x: number, threshold?: number): string {
  if (!Number.isFinite(x)) return 'n/a';
  if (x < -1) return '< -1';
  const three = x.toFixed(3);
  if (threshold !== undefined && Number(three) === Number(threshold.toFixed(3)) && x !== threshold) return x.toFixed(4);
  return three;
}

/** a / b over pairs (a[i], b[i]) of the same round, the finite positive ones. */
function pairRatios(a: readonly number[], b: readonly number[]): number[] {
  return a.map((x, i) => x / b[i]!).filter((x) => Number.isFinite(x) && x > 0);
}

/** Median of a / b over pairs (a[i], b[i]) of the same round; NaN where there are none. */
export function pairedRatio(a: readonly number[], b: readonly number[]): number {
  const r = pairRatios(a, b);
  return r.length ? median(r) : Number.NaN;
}

/** The 95% interval of {@link pairedRatio} (medianInterval of the pairs' ratios); null below 6 pairs. */
export function pairedRatioInterval(a: readonly number[], b: readonly number[]): RatioInterval | null {
  return medianInterval(pairRatios(a, b));
}

/** A 95% interval of a paired median ratio, over `n` pairs. */
export interface RatioInterval {
  lo: number;
  hi: number;
  n: number;
}

/** `95% interval 1.006-1.052 over 61 pairs`, or '' without one. */
export function intervalWords(i: RatioInterval | null | undefined): string {
  return i ? `95% interval ${ratioText(i.lo)}-${ratioText(i.hi)} over ${i.n} pairs` : '';
}

/** A number for the JSON: rounded, or null where it is not finite (JSON has no NaN). */
export function finiteOrNull(x: number | null | undefined, digits = 4): number | null {
  return x !== null && x !== undefined && Number.isFinite(x) ? round(x, digits) : null;
}

/** A growth table (data size, streams, queued ops). */
export interface PerfTable {
  id: string;
  title: string;
  columns: string[];
  rows: (number | string)[][];
  /** The conclusion: "linear: ns/byte within 1.12x from 64 MiB to 1 GiB". */
  verdict: string;
  /** Every run behind the table was verified. */
  verified: boolean;
}

/** What one metric group returns. */
export interface PerfGroupResult {
  metrics: PerfMetric[];
  tables: PerfTable[];
}

/** One metric group: a plain async function of a context and options. */
export interface PerfGroup {
  id: string;
  title: string;
  /** Metric ids it produces. */
  metrics: readonly string[];
  run(ctx: Context, opts: PerfOptions): Promise<PerfGroupResult>;
}

/** One line naming the adapter. */
export function deviceLine(ctx: Context): string {
  const i = ctx.adapterInfo;
  const words: string[] = [];
  for (const part of [i.vendor, i.architecture, i.description, i.device]) {
    const s = String(part ?? '').trim();
    if (s && !words.some((w) => w.toLowerCase() === s.toLowerCase())) words.push(s);
  }
  return words.join(' / ') || 'unknown adapter';
}

/** Folds checks into the metric's verification fields. */
export function verdictOf(checks: Check[], seed: number): { verified: boolean; verification: string } {
  const bad = checks.filter((c) => !c.ok);
  if (checks.length === 0) return { verified: false, verification: 'nothing was checked' };
  if (bad.length) return { verified: false, verification: `MISMATCH: ${bad.map((c) => c.mismatch ?? c.detail).join('; ')} (seed ${seed})` };
  return { verified: true, verification: `${checks.map((c) => c.detail).join('; ')} (seed ${seed})` };
}

/** Builds a metric; `pass` is forced false when the outputs did not verify. */
export function metric(
  ctx: Context,
  m: Omit<PerfMetric, 'device' | 'verified' | 'verification' | 'pass'> & { meets: boolean; checks: Check[]; seed: number },
): PerfMetric {
  const { meets, checks, seed, ...rest } = m;
  const v = verdictOf(checks, seed);
  return { ...rest, value: round(rest.value), pass: meets && v.verified && !rest.skipped && Number.isFinite(rest.value), device: deviceLine(ctx), ...v };
}

/** A metric that could not be measured on this device. */
export function skippedMetric(ctx: Context, id: string, name: string, unit: string, target: string, why: string): PerfMetric {
  return { id, name, value: Number.NaN, unit, target, pass: false, detail: why, device: deviceLine(ctx), verified: false, verification: 'not run', figures: {}, skipped: why };
}

/**
 * {@link measureInterleaved} over named variants: `repeats` rounds, interleaved (a, b, c, a, b, c,
 * ...) after `warmup` rounds, so drift (clocks, other load) hits every variant alike. A variant's
 * sample is what it resolves to (ms). Returns the samples per variant.
 *
 * `rotate` starts each measured round one variant later (see MeasureOptions.rotate).
 *
 * `settle` untimed runs of a variant go right before each of its timed runs (called with
 * `warmup: true`): a pipeline that starts right after another variant moved hundreds of MiB
 * through other buffers starts slow (the first chunks of a pipeline run after the one-pass
 * version take longer, raw WebGPU and library alike), so each design
 * is timed in its own steady state rather than in the other's wake.
 */
export async function interleaved<K extends string>(
  variants: Record<K, (info: { last: boolean; warmup: boolean }) => Promise<number>>,
  repeats: number,
  warmup = 1,
  settle = 0,
  rotate = false,
): Promise<Record<K, number[]>> {
  const keys = Object.keys(variants) as K[];
  const timings = await measureInterleaved(
    keys.map((k) => ({ last, warmup: w }: RunInfo) => variants[k]({ last, warmup: w })),
    { repeats, warmup, settle, rotate },
  );
  return Object.fromEntries(keys.map((k, i) => [k, timings[i]!.samples])) as Record<K, number[]>;
}

export { median };

/** The least of `n` runs of `fn` (each returns ms). */
export async function minOf(n: number, fn: () => Promise<number>): Promise<number> {
  let best = Infinity;
  for (let i = 0; i < n; i++) best = Math.min(best, await fn());
  return best;
}

/** Rounds for the JSON (4 decimals keep ms, GB/s and ratios readable). */
export function round(x: number, digits = 4): number {
  if (!Number.isFinite(x)) return x;
  const p = 10 ** digits;
  return Math.round(x * p) / p;
}

/** GB/s (1e9 bytes per second) of `bytes` in `ms`. */
export function gbps(bytes: number, ms: number): number {
  return ms > 0 ? bytes / ms / 1e6 : Infinity;
}

/** `1.23`, `45.6`, `0.0123`. */
export function num(x: number): string {
  if (!Number.isFinite(x)) return String(x);
  const a = Math.abs(x);
  return a >= 100 ? x.toFixed(0) : a >= 10 ? x.toFixed(1) : a >= 1 ? x.toFixed(2) : a >= 0.01 ? x.toFixed(3) : x.toPrecision(2);
}

/** `16 MiB`, `256 KiB`. */
export function sizeText(b: number): string {
  if (b >= MiB && b % MiB === 0) return `${b / MiB} MiB`;
  if (b >= MiB) return `${(b / MiB).toFixed(2)} MiB`;
  if (b >= 1024) return `${+(b / 1024).toFixed(2)} KiB`;
  return `${b} B`;
}

/** A fresh seed when none was given. */
export function seedOf(opts: PerfOptions): number {
  if (opts.seed && Number.isInteger(opts.seed)) return opts.seed >>> 0 || 1;
  const c = (globalThis as { crypto?: { getRandomValues?: (a: Uint32Array) => Uint32Array } }).crypto;
  const v = c?.getRandomValues ? c.getRandomValues(new Uint32Array(1))[0]! : Math.floor(Math.random() * 2 ** 32);
  return v >>> 0 || 1;
}

/** Fast seeded random bytes (xorshift32 words), for transfer tests where the values do not matter but must differ. */
export function randomBytes(seed: number, bytes: number): Uint8Array<ArrayBuffer> {
  const words = new Uint32Array(Math.ceil(bytes / 4));
  let x = seed >>> 0 || 0x9e3779b9;
  for (let i = 0; i < words.length; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    words[i] = x;
  }
  return new Uint8Array(words.buffer, 0, bytes);
}

/**
 * Seeded random f32 in [lo, hi): fast enough for 1 GiB (xorshift32, 23 mantissa bits). Values
 * are exact multiples of 2^-23 * (hi - lo), so every one is a normal f32.
 */
export function randomF32(seed: number, n: number, lo = -1, hi = 1): Float32Array {
  const out = new Float32Array(n);
  let x = seed >>> 0 || 0x9e3779b9;
  const scale = (hi - lo) / 8388608;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    out[i] = lo + (x >>> 9) * scale;
  }
  return out;
}

/** Waits a macrotask: lets completions land and keeps long runs responsive. */
export function tick(): Promise<void> {
  return new Promise((r) => setTimeout(r, 0));
}

/** Sampled indices of `n` elements: the first and last `edge`, and `middle` evenly spaced between. */
export function sampleIndices(n: number, edge = 256, middle = 2048): number[] {
  if (n <= 2 * edge + middle) return Array.from({ length: n }, (_, i) => i);
  const out: number[] = [];
  for (let i = 0; i < edge; i++) out.push(i);
  const step = (n - 2 * edge) / middle;
  for (let j = 0; j < middle; j++) out.push(edge + Math.floor(j * step));
  for (let i = n - edge; i < n; i++) out.push(i);
  return out;
}
