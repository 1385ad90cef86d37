/**
 * P1: overlap efficiency of the chunked pipeline, (t_sync - t_ovl) / (t_sync - t_ideal), with
 * t_ideal = max(host work, GPU work) measured alone in the same run, from 16 MiB to 1 GiB (capped
 * by the device's buffer limits and a time budget), host and GPU work balanced by the kernel's
 * iteration count, measured against its in-run bound: the efficiency that the longer of two paths
 * through the timed overlapped runs allows: the host thread's own time (fill + read-out + WebGPU
 * calls), and the pipeline's ends around the GPU work (the fills of the first submit's chunks, all
 * GPU work, the last chunk's read-out: nothing overlaps them).
 * The same chunk plan on raw WebGPU runs interleaved beside it, twice over (two pipelines, each with
 * its own buffers): raw' / raw is this host's floor for the library / raw comparison. The metric is the worst size's
 * efficiency / in-run bound; it passes when every size reaches BOUND_FRACTION of its bound and the
 * library takes at most RAW_SLACK x raw WebGPU (median of the pairs) at every size.
 * Also the growth table: pipeline time vs data size.
 */
import type { Context, PinnedBuffer } from 'webgpu-streams';
import type { Check } from '../scenarios/common';
import { checkBytes } from '../scenarios/common';
import {
  MiB,
  interleaved,
  median,
  minOf,
  metric,
  num,
  randomF32,
  round,
  seedOf,
  sizeText,
  skippedMetric,
  BOUND_FRACTION,
  RAW_SLACK,
  boundRule,
  boundRuleText,
  pairedRatio,
  pairedRatioInterval,
  type RatioInterval,
  finiteOrNull,
  ratioText,
  intervalWords,
  type BoundedRow,
  type PerfGroup,
  type PerfGroupResult,
  type PerfOptions,
  type PerfTable,
} from './common';
import { balanceIterations, warmGpu } from './balance';
import { GcLog } from '../gc';
import { spread } from '../stats';
import { checkPipelineOutput, LibPipeline, makePlan, RawPipeline, SyncPass, withBatch, planText, type ChunkPlan, type RunStats } from './pipeline';

interface Params {
  sizes: number[];
  /** Chunk counts to try per size (the fastest is measured). */
  chunkCounts: number[];
  minChunkBytes: number;
  maxChunkBytes: number;
  ring: number;
  /** Designs tried besides one chunk per flush on `ring` slots: chunks per flush and ring depth (see ChunkPlan). */
  designs: { batch: number; ring: number; edges?: boolean; grouped?: boolean }[];
  /** The fastest plans of the sweep that run again (see finalRunsAt) before one is picked. */
  finalists: number;
  /** Levels of ramped ends to try besides uniform chunks (see makePlan). */
  ramp: number;
  repeats: number;
  /**
   * More rounds at sizes up to a bound, [bytes, repeats] in ascending bytes: small runs take
   * milliseconds, and library / raw at 2% needs more pairs than the host's noise leaves in 9.
   */
  moreRepeats: [number, number][];
  /** Iterations used to fit the kernel's cost. */
  probeIterations: number;
  maxIterations: number;
  /** Sizes that would push the group past this are skipped (and said so). */
  budgetMs: number;
  /** GPU work before the first balance (ms of wall time), so it does not time an idle-clocked GPU. */
  warmMs: number;
}

const FULL: Params = {
  sizes: [16 * MiB, 64 * MiB, 256 * MiB, 1024 * MiB],
  chunkCounts: [4, 8, 16, 32, 64],
  minChunkBytes: 256 * 1024,
  maxChunkBytes: 32 * MiB,
  ring: 4,
  designs: [
    { batch: 1, ring: 4 },
    { batch: 2, ring: 6 },
    { batch: 4, ring: 8 },
    { batch: 4, ring: 8, edges: true },
    { batch: 2, ring: 6, grouped: true },
    { batch: 4, ring: 8, edges: true, grouped: true },
  ],
  ramp: 3,
  finalists: 4,
  // 9: on shared hosts single runs of both pipelines stall by tens of ms now and then; the median skips them.
  repeats: 9,
  moreRepeats: [
    [16 * MiB, 61],
    [64 * MiB, 41],
    [256 * MiB, 31],
  ],
  probeIterations: 256,
  maxIterations: 1 << 16,
  budgetMs: 180_000,
  warmMs: 500,
};
const QUICK: Params = {
  sizes: [256 * 1024, 1 * MiB],
  chunkCounts: [4, 8, 16],
  minChunkBytes: 16 * 1024,
  maxChunkBytes: 32 * MiB,
  ring: 3,
  designs: [
    { batch: 1, ring: 3 },
    { batch: 2, ring: 4 },
    { batch: 2, ring: 4, edges: true },
    { batch: 2, ring: 4, edges: true, grouped: true },
  ],
  ramp: 2,
  finalists: 2,
  repeats: 2,
  moreRepeats: [],
  probeIterations: 8,
  maxIterations: 256,
  // Both quick sizes take about 2 s alone; the budget leaves room for a loaded CI machine, where the
  // projection from the first size could otherwise skip the second.
  budgetMs: 60_000,
  warmMs: 0,
};

/** Timed runs of each finalist plan at `bytes` (fewer for the long runs of the large sizes). */
function finalRunsAt(bytes: number): number {
  return bytes <= 64 * MiB ? 5 : bytes <= 256 * MiB ? 3 : 2;
}

/** Rounds at `bytes`: the first of `moreRepeats` whose bound it is within, else `repeats`. */
export function repeatsAt(p: Pick<Params, 'repeats' | 'moreRepeats'>, bytes: number): number {
  return p.moreRepeats.find(([upTo]) => bytes <= upTo)?.[1] ?? p.repeats;
}

/** The old target (absolute efficiency): judges a size where its bound cannot be rated. */
export const TARGET_P1 = 0.9;

/** The least share of sync that sync - ideal must exceed to rate an efficiency (the noise floor where samples agree). */
export const P1_NOISE_FRACTION = 0.03;

/**
 * The gain overlap can give, sync - ideal (ideal = max(host alone, GPU alone), medians): the
 * efficiency's denominator. Rated only where it stands clear of the run's noise: above
 * P1_NOISE_FRACTION of sync and above the spread of the sync samples and of the ideal's (see
 * stats' spread); `why` says, with the figures, why it is not.
 */
export function overlapGain(syncMs: readonly number[], hostMs: readonly number[], gpuMs: readonly number[]): { sync: number; ideal: number; noise: number; why?: string } {
  const sync = median(syncMs);
  const host = median(hostMs);
  const gpu = median(gpuMs);
  const ideal = Math.max(host, gpu);
  const noise = Math.max(P1_NOISE_FRACTION * sync, spread(syncMs), spread(host >= gpu ? hostMs : gpuMs));
  const why = gainWhy(sync, ideal, noise);
  return { sync, ideal, noise, ...(why ? { why } : {}) };
}

/** Why sync - ideal cannot be rated (undefined where it can): not positive, or within `noise` ms. */
export function gainWhy(sync: number, ideal: number, noise = P1_NOISE_FRACTION * sync): string | undefined {
  const d = sync - ideal;
  if (!(d > 0)) return `sync (${num(sync)} ms) took no longer than the ideal (${num(ideal)} ms, max of host and GPU alone): no gain from overlap to rate`;
  if (!(d > noise)) return `sync - ideal is ${num(d)} ms, within the run's noise (${num(noise)} ms: the larger of ${Math.round(P1_NOISE_FRACTION * 100)}% of sync and the spread of the sync and ideal runs): no gain from overlap to rate beyond noise`;
  return undefined;
}

/**
 * A size's efficiency against its in-run bound: eff / bound eff, with the reason where it cannot
 * be rated (sync - ideal not clear of noise: `why`, else from gainWhy; or a bound that leaves no
 * gain over sync), and the rule's verdict.
 */
export function p1Judge(r: {
  efficiency: number;
  inRunBoundEfficiency: number;
  rawEfficiency: number;
  rawInRunBoundEfficiency: number;
  libOverRaw: number;
  libOverRawInterval?: RatioInterval | null;
  sync: number;
  ideal: number;
  inRunHost: number;
  /** The in-run bound's time, ms (max of the host thread's path and first fills + GPU + last read-out). */
  inRunBound: number;
  gpu: number;
  /** Why the efficiency is not rated, where it is NaN (default: gainWhy of sync and ideal). */
  why?: string;
}): { ofBound: number; rawOfBound: number; noBound?: string; pass: boolean; verdict: string } {
  const ofBound = rated(r.efficiency, r.inRunBoundEfficiency) ? r.efficiency / r.inRunBoundEfficiency : Number.NaN;
  const rawOfBound = rated(r.rawEfficiency, r.rawInRunBoundEfficiency) ? r.rawEfficiency / r.rawInRunBoundEfficiency : Number.NaN;
  let noBound: string | undefined;
  if (Number.isNaN(r.efficiency)) noBound = r.why ?? gainWhy(r.sync, r.ideal) ?? 'no efficiency measured';
  else if (Number.isNaN(ofBound)) noBound = `the in-run bound (${num(r.inRunBound)} ms: host thread inside the overlapped runs ${num(r.inRunHost)} ms, GPU ${num(r.gpu)} ms) leaves no gain over sync (${num(r.sync)} ms) to rate`;
  const oldText = `eff ${effText(r.efficiency)} ${r.efficiency >= TARGET_P1 ? '>=' : '<'} ${TARGET_P1.toFixed(2)}`;
  // Neither its bound nor its efficiency rated: the first condition cannot be judged, and the verdict
  // says why; the second still can (library / raw), and a size that misses it falls short.
  const lr = round(r.libOverRaw, 6);
  const v = Number.isNaN(r.efficiency)
    ? Number.isFinite(lr) && lr > RAW_SLACK
      ? { pass: false, verdict: `FALL SHORT: library ${ratioText(lr, RAW_SLACK)}x raw > ${RAW_SLACK.toFixed(2)}x${r.libOverRawInterval ? ` (${intervalWords(r.libOverRawInterval)})` : ''}; the bound NOT RATED: ${noBound}` }
      : { pass: false, verdict: `NOT RATED: ${noBound}` }
    : boundRule({ ofBound, fallback: { meets: r.efficiency >= TARGET_P1, text: oldText }, libOverRaw: r.libOverRaw, libOverRawInterval: r.libOverRawInterval ?? null });
  return { ofBound, rawOfBound, ...(noBound ? { noBound } : {}), ...v };
}

/** An efficiency and its bound's can be divided: both rated, the bound's above zero. */
function rated(eff: number, boundEff: number): boolean {
  return Number.isFinite(eff) && Number.isFinite(boundEff) && boundEff > 0;
}

interface SizeRow {
  bytes: number;
  plan: ChunkPlan;
  sync: number;
  ovl: number;
  /** The same plan hand-written on raw WebGPU (no library), same run: what the platform allows. */
  raw: number;
  rawEfficiency: number;
  /**
   * Median over repeats of library time / raw WebGPU time within the same repeat (they run back to
   * back): steadier than the ratio of medians where the host's speed drifts between repeats.
   */
  libOverRaw: number;
  libOverRawInterval: RatioInterval | null;
  /** A second raw WebGPU pipeline (own buffers) over the first, paired the same way: the comparison's noise floor. */
  raw2OverRaw: number;
  raw2OverRawInterval: RatioInterval | null;
  host: number;
  gpu: number;
  ideal: number;
  efficiency: number;
  /** Why `efficiency` is NaN, and `rawEfficiency` (see overlapGain), where they are. */
  effWhy?: string;
  rawEffWhy?: string;
  /**
   * The WebGPU calls the overlapped run makes on the host thread (enqueue + flush: encoding,
   * submits, unmaps, mapAsync; median ms). The ideal max(host, GPU) does not count them, yet they
   * run on the same thread as the host work, so they add to it.
   */
  apiMs: number;
  /**
   * max(host + apiMs, GPU): an estimate of the best one host thread can do, and the efficiency it
   * would give. An estimate: the host time is the median of a separate host-only pass, so noisy.
   */
  bound: number;
  boundEfficiency: number;
  /**
   * The host thread's own time inside the timed overlapped runs (median ms): fill + read-out + the
   * WebGPU calls, library and raw WebGPU. Host copies run slower while the GPU works than alone
   * (`npm run diag:contention`: plain JS memcpy too, in bursts), so this, not the host-only pass,
   * is what the run had to fit: max(it, GPU) bounds the run, and the efficiency it allows is
   * `inRunBoundEfficiency`. A run close to its bound lost nothing to scheduling.
   */
  inRunHost: number;
  /**
   * The pipeline's ends inside the timed runs (median ms): the fills of the first submit's chunks
   * and the last chunk's read-out (RunStats.ends). No GPU work can overlap them (it has nothing to
   * do before the first submit, and the last result is read after all of it), so they + GPU bound the run too.
   */
  ends: number;
  rawEnds: number;
  /** The in-run bound's time: max(inRunHost, ends + GPU); its efficiency is `inRunBoundEfficiency`. */
  inRunBoundMs: number;
  rawInRunBoundMs: number;
  inRunBoundEfficiency: number;
  rawInRunHost: number;
  rawInRunBoundEfficiency: number;
  /** efficiency / inRunBoundEfficiency (NaN where not rated: see noBound), and raw WebGPU's against its own. */
  ofBound: number;
  rawOfBound: number;
  noBound?: string;
  /** By the rule (boundRule). */
  pass: boolean;
  verdict: string;
  speedup: number;
  syncFill: number;
  syncGpu: number;
  syncRead: number;
  gpuMethod: string;
  tuning: string;
  diag: string;
}

export const overlapGroup: PerfGroup = {
  id: 'overlap',
  title: 'P1: chunked pipeline overlap efficiency, and pipeline time vs data size',
  metrics: ['P1'],
  async run(ctx: Context, opts: PerfOptions): Promise<PerfGroupResult> {
    const p = opts.quick ? QUICK : FULL;
    const progress = opts.progress ?? (() => {});
    const seed = seedOf(opts);
    const cap = Math.min(ctx.limits.maxBufferSize, ctx.limits.maxStorageBufferBindingSize);
    const sizes = p.sizes.filter((s) => s <= cap);
    const capped = p.sizes.filter((s) => s > cap);
    if (sizes.length === 0) {
      return { metrics: [skippedMetric(ctx, 'P1', 'chunked pipeline overlap efficiency', 'ratio', `>= ${TARGET_P1.toFixed(2)}`, `maxBufferSize ${cap} is below the smallest size`)], tables: [] };
    }
    const tStart = performance.now();
    const gcLog = new GcLog();
    const maxN = sizes[sizes.length - 1]! / 4;
    progress('P1: random input', 0);
    const src = randomF32(seed, maxN);
    if (p.warmMs > 0) {
      progress('P1: warming the GPU up', 0);
      await warmGpu(ctx, p.warmMs);
    }
    const checks: Check[] = [];
    const rows: SizeRow[] = [];
    const notes: string[] = capped.length ? [`skipped ${capped.map(sizeText).join(', ')}: above maxBufferSize / maxStorageBufferBindingSize (${sizeText(cap)})`] : [];
    // Kernel cost model per element: gpu(it) = n * (a + b * it), fitted once at the first size.
    let perElemA = 0;
    let perElemB = 0;
    let lastCost = 0;
    let lastBytes = 0;
    let keptIterations = 0;

    for (const [si, bytes] of sizes.entries()) {
      const frac = si / sizes.length;
      const n = bytes / 4;
      const elapsed = performance.now() - tStart;
      const projected = lastCost * (bytes / lastBytes) * (repeatsAt(p, bytes) / repeatsAt(p, lastBytes));
      if (lastCost > 0 && elapsed + projected > p.budgetMs) {
        notes.push(`skipped ${sizes.slice(si).map(sizeText).join(', ')}: the projected time (${num(projected / 1000)} s for ${sizeText(bytes)}) would pass the ${p.budgetMs / 1000} s budget`);
        break;
      }
      const tSize = performance.now();
      const input = src.subarray(0, n);
      const outSync = new Float32Array(n);
      const outOvl = new Float32Array(n);
      const sync = new SyncPass(ctx, n, 1);
      const pipes: (LibPipeline | RawPipeline)[] = [];
      try {
        // --- balance host and GPU work (kernel iterations) with a mid-size chunk plan.
        progress(`P1 ${sizeText(bytes)}: balancing host and GPU work`, frac);
        const counts = p.chunkCounts.filter((c) => bytes / c >= p.minChunkBytes && bytes / c <= p.maxChunkBytes && c >= p.ring && n % (c * 256) === 0);
        if (counts.length === 0) counts.push(p.ring);
        const mid = counts[Math.floor(counts.length / 2)]!;
        const probe = new LibPipeline(ctx, makePlan(n, mid, p.ring, 1), 'probe');
        pipes.push(probe);
        const host = await probe.hostMs(input, outOvl);
        const gpuAt = (it: number): Promise<number> => probe.gpuMsAt(it, sync.up, sync.down);
        // The first size fits the cost model; later sizes keep its iterations (so the growth
        // table compares equal work per byte) unless host and GPU work drifted >25% apart.
        const bal = await balanceIterations(gpuAt, host, {
          probeIterations: p.probeIterations,
          maxIterations: p.maxIterations,
          ...(keptIterations ? { start: keptIterations, model: { fixedMs: perElemA * n, perIterationMs: perElemB * n } } : {}),
        });
        if (!keptIterations) {
          perElemA = bal.model.fixedMs / n;
          perElemB = bal.model.perIterationMs / n;
        }
        const iterations = bal.iterations;
        const gpu = bal.gpuMs;
        const rebalanced = keptIterations !== 0 && iterations !== keptIterations;
        if (!keptIterations) keptIterations = iterations;
        const balance = `host ${num(host)} ms, GPU ${num(gpu)} ms at ${iterations} iterations${rebalanced ? ' (rebalanced at this size)' : ''}`;
        sync.iterations = iterations;

        // --- the best chunk plan for this size: chunk counts, uniform or with ramped ends (2 runs each, the faster kept), then the finalists again.
        let best = { plan: makePlan(n, mid, p.ring, iterations), ms: Infinity };
        const tried: string[] = [];
        const sweep: { plan: ChunkPlan; ms: number }[] = [];
        for (const c of counts) {
          for (const ramp of [0, p.ramp]) {
            for (const d of p.designs) {
            const plan = withBatch(makePlan(n, c, p.ring, iterations, ramp), d.batch, d.ring, d.edges, d.grouped);
            if (ramp > 0 && plan.chunks.length === c) continue; // too small to ramp
            if (d.batch > 1 && plan.chunks.length < 2 * d.batch) continue;
            progress(`P1 ${sizeText(bytes)}: trying ${planText(plan)}`, frac);
            const pipe = new LibPipeline(ctx, plan, 'try');
            try {
              const ms = await minOf(2, () => pipe.run(input, outOvl));
              tried.push(`${planText(plan)}: ${num(ms)} ms`);
              sweep.push({ plan, ms });
            } finally {
              await pipe.destroy();
            }
            }
          }
        }
        // One warm run per plan is noisy (plans within a few % swap places run to run): the fastest
        // few run again, `finalRuns` times each after a warm-up, and the best median wins.
        sweep.sort((a, b) => a.ms - b.ms);
        const finals: string[] = [];
        for (const cand of sweep.slice(0, p.finalists)) {
          progress(`P1 ${sizeText(bytes)}: again ${planText(cand.plan)}`, frac);
          const pipe = new LibPipeline(ctx, cand.plan, 'final');
          try {
            await pipe.run(input, outOvl);
            const runs: number[] = [];
            for (let i = 0; i < finalRunsAt(bytes); i++) runs.push(await pipe.run(input, outOvl));
            const ms = median(runs);
            finals.push(`${planText(cand.plan)}: ${num(ms)} ms`);
            if (ms < best.ms) best = { plan: cand.plan, ms };
          } finally {
            await pipe.destroy();
          }
        }
        if (finals.length) tried.push(`finalists, median of ${finalRunsAt(bytes)} runs: ${finals.join(', ')}`);
        await probe.destroy();
        pipes.length = 0;
        const plan = best.plan;
        const ovl = new LibPipeline(ctx, plan, 'ovl');
        pipes.push(ovl);
        const rawP = new RawPipeline(ctx, plan);
        pipes.push(rawP);
        const rawP2 = new RawPipeline(ctx, plan);
        pipes.push(rawP2);

        // --- measured: sync, overlapped, host alone, GPU alone, interleaved.
        progress(`P1 ${sizeText(bytes)}: measuring (${planText(plan)})`, frac + 0.5 / sizes.length);
        const phases: { fill: number; gpu: number; read: number }[] = [];
        let gpuMethod = 'wall';
        const cache = new Map<number, number>();
        const label = sizeText(bytes);
        const gcSpans: Record<'ovl' | 'raw', [number, number][]> = { ovl: [], raw: [] };
        // The host's own time in each timed run, library and raw WebGPU, timed alike (see RawPipeline.stats).
        const rawStats: { fill: number; read: number; calls: number; ends: number }[] = [];
        const libTimed: RunStats[] = [];
        // A pipeline's timed run: `onTimed(t0)` records what a measured (not warm-up) run left.
        const timedRun =
          (pipe: LibPipeline | RawPipeline, what: string, onTimed?: (t0: number) => void) =>
          async ({ last, warmup }: { last: boolean; warmup: boolean }): Promise<number> => {
            if (last) outOvl.fill(Number.NaN);
            const t0 = performance.now();
            const ms = await pipe.run(input, outOvl);
            if (!warmup) onTimed?.(t0);
            if (last) checks.push(checkPipelineOutput(`${label} ${what}`, outOvl, input, n, iterations, cache));
            return ms;
          };
        // Each variant's last measured run is checked right after it (outside its timed part).
        const samples = await interleaved(
          {
            sync: async ({ last, warmup }) => {
              if (last) outSync.fill(Number.NaN);
              const r = await sync.run(input, outSync);
              if (!warmup) phases.push(r);
              if (last) checks.push(checkPipelineOutput(`${label} sync`, outSync, input, n, iterations, cache));
              return r.total;
            },
            ovl: timedRun(ovl, 'overlapped', (t0) => {
              gcSpans.ovl.push([t0, performance.now()]);
              libTimed.push(ovl.stats);
            }),
            raw: timedRun(rawP, 'raw WebGPU', (t0) => {
              gcSpans.raw.push([t0, performance.now()]);
              rawStats.push(rawP.stats);
            }),
            raw2: timedRun(rawP2, 'raw WebGPU (second pipeline)'),
            host: async ({ last }) => {
              const ms = await ovl.hostOnly(input, outOvl);
              if (last) checks.push(await checkHostOnly(ovl, input, outOvl, `${label} host-only`));
              return ms;
            },
            gpu: async ({ last }) => {
              if (last) {
                await sync.down.ready();
                sync.down.f32.fill(Number.NaN);
              }
              const r = await ovl.gpuOnly(sync.up, sync.down);
              gpuMethod = r.method;
              if (last) {
                await sync.down.ready();
                checks.push(checkPipelineOutput(`${label} gpu-only`, sync.down.f32, input, n, iterations, cache));
              }
              return r.ms;
            },
          },
          repeatsAt(p, bytes),
          1,
          1, // settle: each variant timed after an untimed run of itself (see interleaved)
          true, // rotate: each variant runs after each other one equally often
        );

        const statMed = (k: keyof RunStats): number => median(libTimed.map((x) => x[k]));
        await GcLog.settle();
        const gcText = (k: 'ovl' | 'raw'): string => `${k} ${gcLog.describe(gcSpans[k]) ?? 'not reported'}`;
        const diag =
          `samples sync ${samples.sync.map(num).join('/')}, ovl ${samples.ovl.map(num).join('/')}, raw ${samples.raw.map(num).join('/')}, raw' ${samples.raw2.map(num).join('/')}, host ${samples.host.map(num).join('/')}, gpu ${samples.gpu.map(num).join('/')}; ` +
          `GCs per timed run: ${gcText('ovl')}, ${gcText('raw')}; ` +
          `ovl host ms (median): waitDown ${num(statMed('waitDown'))}, waitUp ${num(statMed('waitUp'))}, fill ${num(statMed('fill'))}, read ${num(statMed('read'))}, enqueue ${num(statMed('enqueue'))}, flush ${num(statMed('flush'))}, waits ${statMed('waits')}, submits ${statMed('submits')}; ` +
          `fill + read-out in the timed runs (median ms): library ${num(median(libTimed.map((x) => x.fill)))} + ${num(median(libTimed.map((x) => x.read)))}, raw WebGPU ${num(median(rawStats.map((x) => x.fill)))} + ${num(median(rawStats.map((x) => x.read)))}`;
        const tOvl = median(samples.ovl);
        const tHost = median(samples.host);
        const tGpu = median(samples.gpu);
        const tRaw = median(samples.raw);
        // The denominator sync - ideal, rated only clear of the run's noise (see overlapGain).
        const gain = overlapGain(samples.sync, samples.host, samples.gpu);
        const { sync: tSync, ideal, noise } = gain;
        const effOf = (t: number): number => (gain.why ? Number.NaN : (tSync - t) / (tSync - ideal));
        // A pipeline's own efficiency: n/a also where its runs spread as far as the gain itself.
        const ownWhy = (what: string, own: number[]): string | undefined =>
          gain.why ?? (spread(own) >= tSync - ideal ? `the ${what} runs spread ${num(spread(own))} ms, as much as sync - ideal (${num(tSync - ideal)} ms): no efficiency to rate beyond noise` : undefined);
        const effWhy = ownWhy('overlapped', samples.ovl);
        const rawEffWhy = ownWhy('raw WebGPU', samples.raw);
        // The timed runs only, as inRunHost below: the same runs, so inRunHost >= apiMs run by run and in the median.
        const apiMs = median(libTimed.map((x) => x.enqueue + x.flush));
        const bound = Math.max(tHost + apiMs, tGpu);
        const inRunHost = median(libTimed.map((x) => x.fill + x.read + x.enqueue + x.flush));
        const rawInRunHost = median(rawStats.map((x) => x.fill + x.read + x.calls));
        const ends = median(libTimed.map((x) => x.ends));
        const rawEnds = median(rawStats.map((x) => x.ends));
        // The in-run bound: the efficiency at the longer path through the run, the host thread's or
        // first fills + GPU + last read-out, rated only where it leaves a gain over sync beyond noise
        // (as the efficiency itself), and never above the ideal's (1).
        const inRunBoundMs = Math.max(inRunHost, ends + tGpu);
        const rawInRunBoundMs = Math.max(rawInRunHost, rawEnds + tGpu);
        const boundEffOf = (ms: number): number => (tSync - ms > noise ? Math.min(1, effOf(ms)) : Number.NaN);
        const efficiency = effWhy ? Number.NaN : effOf(tOvl);
        const rawEfficiency = rawEffWhy ? Number.NaN : effOf(tRaw);
        const libOverRaw = pairedRatio(samples.ovl, samples.raw);
        const libOverRawInterval = pairedRatioInterval(samples.ovl, samples.raw);
        const raw2OverRaw = pairedRatio(samples.raw2, samples.raw);
        const raw2OverRawInterval = pairedRatioInterval(samples.raw2, samples.raw);
        const inRunBoundEfficiency = boundEffOf(inRunBoundMs);
        const rawInRunBoundEfficiency = boundEffOf(rawInRunBoundMs);
        const judged = p1Judge({ efficiency, inRunBoundEfficiency, rawEfficiency, rawInRunBoundEfficiency, libOverRaw, libOverRawInterval, sync: tSync, ideal, inRunHost, inRunBound: inRunBoundMs, gpu: tGpu, ...(effWhy ? { why: effWhy } : {}) });
        rows.push({
          bytes,
          plan,
          sync: tSync,
          ovl: tOvl,
          raw: tRaw,
          rawEfficiency,
          libOverRaw,
          libOverRawInterval,
          raw2OverRaw,
          raw2OverRawInterval,
          host: tHost,
          gpu: tGpu,
          ideal,
          efficiency,
          ...(effWhy ? { effWhy } : {}),
          ...(rawEffWhy ? { rawEffWhy } : {}),
          apiMs,
          bound,
          boundEfficiency: boundEffOf(bound),
          inRunHost,
          ends,
          rawEnds,
          inRunBoundMs,
          rawInRunBoundMs,
          inRunBoundEfficiency,
          rawInRunHost,
          rawInRunBoundEfficiency,
          ...judged,
          speedup: tSync / tOvl,
          syncFill: median(phases.map((x) => x.fill)),
          syncGpu: median(phases.map((x) => x.gpu)),
          syncRead: median(phases.map((x) => x.read)),
          gpuMethod,
          tuning: `${balance}; chunks tried ${tried.join(', ')}`,
          diag,
        });
      } finally {
        for (const pipe of pipes) await pipe.destroy();
        await sync.destroy();
      }
      lastCost = performance.now() - tSize;
      lastBytes = bytes;
    }

    gcLog.stop();
    const ofBounds = rows.map((r) => r.ofBound).filter((x) => Number.isFinite(x));
    // The worst size's efficiency / in-run bound; where no size has a rated bound, the worst
    // efficiency (the old figure, which then judges each size: see the rows).
    const effs = rows.map((r) => r.efficiency);
    const anyBound = ofBounds.length > 0;
    const worst = anyBound ? Math.min(...ofBounds) : effs.some((e) => Number.isNaN(e)) ? Number.NaN : Math.min(...effs);
    const figures: Record<string, number | string | boolean> = { seed };
    for (const r of rows) {
      const k = sizeText(r.bytes).replace(' ', '');
      figures[`${k}.efficiency`] = round(r.efficiency);
      figures[`${k}.ofInRunBound`] = round(r.ofBound);
      figures[`${k}.rawOfInRunBound`] = round(r.rawOfBound);
      figures[`${k}.pass`] = r.pass;
      figures[`${k}.verdict`] = r.verdict;
      if (r.noBound) figures[`${k}.noBound`] = r.noBound;
      figures[`${k}.syncMs`] = round(r.sync);
      figures[`${k}.ovlMs`] = round(r.ovl);
      figures[`${k}.rawMs`] = round(r.raw);
      figures[`${k}.rawEfficiency`] = round(r.rawEfficiency);
      figures[`${k}.libOverRawPaired`] = round(r.libOverRaw);
      figures[`${k}.raw2OverRawPaired`] = round(r.raw2OverRaw);
      for (const [name, iv] of [['libOverRaw', r.libOverRawInterval], ['raw2OverRaw', r.raw2OverRawInterval]] as const) {
        if (!iv) continue;
        figures[`${k}.${name}IntervalLo`] = round(iv.lo);
        figures[`${k}.${name}IntervalHi`] = round(iv.hi);
      }
      figures[`${k}.hostMs`] = round(r.host);
      figures[`${k}.apiMs`] = round(r.apiMs);
      figures[`${k}.hostThreadBoundEfficiency`] = round(r.boundEfficiency);
      figures[`${k}.inRunHostMs`] = round(r.inRunHost);
      figures[`${k}.inRunBoundEfficiency`] = round(r.inRunBoundEfficiency);
      figures[`${k}.rawInRunHostMs`] = round(r.rawInRunHost);
      figures[`${k}.endsMs`] = round(r.ends);
      figures[`${k}.rawEndsMs`] = round(r.rawEnds);
      figures[`${k}.inRunBoundMs`] = round(r.inRunBoundMs);
      figures[`${k}.rawInRunBoundEfficiency`] = round(r.rawInRunBoundEfficiency);
      figures[`${k}.gpuMs`] = round(r.gpu);
      figures[`${k}.chunks`] = planText(r.plan);
      figures[`${k}.iterations`] = r.plan.iterations;
      figures[`${k}.tuning`] = r.tuning;
      figures[`${k}.diag`] = r.diag;
      // The sync pass's own phases (fill of one big pinned buffer, GPU, read-out after the GPU wrote it).
      figures[`${k}.syncFillMs`] = round(r.syncFill);
      figures[`${k}.syncGpuMs`] = round(r.syncGpu);
      figures[`${k}.syncReadMs`] = round(r.syncRead);
    }
    // Where even 1 iteration makes the GPU work far longer than the host work, balance is out of reach.
    const unbalanced = rows.filter((r) => r.plan.iterations === 1 && r.gpu > 2 * r.host);
    if (unbalanced.length) {
      notes.push(
        `not balanceable at ${unbalanced.map((r) => sizeText(r.bytes)).join(', ')}: at 1 kernel iteration the GPU work is already ${unbalanced.map((r) => `${num(r.gpu / r.host)}x the host work at ${sizeText(r.bytes)}`).join(', ')} (per-invocation cost of this device)`,
      );
    }
    const boundedRows: BoundedRow[] = rows.map((r) => ({
      label: sizeText(r.bytes),
      measured: `eff ${effText(r.efficiency)} (overlapped ${num(r.ovl)} ms, sync ${num(r.sync)} ms, ideal ${num(r.ideal)} ms)`,
      bound: r.noBound
        ? `no bound: ${r.noBound}`
        : `eff ${effText(r.inRunBoundEfficiency)} at ${num(r.inRunBoundMs)} ms = max(host thread in the run ${num(r.inRunHost)}, first fills + GPU + last read-out ${num(r.ends)} + ${num(r.gpu)})`,
      ofBound: finiteOrNull(r.ofBound, 6),
      raw: `eff ${r.rawEffWhy && r.rawEffWhy !== r.effWhy ? `n/a (${r.rawEffWhy})` : effText(r.rawEfficiency)} (${num(r.raw)} ms; raw' / raw ${num(r.raw2OverRaw)}${r.raw2OverRawInterval ? `, 95% interval ${ratioText(r.raw2OverRawInterval.lo)}-${ratioText(r.raw2OverRawInterval.hi)}` : ''}; ${Number.isFinite(r.rawOfBound) ? `${ratioText(r.rawOfBound)} of its own in-run bound, eff ${effText(r.rawInRunBoundEfficiency)}` : 'its own in-run bound not rated'})`,
      libOverRaw: finiteOrNull(r.libOverRaw, 6),
      libOverRawInterval: r.libOverRawInterval,
      pass: r.pass,
      verdict: r.verdict,
    }));
    const detail =
      rows
        .map(
          (r) =>
            `${sizeText(r.bytes)}: eff ${Number.isNaN(r.efficiency) ? `n/a (${r.effWhy ?? 'not measured'})` : effText(r.efficiency)} (old target >= ${TARGET_P1.toFixed(2)}; sync ${num(r.sync)} ms, overlapped ${num(r.ovl)} ms = ${num(r.speedup)}x, ideal ${num(r.ideal)} ms = max(host ${num(r.host)}, GPU ${num(r.gpu)}); ${planText(r.plan)}; raw WebGPU, same plan: ${num(r.raw)} ms, eff ${effText(r.rawEfficiency)}; library / raw paired by repeat ${num(r.libOverRaw)} (raw' / raw ${num(r.raw2OverRaw)}: a second raw pipeline, the floor); host-thread bound: WebGPU calls ${num(r.apiMs)} ms on the host thread, max(host + calls, GPU) = ${num(r.bound)} ms, eff ${boundText(r, r.boundEfficiency)}; in-run bound, max(host thread inside the timed runs (fill + read-out + calls), first submit's fills + GPU + last read-out): library max(${num(r.inRunHost)}, ${num(r.ends)} + ${num(r.gpu)}) ms, eff ${boundText(r, r.inRunBoundEfficiency)}, raw WebGPU max(${num(r.rawInRunHost)}, ${num(r.rawEnds)} + ${num(r.gpu)}) ms, eff ${boundText(r, r.rawInRunBoundEfficiency)})`,
        )
        .join('; ') + (notes.length ? `; ${notes.join('; ')}` : '') + `; GPU work timed by ${rows[0]?.gpuMethod ?? '-'}`;
    const m = metric(ctx, {
      id: 'P1',
      name: 'chunked pipeline overlap efficiency / its in-run bound (worst size)',
      value: worst,
      unit: anyBound ? 'of bound' : Number.isNaN(worst) ? 'eff (not rated: each size says why)' : 'eff (no bound)',
      target: anyBound ? `>= ${BOUND_FRACTION.toFixed(2)} of bound, <= ${RAW_SLACK.toFixed(2)}x raw` : `>= ${TARGET_P1.toFixed(2)} eff (no bound), <= ${RAW_SLACK.toFixed(2)}x raw`,
      meets: rows.length > 0 && rows.every((r) => r.pass),
      // No size rated (a quick run on a CPU device) and none over raw: not judged, rather than short of anything.
      ...(rows.length > 0 && rows.every((r) => Number.isNaN(r.efficiency) && r.verdict.startsWith('NOT RATED')) ? { skipped: 'not rated at any size (each says why)' } : {}),
      detail,
      figures,
      checks,
      seed,
      bounded: { rule: boundRuleText(", at every size (a size whose efficiency cannot be rated is judged by library / raw alone: over it, FALL SHORT; else NOT RATED)"), rows: boundedRows },
    });
    const tables = [sizeTable(rows, m.verified, notes)];
    return { metrics: [m], tables };
  },
};

/** After `hostOnly`, the ring's upload buffers hold the last chunks of src and `out` the download buffers' contents. */
async function checkHostOnly(pipe: LibPipeline, src: Float32Array, out: Float32Array, what: string): Promise<Check> {
  const { ring, chunks } = pipe.plan;
  const C = chunks.length;
  for (let k = Math.max(0, C - ring); k < C; k++) {
    const slot = pipe.slots[k % ring]!;
    const ce = chunks[k]!;
    const off = pipe.offsets[k]!;
    await slot.down.ready(); // unmapped after the pass (LibPipeline.hostOnly); contents kept
    if (!slot.up.isHostOwned || !slot.down.isHostOwned) return { ok: false, detail: what, mismatch: `${what}: ring buffers not host-owned after the run` };
    const a = checkBytes(`${what} fill chunk ${k}`, bytesOf(slot.up).subarray(0, ce * 4), bytesOfArray(src.subarray(off, off + ce)));
    if (!a.ok) return a;
    // out's chunk equals what the download buffer held when read (it was not written since).
    const b = checkBytes(`${what} read chunk ${k}`, bytesOfArray(out.subarray(off, off + ce)), bytesOf(slot.down).subarray(0, ce * 4));
    if (!b.ok) return b;
  }
  return { ok: true, detail: `${what}: fill and read-out copies of the last ${Math.min(ring, C)} chunks byte-exact` };
}

function bytesOf(p: PinnedBuffer): Uint8Array {
  return p.bytes;
}

function bytesOfArray(a: Float32Array): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

/** Log-log slope of time vs size between the smallest and largest measured size. */
export function slope(xs: number[], ys: number[]): number {
  const n = xs.length;
  if (n < 2) return Number.NaN;
  const lx = xs.map(Math.log);
  const ly = ys.map(Math.log);
  const mx = lx.reduce((a, b) => a + b, 0) / n;
  const my = ly.reduce((a, b) => a + b, 0) / n;
  let num_ = 0;
  let den = 0;
  for (let i = 0; i < n; i++) {
    num_ += (lx[i]! - mx) * (ly[i]! - my);
    den += (lx[i]! - mx) ** 2;
  }
  return den > 0 ? num_ / den : Number.NaN;
}

/** An efficiency, or 'n/a' where sync - ideal was too small to rate one; below 0 says so. */
function effText(e: number): string {
  return Number.isNaN(e) ? 'n/a' : e < -1 ? '< -1 (slower than sync)' : e < 0 ? `${num(e)} (slower than sync)` : num(e);
}

/** A bound's efficiency; where n/a and the efficiency is rated, the bound left no gain over sync beyond noise. */
function boundText(r: Pick<SizeRow, 'effWhy'>, e: number): string {
  if (!Number.isNaN(e)) return `<= ${effText(e)}`;
  return r.effWhy ? 'n/a (not rated, as the efficiency)' : 'n/a (no gain over sync beyond noise)';
}

/** A table cell: the figure rounded, or 'n/a' where it could not be rated (the table's verdict says why). */
function cell(x: number): number | string {
  return Number.isFinite(x) ? round(x, 3) : 'n/a';
}

/** Time vs size from a log-log slope; a negative one (times fell as size grew) is noise, not a growth rate. */
export function growthText(s: number): string {
  if (Number.isNaN(s)) return 'n/a (fewer than two sizes)';
  if (s < 0) return 'n/a (times fell as size grew: noise)';
  return s > 1.1 ? `superlinear (slope ${num(s)})` : s < 0.9 ? `sublinear (slope ${num(s)}: fixed costs dominate the small sizes)` : `linear (slope ${num(s)})`;
}

function sizeTable(rows: SizeRow[], verified: boolean, notes: string[]): PerfTable {
  const xs = rows.map((r) => r.bytes);
  const sOvl = slope(xs, rows.map((r) => r.ovl));
  const sSync = slope(xs, rows.map((r) => r.sync));
  const perGiB = (ms: number, b: number): number => round((ms * (1024 * MiB)) / b, 2);
  return {
    id: 'growth-size',
    title: 'Pipeline time vs data size',
    columns: ['size', 'chunks', 'iterations', 'sync ms', 'overlapped ms', 'host ms', 'GPU ms', 'ideal ms', 'efficiency', 'WebGPU calls ms', 'host-thread bound eff', 'host in run ms', 'ends ms', 'in-run bound ms', 'in-run bound eff', 'eff / in-run bound', 'speedup', 'raw WebGPU ms', 'raw efficiency', 'library / raw, paired', "raw' / raw, paired", 'sync ms/GiB', 'overlapped ms/GiB'],
    rows: rows.map((r) => [
      sizeText(r.bytes),
      planText(r.plan),
      r.plan.iterations,
      round(r.sync, 3),
      round(r.ovl, 3),
      round(r.host, 3),
      round(r.gpu, 3),
      round(r.ideal, 3),
      cell(r.efficiency),
      round(r.apiMs, 3),
      cell(r.boundEfficiency),
      round(r.inRunHost, 3),
      round(r.ends, 3),
      round(r.inRunBoundMs, 3),
      cell(r.inRunBoundEfficiency),
      cell(r.ofBound),
      round(r.speedup, 3),
      round(r.raw, 3),
      cell(r.rawEfficiency),
      round(r.libOverRaw, 3),
      round(r.raw2OverRaw, 3),
      perGiB(r.sync, r.bytes),
      perGiB(r.ovl, r.bytes),
    ]),
    verdict:
      `time vs size (log-log fit): overlapped ${growthText(sOvl)}, sync ${growthText(sSync)}; ` +
      rows.filter((r) => r.effWhy || r.rawEffWhy).map((r) => `efficiency n/a at ${sizeText(r.bytes)}: ${r.effWhy ?? `raw WebGPU: ${r.rawEffWhy}`}; `).join('') +
      `host-thread bound eff = efficiency at max(host + WebGPU calls, GPU), the calls (enqueue + flush) sharing the thread with the host work; in-run bound eff = efficiency at the longer of two paths through the timed overlapped runs: the host thread's fill + read-out + calls (host copies run slower while the GPU works than alone), and ends (the first submit's fills + the last chunk's read-out, which nothing overlaps) + GPU; a run near it lost nothing to scheduling; n/a: not rated (an efficiency: for the reason given above; a bound: it left no gain over sync beyond noise); eff / in-run bound is P1 (>= ${BOUND_FRACTION.toFixed(2)} at every size, with library / raw <= ${RAW_SLACK.toFixed(2)})` +
      (notes.length ? `; ${notes.join('; ')}` : ''),
    verified,
  };
}
