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
