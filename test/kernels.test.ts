/**
 * Kernels (src/kernels.ts) on real WebGPU (Dawn): a launch is checked at the call (binding count,
 * usage, aliasing, override names, workgroup counts, binding sizes); user kernels run, uniform
 * bindings included; a kernel that fails to compile fails only its own stream. WGSL reflection is
 * in test/wgsl.test.ts, the built-in vector_add.wgsl itself in test/shaders.test.ts.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { gpuContext, useGpuContext, rng, randomSeed, firstMismatch, vectorAddRef } from './fixtures/gpu.js';
import { workgroupsFor, type Context } from '../src/index.js';
import { benchKernels } from '../bench/kernels/index';

type GpuCtx = Context & { errors: string[] };
let ctx: GpuCtx;
useGpuContext((c) => (ctx = c));

describe('override constants', () => {
  it('each launch runs with its own values: changed, changed back, a second constant, one object mutated between launches', async () => {
    const seed = randomSeed();
    const n = 256;
    const k = ctx.kernel(
      `override k: u32 = 1u; override c: u32 = 0u;
       @group(0) @binding(0) var<storage, read> a: array<u32>;
       @group(0) @binding(1) var<storage, read_write> out: array<u32>;
       @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) id: vec3u) { out[id.x] = a[id.x] * k + c; }`,
      { label: 'affine' },
    );
    const s = ctx.createStream({ label: 'constants' });
    const input = rng(seed).u32Array(n).map((x) => x % 1000);
    const a = ctx.alloc(n * 4);
    s.upload(input, a);
    const obj = { k: 4 };
    const runs: [() => Record<string, number>, number, number][] = [
      [() => ({ k: 2 }), 2, 0],
      [() => ({ k: 3 }), 3, 0],
      [() => ({ k: 2, c: 7 }), 2, 7],
      [() => ({ k: 2 }), 2, 0],
      [() => obj, 4, 0],
      [() => ((obj.k = 6), obj), 6, 0], // the same object, changed since its last launch
    ];
    const outs = runs.map(([constants], i) => {
      const out = ctx.alloc(n * 4, { label: `out ${i}` });
      s.launch(k, { bindings: [a, out], workgroups: n / 64, constants: constants() });
      const got = new Uint32Array(n);
      s.download(out, got);
      return got;
    });
    await s.synchronize();
    runs.forEach(([, kk, c], i) => expect(firstMismatch(outs[i]!, input.map((x) => x * kk + c)), `launch ${i}, seed ${seed}`).toBeNull());
    expect(ctx.errors).toEqual([]);
  });
});

describe('override constants are checked at the call as WebGPU reads them', () => {
  it('an @id override is keyed by its id; values must fit its type (integers truncated, booleans taken); the launch runs with them', async () => {
    const k = ctx.kernel(`@id(7) override a: u32 = 1u; override f = 1.0; override b: bool = false; override s = -3;
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(1) fn main() { out[0] = f32(a); out[1] = f; out[2] = select(0.0, 1.0, b); out[3] = f32(s); }`, { label: 'typed' });
    expect(k.overrides).toEqual(['7', 'f', 'b', 's']);
    const s = ctx.createStream({ label: 'typed overrides' });
    const d = ctx.alloc(16);
    const launch = (constants: Record<string, number | boolean>): number => s.launch(k, { bindings: [d], workgroups: [1, 1, 1], constants });
    const refused = (constants: Record<string, number | boolean>, message: RegExp): void => {
      expect(() => launch(constants), JSON.stringify(constants)).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', op: 'launch', stream: 'typed overrides', message: expect.stringMatching(message) }));
    };
    refused({ a: 3 }, /`a` of kernel 'typed' has @id\(7\): WebGPU takes it as `7`/);
    refused({ 7: -1 }, /`7` \(u32\) to be a finite number from 0 to 4294967295, got `-1`/);
    refused({ 7: 2 ** 32 }, /\(u32\)/);
    refused({ s: 2 ** 31 }, /`s` \(i32\) to be a finite number from -2147483648 to 2147483647/);
    refused({ f: 1e300 }, /`f` \(f32\)/);
    refused({ f: NaN }, /finite number/);
    // What WebGPU accepts: 3.9 for a u32 is 3, true for a bool is 1, -7.5 for an i32 is -7.
    launch({ 7: 3.9, f: 2.5, b: true, s: -7.5 });
    const out = new Float32Array(4);
    s.download(d, out);
    await s.synchronize();
    expect([...out]).toEqual([3, 2.5, 1, -7]);
  });

  it('refuses at the call what Dawn would throw a bare TypeError for, fail later on, or read from a prototype; an override without initializer needs a value', async () => {
    const k = ctx.kernel(`override n: u32 = 1u; override scale: f32 = 1.0;
@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(1) fn main() { y[0] = scale * f32(n); }`, { label: 'scaled' });
    const s = ctx.createStream({ label: 'constants' });
    const d = ctx.alloc(16);
    const launch = (constants: unknown): number => s.launch(k, { bindings: [d], workgroups: 1, constants: constants as Record<string, number> });
    const refused = (constants: unknown, message: RegExp): void => {
      expect(() => launch(constants)).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', op: 'launch', stream: 'constants', message: expect.stringMatching(message) }));
    };
    refused({ n: '3' }, /override `n` \(u32\) to be a finite number .*got `"3"`/);
    refused({ n: 3n }, /override `n` \(u32\) to be a finite number/);
    refused({ n: -0.5 }, /override `n` \(u32\) to be a finite number from 0/);
    refused(Object.create({ scale: 3 }), /`scale` is inherited from the prototype of `constants`/);
    // A prototype's value neither runs nor sticks to the pipeline cache: the next launches get what they pass.
    const got = async (constants?: Record<string, number>): Promise<number> => {
      launch(constants);
      const out = new Float32Array(1);
      s.download(d, out, { size: 4 });
      await s.synchronize();
      return out[0]!;
    };
    expect(await got({ scale: 4 })).toBe(4);
    expect(await got()).toBe(1);
    const r = ctx.kernel(`@id(7) override m: i32; @group(0) @binding(0) var<storage, read_write> y: array<i32>;
@compute @workgroup_size(1) fn main() { y[0] = m; }`, { label: 'required' });
    for (const constants of [undefined, {}]) {
      expect(() => s.launch(r, { bindings: [d], workgroups: 1, ...(constants ? { constants } : {}) })).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', message: expect.stringMatching(/override `7` of kernel 'required' has no initializer in the WGSL: every launch gives it a value/) }));
    }
    s.launch(r, { bindings: [d], workgroups: 1, constants: { 7: -9 } });
    const out = new Int32Array(1);
    s.download(d, out, { size: 4 });
    await s.synchronize();
    expect(out[0]).toBe(-9);
    expect(ctx.errors).toEqual([]);
  });
});

describe('bind group cache', () => {
  it('keeps no buffer alive: buffers launched on and dropped are collected, while a kernel on live buffers reuses its groups and stays right', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const own = await gpuContext();
    try {
      const s = own.createStream({ label: 'transient' });
      const n = 1 << 14;
      const seed = randomSeed();
      const r = rng(seed);
      const base = own.memory.current;
      // Each round: three fresh buffers, one launch, the result checked; then all three dropped.
      const round = async (): Promise<void> => {
        const a = r.f32Array(n), b = r.f32Array(n);
        const [da, db, dc] = [own.alloc(n * 4), own.alloc(n * 4), own.alloc(n * 4)];
        s.upload(a, da);
        s.upload(b, db);
        s.launch(own.kernels.vectorAdd, { bindings: [da, db, dc], workgroups: workgroupsFor(n, 256) });
        const out = new Float32Array(n);
        s.download(dc, out);
        await s.synchronize();
        expect(firstMismatch(out, vectorAddRef(a, b)), `seed ${seed}`).toBeNull();
      };
      for (let i = 0; i < 8; i++) await round();
      for (let i = 0; i < 3; i++) {
        await new Promise((res) => setImmediate(res));
        gc();
        s.upload(new Uint32Array(4), own.alloc(16));
        await s.synchronize();
      }
      expect(own.memory.current - base, 'the 24 dropped buffers were collected (the cache held none)').toBeLessThan(3 * n * 4);
    } finally {
      own.destroy();
    }
  });
});

describe('launch checks', () => {
  it('wrong binding count names the kernel and its bindings', () => {
    const s = ctx.createStream({ label: 'k' });
    const a = ctx.alloc(64);
    expect(() => s.launch(ctx.kernels.vectorAdd, { bindings: [a, a], workgroups: 1 })).toThrow(
      expect.objectContaining({ name: 'InvalidArgumentError', op: 'launch', stream: 'k', message: expect.stringContaining("kernel 'vectorAdd' takes 3 bindings (a, b, out), got 2") }),
    );
  });

  it('a buffer without STORAGE usage is refused', () => {
    const s = ctx.createStream();
    const a = ctx.alloc(64), b = ctx.alloc(64);
    const c = ctx.alloc(64, { usage: 0x8 | 0x4 });
    expect(() => s.launch(ctx.kernels.vectorAdd, { bindings: [a, b, c], workgroups: 1 })).toThrow(/needs a STORAGE buffer/);
  });

  it('a writable binding aliased with another binding is refused', () => {
    const s = ctx.createStream();
    const a = ctx.alloc(64), b = ctx.alloc(64);
    expect(() => s.launch(ctx.kernels.vectorAdd, { bindings: [a, b, a], workgroups: 1 })).toThrow(/same buffer/);
  });

  it('unknown override constants and bad workgroup counts are refused', () => {
    const s = ctx.createStream();
    const d = ctx.alloc(64);
    expect(() => s.launch(benchKernels(ctx).sleep, { bindings: [d], workgroups: 1, constants: { iters: 3 } })).toThrow(/no override `iters`; it declares `iterations`/);
    expect(() => s.launch(benchKernels(ctx).sleep, { bindings: [d], workgroups: 65536 })).toThrow(/`workgroups\[0\]` to be an integer from 1 to 65535/);
    expect(() => s.launch(benchKernels(ctx).sleep, { bindings: [d], workgroups: [1, 0.5] })).toThrow(/workgroups\[1\]/);
  });
});

describe('user kernels', () => {
  it('runs a user kernel with a uniform binding; checks its binding sizes at the call', async () => {
    const wgsl = `
      struct Params { scale: f32, offset: f32 }
      @group(0) @binding(0) var<uniform> params: Params;
      @group(0) @binding(1) var<storage, read> x: array<f32>;
      @group(0) @binding(2) var<storage, read_write> y: array<f32>;
      @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3u) {
        if (g.x < arrayLength(&y)) { y[g.x] = x[g.x] * params.scale + params.offset; }
      }`;
    const k = ctx.kernel(wgsl, { label: 'axpb' });
    expect(k.bindings.map((b) => b.kind)).toEqual(['uniform', 'read-only-storage', 'storage']);
    expect(k.workgroupSize).toEqual([64, 1, 1]);
    expect(k.bindings.map((b) => b.minBytes)).toEqual([8, 4, 4]);
    const seed = randomSeed();
    const x = rng(seed).f32Array(777, -3, 3);
    const s = ctx.createStream();
    const params = ctx.alloc(16, { usage: 0x40 | 0x8 }); // UNIFORM | COPY_DST
    const dx = ctx.alloc(x.byteLength), dy = ctx.alloc(x.byteLength);
    s.upload(new Float32Array([2.5, -1, 0, 0]), params);
    s.upload(x, dx);
    s.launch(k, { bindings: [params, dx, dy], workgroups: workgroupsFor(x.length, 64) });
    const y = new Float32Array(x.length);
    s.download(dy, y);
    await s.synchronize();
    const want = x.map((v) => Math.fround(Math.fround(v * 2.5) - 1));
    expect(firstMismatch(y, want, { abs: 1e-6, rel: 1e-6 }), `seed ${seed}`).toBeNull();
    expect(() => s.launch(k, { bindings: [dx, dx, dy], workgroups: 1 })).toThrow(/needs a UNIFORM buffer/);
    const tiny = ctx.alloc(4, { usage: 0x40 | 0x8 });
    expect(() => s.launch(k, { bindings: [tiny, dx, dy], workgroups: 1 })).toThrow(/needs at least 8 bytes/);
  });

  it('a kernel that fails to compile fails only its own stream; other streams keep their results', async () => {
    const bad = ctx.kernel('@group(0) @binding(0) var<storage, read_write> d: array<u32>;\n@compute @workgroup_size(1) fn main() { d[0] = undefined_thing; }', { label: 'broken' });
    const good = ctx.createStream({ label: 'good', nonBlocking: true });
    const victim = ctx.createStream({ label: 'victim', nonBlocking: true });
    const seed = randomSeed();
    const v = rng(seed).u32Array(64);
    const g = ctx.alloc(256), x = ctx.alloc(256);
    good.upload(v, g);
    victim.launch(bad, { bindings: [x], workgroups: 1 });
    victim.upload(v, x); // skipped: depends on the failed launch
    const out = new Uint32Array(64);
    good.download(g, out);
    await good.synchronize();
    expect(firstMismatch(out, v), `seed ${seed}`).toBeNull();
    const err = await victim.synchronize().then(() => null, (e: unknown) => e);
    expect(err).toMatchObject({ name: 'GpuValidationError', op: 'launch', stream: 'victim' });
    expect((err as Error).message).toMatch(/kernel 'broken' failed to compile/);
    // Reported once; the stream is usable again.
    victim.upload(v, x);
    await victim.synchronize();
    // The compile error went to the kernel's own scope, not to the device.
    expect(ctx.errors).toEqual([]);
  });
});
