/**
 * Streams (src/stream.ts) on real WebGPU (Dawn): the ops of one stream run in order, host
 * functions are stream ops, waitStream, the default stream's CUDA legacy semantics, priorities,
 * synchronize (abort, options), the argument checks of stream methods, and destroyed streams.
 * Order is asserted through events, op completion and the scheduler's submit log, never through
 * wall-clock windows.
 */
import { getEventListeners } from 'node:events';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { gpuContext, useGpuContext, rng, randomSeed, firstMismatch, vectorAddRef } from './fixtures/gpu.js';
import { gate } from './fixtures/gate.js';
import { workgroupsFor, type Context, type DeviceBuffer, type StreamError } from '../src/index.js';
import { contextInternals } from '../src/context.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

type GpuCtx = Context & { errors: string[] };
let ctx: GpuCtx;
useGpuContext((c) => (ctx = c), { trace: true });

function addLaunch(s: ReturnType<Context['createStream']>, a: DeviceBuffer, b: DeviceBuffer, out: DeviceBuffer, n: number): void {
  s.launch(ctx.kernels.vectorAdd, { bindings: [a, b, out], workgroups: workgroupsFor(n, 256) });
}

describe('stream order', () => {
  it("your own queue.submit after stream.whenSubmitted() runs after the stream's work, even work flush() could not submit yet (an op on a raw GPUBuffer waits for its validation)", async () => {
    const seed = randomSeed();
    const x = rng(seed).u32Array(256);
    const dev = ctx.device;
    const raw = dev.createBuffer({ size: 1024, usage: GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
    dev.queue.writeBuffer(raw, 0, x as Uint32Array<ArrayBuffer>);
    const d = ctx.alloc(1024), d2 = ctx.alloc(1024);
    const s = ctx.createStream({ label: 'then yours' });
    s.copy(raw, d); // alone in a submit; what follows waits for its validation
    s.copy(d, d2);
    ctx.flush();
    await s.whenSubmitted();
    const read = dev.createBuffer({ size: 1024, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    const enc = dev.createCommandEncoder();
    enc.copyBufferToBuffer(d2.buffer, 0, read, 0, 1024);
    dev.queue.submit([enc.finish()]);
    await read.mapAsync(GPUMapMode.READ);
    expect(firstMismatch(new Uint32Array(read.getMappedRange().slice(0)), x), `seed ${seed}`).toBeNull();
    read.destroy();
    raw.destroy();
    await s.synchronize();
    // Inside a host function, on work queued behind it: DeadlockError (it would never resolve).
    let inside: unknown;
    s.hostFn(async () => {
      s.copy(d, d2);
      inside = await s.whenSubmitted().then(() => null, (e: unknown) => e);
    });
    await s.synchronize();
    expect(inside).toMatchObject({ name: 'DeadlockError' });
    // Its context destroyed: it rejects, as synchronize() does.
    const c = await gpuContext({ label: 'gone' });
    const g = c.createStream({ label: 'g' });
    g.upload(x, c.alloc(1024));
    const waiting = g.whenSubmitted().then(() => null, (e: unknown) => e);
    c.destroy();
    expect(await waiting, 'its context destroyed before it resolved: nothing to order after').toMatchObject({ name: 'DestroyedError' });
    await expect(g.whenSubmitted()).rejects.toMatchObject({ name: 'DestroyedError', op: 'whenSubmitted', stream: 'g' });
  });

  it('runs the ops of one stream in order: upload, add, copy, add, download', async () => {
    const seed = randomSeed();
    const r = rng(seed);
    const n = 513;
    const a = r.f32Array(n, -50, 50), b = r.f32Array(n, -50, 50);
    const s = ctx.createStream({ label: 'order' });
    const da = ctx.alloc(n * 4), db = ctx.alloc(n * 4), t = ctx.alloc(n * 4), u = ctx.alloc(n * 4);
    s.upload(a, da);
    s.upload(b, db);
    addLaunch(s, da, db, t, n); // t = a + b
    s.copy(t, da); // da = a + b
    addLaunch(s, da, db, u, n); // u = a + 2b
    const out = new Float32Array(n);
    s.download(u, out);
    await s.synchronize();
    expect(firstMismatch(out, vectorAddRef(vectorAddRef(a, b), b)), `seed ${seed}`).toBeNull();
    expect(s.query()).toBe(true);
  });

  it('waitStream orders after everything enqueued on the other stream so far', async () => {
    const seed = randomSeed();
    const v = rng(seed).u32Array(128);
    const a = ctx.createStream(), b = ctx.createStream();
    const d = ctx.alloc(512);
    const g = gate();
    a.hostFn(() => g.wait);
    a.upload(v, d);
    b.waitStream(a);
    const out = new Uint32Array(128);
    b.download(d, out);
    await Promise.resolve();
    await Promise.resolve();
    expect(b.query()).toBe(false);
    g.open();
    await b.synchronize();
    expect(firstMismatch(out, v), `seed ${seed}`).toBeNull();
  });
});

describe('host functions', () => {
  it('run after earlier work and before later work of the stream, and see downloaded data', async () => {
    const seed = randomSeed();
    const v = rng(seed).u32Array(256);
    const s = ctx.createStream();
    const d = ctx.alloc(1024);
    const out = new Uint32Array(256);
    const log: string[] = [];
    s.upload(v, d);
    s.download(d, out);
    s.hostFn(() => {
      log.push(`fn1 sees ${firstMismatch(out, v) ?? 'data'}`);
    });
    s.hostFn(async () => {
      await Promise.resolve();
      log.push('fn2');
    });
    s.upload(rng(seed + 1).u32Array(256), d);
    s.hostFn(() => {
      log.push('fn3');
    });
    await s.synchronize();
    expect(log, `seed ${seed}`).toEqual(['fn1 sees data', 'fn2', 'fn3']);
  });

  it('a stream blocked on a slow async host function never delays another stream (50 ops)', async () => {
    const slow = ctx.createStream({ label: 'slow' });
    const fast = ctx.createStream({ label: 'fast' });
    const g = gate();
    let slowDone = false;
    const d = ctx.alloc(4096);
    slow.hostFn(() => g.wait);
    slow.upload(new Uint32Array(1024).fill(1), d);
    slow.hostFn(() => {
      slowDone = true;
    });
    const seed = randomSeed();
    const v = rng(seed).u32Array(1024);
    const e = ctx.alloc(4096), f = ctx.alloc(4096);
    fast.upload(v, e);
    for (let i = 0; i < 48; i++) fast.copy(i % 2 ? f : e, i % 2 ? e : f);
    const out = new Uint32Array(1024);
    fast.download(e, out);
    await fast.synchronize();
    expect(slowDone).toBe(false);
    expect(slow.query()).toBe(false);
    expect(firstMismatch(out, v), `seed ${seed}`).toBeNull();
    g.open();
    await slow.synchronize();
    expect(slowDone).toBe(true);
  });

  it('a throwing host function fails its stream with HostFnError and skips its later work', async () => {
    const s = ctx.createStream({ label: 'thrower' });
    let ran = false;
    s.hostFn(() => {
      throw new Error('boom');
    });
    s.hostFn(() => {
      ran = true;
    });
    await expect(s.synchronize()).rejects.toMatchObject({ name: 'HostFnError', stream: 'thrower', op: 'hostFn' });
    expect(ran).toBe(false);
    // The context's synchronize covers that work too: it reports the failure once as well.
    await expect(ctx.synchronize()).rejects.toMatchObject({ name: 'HostFnError', stream: 'thrower' });
    await ctx.synchronize();
    // Reported: later work runs.
    s.hostFn(() => {
      ran = true;
    });
    await s.synchronize();
    expect(ran).toBe(true);
  });
});

describe('default stream (CUDA legacy semantics)', () => {
  it('waits for earlier work of blocking streams, and blocking streams wait for it', async () => {
    const blocking = ctx.createStream({ label: 'blocking' });
    const log: string[] = [];
    const g = gate();
    blocking.hostFn(() => g.wait);
    blocking.hostFn(() => void log.push('blocking 1'));
    ctx.defaultStream.hostFn(() => void log.push('default'));
    blocking.hostFn(() => void log.push('blocking 2'));
    g.open();
    await ctx.synchronize();
    expect(log).toEqual(['blocking 1', 'default', 'blocking 2']);
  });

  it('non-blocking streams neither wait for the default stream nor make it wait', async () => {
    const nb = ctx.createStream({ label: 'nb', nonBlocking: true });
    const log: string[] = [];
    const gNb = gate(), gDefault = gate();
    nb.hostFn(() => gNb.wait);
    ctx.defaultStream.hostFn(() => gDefault.wait);
    ctx.defaultStream.hostFn(() => void log.push('default'));
    nb.hostFn(() => void log.push('nb'));
    gNb.open();
    await nb.synchronize(); // completes although the default stream is still blocked
    expect(log).toEqual(['nb']);
    gDefault.open();
    await ctx.defaultStream.synchronize();
    expect(log).toEqual(['nb', 'default']);
  });
});

describe('priorities', () => {
  it('ready work of a higher-priority stream is submitted first and overtakes queued low-priority work', async () => {
    const pctx = await gpuContext({ trace: true, maxSubmitsInFlight: 1, maxOpsPerSubmit: 2 });
    try {
      const low = pctx.createStream({ label: 'low', priority: 0 });
      const high = pctx.createStream({ label: 'high', priority: -5 });
      const bufs = Array.from({ length: 4 }, () => pctx.alloc(4096));
      const lowIds: number[] = [];
      for (let i = 0; i < 8; i++) lowIds.push(low.copy(bufs[0]!, bufs[1]!));
      // While the first low submit is in flight, high-priority work arrives.
      pctx.flush();
      const highIds = [high.copy(bufs[2]!, bufs[3]!), high.copy(bufs[3]!, bufs[2]!)];
      await pctx.synchronize();
      const order = pctx.trace.submits.flat();
      const firstHigh = order.indexOf(highIds[0]!);
      const lastLow = order.indexOf(lowIds[lowIds.length - 1]!);
      expect(firstHigh).toBeGreaterThan(0);
      expect(firstHigh).toBeLessThan(lastLow); // overtook queued low-priority work
      expect(order.indexOf(lowIds[0]!)).toBe(0); // what was already submitted stays first
      expect(pctx.errors).toEqual([]);
    } finally {
      pctx.destroy();
    }
  });

  it('clamps an out-of-range priority to the nearest one, as CUDA and PyTorch do; refuses a non-integer', () => {
    expect(ctx.createStream({ priority: 1 }).priority).toBe(ctx.priorityRange.least);
    expect(ctx.createStream({ priority: 99 }).priority).toBe(0);
    expect(ctx.createStream({ priority: -6 }).priority).toBe(ctx.priorityRange.greatest);
    expect(ctx.createStream({ priority: -3 }).priority).toBe(-3);
    expect(ctx.createStream({ priority: -0 }).priority, 'not -0').toBe(0);
    expect(() => ctx.createStream({ priority: 0.5 })).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', message: expect.stringMatching(/`priority` to be an integer from -5 \(highest\) to 0 \(the default; others are clamped\), got `0.5`/) }));
    expect(() => ctx.createStream({ priority: '1' as unknown as number })).toThrow(expect.objectContaining({ name: 'InvalidArgumentError' }));
  });
});

describe('synchronize', () => {
  it('a synchronize aborted through its signal rejects with AbortError; the work still completes', async () => {
    const s = ctx.createStream({ label: 'held' });
    let open!: () => void;
    const wait = new Promise<void>((res) => (open = res));
    s.hostFn(() => wait);
    const e = ctx.createEvent({ label: 'after' });
    s.record(e);
    const ac = new AbortController();
    // Each names the synchronize aborted and its line (not the op it waited for, which its message names).
    const waits = [s.synchronize({ signal: ac.signal }), ctx.synchronize({ signal: ac.signal }), e.synchronize({ signal: ac.signal })];
    ac.abort();
    const errs = await Promise.all(waits.map((p) => p.then(() => null, (x: unknown) => x as StreamError)));
    for (const [err, stream] of [[errs[0], 'held'], [errs[1], undefined], [errs[2], undefined]] as const) {
      expect(err).toMatchObject({ name: 'AbortError', op: 'synchronize', stream, message: expect.stringMatching(/wait for op '.*' #\d+ on stream 'held' was aborted/) });
      expect(err!.callSite).toMatch(/^at .*stream\.test\.ts/);
      expect(err!.message, 'a synchronize enqueues nothing: its line is where it was called').toMatch(/\n {2}called at .*stream\.test\.ts/);
    }
    open();
    await s.synchronize();
  });

  it('many waits on one signal hang one abort listener on it, taken off when they end (Node warned past 10)', async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error): void => void warnings.push(w);
    process.on('warning', onWarning);
    try {
      const streams = Array.from({ length: 16 }, (_, i) => ctx.createStream({ label: `shared signal ${i}` }));
      let open!: () => void;
      const wait = new Promise<void>((res) => (open = res));
      for (const s of streams) s.hostFn(() => wait);
      const ac = new AbortController();
      const waits = [...streams.map((s) => s.synchronize({ signal: ac.signal })), ctx.synchronize({ signal: ac.signal })];
      expect(getEventListeners(ac.signal, 'abort')).toHaveLength(1);
      open();
      await Promise.all(waits);
      expect(getEventListeners(ac.signal, 'abort'), 'taken off once no wait is left').toHaveLength(0);
      // Aborted: every wait rejects.
      const g = gate();
      for (const s of streams.slice(0, 12)) s.hostFn(() => g.wait);
      const ac2 = new AbortController();
      const aborted = streams.slice(0, 12).map((s) => s.synchronize({ signal: ac2.signal }).then(() => null, (e: unknown) => e));
      ac2.abort();
      for (const e of await Promise.all(aborted)) expect(e).toMatchObject({ name: 'AbortError' });
      g.open();
      await ctx.synchronize();
      await new Promise((r) => setImmediate(r));
      expect(warnings.filter((w) => w.name === 'MaxListenersExceededWarning')).toEqual([]);
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('a signal aborted before the call rejects every kind of synchronize at once, idle or not, and a failure stays for the next wait', async () => {
    const s = ctx.createStream({ label: 'pre-aborted' });
    const ac = new AbortController();
    ac.abort(new Error('user left'));
    const idle = ctx.createStream({ label: 'idle' });
    for (const [what, p] of [
      ['idle stream', idle.synchronize({ signal: ac.signal })],
      ['event never recorded', ctx.createEvent().synchronize({ signal: ac.signal })],
    ] as const) {
      await expect(p, what).rejects.toMatchObject({ name: 'AbortError', cause: expect.objectContaining({ message: 'user left' }), message: expect.stringMatching(/\n {2}called at .*stream\.test\.ts/) });
    }
    s.hostFn(() => {
      throw new Error('boom');
    });
    await new Promise((r) => setTimeout(r, 10)); // the failure happened
    await expect(s.synchronize({ signal: ac.signal })).rejects.toMatchObject({ name: 'AbortError', stream: 'pre-aborted' });
    await expect(ctx.synchronize({ signal: ac.signal })).rejects.toMatchObject({ name: 'AbortError' });
    // Not reported to an aborted wait: the next ones see it.
    await expect(s.synchronize()).rejects.toMatchObject({ name: 'HostFnError', stream: 'pre-aborted' });
    await expect(ctx.synchronize()).rejects.toMatchObject({ name: 'HostFnError', stream: 'pre-aborted' });
    await ctx.synchronize();
  });

  it('synchronize options are checked: a signal must be an AbortSignal, no unknown keys', async () => {
    const s = ctx.createStream();
    await expect(s.synchronize({ signal: 'soon' } as never)).rejects.toMatchObject({ name: 'InvalidArgumentError', message: expect.stringMatching(/`signal` to be an AbortSignal/) });
    await expect(ctx.synchronize({ timeout: 5 } as never)).rejects.toMatchObject({ name: 'InvalidArgumentError', message: expect.stringMatching(/Unknown option `options.timeout`/) });
    await expect(ctx.createEvent().synchronize(5 as never)).rejects.toMatchObject({ name: 'InvalidArgumentError' });
  });
});

describe('argument checks', () => {
  it('copies within one buffer are refused, even for disjoint ranges (WebGPU forbids them)', () => {
    const s = ctx.createStream();
    const a = ctx.alloc(64);
    expect(() => s.copy(a, a, { srcOffset: 0, dstOffset: 8, size: 16 })).toThrow(/same buffer/);
    expect(() => s.copy(a, a, { srcOffset: 0, dstOffset: 32, size: 16 })).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', op: 'copy' }));
  });

  it('uploads of a byte length that is not a multiple of 4 are refused', () => {
    const s = ctx.createStream();
    // Named as what it is: the source's length (no `size` was passed).
    expect(() => s.upload(new Uint8Array(6), ctx.alloc(64))).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', op: 'upload', message: expect.stringMatching(/source 'src' has 6 bytes, not a multiple of 4: WebGPU copies whole 4-byte words/) }));
    expect(() => s.upload(new Uint8Array(16), ctx.alloc(64), { srcOffset: 4, dstOffset: 0 })).not.toThrow();
    expect(() => s.copy(ctx.alloc(64), ctx.alloc(64), { srcOffset: 4 })).not.toThrow();
  });
});

describe('lifetimes', () => {
  it('destroyed streams are forgotten once their work is done (no registry of every stream)', async () => {
    const before = contextInternals(ctx).scheduler.streams.length;
    for (let i = 0; i < 130; i++) {
      const s = ctx.createStream();
      s.hostFn(() => {});
      s.destroy();
    }
    await ctx.synchronize();
    expect(contextInternals(ctx).scheduler.streams.length).toBeLessThanOrEqual(before);
    const kept = ctx.createStream({ label: 'kept' });
    await ctx.synchronize();
    expect(contextInternals(ctx).scheduler.streams).toContain(kept.queue);
  });

  it('streams that ran only host functions are let go with no GPU work at all (the busy list kept every one)', async () => {
    const own = await gpuContext();
    try {
      const queues: WeakRef<object>[] = [];
      for (let i = 0; i < 400; i++) {
        const s = own.createStream();
        s.hostFn(() => {});
        queues.push(new WeakRef(s.queue));
        s.destroy();
        if (i % 50 === 49) await own.synchronize();
      }
      await own.synchronize();
      for (let i = 0; i < 3; i++) {
        await new Promise((r) => setImmediate(r));
        gc();
      }
      expect(queues.filter((q) => q.deref() !== undefined).length).toBeLessThan(150);
    } finally {
      own.destroy();
    }
  });

  it('streams dropped without destroy() are forgotten once collected and done; a failure on one still reaches ctx.synchronize()', async () => {
    const own = await gpuContext();
    try {
      const listed = (): number => contextInternals(own).scheduler.streams.length;
      const before = listed();
      ((): void => {
        for (let i = 0; i < 130; i++) own.createStream().hostFn(() => {});
        own.createStream({ label: 'dropped, failing' }).hostFn(() => {
          throw new Error('boom');
        });
      })();
      for (let i = 0; i < 3; i++) {
        await new Promise((r) => setImmediate(r));
        gc();
      }
      await new Promise((r) => setTimeout(r, 10)); // the finalizers' task
      const err = await own.synchronize().then(() => null, (e: unknown) => e);
      expect(err, 'the collected stream\'s failure is reported').toMatchObject({ name: 'HostFnError', stream: 'dropped, failing' });
      await own.synchronize(); // reported once
      expect(listed(), 'the 131 collected streams are forgotten').toBeLessThanOrEqual(before);
    } finally {
      own.destroy();
    }
  });

  it('ops on a destroyed stream throw DestroyedError; destroy is idempotent', () => {
    const s = ctx.createStream({ label: 'gone' });
    s.destroy();
    s.destroy();
    expect(() => s.hostFn(() => {})).toThrow(expect.objectContaining({ name: 'DestroyedError', stream: 'gone' }));
  });
});
