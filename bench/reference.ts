/**
 * Exact CPU references for the kernels in `shaders/`, a seeded PRNG for test and benchmark
 * inputs, and a mismatch reporter. Pure TypeScript: no DOM, no Node imports, so the page, the
 * headless runner, the Node runner and the tests can all share it.
 */

/** Workgroup sizes of the built-in kernels, as declared in their `@workgroup_size`. */
export const WORKGROUP_SIZE = {
  vectorAdd: 256,
  sleep: 64,
  computeIntensive: 256,
} as const;

/** Default values of the kernels' `iterations` override constants. */
export const DEFAULT_ITERATIONS = {
  sleep: 1024,
  computeIntensive: 64,
} as const;

/**
 * Tolerance of `compute_intensive.wgsl` against {@link computeIntensiveRef}: an element matches
 * when `|got - want| <= max(abs, rel * |want|)`. GPUs may fuse a multiply and an add into one
 * FMA; the kernel's map is a contraction, so such differences stay at a few ulps whatever the
 * iteration count.
 */
export const COMPUTE_INTENSIVE_TOL: Tolerance = { abs: 1e-5, rel: 1e-4 };

/** Largest workgroup count per dimension that every WebGPU device accepts. */
export const MAX_WORKGROUPS_PER_DIM = 65535;

/**
 * The dispatch grid for `n` elements with one invocation per element: x up to 65535 workgroups,
 * then y. Every built-in kernel computes `i = gid.x + gid.y * (num_workgroups.x * wgSize)` and
 * skips `i >= n`.
 *
 * @example dispatchSize(1_000_000, 256) // [3907, 1]
 */
export function dispatchSize(n: number, workgroupSize: number): [x: number, y: number] {
  const groups = Math.ceil(n / workgroupSize);
  if (groups === 0) return [0, 0];
  const x = Math.min(groups, MAX_WORKGROUPS_PER_DIM);
  return [x, Math.ceil(groups / MAX_WORKGROUPS_PER_DIM)];
}

/** `vector_add.wgsl`: `out[i] = a[i] + b[i]` in f32, bit-exact. `n = out.length`. */
export function vectorAddRef(
  a: Float32Array,
  b: Float32Array,
  out: Float32Array = new Float32Array(Math.min(a.length, b.length)),
): Float32Array {
  for (let i = 0; i < out.length; i++) out[i] = Math.fround(a[i]! + b[i]!);
  return out;
}

/** One element of `sleep.wgsl`: `iterations` steps of `x = x * 1664525 + 1013904223; x ^= x >> 13` (u32). */
export function sleepStep(x: number, iterations: number): number {
  let v = x >>> 0;
  for (let k = 0; k < iterations; k++) {
    v = (Math.imul(v, 1664525) + 1013904223) >>> 0;
    v = (v ^ (v >>> 13)) >>> 0;
  }
  return v;
}

/** `sleep.wgsl` over a whole array, bit-exact. Returns a new array; `data` is left unchanged. */
export function sleepRef(
  data: Uint32Array,
  iterations: number = DEFAULT_ITERATIONS.sleep,
): Uint32Array {
  const out = new Uint32Array(data.length);
  for (let i = 0; i < data.length; i++) out[i] = sleepStep(data[i]!, iterations);
  return out;
}

/**
 * One element of `compute_intensive.wgsl`, rounding to f32 after every operation:
 * `x = ((0.5*y + 0.5*x) + t) - 0.125*((x*x)*x)` with `t = (k & 1023) * 2^-14` at step `k`,
 * starting at `x = y`.
 */
export function computeIntensiveStep(y: number, iterations: number): number {
  const f = Math.fround;
  const yf = f(y);
  const hy = f(0.5 * yf);
  let x = yf;
  for (let k = 0; k < iterations; k++) {
    const cube = f(f(x * x) * x);
    const t = (k & 1023) * 2 ** -14; // exact in f32
    x = f(f(f(hy + f(0.5 * x)) + t) - f(0.125 * cube));
  }
  return x;
}

/**
 * `compute_intensive.wgsl` over a whole array. Compare with {@link COMPUTE_INTENSIVE_TOL}, not
 * bit-exactly. `n = out.length`.
 */
export function computeIntensiveRef(
  input: Float32Array,
  iterations: number = DEFAULT_ITERATIONS.computeIntensive,
  out: Float32Array = new Float32Array(input.length),
): Float32Array {
  for (let i = 0; i < out.length; i++) out[i] = computeIntensiveStep(input[i]!, iterations);
  return out;
}

/** A seeded pseudo-random generator (mulberry32): same seed, same sequence, on every runtime. */
export interface Rng {
  /** The seed this generator started from (print it when a check fails). */
  readonly seed: number;
  /** Next u32, uniform in [0, 2^32). */
  u32(): number;
  /** Next float, uniform in [0, 1). */
  next(): number;
  /** `n` f32 values uniform in [lo, hi). @default lo = -1, hi = 1 */
  f32Array(n: number, lo?: number, hi?: number): Float32Array;
  /** `n` u32 values uniform over the full range. */
  u32Array(n: number): Uint32Array;
}

/**
 * A mulberry32 generator from a 32-bit seed.
 *
 * @example
 * const seed = randomSeed();
 * const a = rng(seed).f32Array(1024); // print `seed` when a check on `a` fails
 */
export function rng(seed: number): Rng {
  const start = seed >>> 0;
  let state = start;
  const u32 = (): number => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
  const next = (): number => u32() / 4294967296;
  return {
    seed: start,
    u32,
    next,
    f32Array(n, lo = -1, hi = 1) {
      const out = new Float32Array(n);
      for (let i = 0; i < n; i++) out[i] = lo + (hi - lo) * next();
      return out;
    },
    u32Array(n) {
      const out = new Uint32Array(n);
      for (let i = 0; i < n; i++) out[i] = u32();
      return out;
    },
  };
}

/** A fresh seed for {@link rng}, from `crypto.getRandomValues` where present, else `Math.random`. */
export function randomSeed(): number {
  const c = (globalThis as { crypto?: { getRandomValues?: (a: Uint32Array) => Uint32Array } })
    .crypto;
  if (c?.getRandomValues) return c.getRandomValues(new Uint32Array(1))[0]!;
  return Math.floor(Math.random() * 4294967296) >>> 0;
}

/** Absolute and relative tolerance: a value matches when `|got - want| <= max(abs, rel * |want|)`. */
export interface Tolerance {
  abs: number;
  rel: number;
}

type NumericArray = ArrayLike<number>;

/**
 * The first element where `actual` and `expected` differ, described as
 * `"index 17: got 0.5, want 0.25 (|diff| 0.25 > tol 1e-5) [length 1024, 3 mismatches]"`, or null
 * when they match. Without `tol` the comparison is exact (`Object.is`, except that `0` and `-0`
 * match); NaN matches only NaN in both modes. A length difference is a mismatch.
 */
export function firstMismatch(
  actual: NumericArray,
  expected: NumericArray,
  tol?: Tolerance,
): string | null {
  if (actual.length !== expected.length) {
    return `length: got ${actual.length}, want ${expected.length}`;
  }
  let first = -1;
  let count = 0;
  for (let i = 0; i < expected.length; i++) {
    if (!matches(actual[i]!, expected[i]!, tol)) {
      if (first < 0) first = i;
      count++;
    }
  }
  if (first < 0) return null;
  const got = actual[first]!;
  const want = expected[first]!;
  const limit = tol ? ` (|diff| ${Math.abs(got - want)} > tol ${allowed(want, tol)})` : '';
  return (
    `index ${first}: got ${got}, want ${want}${limit} ` +
    `[length ${expected.length}, ${count} mismatch${count === 1 ? '' : 'es'}]`
  );
}

function allowed(want: number, tol: Tolerance): number {
  return Math.max(tol.abs, tol.rel * Math.abs(want));
}

function matches(got: number, want: number, tol: Tolerance | undefined): boolean {
  if (Number.isNaN(want) || Number.isNaN(got)) return Number.isNaN(want) && Number.isNaN(got);
  if (!tol) return got === want;
  if (got === want) return true; // equal infinities
  return Math.abs(got - want) <= allowed(want, tol);
}
