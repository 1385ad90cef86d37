/**
 * P4: weight streaming through two device slots (as examples/stream-weights.ts), with each
 * layer's compute at least its load, against its one-queue bound from the same run; raw
 * hand-written WebGPU streams the same weights through two slots in the same order beside it; the
 * weights' device memory is exactly two slots.
 *
 * Layer i: tmp = act + w_i (vectorAdd), act' = computeIntensive(tmp) (its iterations make compute
 * about 1.25x the load). Loading a layer is the host writing it into a pinned upload buffer (on a
 * discrete GPU that write is the transfer) plus the GPU copy into the slot. Four pinned buffers,
 * two slots, a load stream and a compute stream, events both ways.
 *
 * The one-queue bound (see {@link oneQueueBound}): WebGPU gives the device one queue, and on it
 * copies and kernels run one after another (scenario 1, `overlap-probe`, measures that), so
 * streaming cannot end before the GPU has done every copy and every kernel, and that cannot start
 * before the host filled the first layer; nor before the host filled every layer (one thread) and
 * the GPU then copied and computed the last one.
 */
import { SlotRing, type Context, type DeviceBuffer, type PinnedBuffer, type Stream } from 'webgpu-streams';
import { COMPUTE_INTENSIVE_TOL, computeIntensiveStep } from '../reference';
import type { Check } from '../scenarios/common';
import { checkBytes, grid } from '../scenarios/common';
import {
  MiB,
  interleaved,
  median,
  metric,
  num,
  randomF32,
  round,
  sampleIndices,
  seedOf,
  sizeText,
  BOUND_FRACTION,
  RAW_SLACK,
  boundRule,
  boundRuleText,
  finiteOrNull,
  pairedRatio,
  pairedRatioInterval,
  ratioText,
  type BoundedRow,
  type PerfGroup,
  type PerfGroupResult,
  type PerfOptions,
} from './common';
import { benchKernels, wgsl } from '../kernels/index';

interface Params {
  elements: number;
  layers: number;
  repeats: number;
  /** Compute per layer over load per layer that the iterations aim at. */
  computeOverLoad: number;
  maxIterations: number;
}
const FULL: Params = { elements: 4 * MiB, layers: 16, repeats: 5, computeOverLoad: 1.25, maxIterations: 1 << 16 };
const QUICK: Params = { elements: 16 * 1024, layers: 6, repeats: 2, computeOverLoad: 1.25, maxIterations: 512 };

/** The old target (time / max(loads, compute)): judges P4 where the bound cannot be measured. */
export const TARGET_P4 = 1.1;
/** Pinned upload buffers in the streaming design (and in the loads-alone run it is compared with). */
const PINS = 4;

/** What the one-queue bound is made of, all measured in the same run (ms). */
export interface OneQueueParts {
  /** The kernels of all layers (vector add and compute), on resident weights, GPU timestamps. */
  computeMs: number;
  /** The GPU copies of all layers out of pinned staging into the slots, each timed on the GPU. */
  copiesMs: number;
  /** The host's fill of every layer into pinned staging, inside the timed streaming runs. */
  hostFillMs: number;
  /** The host's fill of the first layer, inside the timed streaming runs. */
  firstFillMs: number;
  layers: number;
}

/**
 * The least time two-slot streaming can take on one queue: max(first fill + GPU serial, host fills
 * + the last layer's copy and kernels), GPU serial = every kernel + every copy. Copies and kernels
 * do not overlap on one queue, and the GPU cannot start before the first layer is in staging; the
 * host fills the layers one after another, and the last layer's copy and kernels follow its fill.
 */
export function oneQueueBound(x: OneQueueParts): { ms: number; gpuSerialMs: number; gpuSide: number; hostSide: number } {
  const gpuSerialMs = x.computeMs + x.copiesMs;
  const gpuSide = x.firstFillMs + gpuSerialMs;
  const hostSide = x.hostFillMs + gpuSerialMs / x.layers;
  return { ms: Math.max(gpuSide, hostSide), gpuSerialMs, gpuSide, hostSide };
}

/**
 * The same streaming by hand on raw WebGPU, as a careful user writes it on one queue: the same
 * four pinned (MAP_WRITE | COPY_SRC) staging buffers in turn, the same two slots and activation
 * buffers (the library's, used as plain GPUBuffers), per layer: wait for the staging buffer's map,
 * fill it, unmap, one command buffer with the copy into slot i % 2 and one compute pass with the
 * vector add and the compute kernel, submit, map the staging buffer again at once. The queue keeps
 * the order, so no events are needed: layer i + 2's copy into a slot follows layer i's kernels.
 */
class RawStreaming {
  readonly pins: GPUBuffer[];
  readonly #maps: (Promise<void> | null)[];
  readonly #va: GPUComputePipeline;
  readonly #ci: GPUComputePipeline;
  readonly #binds: { va: GPUBindGroup; ci: GPUBindGroup }[];
  /** The host's fill in the last run: all layers, and the first (ms). */
  stats = { fill: 0, firstFill: 0 };

  constructor(
    readonly device: GPUDevice,
    readonly slots: GPUBuffer[],
    act: GPUBuffer[],
    readonly bytes: number,
    pins: number,
    readonly iterations: number,
    vectorAddWgsl: string,
    readonly gAdd: [number, number],
    readonly gCi: [number, number],
  ) {
    this.pins = Array.from({ length: pins }, (_, i) =>
      device.createBuffer({ size: bytes, usage: GPUBufferUsage.MAP_WRITE | GPUBufferUsage.COPY_SRC, mappedAtCreation: true, label: `p4.raw.pin[${i}]` }),
    );
    this.#maps = this.pins.map(() => null);
    this.#va = device.createComputePipeline({ layout: 'auto', compute: { module: device.createShaderModule({ code: vectorAddWgsl, label: 'p4.raw.vectorAdd' }), entryPoint: 'main' }, label: 'p4.raw.vectorAdd' });
    this.#ci = device.createComputePipeline({
      layout: 'auto',
      compute: { module: device.createShaderModule({ code: wgsl.computeIntensive, label: 'p4.raw.ci' }), entryPoint: 'main', constants: { iterations } },
      label: 'p4.raw.ci',
    });
    const bind = (pl: GPUComputePipeline, bufs: GPUBuffer[]): GPUBindGroup =>
      device.createBindGroup({ layout: pl.getBindGroupLayout(0), entries: bufs.map((buffer, binding) => ({ binding, resource: { buffer } })) });
    // Layer i uses slot s = i % 2: tmp = act[s] + slot[s]; act[1 - s] = ci(tmp) (as layerOps).
    this.#binds = [0, 1].map((s) => ({ va: bind(this.#va, [act[s]!, slots[s]!, act[2]!]), ci: bind(this.#ci, [act[2]!, act[1 - s]!]) }));
  }

  /** Every staging buffer mapped (before a timed run, as the library's pinned buffers are). */
  async ready(): Promise<void> {
    for (let p = 0; p < this.pins.length; p++) {
      if (this.#maps[p]) await this.#maps[p];
      this.#maps[p] = null;
    }
  }

  /** All layers through the two slots; wall ms until the last submit completed. */
  async run(weights: Float32Array[]): Promise<number> {
    const device = this.device;
    const np = this.pins.length;
    let fill = 0;
    let firstFill = 0;
    const t0 = performance.now();
    for (let i = 0; i < weights.length; i++) {
      const p = i % np;
      const s = i % 2;
      const pin = this.pins[p]!;
      if (this.#maps[p]) {
        await this.#maps[p];
        this.#maps[p] = null;
      }
      const a = performance.now();
      new Float32Array(pin.getMappedRange()).set(weights[i]!);
      const f = performance.now() - a;
      fill += f;
      if (i === 0) firstFill = f;
      pin.unmap();
      const enc = device.createCommandEncoder();
      enc.copyBufferToBuffer(pin, 0, this.slots[s]!, 0, this.bytes);
      const pass = enc.beginComputePass();
      pass.setPipeline(this.#va);
      pass.setBindGroup(0, this.#binds[s]!.va);
      pass.dispatchWorkgroups(this.gAdd[0], this.gAdd[1]);
      pass.setPipeline(this.#ci);
      pass.setBindGroup(0, this.#binds[s]!.ci);
      pass.dispatchWorkgroups(this.gCi[0], this.gCi[1]);
      pass.end();
      device.queue.submit([enc.finish()]);
      this.#maps[p] = pin.mapAsync(GPUMapMode.WRITE);
    }
    await device.queue.onSubmittedWorkDone();
    const ms = performance.now() - t0;
    this.stats = { fill, firstFill };
    return ms;
  }

  async destroy(): Promise<void> {
    for (const m of this.#maps) await m?.catch(() => undefined);
    for (const b of this.pins) b.destroy();
  }
}

export const weightsGroup: PerfGroup = {
  id: 'weights',
  title: 'P4: weight streaming with two slots',
  metrics: ['P4'],
  async run(ctx: Context, opts: PerfOptions): Promise<PerfGroupResult> {
    const p = opts.quick ? QUICK : FULL;
    const seed = seedOf(opts);
    const progress = opts.progress ?? (() => {});
    const n = p.elements;
    const L = p.layers;
    const bytes = n * 4;
    progress('P4: random weights', 0);
    const input = randomF32(seed, n, -1, 1);
    const wAll = randomF32(seed ^ 0x27d4eb2d, n + 7 * L, -0.25, 0.25);
    const weights = Array.from({ length: L }, (_, i) => wAll.subarray(7 * i, 7 * i + n));

    const memBase = ctx.memory.current;
    const slots: DeviceBuffer[] = [ctx.alloc(bytes, { label: 'weights slot 0' }), ctx.alloc(bytes, { label: 'weights slot 1' })];
    const slotBytes = ctx.memory.current - memBase;
    const act: DeviceBuffer[] = [ctx.alloc(bytes, { label: 'act[0]' }), ctx.alloc(bytes, { label: 'act[1]' }), ctx.alloc(bytes, { label: 'tmp' })];
    // Pinned staging (host side of a load): a ring of PINS buffers, so the host fills the next
    // layers while the GPU still copies out of earlier ones. Device memory stays two slots.
    const pins: PinnedBuffer[] = Array.from({ length: PINS }, (_, i) => ctx.allocHost(bytes, 'upload', { label: `weights pinned ${i}` }));
    const load = ctx.createStream({ label: 'load', nonBlocking: true });
    const compute = ctx.createStream({ label: 'compute', nonBlocking: true });
    // Slot i % 2 is refilled once layer i - 2 read it (events between the two streams).
    const ring = new SlotRing(ctx, { buffers: slots, producer: load, consumer: compute });
    const ts = ctx.features.timestampQuery;
    const c0 = ctx.createEvent({ timing: true, label: 'compute t0' });
    const c1 = ctx.createEvent({ timing: true, label: 'compute t1' });
    // One pair per layer: each GPU copy timed alone (copiesOnly).
    const copyEvents = ts ? Array.from({ length: L }, (_, i) => [ctx.createEvent({ timing: true, label: `copy ${i} t0` }), ctx.createEvent({ timing: true, label: `copy ${i} t1` })] as const) : [];
    const va = ctx.kernels.vectorAdd;
    const ci = benchKernels(ctx).computeIntensive;
    const gAdd = grid(n, 'vectorAdd');
    const gCi = grid(n, 'computeIntensive');
    const checks: Check[] = [];
    const out = new Float32Array(n);
    let iterations = 1;
    /** The host's fill inside the last streaming run: all layers, and the first (ms). */
    let streamFill = { fill: 0, firstFill: 0 };
    let raw: RawStreaming | null = null;
    /** Raw WebGPU's streaming, rebuilt when the iterations change (its pipeline bakes them in). */
    const rawAt = async (it: number): Promise<RawStreaming> => {
      if (raw?.iterations === it) return raw;
      await raw?.destroy();
      raw = new RawStreaming(ctx.device, slots.map((b) => b.buffer), act.map((b) => b.buffer), bytes, PINS, it, va.wgsl, gAdd, gCi);
      return raw;
    };

    const layerOps = (s: Stream, i: number, slot: DeviceBuffer): void => {
      s.launch(va, { bindings: [act[i % 2]!, slot, act[2]!], workgroups: gAdd });
      s.launch(ci, { bindings: [act[2]!, act[(i + 1) % 2]!], workgroups: gCi, constants: { iterations } });
    };
    const resetInput = async (): Promise<void> => {
      compute.upload(input, act[0]!);
      await compute.synchronize();
    };
    const readOut = async (): Promise<Float32Array> => {
      compute.download(act[L % 2]!, out);
      await compute.synchronize();
      return out;
    };

    /** Loads alone: every layer through the two pinned buffers into the two slots. */
    const loadOnly = async (np = PINS): Promise<number> => {
      for (const pin of pins) await pin.ready();
      await ctx.synchronize();
      const t0 = performance.now();
      for (let i = 0; i < L; i++) {
        const pin = pins[i % np]!;
        if (!pin.isHostOwned) await pin.ready();
        pin.f32.set(weights[i]!);
        load.upload(pin, slots[i % 2]!);
        ctx.flush();
      }
      await load.synchronize();
      return performance.now() - t0;
    };
    /**
     * The GPU copies alone: every layer's copy out of pinned staging into its slot, each timed on
     * the GPU by a pair of timing events (the host's fills between them are not counted). Sum, ms.
     */
    const copiesOnly = async (): Promise<number> => {
      for (const pin of pins) await pin.ready();
      await ctx.synchronize();
      for (let i = 0; i < L; i++) {
        const pin = pins[i % PINS]!;
        if (!pin.isHostOwned) await pin.ready();
        pin.f32.set(weights[i]!);
        load.record(copyEvents[i]![0]);
        load.upload(pin, slots[i % 2]!);
        load.record(copyEvents[i]![1]);
        ctx.flush();
      }
      await load.synchronize();
      return copyEvents.reduce((sum, [e0, e1]) => sum + e0.elapsedTime(e1), 0);
    };
    /** Compute alone: L layers on resident weights (slots hold layers 0 and 1), no loads. */
    const computeOnly = async (): Promise<number> => {
      compute.upload(weights[0]!, slots[0]!);
      compute.upload(weights[1]!, slots[1]!);
      await resetInput();
      const t0 = performance.now();
      if (ts) compute.record(c0);
      for (let i = 0; i < L; i++) layerOps(compute, i, slots[i % 2]!);
      if (ts) compute.record(c1);
      await compute.synchronize();
      const wall = performance.now() - t0;
      return ts ? c0.elapsedTime(c1) : wall;
    };
    /** The real thing: load layer i+1 while layer i computes. */
    /** Through `np` pinned buffers (the host fills up to np - 1 layers ahead of the GPU). */
    const streaming = async (np = PINS): Promise<number> => {
      await resetInput();
      for (const pin of pins) await pin.ready();
      let fill = 0;
      let firstFill = 0;
      const t0 = performance.now();
      for (let i = 0; i < L; i++) {
        const pin = pins[i % np]!;
        if (!pin.isHostOwned) await pin.ready(); // its upload of layer i-np is done
        const a = performance.now();
        pin.f32.set(weights[i]!);
        const f = performance.now() - a;
        fill += f;
        if (i === 0) firstFill = f;
        ring.fill((slot) => load.upload(pin, slot));
        ring.use((slot) => layerOps(compute, i, slot));
        ctx.flush();
      }
      await compute.synchronize();
      const ms = performance.now() - t0;
      streamFill = { fill, firstFill };
      return ms;
    };

    // Reference for sampled elements: x = ci(x + w_i) per layer, with w_i per layer or alternating (compute-only).
    const idx = (): number[] => sampleIndices(n, 128, Math.max(128, Math.min(2048, Math.floor(2e7 / (L * iterations)))));
    const checkChain = (what: string, got: Float32Array, weightOf: (i: number) => Float32Array): Check => {
      let bad = 0;
      let first = '';
      const ix = idx();
      for (const j of ix) {
        let x = input[j]!;
        for (let i = 0; i < L; i++) x = computeIntensiveStep(Math.fround(x + weightOf(i)[j]!), iterations);
        const g = got[j]!;
        if (!(g === x || Math.abs(g - x) <= Math.max(COMPUTE_INTENSIVE_TOL.abs, COMPUTE_INTENSIVE_TOL.rel * Math.abs(x)))) {
          if (!bad) first = `index ${j}: got ${g}, want ${x}`;
          bad++;
        }
      }
      const detail = `${what}: ${L} layers of ci(${iterations})(x + w) over ${n} floats (${ix.length} sampled)`;
      return bad ? { ok: false, detail, mismatch: `${what}: ${first} [${bad} of ${ix.length} differ]` } : { ok: true, detail };
    };

    try {
      // --- calibrate: compute per layer ~ computeOverLoad x load per layer.
      progress('P4: calibrating compute against load', 0.05);
      await loadOnly();
      const loadMs = Math.min(await loadOnly(), await loadOnly());
      iterations = 1;
      await computeOnly();
      const c1ms = Math.min(await computeOnly(), await computeOnly());
      const want = loadMs * p.computeOverLoad;
      if (c1ms < want) {
        // (Where even 1 iteration computes longer than the loads take, there is nothing to tune.)
        const probe = opts.quick ? 16 : 256;
        iterations = probe;
        await computeOnly();
        const c2ms = Math.min(await computeOnly(), await computeOnly());
        const perIt = Math.max(1e-9, (c2ms - c1ms) / (probe - 1));
        iterations = Math.max(1, Math.min(p.maxIterations, Math.round((want - (c1ms - perIt)) / perIt)));
        await computeOnly(); // compile
        const cNow = await computeOnly();
        if (cNow < loadMs * 1.05 && iterations < p.maxIterations) {
          iterations = Math.max(1, Math.min(p.maxIterations, Math.round((iterations * want) / Math.max(cNow, 1e-6))));
          await computeOnly();
        }
      }

      // --- measured, interleaved. The metric needs compute >= load: where the measured compute
      // came out below the measured loads (calibration runs are short and the loads noisy), raise
      // the iterations and measure again (at most twice more).
      let peakGrowth = 0;
      const checksBefore = checks.length;
      const recalibrations: string[] = [];
      // The host's fills inside the timed streaming runs, library and raw WebGPU.
      const libFills: { fill: number; firstFill: number }[] = [];
      const rawFills: { fill: number; firstFill: number }[] = [];
      const checkSlots = async (what: string): Promise<void> => {
        // The slots hold the last two layers.
        for (const i of [L - 2, L - 1]) {
          const got = new Uint8Array(bytes);
          compute.download(slots[i % 2]!, got);
          await compute.synchronize();
          checks.push(checkBytes(`${what}: slot ${i % 2} holds layer ${i}`, got, new Uint8Array(weights[i]!.slice().buffer)));
        }
      };
      const measure = (): Promise<Record<'load' | 'compute' | 'copies' | 'streaming' | 'raw' | 'load2' | 'stream2', number[]>> => interleaved(
        {
          load: async ({ last }) => {
            const ms = await loadOnly();
            if (last) await checkSlots('load-only');
            return ms;
          },
          compute: async ({ last }) => {
            const ms = await computeOnly();
            if (last) checks.push(checkChain('compute-only (weights 0,1 resident, alternating)', await readOut(), (i) => weights[i % 2]!));
            return ms;
          },
          // Timed on the GPU where the device has timestamps (else not run: no bound without them).
          copies: async ({ last }) => {
            if (!ts) return 0;
            const ms = await copiesOnly();
            if (last) await checkSlots('GPU copies alone (timing events)');
            return ms;
          },
          streaming: async ({ last, warmup }) => {
            const before = ctx.memory.current;
            ctx.memory.resetPeak();
            const ms = await streaming();
            peakGrowth = Math.max(peakGrowth, ctx.memory.peak - before);
            if (!warmup) libFills.push(streamFill);
            if (last) checks.push(checkChain('streaming (two slots)', await readOut(), (i) => weights[i]!));
            return ms;
          },
          // Right after the library's streaming in every round: the pair library / raw is taken over.
          raw: async ({ last, warmup }) => {
            const r = await rawAt(iterations);
            await resetInput();
            await r.ready();
            const ms = await r.run(weights);
            if (!warmup) rawFills.push(r.stats);
            if (last) checks.push(checkChain('raw WebGPU streaming (two slots, one queue)', await readOut(), (i) => weights[i]!));
            return ms;
          },
          // Not in the metric: the former design (two pinned buffers), same run, for comparison.
          load2: async () => loadOnly(2),
          stream2: async ({ last }) => {
            const ms = await streaming(2);
            if (last) checks.push(checkChain('streaming (2 pinned)', await readOut(), (i) => weights[i]!));
            return ms;
          },
        },
        p.repeats,
        1,
        1, // settle: each variant timed after an untimed run of itself (see interleaved)
      );
      progress(`P4: measuring (${L} layers of ${sizeText(bytes)}, ${iterations} iterations)`, 0.3);
      let samples = await measure();
      // compute(it) = a + b * it: refit b from the last two measured points (the fixed part, the
      // vector add and the memory passes, makes a proportional scaling fall short).
      let prev: [number, number] = [1, c1ms];
      for (let attempt = 0; attempt < 2 && median(samples.compute) < median(samples.load) && iterations < p.maxIterations; attempt++) {
        const was = iterations;
        const cWas = median(samples.compute);
        const want = p.computeOverLoad * median(samples.load);
        const b = (cWas - prev[1]) / Math.max(1, was - prev[0]);
        prev = [was, cWas];
        // A slope that is not positive (noise: more iterations measured faster) says nothing:
        // scale proportionally instead. Never more than 4x per step.
        const next = b > 0 ? was + (want - cWas) / b : (was * want) / Math.max(cWas, 1e-6);
        iterations = Math.min(p.maxIterations, 4 * was, Math.max(was + 1, Math.ceil(next)));
        recalibrations.push(`compute ${num(median(samples.compute))} ms < loads ${num(median(samples.load))} ms at ${was} iterations: measured again at ${iterations}`);
        checks.length = checksBefore;
        peakGrowth = 0;
        libFills.length = 0;
        rawFills.length = 0;
        progress(`P4: measuring again (${iterations} iterations)`, 0.6);
        await computeOnly(); // compile the new override value
        samples = await measure();
      }
      const tLoad = median(samples.load);
      const tCompute = median(samples.compute);
      const tStream = median(samples.streaming);
      const tRaw = median(samples.raw);
      const ideal = Math.max(tLoad, tCompute);
      const old = tStream / ideal;
      const libOverRaw = pairedRatio(samples.streaming, samples.raw);
      const libOverRawInterval = pairedRatioInterval(samples.streaming, samples.raw);
      const twoSlots = slotBytes === 2 * bytes && peakGrowth === 0;
      checks.push(
        twoSlots
          ? { ok: true, detail: `weights memory: 2 slots = ${sizeText(slotBytes)} for ${L} layers (${sizeText(L * bytes)}); no device memory allocated while streaming` }
          : { ok: false, detail: 'weights memory', mismatch: `weights memory: slots ${slotBytes} bytes (want ${2 * bytes}); device memory grew by ${peakGrowth} bytes while streaming` },
      );
      // The one-queue bound, from this run: kernels (compute alone) and copies (each timed alone)
      // on the GPU, the host's fills inside the timed streaming runs (the smaller of the library's
      // and raw WebGPU's medians: the same fills, so the bound both had to fit).
      const tCopies = ts ? median(samples.copies) : Number.NaN;
      const fillOf = (k: 'fill' | 'firstFill'): number => Math.min(median(libFills.map((f) => f[k])), median(rawFills.map((f) => f[k])));
      const noBound = !ts
        ? "the device has no 'timestamp-query': its copies and kernels cannot be timed apart from submits and completions"
        : !(tCopies > 0 && tCompute > 0)
          ? `GPU timestamps gave no positive time (copies ${num(tCopies)} ms, kernels ${num(tCompute)} ms)`
          : undefined;
      const parts: OneQueueParts = { computeMs: tCompute, copiesMs: tCopies, hostFillMs: fillOf('fill'), firstFillMs: fillOf('firstFill'), layers: L };
      const bound = noBound ? null : oneQueueBound(parts);
      const ofBound = bound ? bound.ms / tStream : null;
      const oldText = `streaming / max(loads, compute) ${ratioText(old, TARGET_P4)} ${old <= TARGET_P4 ? '<=' : '>'} ${TARGET_P4.toFixed(2)}`;
      const slotsText = twoSlots ? `weights memory ${sizeText(slotBytes)} = 2 slots` : `weights memory ${sizeText(slotBytes)}, grew ${sizeText(peakGrowth)} while streaming: not 2 slots`;
      const verdict = boundRule({
        ofBound,
        fallback: { meets: old <= TARGET_P4, text: oldText },
        libOverRaw,
        libOverRawInterval,
        also: [{ meets: twoSlots, text: slotsText }],
      });
      const row: BoundedRow = {
        label: '',
        measured: `streaming ${num(tStream)} ms`,
        bound: bound
          ? `${num(bound.ms)} ms = max(first fill ${num(parts.firstFillMs)} + GPU serial ${num(bound.gpuSerialMs)} (kernels ${num(tCompute)} + ${L} copies ${num(tCopies)}, GPU timestamps), ` +
            `host fills ${num(parts.hostFillMs)} + the last layer's copy and kernels ${num(bound.gpuSerialMs / L)})`
          : `no bound: ${noBound}`,
        ofBound: finiteOrNull(ofBound, 6),
        raw: `raw WebGPU streaming ${num(tRaw)} ms`,
        libOverRaw: finiteOrNull(libOverRaw, 6),
        libOverRawInterval,
        pass: verdict.pass,
        verdict: verdict.verdict,
      };
      return {
        metrics: [
          metric(ctx, {
            id: 'P4',
            name: 'weight streaming (2 slots): its one-queue bound / time',
            value: bound ? ofBound! : old,
            unit: bound ? 'of bound' : 'x max(load, compute)',
            target: bound
              ? `>= ${BOUND_FRACTION.toFixed(2)} of bound, <= ${RAW_SLACK.toFixed(2)}x raw, weights exactly 2 slots`
              : `<= ${TARGET_P4.toFixed(2)} x max(load, compute) (no bound), <= ${RAW_SLACK.toFixed(2)}x raw, 2 slots`,
            meets: verdict.pass,
            detail:
              `${L} layers x ${sizeText(bytes)}: streaming ${num(tStream)} ms, raw WebGPU ${num(tRaw)} ms, loads alone ${num(tLoad)} ms, compute alone ${num(tCompute)} ms (${ts ? 'GPU timestamps' : 'wall'}; ` +
              `compute/load ${num(tCompute / tLoad)}, ${iterations} iterations); ${slotsText}; ${PINS} pinned staging buffers; old target: ${oldText}` +
              (bound
                ? `; GPU copy of one layer out of pinned staging ${num(tCopies / L)} ms (${num(bytes / 1e6 / (tCopies / L))} GB/s); ` +
                  `without the first fill and the last layer, max(GPU serial, host fills) = ${num(Math.max(bound.gpuSerialMs, parts.hostFillMs))} ms, ${ratioText(Math.max(bound.gpuSerialMs, parts.hostFillMs) / tStream)} of it`
                : ''),
            figures: {
              seed,
              layers: L,
              layerBytes: bytes,
              iterations,
              streamingMs: round(tStream),
              rawMs: round(tRaw),
              libOverRawPaired: round(libOverRaw),
              loadMs: round(tLoad),
              computeMs: round(tCompute),
              computeOverLoad: round(tCompute / tLoad),
              streamingOverMaxLoadCompute: round(old),
              weightsMemoryBytes: slotBytes,
              deviceMemoryGrowthWhileStreaming: peakGrowth,
              pinnedBuffers: PINS,
              recalibrations: recalibrations.join('; ') || 'none',
              hostFillMs: round(parts.hostFillMs),
              firstFillMs: round(parts.firstFillMs),
              libHostFillMs: round(median(libFills.map((f) => f.fill))),
              rawHostFillMs: round(median(rawFills.map((f) => f.fill))),
              ...(bound
                ? {
                    gpuCopiesMs: round(tCopies),
                    gpuCopyPerLayerMs: round(tCopies / L),
                    gpuCopyGBps: round(bytes / 1e6 / (tCopies / L), 2),
                    gpuSerialMs: round(bound.gpuSerialMs),
                    boundMs: round(bound.ms),
                    boundGpuSideMs: round(bound.gpuSide),
                    boundHostSideMs: round(bound.hostSide),
                    // The plain form, max(GPU serial, host fills), without the first fill and the last layer.
                    plainBoundMs: round(Math.max(bound.gpuSerialMs, parts.hostFillMs)),
                    ofBound: round(ofBound!),
                  }
                : { noBound: noBound! }),
              diag: `not in the metric: with 2 pinned buffers (the former design) loads alone ${num(median(samples.load2))} ms, streaming ${num(median(samples.stream2))} ms = ${num(median(samples.stream2) / Math.max(median(samples.load2), tCompute))}; samples streaming ${samples.streaming.map(num).join('/')}, raw ${samples.raw.map(num).join('/')}, load ${samples.load.map(num).join('/')}, compute ${samples.compute.map(num).join('/')}${ts ? `, copies ${samples.copies.map(num).join('/')}` : ''}`,
            },
            checks,
            seed,
            bounded: { rule: boundRuleText(' and the weights in exactly 2 slots'), rows: [row] },
          }),
        ],
        tables: [],
      };
    } finally {
      await ctx.synchronize().catch(() => undefined);
      await ctx.queue.onSubmittedWorkDone().catch(() => undefined);
      // (Assigned in rawAt; TypeScript's narrowing does not see closures.)
      await (raw as RawStreaming | null)?.destroy();
      for (const b of [...slots, ...act, ...pins]) b.destroy();
      load.destroy();
      compute.destroy();
    }
  },
};
