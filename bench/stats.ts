/**
 * Repeat, warm-up and summary helpers for the scenarios. Timings are wall-clock milliseconds on
 * `performance.now()` (the same clock the trace spans use), warm-up runs excluded.
 */
import type { Timing } from './schema';

/** How many times to run a measured function. */
export interface MeasureOptions {
  /** Runs before the measured ones, discarded (pipeline compilation, pool growth, first maps). @default 1 */
  warmup?: number;
  /** Measured runs. @default 5 */
  repeats?: number;
  /**
   * {@link measureInterleaved} only: untimed runs of a variant right before each of its measured
   * runs (told `warmup: true`), so each variant is timed in its own steady state rather than in
   * the wake of the one before it. @default 0
   */
  settle?: number;
  /**
   * {@link measureInterleaved} only: measured round r starts at variant r mod n (a, b, c; b, c, a;
   * c, a, b; ...), so every variant runs in every position equally often and an effect of what
   * ran just before (the wake of a big one-pass run, a slow phase that builds up over a round)
   * does not always land on the same variant. Samples stay in round order, paired by round.
   * @default false
   */
  rotate?: boolean;
}

/** The run counts of `options`, checked; throws a TypeError naming the bad option. */
function runCounts(options: MeasureOptions): { warmup: number; repeats: number; settle: number; rotate: boolean } {
  const { warmup = 1, repeats = 5, settle = 0, rotate = false } = options;
  if (!Number.isInteger(warmup) || warmup < 0) {
    throw new TypeError(`Expected \`warmup\` to be a non-negative integer, got \`${warmup}\` (${typeof warmup})`);
  }
  if (!Number.isInteger(repeats) || repeats < 1) {
    throw new TypeError(`Expected \`repeats\` to be a positive integer, got \`${repeats}\` (${typeof repeats})`);
  }
  if (!Number.isInteger(settle) || settle < 0) {
    throw new TypeError(`Expected \`settle\` to be a non-negative integer, got \`${settle}\` (${typeof settle})`);
  }
  if (typeof rotate !== 'boolean') throw new TypeError(`Expected \`rotate\` to be a boolean, got \`${String(rotate)}\` (${typeof rotate})`);
  return { warmup, repeats, settle, rotate };
}

/** What {@link measure} tells each run of the measured function. */
export interface RunInfo {
  /** 0-based over all runs, warm-up included. */
  index: number;
  /** True for a warm-up run (not counted). */
  warmup: boolean;
  /** True for the last measured run: the one scenarios keep the trace of. */
  last: boolean;
}

/**
 * Runs `fn` `warmup + repeats` times, one after another, and summarizes the measured runs.
 * A run's sample is its wall time, unless `fn` resolves to a number: then that number (ms) is the
 * sample, so a run can report a time it measured itself (GPU timestamps, a sub-phase).
 *
 * @example
 * const t = await measure(async () => { stream.upload(src, dst); await stream.synchronize(); }, { warmup: 1, repeats: 5 });
 * t.median; // ms
 */
export async function measure(
  fn: (run: RunInfo) => Promise<number | void> | number | void,
  options: MeasureOptions = {},
): Promise<Timing> {
  const { warmup, repeats } = runCounts(options);
  const samples: number[] = [];
  const total = warmup + repeats;
  for (let index = 0; index < total; index++) {
    const isWarmup = index < warmup;
    const t0 = performance.now();
    const own = await fn({ index, warmup: isWarmup, last: index === total - 1 });
    const wall = performance.now() - t0;
    if (!isWarmup) samples.push(typeof own === 'number' ? own : wall);
  }
  return timing(samples);
}

/**
 * Like {@link measure} for several variants at once, run round-robin: warm-up rounds, then
 * `repeats` rounds in which every function runs once, in order. Variants compared with each other
 * then see the same device state (GPU clocks rise and fall with load; caches and pools warm up),
 * which back-to-back blocks of repeats do not give. Returns one {@link Timing} per function.
 *
 * @example
 * const [tSync, tStreams] = await measureInterleaved([runSync, runStreams], { warmup: 1, repeats: 5 });
 */
export async function measureInterleaved(
  fns: readonly ((run: RunInfo) => Promise<number | void> | number | void)[],
  options: MeasureOptions = {},
): Promise<Timing[]> {
  const { warmup, repeats, settle, rotate } = runCounts(options);
  const samples: number[][] = fns.map(() => []);
  const total = warmup + repeats;
  const n = fns.length;
  for (let index = 0; index < total; index++) {
    const isWarmup = index < warmup;
    const first = rotate && !isWarmup ? (index - warmup) % n : 0;
    for (let j = 0; j < n; j++) {
      const k = (first + j) % n;
      const fn = fns[k]!;
      if (!isWarmup) for (let i = 0; i < settle; i++) await fn({ index, warmup: true, last: false });
      const t0 = performance.now();
      const own = await fn({ index, warmup: isWarmup, last: index === total - 1 });
      const wall = performance.now() - t0;
      if (!isWarmup) samples[k]!.push(typeof own === 'number' ? own : wall);
    }
  }
  return samples.map((s) => timing(s));
}

/** Summary of samples (ms), in run order. Throws on an empty list. */
export function timing(samples: readonly number[]): Timing {
  if (samples.length === 0) throw new RangeError('timing() needs at least one sample');
  return { median: median(samples), min: Math.min(...samples), max: Math.max(...samples), samples: [...samples] };
}

/** Median of a non-empty list (mean of the two middle values for an even count). */
export function median(values: readonly number[]): number {
  if (values.length === 0) throw new RangeError('median() of an empty list');
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/**
 * A distribution-free 95% interval for the median of `values` (sign test: order statistics k and
 * n + 1 - k, with k the largest whose binomial tail stays within 2.5%). Null below 6 values, where
 * no such interval reaches 95%.
 */
export function medianInterval(values: readonly number[]): { lo: number; hi: number; n: number } | null {
  const s = values.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  const n = s.length;
  // P(Binomial(n, 1/2) <= j), summed term by term.
  let term = 0.5 ** n;
  let tail = term;
  let k = 0;
  for (let j = 0; tail <= 0.025 && j < n; ) {
    k = j + 1;
    term = (term * (n - j)) / (j + 1);
    j++;
    tail += term;
  }
  return k >= 1 ? { lo: s[k - 1]!, hi: s[n - k]!, n } : null;
}

/**
 * How far samples spread, in their unit: half their interquartile range, or half their range below 4
 * samples (0 below 2). One outlying sample (a host hiccup at 3x the rest) does not widen it.
 */
export function spread(samples: readonly number[]): number {
  const n = samples.length;
  if (n < 2) return 0;
  const s = [...samples].sort((a, b) => a - b);
  if (n < 4) return (s[n - 1]! - s[0]!) / 2;
  return (s[Math.ceil((3 * (n - 1)) / 4)]! - s[Math.floor((n - 1) / 4)]!) / 2;
}

/** Element-wise sum of timings' samples (same repeat count), summarized: the time of parts run back to back. */
export function sumTimings(...parts: Timing[]): Timing {
  const n = Math.min(...parts.map((p) => p.samples.length));
  const samples: number[] = [];
  for (let i = 0; i < n; i++) samples.push(parts.reduce((acc, p) => acc + p.samples[i]!, 0));
  return timing(samples);
}

/** Throughput in GB/s (1e9 bytes per second) of `bytes` moved in `ms` milliseconds. */
export function gbps(bytes: number, ms: number): number {
  return ms > 0 ? bytes / ms / 1e6 : Number.NaN;
}
