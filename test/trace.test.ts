/**
 * The trace (src/trace.ts) on real WebGPU (Dawn): its op records and the scheduler's submit log
 * keep about `trace.limit` entries, however many ops run. Spans and their Chrome export are also
 * checked end to end by test/smoke.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { gpuContext } from './fixtures/gpu.js';

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
});
