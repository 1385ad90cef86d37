/**
 * Events (src/event.ts) on real WebGPU (Dawn): record and waitEvent order work across streams, a
 * wait takes the record current at the call, a never-recorded event is complete; query() and
 * synchronize(); elapsedTime between timing events, and its errors. Order is asserted through
 * data and op completion, never through wall-clock windows.
 */
import { describe, expect, it } from 'vitest';
import { useGpuContext, rng, randomSeed, firstMismatch, vectorAddRef, sleepRef } from './fixtures/gpu.js';
import { gate } from './fixtures/gate.js';
import { createContext, workgroupsFor, type Context, type DeviceBuffer } from '../src/index.js';
import { benchKernels } from '../bench/kernels/index';

type GpuCtx = Context & { errors: string[] };
let ctx: GpuCtx;
useGpuContext((c) => (ctx = c), { trace: true });

function addLaunch(s: ReturnType<Context['createStream']>, a: DeviceBuffer, b: DeviceBuffer, out: DeviceBuffer, n: number): void {
  s.launch(ctx.kernels.vectorAdd, { bindings: [a, b, out], workgroups: workgroupsFor(n, 256) });
}

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

  it('a frozen event is refused at the record, before anything is enqueued (it would have run and been forgotten)', async () => {
    const ev = ctx.createEvent({ label: 'frozen' });
    Object.freeze(ev);
    const s = ctx.createStream({ label: 'records' });
    expect(() => s.record(ev)).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', op: 'record', stream: 'records', message: expect.stringMatching(/event 'frozen' is frozen/) }));
    expect(() => ev.record(s)).toThrow(/is frozen/);
    expect(s.pendingOps).toBe(0);
    await s.synchronize();
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

  it('a failed record: event.synchronize() rejects with a DependencyError caused by the op that failed, and every waiter fails until it is recorded again, named waitEvent / waitStream', async () => {
    const bad = ctx.createStream({ label: 'bad' }), waiter = ctx.createStream({ label: 'waiter' });
    const ev = ctx.createEvent({ label: 'ev' });
    bad.hostFn(() => {
      throw new Error('boom');
    });
    ev.record(bad);
    await expect(ev.synchronize()).rejects.toMatchObject({ name: 'DependencyError', op: 'record', cause: expect.objectContaining({ name: 'HostFnError' }) });
    await expect(bad.synchronize()).rejects.toMatchObject({ name: 'HostFnError' });
    waiter.waitEvent(ev);
    await expect(waiter.synchronize(), 'reported or not').rejects.toMatchObject({ name: 'DependencyError', op: 'waitEvent', stream: 'waiter' });
    const again = ctx.createStream({ label: 'again' });
    again.hostFn(() => {
      throw new Error('boom');
    });
    waiter.waitStream(again);
    await expect(waiter.synchronize()).rejects.toMatchObject({ name: 'DependencyError', op: 'waitStream', stream: 'waiter' });
    await again.synchronize().catch(() => undefined);
    ev.record(bad); // recorded again, after the reported failure: waits order behind it, no more
    waiter.waitEvent(ev);
    await waiter.synchronize();
    await ctx.synchronize().catch(() => undefined);
  });
});

describe('events across contexts', () => {
  it("a waiter on another context's failed record names that context in its DependencyError (default labels repeat per context)", async () => {
    const { gpuContext } = await import('./fixtures/gpu.js');
    const other = await gpuContext({ label: 'other' });
    try {
      const s = other.createStream(), ev = other.createEvent();
      s.hostFn(() => {
        throw new Error('boom');
      });
      ev.record(s);
      const w = ctx.createStream({ label: 'waits' });
      w.waitEvent(ev);
      await expect(w.synchronize()).rejects.toMatchObject({ name: 'DependencyError', message: expect.stringMatching(/on stream 'stream#\d+' of context 'other', which failed/) });
      await s.synchronize().catch(() => undefined);
    } finally {
      other.destroy();
    }
  });
});

describe('elapsedTime', () => {
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

  it('elapsedTime errors: EventNotReadyError only while a record is not completed (query() false); what never changes is EventTimingError', async () => {
    const plain = ctx.createEvent(), timed = ctx.createEvent({ timing: true }), timed2 = ctx.createEvent({ timing: true });
    expect(() => plain.elapsedTime(timed)).toThrow(expect.objectContaining({ name: 'EventTimingError' }));
    expect(timed2.query(), 'never recorded: query() is true').toBe(true);
    expect(() => timed.elapsedTime(timed2)).toThrow(expect.objectContaining({ name: 'EventTimingError', message: expect.stringContaining('never recorded') }));
    // A failed record: query() true, and no GPU time ever.
    const failing = ctx.createStream({ label: 'fails' }), bad = ctx.createEvent({ timing: true, label: 'bad' });
    failing.hostFn(() => {
      throw new Error('boom');
    });
    bad.record(failing);
    await failing.synchronize().catch(() => undefined);
    expect(bad.query()).toBe(true);
    expect(() => bad.elapsedTime(bad)).toThrow(expect.objectContaining({ name: 'EventTimingError', message: expect.stringMatching(/event 'bad' failed, so it has no GPU time/) }));
    // A context made with timing: false says so (its device may well have timestamps).
    const untimed = await createContext({ device: ctx.device, timing: false, label: 'untimed' });
    const u = untimed.createEvent({ timing: true, label: 'u' });
    u.record();
    await u.synchronize();
    const want = ctx.device.features.has('timestamp-query') ? /event 'u' belongs to context 'untimed', created with `timing: false`/ : /no 'timestamp-query' feature/;
    expect(() => u.elapsedTime(u)).toThrow(expect.objectContaining({ name: 'EventTimingError', message: expect.stringMatching(want) }));
    untimed.destroy();
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
