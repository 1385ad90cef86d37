/**
 * P7: weights from storage. The benchmark writes a synthetic safetensors file of L layers (one f32
 * tensor each, seeded random), L times a layer is 4x the device budget the scenario sets itself (2
 * weight slots + 2 activation buffers), and streams it through two slots with `uploadFrom` while a
 * compute stream runs each layer: act' = compute_intensive(act + w_i), its iterations swept so
 * compute goes from under to over the load. Outputs are checked against a CPU reference computed
 * from values read back out of the same file.
 *
 * Figures: storage -> device throughput (loads alone) against reading the same bytes into plain
 * memory (one reader; `readers` readers) and against the host's single-thread JS memcpy; time
 * against max(loads alone, compute alone) at each sweep point, paired by round; device bytes; JS heap + external
 * memory at their peak while streaming, against the staging ring + 2 pieces.
 */
import type { Context, DeviceBuffer, RandomAccessSource } from 'webgpu-streams';
import { SafetensorsFile, SlotRing, safetensorsHeader } from 'webgpu-streams';
import { COMPUTE_INTENSIVE_TOL, computeIntensiveStep } from '../reference';
import type { Check } from '../scenarios/common';
import { grid, oneQueueBoundMs, stagingCopyMs } from '../scenarios/common';
import { rawRead, rawStagedLoads, readIntoStaging, readsUnderCopies } from './p7-baselines';
import { MiB, median, metric, minOf, num, randomF32, round, sampleIndices, seedOf, sizeText, skippedMetric, type FileProbe, type PerfGroup, type PerfGroupResult, type PerfMetric, type PerfOptions } from './common';
import { benchKernels } from '../kernels/index';
import { balanceIterations } from './balance';

interface Params {
  /** f32 elements per layer. */
  elements: number;
  layers: number;
  /** Compute per layer over load per layer at each sweep point. */
  sweep: number[];
  maxIterations: number;
  /** Readers of the raw baseline (the Node runner sizes libuv's thread pool to 16 unless UV_THREADPOOL_SIZE is set). */
  readers: number;
  /** uploadFrom's reads in flight (openFile's parallel). */
  parallel: number;
  /** Rounds of loads (library, hand-written), raw reads alone and raw reads under copies, in turn. */
  rounds: number;
  /**
   * Rounds of loads alone, compute alone and streaming at each sweep point, each streaming run
   * judged against its own round's (median of the rounds): on the shared hosts reads stall for
   * ~10 ms now and then, in any run.
   */
  streamRounds: number;
}
const FULL: Params = { elements: 16 * MiB, layers: 16, sweep: [0.5, 1, 2], maxIterations: 1 << 16, readers: 16, parallel: 16, rounds: 7, streamRounds: 5 };
const QUICK: Params = { elements: 64 * 1024, layers: 8, sweep: [1], maxIterations: 64, readers: 4, parallel: 4, rounds: 2, streamRounds: 2 };

export const TARGET_P7_RAW = 0.9;
export const TARGET_P7_MEMCPY = 2;
export const TARGET_P7_PIPELINE = 1.1;

/** ms of `fn`, best of `n`. */
const best = (n: number, fn: () => Promise<void> | void): Promise<number> =>
  minOf(n, async () => {
    const t0 = performance.now();
    await fn();
    return performance.now() - t0;
  });

/**
 * Raw reads under copies in words: the copies' rate, the reads' and their share of reads alone,
 * from the `copiedRounds` of `rounds` in which a copy ran; 'n/a' where none did.
 */
export function underCopiesText(copyGBs: number, readGBs: number, ofAlone: number, copiedRounds: number, rounds: number): string {
  if (copiedRounds === 0 || !(copyGBs > 0)) return `n/a (no copies timed: the reads ended before the first copy fell due, in all ${rounds} rounds)`;
  const some = copiedRounds < rounds ? `, ${copiedRounds} of ${rounds} rounds: the others' reads ended before the first copy fell due` : '';
  return `copied ${num(copyGBs)} GB/s, read ${num(readGBs)} GB/s = ${num(ofAlone)} of reads alone (paired by round${some})`;
}

export const storageGroup: PerfGroup = {
  id: 'storage',
  title: 'P7: weights from storage through two slots (uploadFrom)',
  metrics: ['P7', 'P7.pipeline', 'P7.memory'],
  async run(ctx: Context, opts: PerfOptions): Promise<PerfGroupResult> {
    const files = opts.files;
    if (!files) {
      const why = 'needs a runner with files (Node: npm run bench:perf)';
      return {
        metrics: [
          skippedMetric(ctx, 'P7', 'storage -> device / raw parallel reads', 'ratio', `>= ${TARGET_P7_RAW}`, why),
          skippedMetric(ctx, 'P7.pipeline', 'streaming / max(loads, compute)', 'ratio', `<= ${TARGET_P7_PIPELINE}`, why),
          skippedMetric(ctx, 'P7.memory', 'JS heap + external growth / (ring + 2 pieces)', 'ratio', '<= 1', why),
        ],
        tables: [],
      };
    }
    return run(ctx, opts, files);
  },
};

async function run(ctx: Context, opts: PerfOptions, files: FileProbe): Promise<PerfGroupResult> {
  const p = opts.quick ? QUICK : FULL;
  const seed = seedOf(opts);
  const progress = opts.progress ?? (() => {});
  const n = Math.min(p.elements, Math.floor(ctx.limits.maxStorageBufferBindingSize / 4));
  const bytes = n * 4;
  const L = p.layers;
  const checks: Check[] = [];
  const metrics: PerfMetric[] = [];

  // --- the file: a header, then L layers of seeded random f32, written a layer at a time
  progress(`P7: writing ${L} layers of ${sizeText(bytes)} to a scratch safetensors file`, 0);
  const names = Array.from({ length: L }, (_, i) => `layers.${i}.weight`);
  const header = safetensorsHeader(names.map((name) => ({ name, dtype: 'F32', shape: [n] })));
  const path = await files.write('p7-weights.safetensors', (function* () {
    yield header;
    for (let i = 0; i < L; i++) yield new Uint8Array(randomF32(seed + 1 + i, n).buffer);
  })());
  const file = await files.open(path, p.parallel);
  const ctxAllocs: DeviceBuffer[] = [];
  try {
    const st = await SafetensorsFile.open(file);
    // A ring of a whole layer: reads never wait for a copy queued behind a kernel.
    const ringBuffers = Math.ceil(bytes / Math.min(8 * MiB, bytes));
    const spans = names.map((_, i) => ({ ...st.span(st.layer(i)), ring: ringBuffers }));
    const total = bytes * L;
    const piece = Math.min(8 * MiB, bytes);

    // --- the host's rates: single-thread JS memcpy; reading the same bytes into plain memory
    progress('P7: the host: memcpy, and reading the file into plain memory', 0.1);
    const a = new Uint8Array(Math.min(total, 256 * MiB)).fill(1);
    const b = new Uint8Array(a.length);
    const memcpyMs = await best(3, () => void b.set(a));
    const memcpyGBs = a.length / memcpyMs / 1e6;
    const readOne = await best(2, () => rawRead(file, spans[0]!.offset, total, 1));
    let readPar = await best(2, () => rawRead(file, spans[0]!.offset, total, p.readers));
    const oneGBs = total / readOne / 1e6;

    // --- the pipeline's buffers: the device budget is these four
    const slots = [ctx.alloc(bytes, { label: 'p7.slot0' }), ctx.alloc(bytes, { label: 'p7.slot1' })];
    const act = [ctx.alloc(bytes, { label: 'p7.act0' }), ctx.alloc(bytes, { label: 'p7.act1' })];
    ctxAllocs.push(...slots, ...act);
    const budget = 4 * bytes;
    const load = ctx.createStream({ label: 'p7 load', nonBlocking: true });
    const compute = ctx.createStream({ label: 'p7 compute', nonBlocking: true });
    const k = benchKernels(ctx);
    const gAdd = grid(n, 'vectorAdd');
    const gCi = grid(n, 'computeIntensive');
    const input = randomF32(seed, n);

    // --- the same loads in hand-written WebGPU (reads into staging, copies out): the faster of half and all the readers in flight
    progress('P7: loads in hand-written WebGPU', 0.2);
    const rawStaging = Array.from({ length: 12 }, () => ctx.device.createBuffer({ size: piece, usage: 2 /* MAP_WRITE */ | 4 /* COPY_SRC */, mappedAtCreation: true, label: 'p7.raw staging' }));
    // Host-memory buffers the GPU copies out of, into act[1] (scratch until streaming), while raw reads run.
    const copyStaging = Array.from({ length: 8 }, () => ctx.device.createBuffer({ size: piece, usage: 2 /* MAP_WRITE */ | 4 /* COPY_SRC */, label: 'p7.copy traffic' }));
    const rawLoads = (parallel: number): Promise<void> => rawStagedLoads(ctx.device, file, spans[0]!.offset, bytes, L, slots.map((x) => x.buffer), rawStaging, parallel);
    await rawLoads(p.parallel);
    const rawStaged = new Map<number, number>();
    for (const par of new Set([Math.max(1, p.readers >> 1), p.parallel, p.readers])) rawStaged.set(par, await best(2, () => rawLoads(par)));
    const rawPar = [...rawStaged].reduce((x, y) => (y[1] < x[1] ? y : x))[0];

    // --- loads alone (every layer from the file into the slots, nothing else), hand-written
    // loads, raw reads alone, and raw reads while the GPU copies at the rate the 0.90 target
    // needs, in rounds: the host's read rate drifts, so each is compared within its round.
    progress('P7: loads alone (uploadFrom of every layer), beside hand-written loads and raw reads', 0.25);
    const loadsOnce = async (): Promise<void> => {
      for (let i = 0; i < L; i++) load.uploadFrom(file, slots[i % 2]!, spans[i]!);
      await load.synchronize();
    };
    await loadsOnce(); // warm: the staging ring, the file in the page cache
    // The file's size of plain memory, touched (a first write faults its pages in): raw reads into distinct memory.
    let whole: Uint8Array | null = new Uint8Array(total).fill(1);
    const rounds: { lib: number; hand: number; read: number; readWhole: number; staged: number; under: { readGBs: number; copyGBs: number } }[] = [];
    for (let i = 0; i < p.rounds; i++) {
      // The hand-written loads first: they write the slots in read-completion order, and the check below wants the library's.
      const hand = await best(1, () => rawLoads(rawPar));
      const lib = await best(1, loadsOnce);
      const read = await best(1, () => rawRead(file, spans[0]!.offset, total, p.readers));
      const readWhole = await best(1, () => rawRead(file, spans[0]!.offset, total, p.readers, whole!));
      const staged = await readIntoStaging(copyStaging, (ring) => rawRead(file, spans[0]!.offset, total, p.readers, undefined, ring));
      const under = await readsUnderCopies(ctx.device, file, spans[0]!.offset, total, p.readers, copyStaging, act[1]!.buffer, TARGET_P7_RAW * (total / read / 1e6));
      rounds.push({ lib, hand, read, readWhole, staged, under });
    }
    await ctx.device.queue.onSubmittedWorkDone();
    for (const b of [...rawStaging, ...copyStaging]) b.destroy();
    const loadsMs = Math.min(...rounds.map((r) => r.lib));
    const rawMs = Math.min(rawStaged.get(rawPar)!, ...rounds.map((r) => r.hand));
    whole = null;
    readPar = Math.min(readPar, ...rounds.map((r) => r.read));
    const wholeGBs = total / Math.min(...rounds.map((r) => r.readWhole)) / 1e6;
    const loadGBs = total / loadsMs / 1e6;
    const parGBs = total / readPar / 1e6;
    const rawGBs = total / rawMs / 1e6;
    // Paired within rounds: the library over the hand-written loader, and reads under copies over reads alone.
    const libOverHand = median(rounds.map((r) => r.hand / r.lib));
    // Reads under copies count only from rounds where a copy ran while reading (a short read can end before the first falls due).
    const copied = rounds.filter((r) => r.under.copyGBs > 0);
    const underOfAlone = copied.length ? median(copied.map((r) => r.under.readGBs / (total / r.read / 1e6))) : Number.NaN;
    const underReadGBs = copied.length ? median(copied.map((r) => r.under.readGBs)) : Number.NaN;
    const underCopyGBs = copied.length ? median(copied.map((r) => r.under.copyGBs)) : Number.NaN;
    // Reads into mapped staging, no GPU work: a staged upload's reads land there.
    const stagedReadGBs = median(rounds.map((r) => total / r.staged / 1e6));
    const stagedReadOfAlone = median(rounds.map((r) => r.read / r.staged));
    // The slots hold the last two layers: check them against the file.
    for (const i of [L - 2, L - 1]) {
      const got = new Float32Array(n);
      load.download(slots[i % 2]!, got);
      await load.synchronize();
      const want = randomF32(seed + 1 + i, n);
      const bad = got.findIndex((x, j) => x !== want[j]);
      checks.push(bad < 0 ? { ok: true, detail: `loads alone: slot ${i % 2} holds layer ${i} byte for byte` } : { ok: false, detail: 'loads alone', mismatch: `slot ${i % 2}, element ${bad}: ${got[bad]} != ${want[bad]}` });
    }

    // --- the GPU's copies of one layer out of pinned staging (timing events where the device has
    // timestamps): on WebGPU's one queue they add to the kernels, whatever the streams.
    const copyMs = (await stagingCopyMs(ctx, load, slots[0]!, bytes, piece)) * L;

    // --- compute alone, per iterations: the kernels of every layer on resident weights
    // Layer ops: act1 = act0 + w (vectorAdd), act0 = compute_intensive(act1): the result stays in act0.
    const layerOps = (slot: DeviceBuffer, iterations: number): void => {
      compute.launch(ctx.kernels.vectorAdd, { bindings: [act[0]!, slot, act[1]!], workgroups: gAdd });
      compute.launch(k.computeIntensive, { bindings: [act[1]!, act[0]!], workgroups: gCi, constants: { iterations } });
    };
    const computeOnce = async (iterations: number): Promise<void> => {
      for (let i = 0; i < L; i++) layerOps(slots[i % 2]!, iterations);
      await compute.synchronize();
    };
    const computeMs = async (iterations: number): Promise<number> => {
      await computeOnce(iterations);
      return best(2, () => computeOnce(iterations));
    };

    // --- streaming: the two-slot pipeline from the file
    const slotRing = new SlotRing(ctx, { buffers: slots, producer: load, consumer: compute }); // slot i % 2 refilled once layer i - 2 read it
    let peak = { heap: 0, external: 0 };
    // The file with its reads' ends noted (the first layer's last, and the last): each streaming run
    // is also judged against its own reads, as P1's runs are against their own host time (the host's
    // read rate swings from round to round, so loads alone in the same round bound it loosely).
    const firstLayerEnd = spans[0]!.offset + spans[0]!.size;
    let readEnds = { first: 0, last: 0 };
    const streamFile: RandomAccessSource = {
      size: file.size,
      parallel: file.parallel,
      label: file.label,
      read: async (into, position) => {
        const got = await file.read(into, position);
        const t = performance.now();
        if (t > readEnds.last) readEnds.last = t;
        if (position < firstLayerEnd && t > readEnds.first) readEnds.first = t;
        return got;
      },
    };
    /** One streaming run from a fresh input: ms from the first enqueue to both streams done (the input's upload is not timed), and to its first layer's and its last reads' ends. */
    const stream = async (iterations: number, sample: boolean): Promise<{ ms: number; firstReadMs: number; readsMs: number }> => {
      compute.upload(input, act[0]!);
      await compute.synchronize();
      const m0 = files.memory();
      const t0 = performance.now();
      readEnds = { first: t0, last: t0 };
      for (let i = 0; i < L; i++) {
        slotRing.fill((slot) => load.uploadFrom(streamFile, slot, spans[i]!));
        slotRing.use((slot) => layerOps(slot, iterations));
      }
      // The process's memory while it runs, every millisecond.
      const timer = sample
        ? setInterval(() => {
            const m = files.memory();
            peak = { heap: Math.max(peak.heap, m.heap - m0.heap), external: Math.max(peak.external, m.external - m0.external) };
          }, 1)
        : undefined;
      try {
        await compute.synchronize();
        await load.synchronize();
      } finally {
        clearInterval(timer);
      }
      return { ms: performance.now() - t0, firstReadMs: readEnds.first - t0, readsMs: readEnds.last - t0 };
    };
    // The baselines' garbage (mapped ranges, read arrays) collected now, not in the streaming runs.
    opts.heap?.collect();
    /** Per sweep point: medians over the rounds; `ratio`, `ofOneQueue` and `ofInRun` are medians of each round's own. */
    const rows: { ratio: number; ofOneQueue: number; ofInRun: number; iterations: number; ms: number; computeMs: number; loadsMs: number; readsMs: number; firstReadMs: number; oneQueue: number; inRun: number; probes: string }[] = [];
    // Untimed copies (no timestamps) count as nothing: the in-run bound is then lower than it is.
    const copies = Number.isFinite(copyMs) ? copyMs : 0;
    ctx.memory.resetPeak();
    for (const [si, r] of p.sweep.entries()) {
      progress(`P7: streaming at compute ${r}x the loads`, 0.4 + (0.5 * si) / p.sweep.length);
      // Iterations for compute alone = r x the loads (compute is far from linear in iterations at
      // the low end, where the layer's memory-bound part weighs most: balanceIterations searches).
      const fit = await balanceIterations(computeMs, r * loadsMs, { probeIterations: Math.min(p.maxIterations, 256), maxIterations: p.maxIterations, tolerance: 0.1 });
      const iterations = fit.iterations;
      // Warm (pipelines for these constants), and the memory sampled every millisecond: apart from
      // the timed runs, which the sampling would slow (process.memoryUsage reads /proc).
      await stream(iterations, true);
      // Loads alone, compute alone and streaming in turn: the host's read rate and the GPU's clock
      // drift, so each streaming run is judged against its parts in the same round (the median of
      // the rounds' ratios; the best of each part on its own would pair one round's lucky reads
      // with another's streaming run).
      const ls: number[] = [], cs: number[] = [], runs: Awaited<ReturnType<typeof stream>>[] = [];
      for (let i = 0; i < p.streamRounds; i++) {
        ls.push(await best(1, loadsOnce));
        cs.push(await best(1, () => computeOnce(iterations)));
        runs.push(await stream(iterations, false)); // timed inside: not the input's upload before it
      }
      const ss = runs.map((x) => x.ms);
      const inRuns = runs.map((x, i) => oneQueueBoundMs(x.readsMs, cs[i]!, copies, L, x.firstReadMs));
      const ratio = median(ss.map((x, i) => x / Math.max(ls[i]!, cs[i]!)));
      const ofOneQueue = median(ss.map((x, i) => x / oneQueueBoundMs(ls[i]!, cs[i]!, copyMs, L)));
      const ofInRun = median(ss.map((x, i) => x / inRuns[i]!));
      const [ms, lMs, cMs] = [median(ss), median(ls), median(cs)];
      const probes = fit.probes.map(([it, t]) => `${it}: ${num(t)} ms`).join(', ');
      rows.push({ ratio, ofOneQueue, ofInRun, iterations, ms, computeMs: cMs, loadsMs: lMs, readsMs: median(runs.map((x) => x.readsMs)), firstReadMs: median(runs.map((x) => x.firstReadMs)), oneQueue: oneQueueBoundMs(lMs, cMs, copyMs, L), inRun: median(inRuns), probes });
      // Check: act[0] = ci(act + w_i) per layer, from values read out of the file.
      const got = new Float32Array(n);
      compute.download(act[0]!, got);
      await compute.synchronize();
      const idx = sampleIndices(n, 64, Math.max(64, Math.min(2048, Math.floor(2e7 / (L * iterations)))));
      const w = new Uint8Array(4);
      let bad = '';
      for (const j of idx) {
        let x = input[j]!;
        for (let i = 0; i < L; i++) {
          await file.read(w, spans[i]!.offset + 4 * j);
          x = computeIntensiveStep(Math.fround(x + new Float32Array(w.buffer)[0]!), iterations);
        }
        const g = got[j]!;
        if (!(Math.abs(g - x) <= COMPUTE_INTENSIVE_TOL.abs + COMPUTE_INTENSIVE_TOL.rel * Math.abs(x))) {
          bad = `element ${j}: ${g} != ${x}`;
          break;
        }
      }
      checks.push(bad ? { ok: false, detail: 'streaming', mismatch: bad } : { ok: true, detail: `streaming at ${iterations} iterations: ${L} layers of ci(x + w_i) over ${n} floats (${idx.length} sampled, weights read back from the file)` });
    }
    // What the device held while streaming: the budget's four buffers, and anything the runtime added.
    const deviceBytes = budget + (ctx.memory.peak - ctx.memory.current);
    // The ring's pinned buffers: 8 MiB each, or for a smaller layer its size rounded up to a power of two (docs/API.md).
    const ring = ringBuffers * (piece >= 8 * MiB ? 8 * MiB : Math.max(64 * 1024, 2 ** Math.ceil(Math.log2(piece))));

    // --- metrics
    // On WebGPU's one queue the copies run between the kernels, never beside them (P4 found the
    // same): the pipeline is judged against the one-queue bound of its own reads (in-run).
    const oneQ = Number.isFinite(copyMs);
    const worst = rows.reduce((w, r) => (r.ofInRun > w.ofInRun ? r : w), rows[0]!);
    const ofRaw = loadGBs / parGBs;
    const ofMemcpy = loadGBs / memcpyGBs;
    const growth = peak.heap + peak.external;
    const allowed = ring + 2 * piece;
    // A staged upload at T reads at T while the GPU copies at T: T is at most the GPU's copy rate out
    // of staging (timed alone), and copy traffic never speeds reads up, so reads below the target's
    // rate under copies at (at most) that rate rule it out too.
    const askedGBs = TARGET_P7_RAW * parGBs;
    const copyAloneGBs = Number.isFinite(copyMs) ? total / copyMs / 1e6 : Number.NaN;
    const stagedOfReads = Math.min(Number.isFinite(underOfAlone) ? underOfAlone : Infinity, stagedReadOfAlone, Number.isFinite(copyAloneGBs) ? copyAloneGBs / parGBs : Infinity);
    const underText =
      `what a staged upload can reach here, at most: ${Number.isFinite(copyAloneGBs) ? `the GPU's copy out of staging alone, ${num(copyAloneGBs)} GB/s = ${num(copyAloneGBs / parGBs)} of reads alone; ` : ''}` +
      `raw reads (${p.readers} readers) into mapped staging, no GPU work, ${num(stagedReadGBs)} GB/s = ${num(stagedReadOfAlone)} of reads alone (uploadFrom ${num(loadGBs / stagedReadGBs)}x that); ` +
      `raw reads (${p.readers} readers) while the GPU copies staging out at ${TARGET_P7_RAW} of reads alone (asked ~${num(askedGBs)} GB/s): ${underCopiesText(underCopyGBs, underReadGBs, underOfAlone, copied.length, rounds.length)}` +
      (stagedOfReads < TARGET_P7_RAW ? `; the least of these, ${num(stagedOfReads)} of reads alone, is below ${TARGET_P7_RAW}, so no staged upload reaches ${TARGET_P7_RAW} of raw reads on this host` : `; ${TARGET_P7_RAW} is within reach of a staged upload here`);
    const fileText = `${L} layers x ${sizeText(bytes)} = ${sizeText(total)} (4x the ${sizeText(budget)} device budget: 2 slots + 2 activations)`;
    metrics.push(
      metric(ctx, {
        id: 'P7',
        name: 'storage -> device (uploadFrom, loads alone) / reading the same bytes into plain memory, parallel readers',
        value: ofRaw,
        unit: 'ratio',
        target: `>= ${TARGET_P7_RAW}, and >= ${TARGET_P7_MEMCPY}x JS memcpy`,
        meets: ofRaw >= TARGET_P7_RAW && ofMemcpy >= TARGET_P7_MEMCPY,
        detail:
          `${fileText}, file in the page cache: uploadFrom ${num(loadGBs)} GB/s (${num(loadsMs)} ms, ${p.parallel} reads in flight); raw reads into plain memory ${num(parGBs)} GB/s with ${p.readers} readers (${files.readThreads} read threads; a 2 MiB array each, reused), ${num(oneGBs)} GB/s with one, ${num(wholeGBs)} GB/s with ${p.readers} into an array of the file's size (each byte its own place, as a loader that keeps them; uploadFrom ${num(loadGBs / wholeGBs)}x that); ` +
          `JS memcpy (one thread) ${num(memcpyGBs)} GB/s: ${num(ofRaw)} of parallel reads, ${num(ofMemcpy)}x memcpy; ` +
          `hand-written WebGPU, reading into staging while the GPU copies out of it: ${num(rawGBs)} GB/s (best of ${[...rawStaged.keys()].join(' and ')} reads in flight: ${rawPar}), the library's rate / the hand-written one's ${num(libOverHand)} (paired median over ${p.rounds} rounds; the rates beside it are each one's best); ` +
          underText,
        figures: { seed, layers: L, layerBytes: bytes, loadMs: round(loadsMs), loadGBs: round(loadGBs), rawParallelGBs: round(parGBs), rawOneGBs: round(oneGBs), rawWholeGBs: round(wholeGBs), memcpyGBs: round(memcpyGBs), parallel: p.parallel, readers: p.readers, rawStagedGBs: round(rawGBs), rawStagedParallel: rawPar, libOverHandWritten: round(libOverHand), readsUnderCopiesGBs: round(underReadGBs), copiesMeanwhileGBs: round(underCopyGBs), readsUnderCopiesOfAlone: round(underOfAlone), readsIntoStagingGBs: round(stagedReadGBs), readsIntoStagingOfAlone: round(stagedReadOfAlone), stagedBoundOfReads: round(stagedOfReads), rounds: p.rounds, readThreads: files.readThreads, ofMemcpy: round(ofMemcpy) },
        checks,
        seed,
      }),
      metric(ctx, {
        id: 'P7.pipeline',
        name: 'two-slot streaming from the file / its in-run bound (its own reads of the first layer, then every kernel and copy in turn; or all its reads, then the last layer on the GPU), worst of the sweep',
        value: worst.ofInRun,
        unit: 'ratio',
        target: `<= ${TARGET_P7_PIPELINE}`,
        meets: worst.ofInRun <= TARGET_P7_PIPELINE,
        detail:
          `medians of ${p.streamRounds} rounds, each streaming run against its own reads and its round's compute: ` +
          rows.map((r) => `${r.iterations} iterations: ${num(r.ms)} ms, ${num(r.ofInRun)} of the in-run bound (${num(r.inRun)} ms; its reads ended at ${num(r.readsMs)} ms, the first layer's at ${num(r.firstReadMs)}); against loads alone in the same round (${num(r.loadsMs)} ms) and compute (${num(r.computeMs)}): ${num(r.ratio)} of their max${Number.isFinite(r.oneQueue) ? `, ${num(r.ofOneQueue)} of their one-queue bound (${num(r.oneQueue)} ms)` : ''}`).join('; ') +
          (oneQ ? `; the GPU's copies of all layers out of staging ${num(copyMs)} ms (timing events), which one queue adds to the kernels` : '; no timestamps: the copies were not timed and count as nothing in the bounds'),
        figures: {
          ...(oneQ ? { copyMs: round(copyMs) } : {}),
          ...Object.fromEntries(rows.flatMap((r, i) => [[`s${i}.iterations`, r.iterations], [`s${i}.balance`, r.probes], [`s${i}.ms`, round(r.ms)], [`s${i}.computeMs`, round(r.computeMs)], [`s${i}.loadsMs`, round(r.loadsMs)], [`s${i}.readsMs`, round(r.readsMs)], [`s${i}.firstReadMs`, round(r.firstReadMs)], [`s${i}.inRunMs`, round(r.inRun)], [`s${i}.ofInRun`, round(r.ofInRun)], [`s${i}.ratio`, round(r.ratio)], ...(Number.isFinite(r.oneQueue) ? [[`s${i}.oneQueueMs`, round(r.oneQueue)], [`s${i}.ofOneQueue`, round(r.ofOneQueue)]] : [])])),
        },
        checks,
        seed,
      }),
      metric(ctx, {
        id: 'P7.memory',
        name: 'JS heap + external memory growth while streaming / (staging ring + 2 pieces); device bytes = 2 slots + 2 activations',
        value: growth / allowed,
        unit: 'ratio',
        target: '<= 1, device exactly the budget',
        meets: growth <= allowed && deviceBytes === budget,
        detail: `peak growth while streaming ${sizeText(Math.max(0, growth))} (heap ${sizeText(Math.max(0, peak.heap))}, external ${sizeText(Math.max(0, peak.external))}) against ring ${sizeText(ring)} + 2 pieces of ${sizeText(piece)}; device ${sizeText(deviceBytes)} (${deviceBytes === budget ? 'exactly' : 'NOT'} the ${sizeText(budget)} budget) for a ${sizeText(total)} model`,
        figures: { growthBytes: growth, ringBytes: ring, pieceBytes: piece, deviceBytes, budgetBytes: budget, modelBytes: total },
        checks,
        seed,
      }),
    );
    // At quick sizes the allowance is a few hundred KiB, below the JS heap's own churn: not judged there.
    const mem = metrics[metrics.length - 1]!;
    if (opts.quick) {
      const why = `not judged at quick sizes: ring + 2 pieces is ${sizeText(allowed)}, below the JS heap's own churn (judged at full size)`;
      Object.assign(mem, { pass: false, skipped: why, detail: `${mem.detail}; ${why}` });
    }
    return { metrics, tables: [] };
  } finally {
    await ctx.synchronize().catch(() => undefined);
    for (const x of ctxAllocs) x.destroy();
    await file.close();
    await files.remove(path);
  }
}
