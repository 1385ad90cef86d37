/**
 * Growth of the scheduler's host cost: per-op cost (enqueue + flush, and completion) vs the
 * number of streams the ops are spread over (1..64, fixed op count) and vs the number of ops
 * queued at once (fixed streams). Expect flat per-op cost: no superlinear growth.
 */
import type { Context } from 'webgpu-streams';
import type { Check } from '../scenarios/common';
import { num, round, seedOf, verdictOf, type PerfGroup, type PerfGroupResult, type PerfOptions, type PerfTable } from './common';
import { OpBench, type OpCost } from './ops';
import { slope } from './p1-overlap';

interface Params {
  streams: number[];
  opsForStreams: number;
  queued: number[];
  streamsForQueued: number;
  repeats: number;
}
const FULL: Params = { streams: [1, 2, 4, 8, 16, 32, 64], opsForStreams: 8192, queued: [1000, 2000, 5000, 10_000, 20_000, 50_000], streamsForQueued: 4, repeats: 5 };
const QUICK: Params = { streams: [1, 4, 16, 64], opsForStreams: 1024, queued: [500, 1000, 2000, 4000], streamsForQueued: 4, repeats: 2 };

/** Growth verdict: per-op cost from the first to the last row, and the log-log slope of the total. */
function growthVerdict(what: string, xs: number[], perOp: number[], totalOf: (i: number) => number): string {
  const first = perOp[0]!;
  const last = perOp[perOp.length - 1]!;
  const s = slope(xs, xs.map((_, i) => totalOf(i)));
  const ratio = last / first;
  const kind = ratio > 2 ? 'GROWS' : ratio < 0.5 ? 'no growth (it falls: the first rows carry fixed and warm-up costs)' : 'flat';
  return `${what}: host us/op ${num(first)} -> ${num(last)} (${num(ratio)}x), ${kind}` + (Number.isNaN(s) ? '' : `; log-log slope of total host time ${num(s)}`);
}

export const schedulerGrowthGroup: PerfGroup = {
  id: 'scheduler-growth',
  title: 'Scheduler cost vs streams and queued ops',
  metrics: [],
  async run(ctx: Context, opts: PerfOptions): Promise<PerfGroupResult> {
    const p = opts.quick ? QUICK : FULL;
    const seed = seedOf(opts);
    const progress = opts.progress ?? (() => {});
    const maxOps = Math.max(p.opsForStreams, ...p.queued);
    const bench = new OpBench(ctx, maxOps, seed);
    const tables: PerfTable[] = [];
    // The varied quantity leads; the one held fixed follows it.
    const costs = (c: OpCost): number[] => [round(c.enqueueUs, 3), round(c.flushUs, 3), round(c.hostUs, 3), round(c.completeUs, 3)];
    const columns = ['enqueue us/op', 'flush us/op', 'host us/op', 'completion us/op'];
    try {
      const byStreams: OpCost[] = [];
      for (const [i, s] of p.streams.entries()) {
        progress(`growth: ${p.opsForStreams} ops over ${s} streams`, (0.5 * i) / p.streams.length);
        byStreams.push(await bench.measure(p.opsForStreams, s, p.repeats));
      }
      const checksS: Check[] = byStreams.map((c) => c.check);
      tables.push({
        id: 'growth-streams',
        title: `Scheduler host cost vs streams (${p.opsForStreams} copies of 256 B, round-robin)`,
        columns: ['streams', 'ops', ...columns],
        rows: byStreams.map((c) => [c.streams, c.ops, ...costs(c)]),
        verdict: growthVerdict(`1 -> ${p.streams[p.streams.length - 1]} streams`, p.streams, byStreams.map((c) => c.hostUs), (i) => byStreams[i]!.hostUs),
        verified: verdictOf(checksS, seed).verified,
      });
      const byOps: OpCost[] = [];
      for (const [i, n] of p.queued.entries()) {
        progress(`growth: ${n} queued ops over ${p.streamsForQueued} streams`, 0.5 + (0.5 * i) / p.queued.length);
        byOps.push(await bench.measure(n, p.streamsForQueued, p.repeats));
      }
      // Queued ops stay alive until they complete: their size is what each young-generation GC
      // copies while they wait (docs/PERFORMANCE.md). Measured once, at the most ops
      // (the heap reading has some kilobytes of noise).
      const most = p.queued[p.queued.length - 1]!;
      const retained = opts.heap ? await bench.retainedBytes(most, p.streamsForQueued, opts.heap) : null;
      const checksO: Check[] = byOps.map((c) => c.check);
      tables.push({
        id: 'growth-ops',
        title: `Scheduler host cost vs queued ops (${p.streamsForQueued} streams)`,
        columns: ['queued ops', 'streams', ...columns],
        rows: byOps.map((c) => [c.ops, c.streams, ...costs(c)]),
        verdict:
          growthVerdict(`${p.queued[0]} -> ${most} queued ops`, p.queued, byOps.map((c) => c.hostUs), (i) => byOps[i]!.hostUs * byOps[i]!.ops) +
          (retained === null ? '' : `; JS heap retained per queued op (${most} queued, after a full GC): ${Math.round(retained)} B`),
        verified: verdictOf(checksO, seed).verified,
      });
      const bad = [...checksS, ...checksO].filter((c) => !c.ok);
      if (bad.length) for (const t of tables) t.verdict += `; MISMATCH: ${bad.map((c) => c.mismatch).join('; ')}`;
      return { metrics: [], tables };
    } finally {
      await bench.destroy();
    }
  },
};
