/**
 * The built-in kernels (shaders/*.wgsl) on real WebGPU (Dawn; SwiftShader where there is no GPU)
 * against the CPU references in bench/reference.ts, on fresh seeded random data.
 *
 * Raw WebGPU on purpose: these tests pin the kernel contracts (bindings, overrides, workgroup
 * sizes, 2D indexing) that the library builds on, independently of the library.
 *
 * Reproduce a failure with the seed from its message: `SHADER_TEST_SEED=1234 npx vitest run
 * test/shaders.test.ts`.
 */
import './gpu'; // points the Vulkan loader at SwiftShader when there is no GPU
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { create, globals } from 'webgpu';

import {
  type Tolerance,
  COMPUTE_INTENSIVE_TOL,
  DEFAULT_ITERATIONS,
  WORKGROUP_SIZE,
  computeIntensiveRef,
  dispatchSize,
  firstMismatch,
  randomSeed,
  rng,
  sleepRef,
  sleepStep,
  vectorAddRef,
} from '../bench/reference';
import computeIntensiveWgsl from '../bench/kernels/compute_intensive.wgsl?raw';
import sleepWgsl from '../bench/kernels/sleep.wgsl?raw';
import vectorAddWgsl from '../shaders/vector_add.wgsl?raw';

// ---------------------------------------------------------------------------------------------
// Device setup: one device for the whole file.

Object.assign(globalThis, globals);

// Held at module scope for the whole file: when this object is garbage-collected while a device
// from it is alive, Dawn aborts or segfaults.
const gpu: GPU = create(['disable-dawn-features=timestamp_quantization']);
const adapter: GPUAdapter | null = await gpu.requestAdapter();
const hasTimestamps = adapter?.features.has('timestamp-query') ?? false;
const device: GPUDevice | null = adapter
  ? await adapter.requestDevice({
      label: 'shaders.test',
      requiredFeatures: hasTimestamps ? ['timestamp-query'] : [],
    })
  : null;
if (!adapter) {
  console.warn('shaders.test: no WebGPU adapter at all (no GPU, no SwiftShader): skipping');
} else {
  const info = adapter.info;
  console.log(
    `shaders.test: adapter ${info.vendor} / ${info.architecture} / ${info.device} / ` +
      `${info.description}; timestamp-query: ${hasTimestamps}`,
  );
}
let lost: string | null = null;
void device?.lost.then((l) => {
  lost = `${l.reason}: ${l.message}`;
});

afterAll(() => {
  device?.destroy();
  // `gpu` stays referenced until here.
  expect(gpu).toBeDefined();
});

/** Seed per test case: fresh each run, or fixed by SHADER_TEST_SEED to reproduce a failure. */
function seedFor(): number {
  const fixed = process.env.SHADER_TEST_SEED;
  return fixed !== undefined && fixed !== '' ? Number(fixed) >>> 0 : randomSeed();
}

// ---------------------------------------------------------------------------------------------
// Fixture: buffers created by a test are destroyed after it (CTS trackForCleanup).

const created: GPUBuffer[] = [];
afterEach(() => {
  for (const b of created.splice(0)) b.destroy();
});

function dev(): GPUDevice {
  if (!device) throw new Error('no device');
  if (lost) throw new Error(`device lost: ${lost}`);
  return device;
}

function track<T extends GPUBuffer>(b: T): T {
  created.push(b);
  return b;
}

/** Runs `fn` inside validation and out-of-memory error scopes; throws on any captured error. */
async function scoped<T>(what: string, fn: () => T | Promise<T>): Promise<T> {
  const d = dev();
  d.pushErrorScope('out-of-memory');
  d.pushErrorScope('validation');
  let result: T;
  try {
    result = await fn();
  } finally {
    const validation = await d.popErrorScope();
    const oom = await d.popErrorScope();
    const err = validation ?? oom;
    if (err) throw new Error(`${what}: GPU ${err.constructor.name}: ${err.message}`);
  }
  return result;
}

function storageFrom(label: string, data: Float32Array | Uint32Array): GPUBuffer {
  const b = track(
    dev().createBuffer({
      label,
      size: Math.max(4, data.byteLength),
      usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
      mappedAtCreation: true,
    }),
  );
  new Uint8Array(b.getMappedRange()).set(
    new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
  );
  b.unmap();
  return b;
}

async function readBack(src: GPUBuffer, byteLength: number): Promise<ArrayBuffer> {
  const d = dev();
  const staging = track(
    d.createBuffer({
      label: `${src.label} read-back`,
      size: byteLength,
      usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    }),
  );
  const enc = d.createCommandEncoder({ label: `${src.label} read-back` });
  enc.copyBufferToBuffer(src, 0, staging, 0, byteLength);
  d.queue.submit([enc.finish()]);
  await staging.mapAsync(GPUMapMode.READ);
  const copy = staging.getMappedRange().slice(0);
  staging.unmap();
  return copy;
}

// ---------------------------------------------------------------------------------------------
// Kernels: explicit layouts that spell out the contracts in docs/API.md. A shader whose
// bindings, access modes or entry point drift from them fails pipeline creation here.

type Access = 'read-only-storage' | 'storage';

interface KernelSpec {
  name: string;
  code: string;
  bindings: Access[];
  workgroupSize: number;
}

const KERNELS = {
  vectorAdd: {
    name: 'vector_add',
    code: vectorAddWgsl,
    bindings: ['read-only-storage', 'read-only-storage', 'storage'],
    workgroupSize: WORKGROUP_SIZE.vectorAdd,
  },
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

const modules = new Map<string, GPUShaderModule>();

async function moduleFor(k: KernelSpec): Promise<GPUShaderModule> {
  const cached = modules.get(k.name);
  if (cached) return cached;
  const module = await scoped(`${k.name}: createShaderModule`, () =>
    dev().createShaderModule({ label: k.name, code: k.code }),
  );
  const info = await module.getCompilationInfo();
  const messages = info.messages.map((m) => `${m.type} ${m.lineNum}:${m.linePos} ${m.message}`);
  expect(messages, `${k.name}.wgsl compilation messages`).toEqual([]);
  modules.set(k.name, module);
  return module;
}

async function pipelineFor(
  k: KernelSpec,
  constants?: Record<string, number>,
): Promise<GPUComputePipeline> {
  const module = await moduleFor(k);
  return scoped(`${k.name}: createComputePipeline`, () => {
    const d = dev();
    const layout = d.createBindGroupLayout({
      label: `${k.name} layout`,
      entries: k.bindings.map((type, binding) => ({
        binding,
        visibility: GPUShaderStage.COMPUTE,
        buffer: { type },
      })),
    });
    return d.createComputePipelineAsync({
      label: `${k.name} ${JSON.stringify(constants ?? {})}`,
      layout: d.createPipelineLayout({ label: `${k.name} layout`, bindGroupLayouts: [layout] }),
      compute: { module, entryPoint: 'main', ...(constants ? { constants } : {}) },
    });
  });
}

interface Binding {
  buffer: GPUBuffer;
  /** Bytes; the whole buffer when left out. */
  size?: number;
}

/** Encodes one dispatch (with optional timestamps around it) and submits it. */
async function dispatch(
  k: KernelSpec,
  pipeline: GPUComputePipeline,
  bindings: Binding[],
  grid: [number, number],
  timestamps?: { querySet: GPUQuerySet; first: number },
): Promise<void> {
  await scoped(`${k.name}: dispatch ${grid.join('x')}`, () => {
    const d = dev();
    const bindGroup = d.createBindGroup({
      label: `${k.name} bind group`,
      layout: pipeline.getBindGroupLayout(0),
      entries: bindings.map((b, binding) => ({
        binding,
        resource: { buffer: b.buffer, ...(b.size !== undefined ? { size: b.size } : {}) },
      })),
    });
    const enc = d.createCommandEncoder({ label: `${k.name} dispatch` });
    const pass = enc.beginComputePass({
      label: `${k.name} pass`,
      ...(timestamps
        ? {
            timestampWrites: {
              querySet: timestamps.querySet,
              beginningOfPassWriteIndex: timestamps.first,
              endOfPassWriteIndex: timestamps.first + 1,
            },
          }
        : {}),
    });
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, bindGroup);
    pass.dispatchWorkgroups(grid[0], grid[1]);
    pass.end();
    d.queue.submit([enc.finish()]);
  });
}

/** Grid override for the 2D path, checked to cover n; otherwise the library's grid. */
function gridFor(n: number, wg: number, grid?: [number, number]): [number, number] {
  if (!grid) return dispatchSize(n, wg);
  expect(grid[0] * grid[1] * wg, `grid ${grid} covers n = ${n}`).toBeGreaterThanOrEqual(n);
  return grid;
}

// ---------------------------------------------------------------------------------------------
// Kernel runners: random input in, GPU output and CPU reference out.

async function runVectorAdd(n: number, seed: number, grid?: [number, number]) {
  const k = KERNELS.vectorAdd;
  const r = rng(seed);
  // Mixed magnitudes so that the f32 add actually rounds. a and b are longer than out: the
  // kernel must take n from out, and an unguarded i >= n (clamped by robust buffer access) would
  // write a[j] + b[j] for some j >= n over out[n - 1].
  const a = r.f32Array(n + 64, -1000, 1000);
  const b = r.f32Array(n + 64, -1, 1);
  const junk = r.f32Array(n + 64, 5000, 6000); // not zeros: unwritten elements show up
  const bufA = storageFrom('a', a);
  const bufB = storageFrom('b', b);
  // `out` binds the first n elements of a longer buffer: the tail must stay untouched.
  const bufOut = storageFrom('out', junk);
  const pipeline = await pipelineFor(k);
  await dispatch(
    k,
    pipeline,
    [{ buffer: bufA }, { buffer: bufB }, { buffer: bufOut, size: n * 4 }],
    gridFor(n, k.workgroupSize, grid),
  );
  const all = new Float32Array(await readBack(bufOut, junk.byteLength));
  return {
    got: all.subarray(0, n),
    want: vectorAddRef(a, b, new Float32Array(n)),
    tail: all.subarray(n),
    wantTail: junk.subarray(n),
  };
}

async function runSleep(
  n: number,
  seed: number,
  iterations: number | undefined,
  grid?: [number, number],
) {
  const k = KERNELS.sleep;
  const data = rng(seed).u32Array(n);
  const buf = storageFrom('data', data);
  const pipeline = await pipelineFor(k, iterations === undefined ? undefined : { iterations });
  await dispatch(k, pipeline, [{ buffer: buf }], gridFor(n, k.workgroupSize, grid));
  return {
    input: data,
    got: new Uint32Array(await readBack(buf, n * 4)),
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
  // Longer than out, as in runVectorAdd: n comes from out.
  const input = r.f32Array(n + 64, -1, 1);
  // The ends of the documented input range, where the map's derivative is smallest.
  if (n >= 3) {
    input[0] = -1;
    input[1] = 1;
    input[n - 1] = Math.fround(0.999999);
  }
  const bufIn = storageFrom('input', input);
  const bufOut = storageFrom('out', r.f32Array(n, 5000, 6000));
  const pipeline = await pipelineFor(k, iterations === undefined ? undefined : { iterations });
  await dispatch(
    k,
    pipeline,
    [{ buffer: bufIn }, { buffer: bufOut }],
    gridFor(n, k.workgroupSize, grid),
  );
  const used = input.subarray(0, n);
  return {
    input: used,
    got: new Float32Array(await readBack(bufOut, n * 4)),
    want: computeIntensiveRef(used, iterations ?? DEFAULT_ITERATIONS.computeIntensive),
  };
}

/** Fails with firstMismatch's full description (vitest would truncate it in a diff). */
function expectMatch(
  got: ArrayLike<number>,
  want: ArrayLike<number>,
  context: string,
  tol?: Tolerance,
): void {
  const mismatch = firstMismatch(got, want, tol);
  if (mismatch !== null) expect.fail(`${context}: ${mismatch}`);
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
// Pure checks of the references and helpers (no GPU).

describe('reference helpers', () => {
  it('rng is deterministic per seed and spans its range', () => {
    const seed = seedFor();
    expect(rng(seed).u32Array(64)).toEqual(rng(seed).u32Array(64));
    const f = rng(seed).f32Array(4096, -2, 3);
    expect(Math.min(...f), `seed ${seed}`).toBeGreaterThanOrEqual(-2);
    expect(Math.max(...f), `seed ${seed}`).toBeLessThanOrEqual(3);
    expect(new Set(f).size, `seed ${seed}`).toBeGreaterThan(4000);
    // mulberry32 reference values for seed 1 (from the C original: t = s += 0x6D2B79F5; ...).
    expect(Array.from(rng(1).u32Array(3))).toEqual([2693262067, 11749833, 2265367787]);
  });

  it('firstMismatch reports index, got and want', () => {
    expect(firstMismatch([1, 2, 3], [1, 2, 3])).toBeNull();
    expect(firstMismatch([1, 5, 7], [1, 2, 3])).toBe('index 1: got 5, want 2 [length 3, 2 mismatches]');
    expect(firstMismatch([1], [1, 2])).toBe('length: got 1, want 2');
    expect(firstMismatch([1.00001], [1], { abs: 0, rel: 1e-4 })).toBeNull();
    expect(firstMismatch([1.1], [1], { abs: 0, rel: 1e-4 })).toMatch(/^index 0: got 1.1, want 1/);
    expect(firstMismatch([NaN], [NaN])).toBeNull();
    expect(firstMismatch([NaN], [1], { abs: 1, rel: 1 })).not.toBeNull();
  });

  it('dispatchSize spills into y past 65535 workgroups', () => {
    expect(dispatchSize(0, 256)).toEqual([0, 0]);
    expect(dispatchSize(1, 256)).toEqual([1, 1]);
    expect(dispatchSize(257, 256)).toEqual([2, 1]);
    expect(dispatchSize(65535 * 256, 256)).toEqual([65535, 1]);
    expect(dispatchSize(65535 * 256 + 1, 256)).toEqual([65535, 2]);
    expect(dispatchSize(65535 * 64 * 3, 64)).toEqual([65535, 3]);
  });

  it('sleepStep mixes in the xorshift (not a plain LCG)', () => {
    const lcg = (x: number) => (Math.imul(x, 1664525) + 1013904223) >>> 0;
    expect(sleepStep(12345, 1)).toBe((lcg(12345) ^ (lcg(12345) >>> 13)) >>> 0);
    expect(sleepStep(7, 0)).toBe(7);
    expect(sleepStep(0xffffffff, 3)).toBe(sleepStep(sleepStep(0xffffffff, 1), 2));
  });

  it('computeIntensiveRef depends on the iteration count beyond the tolerance', () => {
    const seed = seedFor();
    const x = rng(seed).f32Array(1000, -1, 1);
    const at = (iterations: number) => computeIntensiveRef(x, iterations);
    for (const [p, q] of [[64, 65], [64, 63], [1000, 1001], [10000, 9999]] as const) {
      expect(firstMismatch(at(p), at(q), COMPUTE_INTENSIVE_TOL), `seed ${seed}, ${p} vs ${q}`)
        .not.toBeNull();
    }
    // Stays in [-1, 1] and finite at the ends of the input range.
    const ends = computeIntensiveRef(new Float32Array([-1, 1, 0]), 5000);
    for (const v of ends) expect(Math.abs(v)).toBeLessThanOrEqual(1);
  });
});

// ---------------------------------------------------------------------------------------------
// GPU checks.

/** Sizes: 1, workgroup size +-1 and at it, a few multiples, and non-multiples. */
const sizes256 = [1, 2, 255, 256, 257, 511, 512, 1000, 4099];
const sizes64 = [1, 63, 64, 65, 255, 256, 257, 1000];

describe.skipIf(!device)('vector_add.wgsl', () => {
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

describe.skipIf(!device)('sleep.wgsl', () => {
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
  it.skipIf(!hasTimestamps)('GPU time grows with iterations (printed, not asserted)', async () => {
    const d = dev();
    const k = KERNELS.sleep;
    const n = 4096;
    const counts = [2000, 8000];
    const reps = 3;
    const querySet = d.createQuerySet({ label: 'sleep timing', type: 'timestamp', count: 2 });
    const resolve = track(
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
        const pipeline = await pipelineFor(k, { iterations });
        const samples: number[] = [];
        for (let rep = 0; rep < reps + 1; rep++) {
          const buf = storageFrom('data', data);
          await dispatch(k, pipeline, [{ buffer: buf }], dispatchSize(n, k.workgroupSize), {
            querySet,
            first: 0,
          });
          await scoped('resolve timestamps', () => {
            const enc = d.createCommandEncoder({ label: 'resolve timestamps' });
            enc.resolveQuerySet(querySet, 0, 2, resolve, 0);
            d.queue.submit([enc.finish()]);
          });
          const [t0, t1] = new BigUint64Array(await readBack(resolve, 16));
          if (rep > 0) samples.push(Number(t1! - t0!) / 1e6); // rep 0 is warm-up
          if (rep === reps) {
            const got = new Uint32Array(await readBack(buf, n * 4));
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
    console.log(`sleep.wgsl timing on ${adapter?.info.description}:\n  ${lines.join('\n  ')}`);
  });
});

describe.skipIf(!device)('compute_intensive.wgsl', () => {
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
