/**
 * P1 diagnostics (not part of any metric): one overlapped pipeline run in a context that traces
 * every op with GPU timestamps, summarized per submit: how long the GPU worked, how long it sat
 * idle between submits, how long a submit waited before the GPU began it, and how long after the
 * GPU ended the host saw its download complete. Says where an overlapped run loses time.
 */
import type { Context } from '../../src/index';
import type { ContextFactory, PerfTable } from './common';
import { median, num, round } from './common';
import { LibPipeline, makePlan, planText, withBatch } from './pipeline';

export async function traceDiagnosis(
  factory: ContextFactory,
  n: number,
  iterations: number,
  designs: { chunks: number; batch: number; ring: number; ramp: number }[],
  input: Float32Array,
): Promise<PerfTable> {
  const rows: (string | number)[][] = [];
  const ctx: Context = await factory({ trace: { gpuTimestamps: true }, label: 'p1-diag' });
  const out = new Float32Array(n);
  try {
    for (const d of designs) {
      const plan = withBatch(makePlan(n, d.chunks, d.ring, iterations, d.ramp), d.batch, d.ring);
      const pipe = new LibPipeline(ctx, plan, 'diag');
      try {
        await pipe.run(input, out);
        await pipe.run(input, out);
        ctx.trace.clear();
        const wall = await pipe.run(input, out);
        await ctx.synchronize();
        const recs = ctx.trace.records;
        const byBatch = new Map<number, { tSubmit: number; begin: number; end: number; done: number }>();
        let unaligned = 0;
        for (const r of recs) {
          if (r.batch < 0 || r.gpuBegin === null || r.gpuEnd === null) continue;
          const b = ctx.scheduler.gpuToHostMs(r.gpuBegin);
          const e = ctx.scheduler.gpuToHostMs(r.gpuEnd);
          if (b === null || e === null) {
            unaligned++;
            continue;
          }
          const x = byBatch.get(r.batch) ?? { tSubmit: r.tSubmit, begin: Infinity, end: -Infinity, done: -Infinity };
          x.begin = Math.min(x.begin, b);
          x.end = Math.max(x.end, e);
          if (r.kind === 'download') x.done = Math.max(x.done, r.tDone);
          byBatch.set(r.batch, x);
        }
        const bs = [...byBatch.values()].sort((a, b) => a.begin - b.begin);
        const busy = bs.map((x) => x.end - x.begin);
        const gaps = bs.slice(1).map((x, i) => x.begin - bs[i]!.end);
        const queued = bs.map((x) => x.begin - x.tSubmit);
        const seen = bs.filter((x) => x.done > 0).map((x) => x.done - x.end);
        const first = bs[0];
        const last = bs[bs.length - 1];
        rows.push([
          planText(plan),
          round(wall, 3),
          bs.length,
          round(busy.reduce((a, b) => a + b, 0), 3),
          round(median(busy), 4),
          round(gaps.reduce((a, b) => a + Math.max(0, b), 0), 3),
          round(median(gaps), 4),
          round(median(queued), 4),
          round(median(seen), 4),
          first && last ? round((busy.reduce((a, b) => a + b, 0)) / wall, 3) : '-',
          unaligned,
        ]);
      } finally {
        await pipe.destroy();
      }
    }
  } finally {
    ctx.destroy();
  }
  return {
    id: 'p1-diag',
    title: `P1 diagnosis (not a metric): one traced overlapped run of ${num((n * 4) / 1048576)} MiB, GPU timestamps on every op (they add passes), per submit`,
    columns: ['plan', 'wall ms', 'submits', 'GPU busy ms', 'busy/submit ms', 'GPU idle between ms', 'gap median ms', 'submit->GPU begin ms', 'GPU end->host done ms', 'GPU busy / wall', 'unaligned'],
    rows,
    verdict: 'GPU idle between submits = time the GPU waited for the host; submit->GPU begin = queueing behind earlier submits; GPU end->host done = completion latency',
    verified: true,
  };
}
