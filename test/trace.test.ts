/**
 * The trace (src/trace.ts) on real WebGPU (Dawn): its op records and the scheduler's submit log
 * keep about `trace.limit` entries, however many ops run. Spans and their Chrome export are also
 * checked end to end by test/smoke.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { gpuContext } from './fixtures/gpu.js';
import { toChromeTraceEvents } from '../src/index.js';

describe('trace memory is bounded', () => {
  it('op records and the submit log keep about `trace.limit` entries', async () => {
    const c = await gpuContext({ trace: { limit: 1000 }, maxOpsPerSubmit: 1 });
    const s = c.createStream();
    const a = c.alloc(64), b = c.alloc(64);
    for (let round = 0; round < 5; round++) {
      for (let i = 0; i < 1000; i++) s.copy(i & 1 ? a : b, i & 1 ? b : a);
      await s.synchronize();
    }
    expect(c.trace.records.length).toBeLessThanOrEqual(1250);
    expect(c.trace.records.length).toBeGreaterThanOrEqual(1000);
    expect(c.trace.submits.length).toBeLessThanOrEqual(1250);
    expect(c.errors).toEqual([]);
    c.destroy();
  });

  it('marks keep about `trace.limit` too, and 200,000 of them export (a spread of them all overflowed the stack); the limit is checked', async () => {
    const c = await gpuContext({ trace: true });
    for (let i = 0; i < 200_000; i++) c.trace.mark('app', 'host', `m${i}`, i, i + 0.5);
    expect(c.trace.toChromeTrace().traceEvents.length).toBeGreaterThan(100_000);
    c.trace.limit = 1000;
    for (let i = 0; i < 5000; i++) c.trace.mark('app', 'host', `n${i}`, i, i + 0.5);
    expect(c.trace.spans().length).toBeLessThanOrEqual(1250);
    for (const bad of [NaN, 0, 1.5]) expect(() => (c.trace.limit = bad), String(bad)).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', op: 'trace.limit' }));
    c.destroy();
  });

  it('the export, gpuTimes and gpuTimestamps check their arguments (a TypeError, an unknown option or a string pid got through)', async () => {
    const c = await gpuContext({ trace: true });
    const refused = (f: () => unknown, op: string, message: RegExp): void => {
      expect(f).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', op, message: expect.stringMatching(message) }));
    };
    refused(() => toChromeTraceEvents(null as never), 'toChromeTrace', /`spans` to be an array/);
    refused(() => toChromeTraceEvents([null as never]), 'toChromeTrace', /spans\[0\]/);
    refused(() => c.trace.toChromeTrace(5 as never), 'toChromeTrace', /`spans` to be an array/);
    refused(() => toChromeTraceEvents([], { bogus: 1 } as never), 'toChromeTrace', /Unknown option `options.bogus`/);
    refused(() => toChromeTraceEvents([], { pid: 'x' as never }), 'toChromeTrace', /pid/);
    refused(() => toChromeTraceEvents([], { links: [null as never] }), 'toChromeTrace', /links\[0\]/);
    refused(() => toChromeTraceEvents([], { links: [{ from: 1, to: 2 } as never] }), 'toChromeTrace', /links\[0\].name/);
    refused(() => c.trace.gpuTimes(null as never), 'trace.gpuTimes', /Expected an OpRecord/);
    refused(() => (c.trace.gpuTimestamps = 1 as never), 'trace.gpuTimestamps', /trace.gpuTimestamps/);
    expect(c.trace.gpuTimestamps).toBe(false);
    c.destroy();
  });

  it('without GPU timestamps, a wait is drawn where its stream began waiting, before the work that waited; the export links it to what it waited for', async () => {
    const c = await gpuContext({ trace: true });
    const a = c.createStream({ label: 'A' }), b = c.createStream({ label: 'B' });
    const x = c.alloc(1 << 16), y = c.alloc(1 << 16), z = c.alloc(1 << 16);
    const e1 = c.createEvent({ label: 'e1' });
    a.copy(x, y);
    a.record(e1);
    b.waitEvent(e1);
    b.copy(y, z);
    await c.synchronize();
    const onB = c.trace.spans().filter((s) => s.lane === 'B');
    const wait = onB.find((s) => s.kind === 'wait')!, copy = onB.find((s) => s.kind === 'copy')!;
    expect(wait.start, JSON.stringify(onB)).toBeLessThanOrEqual(copy.start);
    // The Chrome export draws the wait as a flow arrow from the record it waited for (Perfetto shows the dependency).
    const rec = c.trace.spans().find((s) => s.lane === 'A' && s.kind === 'event')!;
    expect(c.trace.records.find((r) => r.id === wait.op)?.after).toBe(rec.op);
    const flows = c.trace.toChromeTrace().traceEvents.filter((e) => e.cat === 'wait' && e.ph !== 'X');
    expect(flows.map((e) => e.ph)).toEqual(['s', 'f']);
    expect(flows[0]!.id).toBe(flows[1]!.id);
    c.destroy();
  });

  it('an op that never ran (skipped behind a failure) has no span, not one from time 0', async () => {
    const c = await gpuContext({ trace: true });
    const s = c.createStream({ label: 'skips' });
    const a = c.alloc(64), b = c.alloc(64);
    s.hostFn(() => {
      throw new Error('boom');
    });
    s.copy(a, b);
    s.hostFn(() => undefined);
    await s.synchronize().catch(() => undefined);
    const spans = c.trace.spans().filter((x) => x.lane === 'skips' || x.name.startsWith('skips'));
    expect(spans.every((x) => x.start > 0), JSON.stringify(spans)).toBe(true);
    expect(c.trace.records.filter((r) => r.failed).length).toBe(3);
    c.destroy();
  });
});

describe('trace.gpuTimestamps', () => {
  it('times the GPU ops enqueued while it is on, and only those, in submit order without overlap', async () => {
    const c = await gpuContext({ trace: true });
    try {
      const s = c.createStream({ label: 'timed' });
      const a = c.alloc(4096), b = c.alloc(4096);
      s.copy(a, b); // before: estimated
      await s.synchronize();
      c.trace.gpuTimestamps = c.features.timestampQuery;
      const timedIds = [s.copy(b, a), s.copy(a, b), s.copy(b, a)];
      await s.synchronize();
      c.trace.gpuTimestamps = false;
      s.copy(a, b); // after: estimated
      await s.synchronize();
      const byId = new Map(c.trace.records.map((r) => [r.id, r]));
      if (!c.features.timestampQuery) return; // nothing to time: the toggle is a no-op
      const timed = timedIds.map((id) => byId.get(id)!);
      for (const r of timed) expect(r.gpuBegin !== null && r.gpuEnd !== null, `op ${r.id}`).toBe(true);
      for (let i = 1; i < timed.length; i++) expect(timed[i]!.gpuBegin! >= timed[i - 1]!.gpuEnd!, 'one queue: no overlap').toBe(true);
      const untimed = c.trace.records.filter((r) => !timedIds.includes(r.id) && r.kind === 'copy');
      expect(untimed).toHaveLength(2);
      for (const r of untimed) expect(r.gpuBegin).toBeNull();
      expect(c.errors).toEqual([]);
    } finally {
      c.destroy();
    }
  });

  it('a submit WebGPU rejected gives its ops no GPU times, and the good spans stay inside their host windows (its stale read-back moved every span)', async () => {
    const c = await gpuContext({ trace: { gpuTimestamps: true }, label: 'rejected' });
    try {
      if (!c.features.timestampQuery) return;
      const s = c.createStream({ label: 'S' });
      const [a, b] = [c.alloc(4096), c.alloc(4096)];
      const window = async (f: () => number): Promise<{ id: number; t0: number; t1: number }> => {
        const t0 = performance.now(), id = f();
        await s.synchronize();
        return { id, t0, t1: performance.now() };
      };
      const first = await window(() => s.copy(a, b));
      const bad = s.encode((enc) => enc.copyBufferToBuffer(a.buffer, 0, a.buffer, 0, 4), { label: 'bad' }); // WebGPU rejects a copy onto itself
      await s.synchronize().catch(() => undefined);
      const last = await window(() => s.copy(b, a));
      const rec = new Map(c.trace.records.map((r) => [r.id, r]));
      expect(rec.get(bad)!.gpuBegin, 'no GPU time for the rejected op').toBeNull();
      const spans = new Map(c.trace.spans().filter((x) => x.lane !== 'host').map((x) => [x.op, x]));
      for (const w of [first, last]) {
        const sp = spans.get(w.id)!;
        expect(sp.estimated, `op ${w.id} timed`).toBeUndefined();
        expect(sp.start >= w.t0 - 0.5 && sp.end <= w.t1 + 0.5, `op ${w.id}: span [${sp.start}, ${sp.end}] inside its host window [${w.t0}, ${w.t1}]`).toBe(true);
      }
      c.errors.length = 0; // the rejected copy's message
    } finally {
      c.destroy();
    }
  });
});
