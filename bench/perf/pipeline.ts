/**
 * The chunked pipeline behind P1 and P5: f32 data goes up, through the compute-intensive kernel
 * and back, as
 * - one synchronous pass (fill one big pinned buffer, upload, kernel, download, read out),
 * - the best overlapped pipeline the library's public API allows: a ring of `ring` slots, each a
 *   stream with its own pinned upload / download buffers and device buffers; chunk k goes to slot
 *   k % ring; before filling chunk k the host reads out chunk k - ring (the slot's previous
 *   result), so `ring - 1` chunks stay queued on the GPU while the host works, and the host never
 *   waits on a GPU step it does not need,
 * - the same pipeline in raw WebGPU (no library): the same ring, one submit per chunk, two
 *   `mapAsync` per chunk issued right after the submit, bind groups made once,
 * - its two halves measured alone: host work (fill + read-out, no GPU) and GPU work (the same
 *   copies and kernels, no host work, timed with timing events where the device has timestamps).
 */
import type { Context, DeviceBuffer, GpuEvent, PinnedBuffer, Stream } from '../../src/index';
import { builtinShaders } from '../../src/index';
import { COMPUTE_INTENSIVE_TOL, computeIntensiveStep } from '../reference';
import type { Check } from '../scenarios/common';
import { grid } from '../scenarios/common';
import { BufferUsage as Usage, MapMode as MapFlag } from '../../src/index';
import { num, sampleIndices } from './common';

/** How the data is cut. */
export interface ChunkPlan {
  /** f32 elements in all. */
  elements: number;
  /** f32 elements per chunk; divides `elements`. */
  chunkElements: number;
  /** Slots in the ring (streams, pinned buffer pairs, device buffer pairs). */
  ring: number;
  /** compute_intensive iterations per element. */
  iterations: number;
}

export function chunksOf(plan: ChunkPlan): number {
  return plan.elements / plan.chunkElements;
}

interface LibSlot {
  stream: Stream;
  up: PinnedBuffer;
  down: PinnedBuffer;
  din: DeviceBuffer;
  dout: DeviceBuffer;
  /** Chunk whose result the slot's download buffer holds (or will), -1 for none. */
  pending: number;
}

/** The overlapped pipeline on the library's public API. */
export class LibPipeline {
  readonly slots: LibSlot[] = [];
  readonly #grid: [number, number];
  #gpuStream: Stream | null = null;
  #t0: GpuEvent | null = null;
  #t1: GpuEvent | null = null;

  constructor(
    readonly ctx: Context,
    readonly plan: ChunkPlan,
    label = 'ovl',
  ) {
    if (plan.elements % plan.chunkElements !== 0) throw new RangeError(`chunk ${plan.chunkElements} does not divide ${plan.elements}`);
    const cb = plan.chunkElements * 4;
    for (let r = 0; r < plan.ring; r++) {
      this.slots.push({
        stream: ctx.createStream({ label: `${label} slot ${r}`, nonBlocking: true }),
        up: ctx.allocHost(cb, 'upload', { label: `${label}.up[${r}]` }),
        down: ctx.allocHost(cb, 'download', { label: `${label}.down[${r}]` }),
        din: ctx.alloc(cb, { label: `${label}.in[${r}]` }),
        dout: ctx.alloc(cb, { label: `${label}.out[${r}]` }),
        pending: -1,
      });
    }
    this.#grid = grid(plan.chunkElements, 'computeIntensive');
  }

  /** One overlapped pass: src -> out. Returns wall ms. */
  async run(src: Float32Array, out: Float32Array): Promise<number> {
    const { ring, chunkElements: ce, iterations } = this.plan;
    const C = chunksOf(this.plan);
    const ci = this.ctx.kernels.computeIntensive;
    const constants = { iterations };
    const workgroups = this.#grid;
    const t0 = performance.now();
    for (let k = 0; k < C; k++) {
      const slot = this.slots[k % ring]!;
      if (slot.pending >= 0) {
        await slot.down.ready();
        out.set(slot.down.f32, slot.pending * ce);
        slot.pending = -1;
      }
      if (!slot.up.isHostOwned) await slot.up.ready();
      slot.up.f32.set(src.subarray(k * ce, (k + 1) * ce));
      const s = slot.stream;
      s.upload(slot.up, slot.din);
      s.launch(ci, { bindings: [slot.din, slot.dout], workgroups, constants });
      s.download(slot.dout, slot.down);
      this.ctx.flush();
      slot.pending = k;
    }
    for (let k = Math.max(0, C - ring); k < C; k++) {
      const slot = this.slots[k % ring]!;
      await slot.down.ready();
      out.set(slot.down.f32, k * ce);
      slot.pending = -1;
    }
    return performance.now() - t0;
  }

  /** Host work alone: fill the ring's upload buffers from src and read the download buffers out, no GPU. Returns ms. */
  async hostOnly(src: Float32Array, out: Float32Array): Promise<number> {
    for (const s of this.slots) {
      await s.up.ready();
      await s.down.ready();
    }
    const { ring, chunkElements: ce } = this.plan;
    const C = chunksOf(this.plan);
    const t0 = performance.now();
    for (let k = 0; k < C; k++) {
      const slot = this.slots[k % ring]!;
      slot.up.f32.set(src.subarray(k * ce, (k + 1) * ce));
      out.set(slot.down.f32, k * ce);
    }
    return performance.now() - t0;
  }

  /**
   * GPU work alone: every chunk's upload, kernel and download, with no host work in between: the
   * chunks come from / go to whole-size pinned buffers (offsets), on one stream, all enqueued at
   * once. Timed with timing events when the device has timestamps (else wall). Returns ms.
   */
  async gpuOnly(upAll: PinnedBuffer, downAll: PinnedBuffer): Promise<{ ms: number; method: 'timestamps' | 'wall' }> {
    const ctx = this.ctx;
    const { ring, chunkElements: ce, iterations } = this.plan;
    const cb = ce * 4;
    const C = chunksOf(this.plan);
    const s = (this.#gpuStream ??= ctx.createStream({ label: 'gpu-only', nonBlocking: true }));
    const ts = ctx.features.timestampQuery;
    if (ts && !this.#t0) {
      this.#t0 = ctx.createEvent({ timing: true, label: 'gpu-only.t0' });
      this.#t1 = ctx.createEvent({ timing: true, label: 'gpu-only.t1' });
    }
    await upAll.ready();
    await downAll.ready();
    for (const slot of this.slots) await slot.stream.synchronize();
    const ci = ctx.kernels.computeIntensive;
    const t0 = performance.now();
    if (ts) s.record(this.#t0!);
    for (let k = 0; k < C; k++) {
      const slot = this.slots[k % ring]!;
      s.upload(upAll, slot.din, { srcOffset: k * cb, size: cb });
      s.launch(ci, { bindings: [slot.din, slot.dout], workgroups: this.#grid, constants: { iterations } });
      s.download(slot.dout, downAll, { dstOffset: k * cb, size: cb });
    }
    if (ts) s.record(this.#t1!);
    await s.synchronize();
    const wall = performance.now() - t0;
    return ts ? { ms: this.#t0!.elapsedTime(this.#t1!), method: 'timestamps' } : { ms: wall, method: 'wall' };
  }

  async destroy(): Promise<void> {
    await this.ctx.synchronize().catch(() => undefined);
    for (const s of this.slots) {
      s.up.destroy();
      s.down.destroy();
      s.din.destroy();
      s.dout.destroy();
      s.stream.destroy();
    }
    this.#gpuStream?.destroy();
  }
}

/** The one-pass synchronous version, with its phases timed. */
export class SyncPass {
  readonly stream: Stream;
  readonly up: PinnedBuffer;
  readonly down: PinnedBuffer;
  readonly din: DeviceBuffer;
  readonly dout: DeviceBuffer;
  readonly #grid: [number, number];

  constructor(
    readonly ctx: Context,
    readonly elements: number,
    readonly iterations: number,
  ) {
    const b = elements * 4;
    this.stream = ctx.createStream({ label: 'sync', nonBlocking: true });
    this.up = ctx.allocHost(b, 'upload', { label: 'sync.up' });
    this.down = ctx.allocHost(b, 'download', { label: 'sync.down' });
    this.din = ctx.alloc(b, { label: 'sync.in' });
    this.dout = ctx.alloc(b, { label: 'sync.out' });
    this.#grid = grid(elements, 'computeIntensive');
  }

  /** fill, upload + kernel + download, read out. Returns the phases in ms. */
  async run(src: Float32Array, out: Float32Array): Promise<{ total: number; fill: number; gpu: number; read: number }> {
    await this.up.ready();
    await this.down.ready();
    const t0 = performance.now();
    this.up.f32.set(src);
    const t1 = performance.now();
    const s = this.stream;
    s.upload(this.up, this.din);
    s.launch(this.ctx.kernels.computeIntensive, { bindings: [this.din, this.dout], workgroups: this.#grid, constants: { iterations: this.iterations } });
    s.download(this.dout, this.down);
    await s.synchronize();
    const t2 = performance.now();
    out.set(this.down.f32);
    const t3 = performance.now();
    return { total: t3 - t0, fill: t1 - t0, gpu: t2 - t1, read: t3 - t2 };
  }

  async destroy(): Promise<void> {
    await this.stream.synchronize().catch(() => undefined);
    for (const b of [this.up, this.down, this.din, this.dout]) b.destroy();
    this.stream.destroy();
  }
}

interface RawSlot {
  up: GPUBuffer;
  down: GPUBuffer;
  din: GPUBuffer;
  dout: GPUBuffer;
  bind: GPUBindGroup;
  /** mapAsync(WRITE) of `up` issued after its last submit; null while mapped (or at creation). */
  upMap: Promise<void> | null;
  downMap: Promise<void> | null;
  pending: number;
}

/** The same overlapped pipeline written against `GPUDevice` directly, as a careful user would. */
export class RawPipeline {
  readonly slots: RawSlot[] = [];
  readonly #pipeline: GPUComputePipeline;
  readonly #grid: [number, number];
  readonly device: GPUDevice;

  constructor(
    ctx: Context,
    readonly plan: ChunkPlan,
  ) {
    const device = (this.device = ctx.device);
    const module = device.createShaderModule({ code: builtinShaders.computeIntensive, label: 'raw compute_intensive' });
    this.#pipeline = device.createComputePipeline({
      layout: 'auto',
      compute: { module, entryPoint: 'main', constants: { iterations: plan.iterations } },
      label: 'raw compute_intensive',
    });
    const cb = plan.chunkElements * 4;
    for (let r = 0; r < plan.ring; r++) {
      const din = device.createBuffer({ size: cb, usage: Usage.STORAGE | Usage.COPY_DST, label: `raw.in[${r}]` });
      const dout = device.createBuffer({ size: cb, usage: Usage.STORAGE | Usage.COPY_SRC, label: `raw.out[${r}]` });
      this.slots.push({
        up: device.createBuffer({ size: cb, usage: Usage.MAP_WRITE | Usage.COPY_SRC, mappedAtCreation: true, label: `raw.up[${r}]` }),
        down: device.createBuffer({ size: cb, usage: Usage.MAP_READ | Usage.COPY_DST, label: `raw.down[${r}]` }),
        din,
        dout,
        bind: device.createBindGroup({
          layout: this.#pipeline.getBindGroupLayout(0),
          entries: [
            { binding: 0, resource: { buffer: din } },
            { binding: 1, resource: { buffer: dout } },
          ],
        }),
        upMap: null,
        downMap: null,
        pending: -1,
      });
    }
    this.#grid = grid(plan.chunkElements, 'computeIntensive');
  }

  /** One overlapped pass: src -> out. Returns wall ms. */
  async run(src: Float32Array, out: Float32Array): Promise<number> {
    const { ring, chunkElements: ce } = this.plan;
    const cb = ce * 4;
    const C = chunksOf(this.plan);
    const device = this.device;
    const [gx, gy] = this.#grid;
    const t0 = performance.now();
    const readOut = async (slot: RawSlot): Promise<void> => {
      await slot.downMap;
      slot.downMap = null;
      out.set(new Float32Array(slot.down.getMappedRange()), slot.pending * ce);
      slot.down.unmap();
      slot.pending = -1;
    };
    for (let k = 0; k < C; k++) {
      const slot = this.slots[k % ring]!;
      if (slot.pending >= 0) await readOut(slot);
      if (slot.upMap) {
        await slot.upMap;
        slot.upMap = null;
      }
      new Float32Array(slot.up.getMappedRange()).set(src.subarray(k * ce, (k + 1) * ce));
      slot.up.unmap();
      const enc = device.createCommandEncoder();
      enc.copyBufferToBuffer(slot.up, 0, slot.din, 0, cb);
      const pass = enc.beginComputePass();
      pass.setPipeline(this.#pipeline);
      pass.setBindGroup(0, slot.bind);
      pass.dispatchWorkgroups(gx, gy);
      pass.end();
      enc.copyBufferToBuffer(slot.dout, 0, slot.down, 0, cb);
      device.queue.submit([enc.finish()]);
      slot.upMap = slot.up.mapAsync(MapFlag.WRITE);
      slot.downMap = slot.down.mapAsync(MapFlag.READ);
      slot.pending = k;
    }
    for (let k = Math.max(0, C - ring); k < C; k++) await readOut(this.slots[k % ring]!);
    return performance.now() - t0;
  }

  async destroy(): Promise<void> {
    for (const s of this.slots) {
      await s.upMap?.catch(() => undefined);
      await s.downMap?.catch(() => undefined);
      for (const b of [s.up, s.down, s.din, s.dout]) b.destroy();
    }
  }
}

/**
 * Checks `out` against compute_intensive(iterations) of `src` on sampled elements (all of them
 * when that is cheap). `cache` keeps reference values across variants of the same input.
 */
export function checkPipelineOutput(what: string, out: Float32Array, src: Float32Array, n: number, iterations: number, cache: Map<number, number>): Check {
  const budget = 2e7;
  const middle = Math.max(256, Math.min(4096, Math.floor(budget / Math.max(1, iterations)) - 512));
  const idx = n * iterations <= budget ? null : sampleIndices(n, 256, middle);
  let bad = 0;
  let first = '';
  let checked = 0;
  const check = (i: number): void => {
    checked++;
    let want = cache.get(i);
    if (want === undefined) {
      want = computeIntensiveStep(src[i]!, iterations);
      cache.set(i, want);
    }
    const got = out[i]!;
    const ok = got === want || Math.abs(got - want) <= Math.max(COMPUTE_INTENSIVE_TOL.abs, COMPUTE_INTENSIVE_TOL.rel * Math.abs(want));
    if (!ok) {
      if (!bad) first = `index ${i}: got ${got}, want ${want}`;
      bad++;
    }
  };
  if (idx) for (const i of idx) check(i);
  else for (let i = 0; i < n; i++) check(i);
  const detail = `${what}: compute_intensive(${iterations}) of ${n} floats${idx ? ` (${checked} sampled)` : ''}`;
  return bad ? { ok: false, detail, mismatch: `${what}: ${first} [${bad} of ${checked} differ]` } : { ok: true, detail };
}

/**
 * Finds the kernel iterations that make the pipeline's GPU work (copies + kernels, measured
 * alone) about equal to its host work (fill + read-out, measured alone): a linear fit from two
 * probes, then one refinement at the solution.
 */
export async function balanceIterations(
  ctx: Context,
  plan: ChunkPlan,
  input: Float32Array,
  o: { probeIterations: number; maxIterations: number },
): Promise<{ iterations: number; hostMs: number; gpuMs: number; note: string }> {
  const n = plan.elements;
  const sync = new SyncPass(ctx, n, 1);
  const pipe = new LibPipeline(ctx, { ...plan, iterations: 1 }, 'balance');
  const scratch = new Float32Array(n);
  const min = async (k: number, f: () => Promise<number>): Promise<number> => {
    let b = Infinity;
    for (let i = 0; i < k; i++) b = Math.min(b, await f());
    return b;
  };
  try {
    await pipe.hostOnly(input, scratch);
    const host = await min(3, () => pipe.hostOnly(input, scratch));
    const gpuAt = async (it: number): Promise<number> => {
      (pipe.plan as ChunkPlan).iterations = it;
      await pipe.gpuOnly(sync.up, sync.down);
      return min(2, async () => (await pipe.gpuOnly(sync.up, sync.down)).ms);
    };
    const g1 = await gpuAt(1);
    const g2 = await gpuAt(o.probeIterations);
    let b = Math.max(1e-12, (g2 - g1) / (o.probeIterations - 1));
    const a = Math.max(0, g1 - b);
    const solve = (): number => Math.max(1, Math.min(o.maxIterations, Math.round((host - a) / b)));
    let iterations = solve();
    let gpu = await gpuAt(iterations);
    if (Math.abs(gpu - host) > 0.1 * host && host > a) {
      b = Math.max(1e-12, (gpu - a) / iterations);
      const next = solve();
      if (next !== iterations) {
        iterations = next;
        gpu = await gpuAt(iterations);
      }
    }
    return { iterations, hostMs: host, gpuMs: gpu, note: `balanced: host ${num(host)} ms, GPU ${num(gpu)} ms` };
  } finally {
    await pipe.destroy();
    await sync.destroy();
  }
}
