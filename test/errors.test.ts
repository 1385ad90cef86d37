/**
 * Bad input gets a typed error naming the op, the stream and the call site, and leaves every other
 * stream and its data intact. Nothing hangs: device loss rejects every pending wait.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gpuContext, rng, randomSeed, firstMismatch } from './gpu.js';
import { StreamError, workgroupsFor, type Context } from '../src/index.js';
import { bucketSize } from '../src/transfer.js';
import { reflectWgsl } from '../src/wgsl.js';
import { benchKernels } from '../bench/kernels/index';

let ctx: Context & { errors: string[] };
beforeAll(async () => {
  ctx = await gpuContext();
});
afterAll(() => {
  expect(ctx.errors).toEqual([]);
  ctx.destroy();
});

describe('transfers', () => {
  it.each([
    ['unaligned size', { size: 6 }, /`size` to be a multiple of 4 bytes/],
    ['unaligned srcOffset', { srcOffset: 2 }, /`srcOffset` to be a multiple of 4/],
    ['unaligned dstOffset', { dstOffset: 1, size: 4 }, /`dstOffset` to be a multiple of 4/],
    ['source out of range (N+4)', { srcOffset: 4, size: 64 }, /out of bounds of source/],
    ['destination out of range', { dstOffset: 64, size: 4 }, /out of bounds of destination/],
    ['negative offset', { srcOffset: -4 }, /`srcOffset` to be an integer >= 0/],
    ['unknown option', { offset: 4 } as object, /Unknown option `options.offset`/],
  ])('copy with %s throws InvalidArgumentError at the call', (_name, opts, message) => {
    const s = ctx.createStream({ label: 'copies' });
    const a = ctx.alloc(64), b = ctx.alloc(64);
    let err: unknown;
    try {
      s.copy(a, b, opts);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(StreamError);
    expect(err).toMatchObject({ name: 'InvalidArgumentError', op: 'copy', stream: 'copies' });
    expect((err as Error).message).toMatch(message);
    expect((err as StreamError).callSite).toMatch(/errors\.test\.ts/);
  });

  it('the largest in-range copy (N) works where N+4 fails', async () => {
    const s = ctx.createStream();
    const v = rng(randomSeed()).u32Array(16);
    const a = ctx.alloc(64), b = ctx.alloc(64);
    s.upload(v, a);
    s.copy(a, b, { srcOffset: 4, dstOffset: 0, size: 60 });
    const out = new Uint32Array(16);
    s.download(b, out);
    await s.synchronize();
    expect(Array.from(out.subarray(0, 15))).toEqual(Array.from(v.subarray(1)));
  });

  it('copies within one buffer are refused, even for disjoint ranges (WebGPU forbids them)', () => {
    const s = ctx.createStream();
    const a = ctx.alloc(64);
    expect(() => s.copy(a, a, { srcOffset: 0, dstOffset: 8, size: 16 })).toThrow(/same buffer/);
    expect(() => s.copy(a, a, { srcOffset: 0, dstOffset: 32, size: 16 })).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', op: 'copy' }));
  });

  it('uploads of a byte length that is not a multiple of 4 are refused', () => {
    const s = ctx.createStream();
    expect(() => s.upload(new Uint8Array(6), ctx.alloc(64))).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', op: 'upload' }));
  });
});

describe('launches', () => {
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
    expect(() => s.launch(benchKernels(ctx).sleep, { bindings: [d], workgroups: 65536 })).toThrow(/`workgroups\[0\]` to be an integer from 0 to 65535/);
    expect(() => s.launch(benchKernels(ctx).sleep, { bindings: [d], workgroups: [1, 0.5] })).toThrow(/workgroups\[1\]/);
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

  it('an event recorded after a failed op fails the streams that wait on it, with the cause', async () => {
    const a = ctx.createStream({ label: 'a', nonBlocking: true });
    const b = ctx.createStream({ label: 'b', nonBlocking: true });
    const ev = ctx.createEvent();
    a.hostFn(() => {
      throw new Error('producer broke');
    });
    ev.record(a);
    b.waitEvent(ev);
    let ran = false;
    b.hostFn(() => {
      ran = true;
    });
    await expect(b.synchronize()).rejects.toMatchObject({ name: 'DependencyError', stream: 'b' });
    await expect(a.synchronize()).rejects.toMatchObject({ name: 'HostFnError' });
    expect(ran).toBe(false);
  });
});

describe('lifetimes', () => {
  it('ops on a destroyed stream throw DestroyedError; destroy is idempotent', () => {
    const s = ctx.createStream({ label: 'gone' });
    s.destroy();
    s.destroy();
    expect(() => s.hostFn(() => {})).toThrow(expect.objectContaining({ name: 'DestroyedError', stream: 'gone' }));
  });

  it('a destroyed pinned buffer throws on use and rejects ready()', async () => {
    const p = ctx.allocHost(64, 'upload', { label: 'p' });
    p.destroy();
    p.destroy();
    expect(() => p.f32).toThrow(expect.objectContaining({ name: 'DestroyedError' }));
    await expect(p.ready()).rejects.toMatchObject({ name: 'DestroyedError' });
    expect(() => ctx.createStream().upload(p, ctx.alloc(64))).toThrow(expect.objectContaining({ name: 'DestroyedError' }));
  });

  it('option validation quotes the option, the value and its type', async () => {
    expect(() => ctx.createStream({ nonBlocking: 'yes' as unknown as boolean })).toThrow('Expected `nonBlocking` to be a boolean, got `"yes"` (string)');
    expect(() => ctx.alloc(6)).toThrow(/multiple of 4/);
    expect(() => ctx.allocHost(64, 'both' as 'upload')).toThrow(/'upload' or 'download'/);
    expect(() => ctx.createStream().hostFn(42 as unknown as () => void)).toThrow(/`fn` to be a function/);
  });

  it('a synchronize aborted through its signal rejects with AbortError; the work still completes', async () => {
    const s = ctx.createStream();
    let open!: () => void;
    const wait = new Promise<void>((res) => (open = res));
    s.hostFn(() => wait);
    const ac = new AbortController();
    const p = s.synchronize({ signal: ac.signal });
    ac.abort();
    await expect(p).rejects.toMatchObject({ name: 'AbortError' });
    open();
    await s.synchronize();
  });

  it('device loss rejects every pending wait with DeviceLostError and later calls throw it', async () => {
    const lctx = await gpuContext();
    const s1 = lctx.createStream({ label: 's1' }), s2 = lctx.createStream({ label: 's2', nonBlocking: true });
    const wait = new Promise<void>(() => {}); // a host function that never finishes
    s1.hostFn(() => wait);
    s1.upload(new Uint32Array(16), lctx.alloc(64));
    s2.hostFn(() => wait);
    const ev = lctx.createEvent();
    ev.record(s2);
    const p1 = s1.synchronize(), p2 = s2.synchronize(), p3 = lctx.synchronize(), p4 = ev.synchronize();
    lctx.device.destroy(); // loss reason 'destroyed'
    const results = await Promise.allSettled([p1, p2, p3, p4]);
    for (const r of results) {
      expect(r.status).toBe('rejected');
      expect((r as PromiseRejectedResult).reason).toMatchObject({ name: 'DeviceLostError' });
    }
    expect(() => s1.hostFn(() => {})).toThrow(expect.objectContaining({ name: 'DeviceLostError' }));
    lctx.destroy();
  });

  it('a destroyed context refuses new work; destroy is idempotent', async () => {
    const c = await gpuContext();
    const s = c.createStream();
    c.destroy();
    c.destroy();
    expect(() => c.createStream()).toThrow(expect.objectContaining({ name: 'DestroyedError' }));
    expect(() => s.hostFn(() => {})).toThrow(expect.objectContaining({ name: 'DestroyedError' }));
    expect(() => c.alloc(64)).toThrow(/context 'ctx#\d+': the context was destroyed/);
  });
});

describe('call sites', () => {
  it('async failures of launches and host functions carry the enqueue stack; transfers keep theirs with captureStacks: "all"', async () => {
    for (const mode of [true, 'all'] as const) {
      const c = await gpuContext({ captureStacks: mode });
      try {
        const s = c.createStream({ label: `sites-${String(mode)}` });
        const d = c.alloc(64), e = c.alloc(64);
        s.hostFn(function failingCallback() {
          throw new Error('boom');
        });
        s.copy(d, e); // skipped: depends on the failed host function
        const copyOp = s.queue.tail as unknown as { callSite: Error | undefined };
        const err = await s.synchronize().then(() => null, (x: unknown) => x as Error & { callSite?: string });
        expect(err).toMatchObject({ name: 'HostFnError' });
        expect(err!.callSite).toMatch(/errors\.test\.ts/);
        // The skipped copy's own record of where it was enqueued:
        if (mode === 'all') expect(copyOp.callSite?.stack).toMatch(/errors\.test\.ts/);
        else expect(copyOp.callSite).toBeUndefined();
        // Errors thrown at the call always say where.
        let thrown: (Error & { callSite?: string }) | undefined;
        try {
          s.copy(d, e, { size: 6 });
        } catch (x) {
          thrown = x as Error & { callSite?: string };
        }
        expect(thrown?.callSite).toMatch(/errors\.test\.ts/);
      } finally {
        c.destroy();
      }
    }
  });

  it('a launch keeps its enqueue stack until its pipeline is known to compile (always with "all")', async () => {
    for (const mode of [true, 'all', false] as const) {
      const c = await gpuContext({ captureStacks: mode });
      try {
        const s = c.createStream({ label: `launch-sites-${String(mode)}` });
        const a = c.alloc(256), b = c.alloc(256), out = c.alloc(256);
        const launch = (): { callSite: Error | undefined } => {
          s.launch(c.kernels.vectorAdd, { bindings: [a, b, out], workgroups: 1, constants: {} });
          return s.queue.tail as unknown as { callSite: Error | undefined };
        };
        const first = launch(); // a fresh pipeline (no overrides): not validated yet
        await s.synchronize();
        const later = launch(); // the same pipeline, now validated
        await s.synchronize();
        if (mode === false) expect(first.callSite).toBeUndefined();
        else expect(first.callSite?.stack).toMatch(/errors\.test\.ts/);
        if (mode === 'all') expect(later.callSite?.stack).toMatch(/errors\.test\.ts/);
        else expect(later.callSite).toBeUndefined();
        // A kernel that fails to compile names the launch's call site in its error.
        const bad = c.kernel('@compute @workgroup_size(1) fn main() { let x: i32 = "no"; }', { label: 'bad' });
        s.launch(bad, { bindings: [], workgroups: 1 });
        const err = await s.synchronize().then(() => null, (x: unknown) => x as Error & { callSite?: string });
        expect(err).toMatchObject({ name: 'GpuValidationError' });
        if (mode === false) expect(err!.callSite).toBeUndefined();
        else expect(err!.callSite).toMatch(/errors\.test\.ts/);
      } finally {
        c.destroy();
      }
    }
  });
});

describe('every public entry checks its arguments', () => {
  const s = () => ctx.createStream({ label: 'args' });
  const ev = () => ctx.createEvent({ label: 'args-event' });
  it.each<[string, () => unknown, RegExp]>([
    ['ctx.createStream(5)', () => ctx.createStream(5 as never), /`options` to be an options object/],
    ["ctx.createEvent('x')", () => ctx.createEvent('x' as never), /`options` to be an options object/],
    ["ctx.alloc('64')", () => ctx.alloc('64' as never), /`bytes` to be an integer/],
    ["ctx.allocHost(64, 'both')", () => ctx.allocHost(64, 'both' as never), /`kind` to be 'upload' or 'download'/],
    ['ctx.kernel(5)', () => ctx.kernel(5 as never), /`wgsl` to be a string/],
    ['stream.launch(null, ...)', () => s().launch(null as never, { bindings: [], workgroups: 1 }), /Expected a Kernel/],
    ['stream.copy(null, buf)', () => s().copy(null as never, ctx.alloc(64)), /`src` to be a DeviceBuffer/],
    ["stream.upload('x', buf)", () => s().upload('x' as never, ctx.alloc(64)), /`src` to be a PinnedBuffer or an ArrayBufferView/],
    ['stream.download(buf, 5)', () => s().download(ctx.alloc(64), 5 as never), /`dst` to be a PinnedBuffer or an ArrayBufferView/],
    ['stream.hostFn(5)', () => s().hostFn(5 as never), /`fn` to be a function/],
    ['stream.record(null)', () => s().record(null as never), /`event` to be a GpuEvent/],
    ['stream.record(a stream)', () => s().record(s() as never), /`event` to be a GpuEvent/],
    ['stream.waitEvent(null)', () => s().waitEvent(null as never), /`event` to be a GpuEvent/],
    ["stream.waitEvent('x')", () => s().waitEvent('x' as never), /`event` to be a GpuEvent/],
    ['stream.waitEvent(42)', () => s().waitEvent(42 as never), /`event` to be a GpuEvent/],
    ['stream.waitEvent({})', () => s().waitEvent({} as never), /`event` to be a GpuEvent/],
    ['stream.waitEvent(a stream)', () => s().waitEvent(s() as never), /`event` to be a GpuEvent/],
    ['stream.waitStream(an event)', () => s().waitStream(ev() as never), /`other` to be a Stream/],
    ['event.record(another event)', () => ev().record(ev() as never), /`stream` to be a Stream/],
    ['event.record(5)', () => ev().record(5 as never), /`stream` to be a Stream/],
    ['event.elapsedTime(null)', () => ev().elapsedTime(null as never), /`end` to be a GpuEvent/],
    ["workgroupsFor('x', 256)", () => workgroupsFor('x' as never, 256), /`n` to be an integer/],
    ['workgroupsFor(64, 0)', () => workgroupsFor(64, 0), /`workgroupSize` to be an integer >= 1/],
    ['bucketSize(-1)', () => bucketSize(-1), /`bytes` to be an integer >= 0/],
    ['reflectWgsl(5, main)', () => reflectWgsl(5 as never, 'main'), /`wgsl` to be a string/],
    ["trace.mark('host', 'nap', ...)", () => ctx.trace.mark('host', 'nap' as never, 'x', 0, 1), /`kind` to be one of/],
    ['trace.spans(NaN)', () => ctx.trace.spans(Number.NaN), /`since` to be a number/],
  ])('%s throws InvalidArgumentError at the call', (_name, call, message) => {
    let err: unknown;
    try {
      call();
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(StreamError);
    expect(err).toMatchObject({ name: 'InvalidArgumentError', message: expect.stringMatching(message) });
    expect((err as StreamError).op).toBeTruthy();
    expect((err as StreamError).callSite, 'the call site names the caller').toMatch(/errors\.test\.ts/);
  });

  it.each<[string, () => Promise<unknown>, RegExp]>([
    ['stream.synchronize(5)', () => s().synchronize(5 as never), /`options` to be an options object/],
    ['event.synchronize({ signal: 1 })', () => ev().synchronize({ signal: 1 } as never), /`signal` to be an AbortSignal/],
  ])('%s rejects with InvalidArgumentError', async (_name, call, message) => {
    await expect(call()).rejects.toMatchObject({ name: 'InvalidArgumentError', message: expect.stringMatching(message) });
  });
});
