/**
 * The overlapped pipeline designs the P1 metric searches (bench/perf/pipeline.ts): one chunk per
 * flush, several per flush, single chunks at the ends, ramped ends, rings of any depth. Each must
 * produce compute_intensive(src) for every element, run after run (slots reused), whatever the
 * grouping of chunks into submits. The hand-written raw WebGPU version (P1's platform reference
 * and P5's baseline) follows the same groups.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { checkPipelineOutput, firstSubmitEnd, LibPipeline, makePlan, RawPipeline, withBatch } from '../perf/pipeline';
import { randomF32 } from '../perf/common';
import { gpuContext } from '../../test/fixtures/gpu';

const ctx = await gpuContext({ label: 'pipeline-designs.test' });
afterAll(() => ctx.destroy());

describe('overlapped pipeline designs', () => {
  const n = 16 * 1024;
  const src = randomF32(0x5eed, n);
  const cache = new Map<number, number>();
  const designs: [number, number, number, number, boolean, boolean?][] = [
    // chunks, ring, batch, ramp levels, single chunks at the ends, a group's copies before its calls
    [8, 4, 1, 0, false],
    [8, 6, 2, 0, false],
    [8, 8, 4, 0, false],
    [8, 8, 4, 0, true],
    [16, 4, 2, 2, true],
    [16, 3, 3, 0, true],
    [4, 8, 4, 0, false],
    [8, 6, 2, 0, false, true],
    [16, 8, 4, 2, true, true],
  ];
  it('the first submit carries the first group of chunks: one with single chunks at the ends, else a batch', () => {
    expect(firstSubmitEnd(withBatch(makePlan(n, 8, 4, 3), 1, 4))).toBe(1);
    expect(firstSubmitEnd(withBatch(makePlan(n, 8, 4, 3), 2, 6))).toBe(2);
    expect(firstSubmitEnd(withBatch(makePlan(n, 8, 4, 3), 4, 8, true))).toBe(1);
    expect(firstSubmitEnd(withBatch(makePlan(n, 4, 4, 3), 4, 8))).toBe(4);
  });
  for (const [chunks, ring, batch, ramp, edges, grouped] of designs) {
    it(`${chunks} chunks, ring ${ring}, ${batch} per flush${edges ? ', single at the ends' : ''}${ramp ? `, ramp ${ramp}` : ''}${grouped ? ', copies then calls' : ''}`, async () => {
      const plan = withBatch(makePlan(n, chunks, 4, 3, ramp), batch, ring, edges, grouped);
      const pipe = new LibPipeline(ctx, plan, 'design');
      const raw = new RawPipeline(ctx, plan);
      try {
        for (let run = 0; run < 2; run++) {
          const out = new Float32Array(n).fill(Number.NaN);
          await pipe.run(src, out);
          const c = checkPipelineOutput(`run ${run}`, out, src, n, 3, cache);
          expect(c.mismatch ?? 'ok').toBe('ok');
          expect(pipe.stats.submits).toBeGreaterThan(0);
          // P1's ends: the first submit's fills and the last read-out, a part of the host's copies.
          expect(pipe.stats.ends).toBeGreaterThan(0);
          expect(pipe.stats.ends).toBeLessThanOrEqual(pipe.stats.fill + pipe.stats.read);
          out.fill(Number.NaN);
          await raw.run(src, out);
          const r = checkPipelineOutput(`raw run ${run}`, out, src, n, 3, cache);
          expect(r.mismatch ?? 'ok').toBe('ok');
        }
      } finally {
        await pipe.destroy();
        await raw.destroy();
      }
      expect(ctx.errors).toEqual([]);
    });
  }
});
