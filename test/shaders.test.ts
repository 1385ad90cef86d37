/**
 * The library's built-in kernel (shaders/vector_add.wgsl) on real WebGPU (Dawn; SwiftShader where
 * there is no GPU) against its CPU reference in bench/reference.ts, on fresh seeded random data.
 *
 * Raw WebGPU on purpose (test/fixtures/raw-webgpu.ts): these tests pin the kernel's contract
 * (bindings, workgroup size, 2D indexing) that the library builds on, independently of the library.
 * The benchmark's kernels (bench/kernels/) are tested the same way in bench/test/kernels.test.ts.
 *
 * Reproduce a failure with the seed from its message: `SHADER_TEST_SEED=1234 npx vitest run
 * test/shaders.test.ts`.
 */
import { describe, it } from 'vitest';
import { WORKGROUP_SIZE, rng, vectorAddRef } from '../bench/reference';
import vectorAddWgsl from '../shaders/vector_add.wgsl?raw';
import { type KernelSpec, expectMatch, gridFor, rawGpu, seedFor } from './fixtures/raw-webgpu';

const gpu = await rawGpu('shaders.test');

// Explicit layout that spells out the contract in docs/API.md. A shader whose bindings, access
// modes or entry point drift from it fails pipeline creation here.
const KERNELS = {
  vectorAdd: {
    name: 'vector_add',
    code: vectorAddWgsl,
    bindings: ['read-only-storage', 'read-only-storage', 'storage'],
    workgroupSize: WORKGROUP_SIZE.vectorAdd,
  },
} satisfies Record<string, KernelSpec>;

/** Random input in, GPU output and CPU reference out. */
async function runVectorAdd(n: number, seed: number, grid?: [number, number]) {
  const k = KERNELS.vectorAdd;
  const r = rng(seed);
  // Mixed magnitudes so that the f32 add actually rounds. a and b are longer than out: the
  // kernel must take n from out, and an unguarded i >= n (clamped by robust buffer access) would
  // write a[j] + b[j] for some j >= n over out[n - 1].
  const a = r.f32Array(n + 64, -1000, 1000);
  const b = r.f32Array(n + 64, -1, 1);
  const junk = r.f32Array(n + 64, 5000, 6000); // not zeros: unwritten elements show up
  const bufA = gpu.storageFrom('a', a);
  const bufB = gpu.storageFrom('b', b);
  // `out` binds the first n elements of a longer buffer: the tail must stay untouched.
  const bufOut = gpu.storageFrom('out', junk);
  const pipeline = await gpu.pipelineFor(k);
  await gpu.dispatch(
    k,
    pipeline,
    [{ buffer: bufA }, { buffer: bufB }, { buffer: bufOut, size: n * 4 }],
    gridFor(n, k.workgroupSize, grid),
  );
  const all = new Float32Array(await gpu.readBack(bufOut, junk.byteLength));
  return {
    got: all.subarray(0, n),
    want: vectorAddRef(a, b, new Float32Array(n)),
    tail: all.subarray(n),
    wantTail: junk.subarray(n),
  };
}

/** Sizes: 1, workgroup size +-1 and at it, a few multiples, and non-multiples. */
const sizes256 = [1, 2, 255, 256, 257, 511, 512, 1000, 4099];

describe.skipIf(!gpu.device)('vector_add.wgsl', () => {
  it.each(sizes256)('n = %i matches Math.fround(a + b) bit-exactly', async (n) => {
    const seed = seedFor();
    const { got, want, tail, wantTail } = await runVectorAdd(n, seed);
    expectMatch(got, want, `seed ${seed}, n ${n}`);
    expectMatch(tail, wantTail, `seed ${seed}, n ${n}: wrote past n`);
  });

  it.each([
    { n: 1300, grid: [2, 3] as [number, number] },
    { n: 256 * 6, grid: [3, 2] as [number, number] },
    { n: 700, grid: [1, 4] as [number, number] },
  ])('2D dispatch $grid covers n = $n', async ({ n, grid }) => {
    const seed = seedFor();
    const { got, want, tail, wantTail } = await runVectorAdd(n, seed, grid);
    expectMatch(got, want, `seed ${seed}, n ${n}, grid ${grid}`);
    expectMatch(tail, wantTail, `seed ${seed}, n ${n}: wrote past n`);
  });
});
