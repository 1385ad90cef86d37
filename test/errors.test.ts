/**
 * Typed errors (src/errors.ts): bad arguments to every public entry throw InvalidArgumentError at
 * the call, a StreamError naming the op, the stream and the call site; messages quote the option,
 * the value and its type; asynchronous failures of launches and host functions carry the stack of
 * the line that enqueued them (captureStacks). The call-site assertions name this file, so the
 * argument tables that check them live here; each module's own failures are tested beside it.
 */
import { describe, expect, it } from 'vitest';
import { gpuContext, useGpuContext, rng, randomSeed } from './fixtures/gpu.js';
import { createContext, StreamError, workgroupsFor, type Context } from '../src/index.js';
import { bucketSize } from '../src/transfer.js';
import { reflectWgsl } from '../src/wgsl.js';
import { atCall, DestroyedError, EntrySite, formatSite } from '../src/errors.js';
import { CallSite } from '../src/call-site.js';
import { fileURLToPath } from 'node:url';

type GpuCtx = Context & { errors: string[] };
let ctx: GpuCtx;
useGpuContext((c) => (ctx = c));

describe('copy arguments', () => {
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
        expect(err!.message, 'a failure after the call: the line that enqueued it').toMatch(/\n {2}enqueued at .*errors\.test\.ts/);
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
        expect(thrown?.message, 'thrown at the call: nothing was enqueued').toMatch(/\n {2}called at .*errors\.test\.ts/);
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

describe('call sites found deep in a check', () => {
  it('a launch binding a destroyed buffer names the line that launched it, as a copy does', () => {
    const s = ctx.createStream({ label: 'deep' });
    const a = ctx.alloc(64, { label: 'gone' }), b = ctx.alloc(64), c = ctx.alloc(64);
    a.destroy();
    for (const call of [() => s.launch(ctx.kernels.vectorAdd, { bindings: [a, b, c], workgroups: 1 }), () => s.copy(a, b)]) {
      let err: StreamError | undefined;
      try {
        call();
      } catch (e) {
        err = e as StreamError;
      }
      expect(err).toMatchObject({ name: 'DestroyedError', stream: 'deep', message: expect.stringMatching(/buffer 'gone' was destroyed/) });
      expect(err!.callSite, 'the caller, past the library frames of the check').toMatch(/^at .*errors\.test\.ts/);
    }
  });

  it('a call on a context whose device is gone names that call, and the loss as its cause', async () => {
    const owner = await gpuContext({ label: 'owner' });
    const borrower = await createContext({ device: owner.device, label: 'borrower' });
    const pinned = borrower.allocHost(64, 'download');
    owner.destroy();
    await borrower.lost;
    // A pinned buffer's wait and its views name themselves alike.
    await expect(pinned.ready()).rejects.toMatchObject({ name: 'DeviceLostError', op: 'ready', context: 'borrower' });
    expect(() => pinned.u32).toThrow(expect.objectContaining({ name: 'DeviceLostError', op: 'view', context: 'borrower' }));
    const tries: [string, () => unknown][] = [['alloc', () => borrower.alloc(64)], ['createStream', () => borrower.createStream()]];
    for (const [op, call] of tries) {
      let err: StreamError | undefined;
      try {
        call();
      } catch (e) {
        err = e as StreamError;
      }
      expect(err).toMatchObject({ name: 'DeviceLostError', op, context: 'borrower', message: expect.stringMatching(/the GPU device was lost \(destroyed\)/) });
      expect(err!.callSite).toMatch(/^at .*errors\.test\.ts/);
      expect(err!.cause).toMatchObject({ name: 'DeviceLostError', op: undefined });
    }
    borrower.destroy();
  });

  it('work cut short by ctx.destroy() fails with an error naming each stream\'s first op and its line, the destroy as its cause', async () => {
    const c = await gpuContext({ label: 'doomed' });
    const s = c.createStream({ label: 'pending' });
    const d = c.alloc(64);
    s.hostFn(() => new Promise(() => {})); // never settles: still running at destroy
    s.upload(new Uint32Array(16), d);
    const t = c.createStream({ label: 'also pending' });
    t.hostFn(() => new Promise(() => {}));
    const done = s.synchronize().then(() => null, (e: unknown) => e as StreamError);
    const all = c.synchronize().then(() => null, (e: unknown) => e as StreamError);
    c.destroy();
    const err = await done;
    expect(err).toMatchObject({ name: 'DestroyedError', op: 'hostFn', stream: 'pending', context: 'doomed', message: expect.stringMatching(/destroyed by ctx\.destroy\(\) before this work completed/) });
    expect(err!.callSite).toMatch(/^at .*errors\.test\.ts/);
    expect(err!.cause).toMatchObject({ name: 'DestroyedError', op: undefined, context: 'doomed' });
    // ctx.synchronize() in flight: one error of the close's kind naming each stream's cut-short op and line.
    const whole = await all;
    expect(whole).toMatchObject({ name: 'DestroyedError', op: 'synchronize', context: 'doomed' });
    expect(whole!.message).toMatch(/work cut short: op 'hostFn' on stream 'pending' \(at .*errors\.test\.ts:\d+:\d+\); op 'hostFn' on stream 'also pending' \(at .*errors\.test\.ts/);
    expect(whole!.cause).toBe(err!.cause);
    // Asked after the destroy, each wait names its own op or the cut-short work.
    await expect(s.synchronize()).rejects.toBe(err);
  });

  it('waits in flight at a destroy name the work cut short; an idle stream synchronized after it names the call', async () => {
    const c = await gpuContext({ label: 'ended' });
    const s = c.createStream({ label: 'busy' });
    const idle = c.createStream({ label: 'idle' });
    const down = c.allocHost(64, 'download', { label: 'down' });
    const d = c.alloc(64);
    const e = c.createEvent({ label: 'after' });
    s.hostFn(() => new Promise(() => {})); // still running at the destroy
    s.download(d, down);
    s.record(e);
    const waits = [e.synchronize(), down.ready()].map((p) => p.then(() => null, (x: unknown) => x as StreamError));
    c.destroy();
    for (const err of await Promise.all(waits)) {
      expect(err).toMatchObject({ name: 'DestroyedError', op: 'hostFn', stream: 'busy', context: 'ended' });
      expect(err!.callSite).toMatch(/^at .*errors\.test\.ts/);
    }
    const late = await idle.synchronize().then(() => null, (x: unknown) => x as StreamError);
    expect(late).toMatchObject({ name: 'DestroyedError', op: 'synchronize', stream: 'idle', context: 'ended' });
    expect(late!.callSite).toMatch(/^at .*errors\.test\.ts/);
  });

  it('a call site captured below a public method starts at its caller, whatever the files are named (a bundle)', () => {
    let site!: CallSite;
    function publicMethod(): void {
      check();
    }
    function check(): void {
      site = new CallSite('copy', 's', 'c', undefined, true, publicMethod);
      void site.callSite; // captured here, two calls below the method
    }
    function usersCode(): void {
      publicMethod();
    }
    usersCode();
    expect(site.callSite!.stack!.split('\n')[1]).toMatch(/^\s+at usersCode /);
    // A context call's site finds its method on the prototype given.
    class Api {
      alloc(): EntrySite {
        return deep(this);
      }
    }
    const deep = (api: Api): EntrySite => {
      const s = new EntrySite('alloc', 'c', Api.prototype);
      void s.callSite; // read while the check runs, below the method
      return s;
    };
    function allocates(): EntrySite {
      return new Api().alloc();
    }
    expect(allocates().callSite!.stack!.split('\n')[1]).toMatch(/^\s+at allocates /);
    // And an error raised again at a call (atCall) keeps that site's stack.
    const again = atCall(new DestroyedError('closed', { context: 'c' }), site);
    expect(again.callSite).toMatch(/^at usersCode /);
  });

  it("the library's own source frames are left out, a caller's file of the same name is kept, and so are no builtins", () => {
    const own = fileURLToPath(new URL('../src/stream.ts', import.meta.url));
    const site = new Error('x');
    site.stack = ['Error: x', `    at Stream.launch (${own}:120:5)`, '    at Array.forEach (<anonymous>)', '    at main (/home/app/src/stream.ts:3:7)'].join('\n');
    expect(formatSite(site)).toBe('at main (/home/app/src/stream.ts:3:7)');
  });

  it("a WebGPU message quoting lines of its own ('    at Fn (file.cpp:119)') is no call site: the frames start past the message", () => {
    const dawn = 'vkAllocateMemory failed\n - While calling [Device].CreateBuffer.\n    at CheckVkOOMThenSuccessImpl (../../third_party/dawn/src/dawn/native/vulkan/VulkanError.cpp:119)\n';
    const e = new StreamError(`out of memory. WebGPU: ${dawn}`, { op: 'allocHost' });
    expect(e.callSite).toMatch(/^at .*errors\.test\.ts/);
  });
});

describe('every public entry checks its arguments', () => {
  const s = () => ctx.createStream({ label: 'args' });
  const ev = () => ctx.createEvent({ label: 'args-event' });

  it('option validation quotes the option, the value and its type', async () => {
    expect(() => ctx.createStream({ nonBlocking: 'yes' as unknown as boolean })).toThrow('Expected `nonBlocking` to be a boolean, got `"yes"` (string)');
    expect(() => ctx.alloc(6)).toThrow(/multiple of 4/);
    expect(() => ctx.allocHost(64, 'both' as 'upload')).toThrow(/'upload' or 'download'/);
    expect(() => ctx.createStream().hostFn(42 as unknown as () => void)).toThrow(/`fn` to be a function/);
  });

  it.each<[string, () => unknown, RegExp]>([
    ['ctx.createStream(5)', () => ctx.createStream(5 as never), /`options` to be an options object/],
    ["ctx.createEvent('x')", () => ctx.createEvent('x' as never), /`options` to be an options object/],
    ["ctx.alloc('64')", () => ctx.alloc('64' as never), /`bytes` to be an integer/],
    ["ctx.allocHost(64, 'both')", () => ctx.allocHost(64, 'both' as never), /`kind` to be 'upload' or 'download'/],
    ['ctx.kernel(5)', () => ctx.kernel(5 as never), /`wgsl` to be a string/],
    ['stream.launch(null, ...)', () => s().launch(null as never, { bindings: [], workgroups: 1 }), /Expected a Kernel/],
    ['stream.launch(k, { workgroups: 0 })', () => s().launch(ctx.kernels.vectorAdd, { bindings: [ctx.alloc(64), ctx.alloc(64), ctx.alloc(64)], workgroups: 0 }), /`workgroups` .*has a count of 0: .*CUDA refuses an empty grid/],
    ['stream.launch(k, { workgroups: [4, 0] })', () => s().launch(ctx.kernels.vectorAdd, { bindings: [ctx.alloc(64), ctx.alloc(64), ctx.alloc(64)], workgroups: [4, 0] }), /has a count of 0/],
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

describe('hostile arguments (from a fuzz of every public call): typed errors at the call, never a bare TypeError', () => {
  it('missing options, values with no string form, holes, another device or a destroyed texture, a pinned buffer in an encode', async () => {
    const { SlotRing, encodeSafetensors, textureLayout, toChromeTraceEvents } = await import('../src/index.js');
    const typed = (f: () => unknown, message?: RegExp): void => {
      expect(f).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', ...(message ? { message: expect.stringMatching(message) } : {}) }));
    };
    typed(() => ctx.allocTexture(undefined as never), /`format`/);
    typed(() => new SlotRing(ctx, undefined as never), /`producer`/);
    typed(() => ctx.allocHost(64, Object.create(null) as never), /`kind` to be 'upload' or 'download'/);
    typed(() => textureLayout(Object.create(null) as never, [4, 4]), /has no texel size/);
    typed(() => encodeSafetensors([, ] as never), /tensors\[0\]/);
    typed(() => toChromeTraceEvents([undefined] as never), /spans\[0\]/);
    const s = ctx.createStream({ label: 'hostile' });
    typed(() => s.encode([, ] as never), /commands\[0\]/);
    typed(() => s.encode(() => undefined, { label: 42 as never }), /`label`/);
    const [x, y, out] = [ctx.alloc(1024), ctx.alloc(1024), ctx.alloc(1024)];
    typed(() => s.launch(ctx.kernels.vectorAdd, { bindings: [x, y, out], workgroups: [, , ] as never }), /workgroups\[0\]/);
    typed(() => s.launch(ctx.kernels.vectorAdd, { bindings: [x, y, out], workgroups: [undefined] as never }), /workgroups\[0\]/);
    const gone = ctx.allocTexture({ size: [4, 4], format: 'rgba8unorm' });
    gone.destroy();
    expect(() => s.encode(() => undefined, { reads: [gone] })).toThrow(expect.objectContaining({ name: 'DestroyedError' }));
    const pinned = ctx.allocHost(64, 'upload', { label: 'p' });
    typed(() => s.encode(() => undefined, { writes: [pinned as never] }), /pinned buffer 'p': your commands cannot use it/);
    const other = await gpuContext({ label: 'other' });
    try {
      const foreign = other.allocTexture({ size: [4, 4], format: 'rgba8unorm', label: 'foreign' });
      typed(() => s.encode(() => undefined, { reads: [foreign] }), /texture 'foreign' was allocated on another GPUDevice/);
    } finally {
      other.destroy();
    }
    expect(s.pendingOps).toBe(0);
    for (const b of [x, y, out]) b.destroy();
    pinned.destroy();
  });
});
