/**
 * The benchmark's kernels (bench/kernels/sleep.wgsl, compute_intensive.wgsl) on real WebGPU (Dawn;
 * SwiftShader where there is no GPU) against the CPU references in bench/reference.ts, on fresh
 * seeded random data.
 *
 * Raw WebGPU on purpose (test/fixtures/raw-webgpu.ts, shared with the library's test/shaders.test.ts):
 * these tests pin the kernel contracts (bindings, overrides, workgroup sizes, 2D indexing) that the
 * scenarios build on, independently of the library.
 *
 * Reproduce a failure with the seed from its message: `SHADER_TEST_SEED=1234 npx vitest run
 * bench/test/kernels.test.ts`.
 */
import { describe, expect, it } from 'vitest';
import {
  COMPUTE_INTENSIVE_TOL,
  DEFAULT_ITERATIONS,
  WORKGROUP_SIZE,
  computeIntensiveRef,
  dispatchSize,
  firstMismatch,
  rng,
  sleepRef,
} from '../reference';
import computeIntensiveWgsl from '../kernels/compute_intensive.wgsl?raw';
import sleepWgsl from '../kernels/sleep.wgsl?raw';
import { type KernelSpec, expectMatch, gridFor, rawGpu, seedFor } from '../../test/fixtures/raw-webgpu';

const gpu = await rawGpu('kernels.test');

// ---------------------------------------------------------------------------------------------
// Kernels: explicit layouts that spell out the contracts in docs/API.md. A shader whose
// bindings, access modes or entry point drift from them fails pipeline creation here.

const KERNELS = {
  sleep: {
    name: 'sleep',
    code: sleepWgsl,
    bindings: ['storage'],
    workgroupSize: WORKGROUP_SIZE.sleep,
  },
  computeIntensive: {
    name: 'compute_intensive',
    code: computeIntensiveWgsl,
    bindings: ['read-only-storage', 'storage'],
    workgroupSize: WORKGROUP_SIZE.computeIntensive,
  },
} satisfies Record<string, KernelSpec>;

// ---------------------------------------------------------------------------------------------
// Kernel runners: random input in, GPU output and CPU reference out.

async function runSleep(
  n: number,
  seed: number,
  iterations: number | undefined,
  grid?: [number, number],
) {
  const k = KERNELS.sleep;
  const data = rng(seed).u32Array(n);
  const buf = gpu.storageFrom('data', data);
  const pipeline = await gpu.pipelineFor(k, iterations === undefined ? undefined : { iterations });
  await gpu.dispatch(k, pipeline, [{ buffer: buf }], gridFor(n, k.workgroupSize, grid));
  return {
    input: data,
    got: new Uint32Array(await gpu.readBack(buf, n * 4)),
    want: sleepRef(data, iterations ?? DEFAULT_ITERATIONS.sleep),
  };
}

async function runComputeIntensive(
  n: number,
  seed: number,
  iterations: number | undefined,
  grid?: [number, number],
) {
  const k = KERNELS.computeIntensive;
  const r = rng(seed);
  // Longer than out, as in test/shaders.test.ts's vector_add: n comes from out.
  const input = r.f32Array(n + 64, -1, 1);
  // The ends of the documented input range, where the map's derivative is smallest.
  if (n >= 3) {
    input[0] = -1;
    input[1] = 1;
    input[n - 1] = Math.fround(0.999999);
  }
  const bufIn = gpu.storageFrom('input', input);
  const bufOut = gpu.storageFrom('out', r.f32Array(n, 5000, 6000));
  const pipeline = await gpu.pipelineFor(k, iterations === undefined ? undefined : { iterations });
  await gpu.dispatch(
    k,
    pipeline,
    [{ buffer: bufIn }, { buffer: bufOut }],
    gridFor(n, k.workgroupSize, grid),
  );
  const used = input.subarray(0, n);
  return {
    input: used,
    got: new Float32Array(await gpu.readBack(bufOut, n * 4)),
    want: computeIntensiveRef(used, iterations ?? DEFAULT_ITERATIONS.computeIntensive),
  };
}

/** Largest |got - want| and largest distance in f32 ulps, for the log. */
function maxError(got: Float32Array, want: Float32Array): { abs: number; ulps: number } {
  const gi = new Int32Array(got.buffer, got.byteOffset, got.length);
  const wi = new Int32Array(want.buffer, want.byteOffset, want.length);
  // Bit patterns mapped to integers that order like the floats (negatives mirrored).
  const ordered = (bits: number) => (bits < 0 ? -(bits & 0x7fffffff) : bits);
  let abs = 0;
  let ulps = 0;
  for (let i = 0; i < got.length; i++) {
    abs = Math.max(abs, Math.abs(got[i]! - want[i]!));
    ulps = Math.max(ulps, Math.abs(ordered(gi[i]!) - ordered(wi[i]!)));
  }
  return { abs, ulps };
}

// ---------------------------------------------------------------------------------------------
// GPU checks.

/** Sizes: 1, workgroup size +-1 and at it, a few multiples, and non-multiples. */
const sizes256 = [1, 2, 255, 256, 257, 511, 512, 1000, 4099];
const sizes64 = [1, 63, 64, 65, 255, 256, 257, 1000];

describe.skipIf(!gpu.device)('sleep.wgsl', () => {
  it.each(sizes64)('n = %i, default iterations (1024), bit-exact', async (n) => {
    const seed = seedFor();
    const { got, want } = await runSleep(n, seed, undefined);
    expectMatch(got, want, `seed ${seed}, n ${n}`);
  });

  it.each([0, 1, 2, 7, 100, 5000])('iterations = %i, bit-exact', async (iterations) => {
    const seed = seedFor();
    const n = 333;
    const { input, got, want } = await runSleep(n, seed, iterations);
    expectMatch(got, want, `seed ${seed}, iterations ${iterations}`);
    if (iterations === 0) expectMatch(got, input, `seed ${seed}: iterations 0 changed data`);
    else expect(firstMismatch(got, input), 'data changed').not.toBeNull();
  });

  it.each([
    { n: 700, grid: [3, 4] as [number, number] },
    { n: 64 * 6, grid: [2, 3] as [number, number] },
  ])('2D dispatch $grid covers n = $n', async ({ n, grid }) => {
    const seed = seedFor();
    const { got, want } = await runSleep(n, seed, 37, grid);
    expectMatch(got, want, `seed ${seed}, n ${n}, grid ${grid}`);
  });

  // Prints GPU time at two iteration counts; asserts nothing about time (timings belong in
  // bench/), only that the kernel ran and stayed exact.
  it.skipIf(!gpu.hasTimestamps)('GPU time grows with iterations (printed, not asserted)', async () => {
    const d = gpu.dev();
    const k = KERNELS.sleep;
    const n = 4096;
    const counts = [2000, 8000];
    const reps = 3;
    const querySet = d.createQuerySet({ label: 'sleep timing', type: 'timestamp', count: 2 });
    const resolve = gpu.track(
      d.createBuffer({
        label: 'sleep timing resolve',
        size: 16,
        usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC,
      }),
    );
    const seed = seedFor();
    const data = rng(seed).u32Array(n);
    const lines: string[] = [];
    try {
      for (const iterations of counts) {
        const pipeline = await gpu.pipelineFor(k, { iterations });
        const samples: number[] = [];
        for (let rep = 0; rep < reps + 1; rep++) {
          const buf = gpu.storageFrom('data', data);
          await gpu.dispatch(k, pipeline, [{ buffer: buf }], dispatchSize(n, k.workgroupSize), {
            querySet,
            first: 0,
          });
          await gpu.scoped('resolve timestamps', () => {
            const enc = d.createCommandEncoder({ label: 'resolve timestamps' });
            enc.resolveQuerySet(querySet, 0, 2, resolve, 0);
            d.queue.submit([enc.finish()]);
          });
          const [t0, t1] = new BigUint64Array(await gpu.readBack(resolve, 16));
          if (rep > 0) samples.push(Number(t1! - t0!) / 1e6); // rep 0 is warm-up
          if (rep === reps) {
            const got = new Uint32Array(await gpu.readBack(buf, n * 4));
            expectMatch(got, sleepRef(data, iterations), `seed ${seed}`);
          }
        }
        samples.sort((x, y) => x - y);
        const median = samples[Math.floor(samples.length / 2)]!;
        lines.push(
          `iterations ${iterations}: median ${median.toFixed(3)} ms ` +
            `(${((median / iterations) * 1000).toFixed(3)} ms per 1000 iterations, n = ${n}; ` +
            `samples ${samples.map((s) => s.toFixed(3)).join(', ')})`,
        );
      }
    } finally {
      querySet.destroy();
    }
    console.log(`sleep.wgsl timing on ${gpu.adapter?.info.description}:\n  ${lines.join('\n  ')}`);
  });
});

describe.skipIf(!gpu.device)('compute_intensive.wgsl', () => {
  const tol = COMPUTE_INTENSIVE_TOL;

  it.each(sizes256)('n = %i, default iterations (64), within tolerance', async (n) => {
    const seed = seedFor();
    const { got, want } = await runComputeIntensive(n, seed, undefined);
    expectMatch(got, want, `seed ${seed}, n ${n}`, tol);
  });

  it.each([0, 1, 3, 64, 1000, 10000])('iterations = %i, within tolerance', async (iterations) => {
    const seed = seedFor();
    const n = 1000;
    const { input, got, want } = await runComputeIntensive(n, seed, iterations);
    expectMatch(got, want, `seed ${seed}, iterations ${iterations}`, tol);
    if (iterations === 0) expectMatch(got, input, `seed ${seed}: iterations 0 changed data`);
    const err = maxError(got, want);
    console.log(
      `compute_intensive iterations ${iterations}: max |diff| ${err.abs.toExponential(2)}, ` +
        `max ${err.ulps} ulp (n ${n}, seed ${seed})`,
    );
    // Finite and inside the contraction's range for inputs in [-1, 1].
    for (const v of got) expect(Math.abs(v)).toBeLessThanOrEqual(1);
  });

  it.each([
    { n: 1300, grid: [2, 3] as [number, number] },
    { n: 700, grid: [1, 4] as [number, number] },
  ])('2D dispatch $grid covers n = $n', async ({ n, grid }) => {
    const seed = seedFor();
    const { got, want } = await runComputeIntensive(n, seed, 5, grid);
    expectMatch(got, want, `seed ${seed}, n ${n}, grid ${grid}`, tol);
  });
});
