/**
 * Stream, event, callback and pinned-memory semantics on real WebGPU (Dawn). Order is asserted
 * through events, op completion and the scheduler's submit log, never through wall-clock windows.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gpuContext, rng, randomSeed, firstMismatch, vectorAddRef, sleepRef } from './gpu.js';
import { workgroupsFor, type Context, type DeviceBuffer } from '../src/index.js';
import { contextInternals } from '../src/context.js';
import { benchKernels } from '../bench/kernels/index';

let ctx: Context & { errors: string[] };
beforeAll(async () => {
  ctx = await gpuContext({ trace: true });
});
afterAll(() => {
  expect(ctx.errors).toEqual([]);
  ctx.destroy();
});

/** A promise the test resolves: `open()` lets a host function that returned `wait` finish. */
function gate(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((res) => (open = res));
  return { wait, open };
}

function addLaunch(s: ReturnType<Context['createStream']>, a: DeviceBuffer, b: DeviceBuffer, out: DeviceBuffer, n: number): void {
  s.launch(ctx.kernels.vectorAdd, { bindings: [a, b, out], workgroups: workgroupsFor(n, 256) });
}

describe('stream order', () => {
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

  it('captures pageable upload data at the call, so the array can be reused at once', async () => {
    const seed = randomSeed();
    const src = rng(seed).u32Array(64);
    const want = src.slice();
    const s = ctx.createStream();
    const d = ctx.alloc(256);
    s.upload(src, d);
    src.fill(7); // CUDA: cudaMemcpyAsync from pageable memory returns after staging the data
    const out = new Uint32Array(64);
    s.download(d, out);
    await s.synchronize();
    expect(firstMismatch(out, want), `seed ${seed}`).toBeNull();
  });

  it('honours offsets and sizes (N and N-4 bytes)', async () => {
    const seed = randomSeed();
    const data = rng(seed).u32Array(32);
    const s = ctx.createStream();
    const d = ctx.alloc(128);
    s.upload(rng(seed + 1).u32Array(32), d);
    s.upload(data, d, { srcOffset: 8, dstOffset: 16, size: 60 });
    const out = new Uint32Array(32);
    s.download(d, out);
    const part = new Uint32Array(4);
    s.download(d, part, { srcOffset: 16, size: 12 });
    await s.synchronize();
    expect(Array.from(out.subarray(4, 19)), `seed ${seed}`).toEqual(Array.from(data.subarray(2, 17)));
    expect(Array.from(part.subarray(0, 3))).toEqual(Array.from(data.subarray(2, 5)));
    expect(part[3]).toBe(0);
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

describe('events', () => {
  it('orders work across streams; waitEvent takes the record current at the call', async () => {
    const seed = randomSeed();
    const r = rng(seed);
    const n = 300;
    const a = r.f32Array(n), b = r.f32Array(n);
    const producer = ctx.createStream({ label: 'producer' });
    const consumer = ctx.createStream({ label: 'consumer' });
    const da = ctx.alloc(n * 4), db = ctx.alloc(n * 4), out = ctx.alloc(n * 4);
    const ev = ctx.createEvent();
    const g = gate();
    const endless = gate();
    producer.hostFn(() => g.wait);
    producer.upload(a, da);
    producer.upload(b, db);
    ev.record(producer);
    consumer.waitEvent(ev); // waits for the record above
    addLaunch(consumer, da, db, out, n);
    const host = new Float32Array(n);
    consumer.download(out, host);
    // A later record does not change what the consumer waits for.
    producer.hostFn(() => endless.wait); // does not finish until the end of the test
    ev.record(producer);
    expect(ev.query()).toBe(false);
    g.open();
    await consumer.synchronize();
    expect(firstMismatch(host, vectorAddRef(a, b)), `seed ${seed}`).toBeNull();
    expect(ev.query()).toBe(false); // the second record is stuck behind the endless host function
    endless.open();
    await ev.synchronize();
    expect(ev.query()).toBe(true);
  });

  it('waiting on a never-recorded event is a no-op; query() is true', async () => {
    const ev = ctx.createEvent();
    expect(ev.query()).toBe(true);
    const s = ctx.createStream();
    s.waitEvent(ev);
    let ran = false;
    s.hostFn(() => {
      ran = true;
    });
    await s.synchronize();
    await ev.synchronize();
    expect(ran).toBe(true);
  });

  it('event.synchronize resolves once the recorded work completed, and query() turns true', async () => {
    const s = ctx.createStream();
    const d = ctx.alloc(4096);
    const out = new Uint32Array(1024);
    const v = rng(randomSeed()).u32Array(1024);
    s.upload(v, d);
    s.download(d, out);
    const ev = ctx.createEvent();
    ev.record(s);
    await ev.synchronize();
    expect(ev.query()).toBe(true);
    expect(firstMismatch(out, v)).toBeNull();
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

  it('elapsedTime measures GPU time between two timing events; sleep kernels take longer with more iterations', async () => {
    expect(ctx.features.timestampQuery).toBe(true); // SwiftShader and NVIDIA have it
    const s = ctx.createStream();
    const seed = randomSeed();
    const init = rng(seed).u32Array(64);
    const data = ctx.alloc(256);
    const times: number[] = [];
    for (const iterations of [2000, 40000]) {
      s.upload(init, data);
      s.launch(benchKernels(ctx).sleep, { bindings: [data], workgroups: 1, constants: { iterations } }); // compile
      await s.synchronize();
      // Best of 3: SwiftShader runs a dispatch on worker threads and may write the next empty
      // pass's timestamp before the dispatch ends, so one sample can read short (NVIDIA does not).
      let best = 0;
      for (let rep = 0; rep < 3; rep++) {
        s.upload(init, data);
        const t0 = ctx.createEvent({ timing: true }), t1 = ctx.createEvent({ timing: true });
        t0.record(s);
        s.launch(benchKernels(ctx).sleep, { bindings: [data], workgroups: 1, constants: { iterations } });
        t1.record(s);
        const out = new Uint32Array(64);
        s.download(data, out);
        await t1.synchronize();
        best = Math.max(best, t0.elapsedTime(t1));
        await s.synchronize();
        expect(firstMismatch(out, sleepRef(init, iterations)), `seed ${seed}`).toBeNull();
      }
      times.push(best);
    }
    expect(times[0], `elapsed ms for 2000 and 40000 iterations: ${times.join(', ')}`).toBeGreaterThan(0);
    expect(times[1], `elapsed ms for 2000 and 40000 iterations: ${times.join(', ')}`).toBeGreaterThan(times[0]!);
  });

  it('elapsedTime errors: no timing, not recorded, not completed', async () => {
    const plain = ctx.createEvent(), timed = ctx.createEvent({ timing: true }), timed2 = ctx.createEvent({ timing: true });
    expect(() => plain.elapsedTime(timed)).toThrow(expect.objectContaining({ name: 'EventTimingError' }));
    expect(() => timed.elapsedTime(timed2)).toThrow(expect.objectContaining({ name: 'EventNotReadyError', message: expect.stringContaining('never recorded') }));
    const s = ctx.createStream();
    const g = gate();
    timed.record(s);
    s.hostFn(() => g.wait);
    timed2.record(s);
    await timed.synchronize();
    expect(() => timed.elapsedTime(timed2)).toThrow(expect.objectContaining({ name: 'EventNotReadyError', message: expect.stringContaining('not completed') }));
    g.open();
    await timed2.synchronize();
    expect(timed.elapsedTime(timed2)).toBeGreaterThanOrEqual(0);
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

describe('pageable uploads in pieces', () => {
  it('sends a pageable upload above uploadPieceBytes as pieces, one submit each while the stream can run, in order, data intact', async () => {
    const pctx = await gpuContext({ trace: true, uploadPieceBytes: 4096 });
    try {
      const seed = randomSeed();
      const r = rng(seed);
      const n = 10_000; // 40000 bytes: 8 pieces of 5000 (at most 8 per upload)
      const a = r.f32Array(n, -50, 50), b = r.f32Array(n, -50, 50);
      const s = pctx.createStream({ label: 'pieces' });
      const da = pctx.alloc(n * 4), db = pctx.alloc(n * 4), out = pctx.alloc(n * 4);
      s.upload(b, db); // 8 pieces too
      const before = pctx.trace.submits.length;
      const id = s.upload(a, da);
      // Seven pieces went out during the call (the eighth waits for the microtask flush); the first
      // shares its submit with b's last piece, each other has its own.
      const during = pctx.trace.submits.slice(before);
      expect(during).toHaveLength(7);
      expect(during.map((ops) => ops.length)).toEqual([2, 1, 1, 1, 1, 1, 1]);
      expect(id).toBe(during[6]![0]! + 1); // the call returns the last piece's op id
      s.launch(pctx.kernels.vectorAdd, { bindings: [da, db, out], workgroups: workgroupsFor(n, 256) });
      const got = new Float32Array(n);
      s.download(out, got);
      await s.synchronize();
      expect(firstMismatch(got, vectorAddRef(a, b)), `seed ${seed}`).toBeNull();
      // Pieces of one upload stay in stream order.
      const order = pctx.trace.submits.flat();
      const pieces = order.filter((o) => o >= during[0]![1]! && o <= id);
      expect(pieces).toHaveLength(8);
      expect(pieces).toEqual([...pieces].sort((x, y) => x - y));
      expect(pctx.errors).toEqual([]);
    } finally {
      pctx.destroy();
    }
  });

  it('keeps pieces behind what the stream waits for, and honours offsets across piece boundaries', async () => {
    const pctx = await gpuContext({ trace: true, uploadPieceBytes: 4096 });
    try {
      const seed = randomSeed();
      const r = rng(seed);
      const words = 5000;
      const data = r.u32Array(words);
      const init = r.u32Array(words + 16);
      const s = pctx.createStream({ label: 'blocked pieces' });
      const d = pctx.alloc((words + 16) * 4);
      s.upload(init, d);
      const g = gate();
      const log: string[] = [];
      s.hostFn(() => g.wait.then(() => void log.push('host')));
      pctx.flush(); // the last piece of `init`
      const before = pctx.trace.submits.flat().length;
      // srcOffset 12, dstOffset 40, 19000 bytes: 5 pieces of 3800, all behind the host function.
      s.upload(data, d, { srcOffset: 12, dstOffset: 40, size: 19_000 });
      await new Promise((res) => setImmediate(res));
      expect(pctx.trace.submits.flat().length).toBe(before); // nothing passed the host function
      g.open();
      const got = new Uint32Array(words + 16);
      s.download(d, got);
      await s.synchronize();
      const want = init.slice();
      want.set(data.subarray(3, 3 + 19_000 / 4), 10);
      expect(firstMismatch(got, want), `seed ${seed}`).toBeNull();
      expect(log).toEqual(['host']);
      expect(pctx.errors).toEqual([]);
    } finally {
      pctx.destroy();
    }
  });

  it('validates uploadPieceBytes', async () => {
    await expect(gpuContext({ uploadPieceBytes: 4094 })).rejects.toThrow(/`uploadPieceBytes` to be 0 \(uploads go whole\) or a multiple of 4 of at least 4096, got 4094/);
    await expect(gpuContext({ uploadPieceBytes: -4 })).rejects.toThrow(expect.objectContaining({ name: 'InvalidArgumentError' }));
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
    expect(() => ctx.createStream({ priority: 0.5 })).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', message: expect.stringMatching(/`priority` to be an integer/) }));
    expect(() => ctx.createStream({ priority: '1' as unknown as number })).toThrow(expect.objectContaining({ name: 'InvalidArgumentError' }));
  });
});

describe('pinned buffers', () => {
  it('views throw while the GPU owns the buffer, naming the stream and op; ready() hands them back', async () => {
    const seed = randomSeed();
    const v = rng(seed).f32Array(256);
    const up = ctx.allocHost(1024, 'upload', { label: 'pin-up' });
    const down = ctx.allocHost(1024, 'download', { label: 'pin-down' });
    const s = ctx.createStream({ label: 'copier' });
    const d = ctx.alloc(1024);
    up.f32.set(v);
    s.upload(up, d);
    expect(() => up.f32).toThrow(expect.objectContaining({ name: 'PinnedBufferBusyError', message: expect.stringMatching(/'upload' #\d+ on stream 'copier'/) }));
    s.download(d, down);
    expect(() => down.bytes).toThrow(expect.objectContaining({ name: 'PinnedBufferBusyError' }));
    await s.synchronize();
    expect(down.isHostOwned).toBe(true);
    expect(firstMismatch(down.f32, v), `seed ${seed}`).toBeNull();
    await up.ready();
    expect(up.isHostOwned).toBe(true);
    // Reuse: fill again, upload again.
    const w = rng(seed + 1).f32Array(256);
    up.f32.set(w);
    s.upload(up, d);
    s.download(d, down);
    await s.synchronize();
    expect(firstMismatch(down.f32, w), `seed ${seed}`).toBeNull();
  });

  it('a host function may fill the pinned buffer that the next op of its stream uploads (as CUDA allows)', async () => {
    const seed = randomSeed();
    const r = rng(seed);
    const s = ctx.createStream({ label: 'prefetch' });
    const pin = ctx.allocHost(1024, 'upload', { label: 'ring' });
    const d = ctx.alloc(1024);
    const batches = [r.u32Array(256), r.u32Array(256), r.u32Array(256)];
    const outs = batches.map(() => new Uint32Array(256));
    batches.forEach((batch, i) => {
      s.hostFn(async () => {
        await Promise.resolve(); // async callbacks keep the window until they settle
        pin.u32.set(batch);
      });
      s.upload(pin, d);
      s.download(d, outs[i]!);
    });
    await s.synchronize();
    batches.forEach((b, i) => expect(firstMismatch(outs[i]!, b), `batch ${i}, seed ${seed}`).toBeNull());
    expect(() => {
      s.upload(pin, d);
      pin.u32[0] = 2; // after enqueue, outside a callback: refused
    }).toThrow(expect.objectContaining({ name: 'PinnedBufferBusyError' }));
    await s.synchronize();
  });

  it('enqueuing hands the mapped range back at once when nothing ahead can use it; a host function ahead keeps it', async () => {
    const seed = randomSeed();
    const r = rng(seed);
    const a = r.f32Array(256);
    const b = r.f32Array(256);
    const up = ctx.allocHost(1024, 'upload', { label: 'eager-up' });
    const down = ctx.allocHost(1024, 'download', { label: 'eager-down' });
    const d = ctx.alloc(1024);
    const s = ctx.createStream({ label: 'eager' });
    const s2 = ctx.createStream({ label: 'eager-2', nonBlocking: true });
    // Nothing ahead: the range is detached at the enqueue (V8 stops counting it), not at the flush.
    const held = up.f32;
    held.set(a);
    s.upload(up, d);
    expect(held.length).toBe(0);
    const out = new Float32Array(256);
    s.download(d, out);
    // A second stream reads the same buffer: both uses see the same bytes. Its download waits
    // behind its upload, a GPU op: the download buffer's range is detached at the enqueue too.
    const d2 = ctx.alloc(1024);
    const heldDown = down.f32;
    s2.upload(up, d2);
    s2.download(d2, down);
    expect(heldDown.length).toBe(0);
    await ctx.synchronize();
    expect(firstMismatch(out, a), `seed ${seed}`).toBeNull();
    expect(firstMismatch(down.f32, a), `seed ${seed}`).toBeNull();
    // A host function ahead on the stream may still fill it: the mapping stays until it ran, but a
    // view taken before the enqueue detaches there (only that host function writes what is sent).
    await up.ready();
    const gateOpen = gate();
    const view = up.f32;
    s.hostFn(async () => {
      await gateOpen.wait;
      up.f32.set(b);
    });
    s.upload(up, d);
    expect(view.length).toBe(0);
    expect(() => up.f32).toThrow(expect.objectContaining({ name: 'PinnedBufferBusyError' }));
    s.download(d, out);
    gateOpen.open();
    await s.synchronize();
    expect(firstMismatch(out, b), `seed ${seed}`).toBeNull();
    // A host function that threw is done too: the next enqueue detaches at once again.
    s.hostFn(() => {
      throw new Error('boom');
    });
    await expect(s.synchronize()).rejects.toMatchObject({ name: 'HostFnError' });
    await expect(ctx.synchronize()).rejects.toMatchObject({ name: 'HostFnError', stream: 'eager' });
    await up.ready();
    const again = up.f32;
    s.upload(up, d);
    expect(again.length).toBe(0);
    await s.synchronize();
  });

  it('an upload skipped behind a failed op hands its detached buffer back to the host, bytes intact', async () => {
    const seed = randomSeed();
    const a = rng(seed).f32Array(256);
    const up = ctx.allocHost(1024, 'upload', { label: 'skipped-up' });
    const s = ctx.createStream({ label: 'doomed', nonBlocking: true });
    const bad = ctx.kernel('@group(0) @binding(0) var<storage, read_write> d: array<u32>;\n@compute @workgroup_size(1) fn main() { d[0] = nope; }', { label: 'bad' });
    up.f32.set(a);
    s.launch(bad, { bindings: [ctx.alloc(256)], workgroups: 1 });
    const held = up.f32;
    s.upload(up, ctx.alloc(1024)); // detached at the enqueue, then skipped: the launch fails
    expect(held.length).toBe(0);
    await expect(s.synchronize()).rejects.toMatchObject({ name: 'GpuValidationError' });
    await expect(ctx.synchronize()).rejects.toMatchObject({ name: 'GpuValidationError', stream: 'doomed' });
    await up.ready();
    expect(firstMismatch(up.f32, a), `seed ${seed}`).toBeNull();
  });

  it('unmap() lets the host mapping go: views detach, ready() maps it back with its bytes, ops use it as before', async () => {
    const seed = randomSeed();
    const r = rng(seed);
    const a = r.f32Array(256);
    const b = r.f32Array(256);
    const up = ctx.allocHost(1024, 'upload', { label: 'unmap-up' });
    const down = ctx.allocHost(1024, 'download', { label: 'unmap-down' });
    const d = ctx.alloc(1024);
    const s = ctx.createStream({ label: 'unmap' });
    up.f32.set(a);
    s.upload(up, d);
    s.download(d, down);
    await down.ready();
    expect(firstMismatch(down.f32, a), `seed ${seed}`).toBeNull();
    // Done reading: the range detaches, and the views refuse with a hint until ready().
    const held = down.f32;
    down.unmap();
    expect(held.length).toBe(0);
    expect(() => down.f32).toThrow(expect.objectContaining({ name: 'PinnedBufferBusyError', message: expect.stringContaining('await pinned.ready()') }));
    down.unmap(); // idempotent
    await down.ready();
    expect(firstMismatch(down.f32, a), `contents kept, seed ${seed}`).toBeNull();
    // Unmapped and then used by an op: the op needs no mapping, and the buffer comes back after it.
    down.unmap();
    await up.ready();
    up.f32.set(b);
    up.unmap(); // an upload of an unmapped buffer uploads what was written before
    s.upload(up, d);
    s.download(d, down);
    await s.synchronize();
    await down.ready();
    expect(firstMismatch(down.f32, b), `seed ${seed}`).toBeNull();
    // While an op uses it, unmap() does nothing: the op hands it back.
    s.download(d, down);
    down.unmap();
    await s.synchronize();
    await down.ready();
    expect(firstMismatch(down.f32, b), `seed ${seed}`).toBeNull();
    down.destroy();
    expect(() => down.unmap()).toThrow(expect.objectContaining({ name: 'DestroyedError' }));
  });

  it('a pinned buffer of the wrong kind is refused', () => {
    const s = ctx.createStream();
    const down = ctx.allocHost(64, 'download');
    expect(() => s.upload(down, ctx.alloc(64))).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', message: expect.stringContaining("allocHost(bytes, 'upload')") }));
  });
});

describe('memory', () => {
  it('accounts device bytes and defers destroy until the streams using the buffer are done', async () => {
    const mctx = await gpuContext();
    try {
      const before = mctx.memory.current;
      const a = mctx.alloc(1 << 16), b = mctx.alloc(1 << 16);
      expect(mctx.memory.current - before).toBe(2 << 16);
      const s = mctx.createStream();
      const g = gate();
      s.hostFn(() => g.wait);
      const v = rng(randomSeed()).u32Array(1 << 14);
      s.upload(v, a);
      s.copy(a, b);
      a.destroy(); // in use: deferred
      a.destroy(); // idempotent
      expect(mctx.memory.current - before).toBe(2 << 16);
      expect(() => s.copy(a, b)).toThrow(expect.objectContaining({ name: 'DestroyedError' }));
      const out = new Uint32Array(1 << 14);
      s.download(b, out);
      g.open();
      await s.synchronize();
      expect(mctx.memory.current - before).toBe(1 << 16);
      expect(mctx.memory.peak - before).toBe(2 << 16);
      expect(firstMismatch(out, v)).toBeNull();
    } finally {
      mctx.destroy();
    }
  });
});

describe('staging pool and user kernels', () => {
  it('never reuses a staging buffer before the GPU is done with it: 24 pageable uploads in flight', async () => {
    const seed = randomSeed();
    const r = rng(seed);
    const s = ctx.createStream();
    const n = 1000; // same size bucket for every upload
    const bufs = Array.from({ length: 24 }, () => ctx.alloc(n * 4));
    const data = bufs.map(() => r.u32Array(n));
    const scratch = new Uint32Array(n);
    bufs.forEach((b, i) => {
      scratch.set(data[i]!);
      s.upload(scratch, b); // one host array, refilled each time: the pool must have copied it
    });
    const outs = bufs.map(() => new Uint32Array(n));
    bufs.forEach((b, i) => s.download(b, outs[i]!));
    await s.synchronize();
    outs.forEach((o, i) => expect(firstMismatch(o, data[i]!), `upload ${i}, seed ${seed}`).toBeNull());
    expect(ctx.memory.staging).toBeGreaterThan(0);
  });

  it('stagingPoolBytes bounds the free staging kept: with 0 a read-back buffer is destroyed once its download completes', async () => {
    const seed = randomSeed();
    const data = rng(seed).u32Array(2000);
    for (const [poolBytes, kept] of [[0, 0], [1 << 20, 8192]] as const) {
      const pctx = await gpuContext({ stagingPoolBytes: poolBytes });
      try {
        const s = pctx.createStream();
        const d = pctx.alloc(data.byteLength);
        pctx.queue.writeBuffer(d.buffer, 0, data as Uint32Array<ArrayBuffer>); // no staging of ours
        const out = new Uint32Array(data.length);
        s.download(d, out); // 8000 bytes: an 8192-byte read-back bucket, back in the pool before the op completes
        await s.synchronize();
        expect(firstMismatch(out, data), `seed ${seed}`).toBeNull();
        expect(pctx.memory.staging, `stagingPoolBytes ${poolBytes}`).toBe(kept);
        expect(pctx.errors).toEqual([]);
      } finally {
        pctx.destroy();
      }
    }
    await expect(gpuContext({ stagingPoolBytes: -1 })).rejects.toThrow(/`stagingPoolBytes`/);
  });

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
});

describe('stream lifetimes', () => {
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
});
