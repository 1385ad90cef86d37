/**
 * The chunked pipeline behind P1 and P5: f32 data goes up, through the compute-intensive kernel
 * and back, as
 * - one synchronous pass (fill one big pinned buffer, upload, kernel, download, read out),
 * - the best overlapped pipeline the library's public API allows: a ring of `ring` slots, each a
 *   stream with its own pinned upload / download buffers and device buffers; chunk k goes to slot
 *   k % ring; right after filling chunk k the host reads out chunk k - ring (the slot's previous
 *   result), so `ring - 1` chunks stay queued on the GPU while the host works, and the host never
 *   waits on a GPU step it does not need,
 * - the same pipeline in raw WebGPU (no library): the same ring, one submit per chunk, two
 *   `mapAsync` per chunk issued right after the submit, bind groups made once,
 * - its two halves measured alone: host work (fill + read-out, no GPU) and GPU work (the same
 *   copies and kernels, no host work, timed with timing events where the device has timestamps).
 */
import type { Context, DeviceBuffer, GpuEvent, PinnedBuffer, Stream } from 'webgpu-streams';
import { COMPUTE_INTENSIVE_TOL, computeIntensiveStep } from '../reference';
import type { Check } from '../scenarios/common';
import { grid } from '../scenarios/common';
import { minOf, num, sampleIndices } from './common';
import { balanceIterations } from './balance';
import { benchKernels, wgsl } from '../kernels/index';

/** How the data is cut. */
const now = (): number => performance.now();

export interface ChunkPlan {
  /** f32 elements in all. */
  elements: number;
  /** f32 elements of each chunk, in order; they sum to `elements`. */
  chunks: number[];
  /** Slots in the ring (streams, pinned buffer pairs, device buffers per chunk size). */
  ring: number;
  /** compute_intensive iterations per element. */
  iterations: number;
  /** Short description: `32 x 8 MiB`, `16 x 1 MiB, ramped`. */
  label: string;
  /**
   * Chunks filled and enqueued per flush (one submit carries them all). @default 1. The host first
   * waits until the slots of the whole group are back, then per chunk fills, reads the slot's
   * previous result out and enqueues, and flushes once, so no wait splits the group's submit.
   */
  batch?: number;
  /**
   * With `batch` > 1: the first chunk and the last `batch` chunks go out one per flush, so the GPU
   * starts after one chunk's fill and has only one chunk left after the last fill.
   */
  edges?: boolean;
  /**
   * With `batch` > 1: the group's host copies (fills and read-outs) first, then its enqueues back
   * to back, so the calls after the first run with warm caches (a copy of a few MiB between two
   * calls evicts them). Its ranges stay attached until the enqueues.
   */
  grouped?: boolean;
}

/** `plan` with `batch` chunks per flush and a ring of `ring` slots; the label says so. */
export function withBatch(plan: ChunkPlan, batch: number, ring: number, edges = false, grouped = false): ChunkPlan {
  if (batch <= 1 && ring === plan.ring) return plan;
  const e = edges && batch > 1;
  const g = grouped && batch > 1;
  return { ...plan, chunks: [...plan.chunks], ring, batch, edges: e, grouped: g, label: `${plan.label}${batch > 1 ? `, ${batch} per submit${e ? ' (single at the ends)' : ''}${g ? ', copies then calls' : ''}` : ''}` };
}

/** The plan in words, ring included: `64 x 16 MiB, ends ramped to 2 MiB, 2 per submit, ring 6`. */
export function planText(plan: ChunkPlan): string {
  return `${plan.label}, ring ${plan.ring}`;
}

/** The plan's chunk groups [start, end) that go out one flush each (`batch` per flush, at most the ring). */
function groupsOf(plan: ChunkPlan): [number, number][] {
  const C = plan.chunks.length;
  const batch = Math.max(1, Math.min(plan.batch ?? 1, plan.ring));
  const edges = plan.edges ?? false;
  const out: [number, number][] = [];
  let k = 0;
  if (edges && batch > 1 && C > 0) out.push([k, ++k]);
  while (k < C) {
    const size = edges && k >= C - batch ? 1 : batch;
    const end = Math.min(C, k + size);
    out.push([k, end]);
    k = end;
  }
  return out;
}

/** Chunks [0, end) go out in the first submit: their fills all come before the GPU has work. */
export function firstSubmitEnd(plan: ChunkPlan): number {
  return groupsOf(plan)[0]?.[1] ?? 0;
}

/** Where the host's time went in the last overlapped run (ms). */
export interface RunStats {
  /** Awaiting a download buffer (the GPU result of an earlier chunk) or an upload buffer. */
  waitDown: number;
  waitUp: number;
  fill: number;
  read: number;
  /** Enqueue calls. */
  enqueue: number;
  /**
   * The fills of the first submit's chunks plus the last chunk's read-out: host work no GPU work
   * can overlap (the GPU has nothing before the first submit, the host nothing to do but read after
   * the last result comes back).
   */
  ends: number;
  /** ctx.flush(): encode + submit. */
  flush: number;
  waits: number;
  submits: number;
}

/**
 * `count` chunks of n / count elements; with `ramp` levels > 0, the first and the last of them
 * are each cut into pieces of 1/2^ramp, 1/2^ramp, ..., 1/4, 1/2 (reversed at the end), so the GPU
 * starts after a small fill and the host finishes after a small read-out.
 */
export function makePlan(n: number, count: number, ring: number, iterations: number, ramp = 0): ChunkPlan {
  const base = n / count;
  if (!Number.isInteger(base)) throw new RangeError(`${count} chunks do not divide ${n} elements`);
  const levels = count >= 2 && base % (2 ** ramp) === 0 ? ramp : 0;
  const head: number[] = [];
  if (levels > 0) {
    head.push(base / 2 ** levels);
    for (let l = levels; l >= 1; l--) head.push(base / 2 ** l);
  }
  const chunks = levels > 0 ? [...head, ...Array<number>(count - 2).fill(base), ...[...head].reverse()] : Array<number>(count).fill(base);
  const label = `${count} x ${sizeTextOf(base * 4)}${levels > 0 ? `, ends ramped to ${sizeTextOf((base * 4) / 2 ** levels)}` : ''}`;
  return { elements: n, chunks, ring, iterations, label };
}

function sizeTextOf(b: number): string {
  const MiB = 1024 * 1024;
  return b >= MiB ? `${+(b / MiB).toFixed(2)} MiB` : `${+(b / 1024).toFixed(2)} KiB`;
}

/** Start element of every chunk. */
function offsetsOf(plan: ChunkPlan): number[] {
  const out: number[] = [];
  let at = 0;
  for (const c of plan.chunks) {
    out.push(at);
    at += c;
  }
  if (at !== plan.elements) throw new RangeError(`chunks sum to ${at}, want ${plan.elements}`);
  return out;
}

interface LibSlot {
  stream: Stream;
  up: PinnedBuffer;
  down: PinnedBuffer;
  /** Device buffers per chunk size (kernels bind whole buffers, so one pair per size). */
  dev: Map<number, { din: DeviceBuffer; dout: DeviceBuffer }>;
  /** Chunk whose result the slot's download buffer holds (or will), -1 for none. */
  pending: number;
}

/** The overlapped pipeline on the library's public API. */
export class LibPipeline {
  readonly slots: LibSlot[] = [];
  readonly offsets: number[];
  readonly #grids = new Map<number, [number, number]>();
  readonly #firstSubmitEnd: number;
  #gpuStream: Stream | null = null;
  #t0: GpuEvent | null = null;
  #t1: GpuEvent | null = null;

  constructor(
    readonly ctx: Context,
    readonly plan: ChunkPlan,
    label = 'ovl',
  ) {
    this.offsets = offsetsOf(plan);
    this.#firstSubmitEnd = firstSubmitEnd(plan);
    const sizes = [...new Set(plan.chunks)];
    const maxBytes = Math.max(...sizes) * 4;
    for (let r = 0; r < plan.ring; r++) {
      const dev = new Map<number, { din: DeviceBuffer; dout: DeviceBuffer }>();
      // A slot only ever sees the sizes of chunks k with k % ring == r.
      for (const size of new Set(plan.chunks.filter((_, k) => k % plan.ring === r))) {
        dev.set(size, { din: ctx.alloc(size * 4, { label: `${label}.in[${r}]/${size}` }), dout: ctx.alloc(size * 4, { label: `${label}.out[${r}]/${size}` }) });
      }
      this.slots.push({
        stream: ctx.createStream({ label: `${label} slot ${r}`, nonBlocking: true }),
        up: ctx.allocHost(maxBytes, 'upload', { label: `${label}.up[${r}]` }),
        down: ctx.allocHost(maxBytes, 'download', { label: `${label}.down[${r}]` }),
        dev,
        pending: -1,
      });
    }
    for (const size of sizes) this.#grids.set(size, grid(size, 'computeIntensive'));
  }

  /** Waits until the host owns `buf`, timing the wait into `st[into]` (no wait, no count). */
  async #ready(buf: PinnedBuffer, st: RunStats, into: 'waitDown' | 'waitUp'): Promise<void> {
    if (buf.isHostOwned) return;
    const a = now();
    await buf.ready();
    st[into] += now() - a;
    st.waits++;
  }

  /** Waits for the slot's pending chunk to be back on the host and reads it out, timing both. */
  async #collect(slot: LibSlot, out: Float32Array, st: RunStats): Promise<void> {
    await this.#ready(slot.down, st, 'waitDown');
    this.#readOut(slot, out, st);
  }

  /** Fills the slot's upload buffer with chunk `k` of `src`, timing it into `st.fill`. */
  #fill(slot: LibSlot, k: number, src: Float32Array, st: RunStats): void {
    const a = now();
    const off = this.offsets[k]!;
    slot.up.f32.set(src.subarray(off, off + this.plan.chunks[k]!));
    const ms = now() - a;
    st.fill += ms;
    if (k < this.#firstSubmitEnd) st.ends += ms;
  }

  /** Reads the slot's previous result out, timed into `st.read` (the last chunk's into `st.ends` too); returns when it ended. */
  #readOut(slot: LibSlot, out: Float32Array, st: RunStats): number {
    const a = now();
    const k = slot.pending;
    const ce = this.plan.chunks[k]!;
    const view = slot.down.f32;
    out.set(ce === view.length ? view : view.subarray(0, ce), this.offsets[k]!);
    // Done with it: let the range go now, as raw WebGPU unmaps after its read-out. Mid-run the next
    // download would detach it anyway; at the end of a run this keeps the ring's download ranges
    // from staying attached (major GCs: docs/PERFORMANCE.md).
    slot.down.unmap();
    slot.pending = -1;
    const b = now();
    st.read += b - a;
    if (k === this.plan.chunks.length - 1) st.ends += b - a;
    return b;
  }

  /** Where the host's time went in the last `run` (ms). */
  stats: RunStats = { waitDown: 0, waitUp: 0, fill: 0, read: 0, enqueue: 0, ends: 0, flush: 0, waits: 0, submits: 0 };
  /**
   * When set to an array, each `run` fills it with one row per chunk (diagnostics):
   * [chunk, slot ready (its download and upload buffers back on the host), chunk filled and previous result read out, flushed], ms from the start.
   */
  timeline: number[][] | null = null;

  /**
   * One overlapped pass: src -> out. Returns wall ms. Chunks go in groups of `batch` (one flush
   * each): the host waits for the group's slots, then per chunk fills and enqueues the upload,
   * reads out the slot's previous result and enqueues the kernel and download, and flushes once.
   */
  async run(src: Float32Array, out: Float32Array): Promise<number> {
    const { ring, chunks, iterations } = this.plan;
    const C = chunks.length;
    const ci = benchKernels(this.ctx).computeIntensive;
    const constants = { iterations };
    const st: RunStats = { waitDown: 0, waitUp: 0, fill: 0, read: 0, enqueue: 0, ends: 0, flush: 0, waits: 0, submits: 0 };
    const tl = this.timeline;
    if (tl) tl.length = 0;
    const t0 = now();
    for (const [k0, k1] of groupsOf(this.plan)) {
      // Wait for the group's slots first: no wait between this group's enqueues and its flush.
      for (let k = k0; k < k1; k++) {
        const slot = this.slots[k % ring]!;
        if (slot.pending >= 0) await this.#ready(slot.down, st, 'waitDown');
        await this.#ready(slot.up, st, 'waitUp');
        if (tl) tl[k] = [k, now() - t0, 0, 0];
      }
      // Then per chunk: fill and enqueue the upload, read the slot's previous result out, enqueue
      // the kernel and the download. Each enqueue hands its pinned buffer's mapped range back at
      // once, so one is attached at a time: V8 counts each as external memory and starts a major
      // GC whenever that grows 64 MiB above its low point (docs/PERFORMANCE.md).
      // Grouped (ChunkPlan.grouped): the group's fills and read-outs first, its ranges attached until its enqueues.
      if (this.plan.grouped) {
        for (let k = k0; k < k1; k++) {
          const slot = this.slots[k % ring]!;
          this.#fill(slot, k, src, st);
          if (slot.pending >= 0) this.#readOut(slot, out, st);
        }
      }
      for (let k = k0; k < k1; k++) {
        const slot = this.slots[k % ring]!;
        const ce = chunks[k]!;
        const { din, dout } = slot.dev.get(ce)!;
        const s = slot.stream;
        const size = ce * 4;
        if (!this.plan.grouped) this.#fill(slot, k, src, st);
        let b = now();
        s.upload(slot.up, din, { size });
        let a = now();
        st.enqueue += a - b;
        if (slot.pending >= 0) a = this.#readOut(slot, out, st);
        s.launch(ci, { bindings: [din, dout], workgroups: this.#grids.get(ce)!, constants });
        s.download(dout, slot.down, { size });
        b = now();
        st.enqueue += b - a;
        slot.pending = k;
        if (tl) tl[k]![2] = b - t0;
      }
      const a = now();
      this.ctx.flush();
      const e = now();
      st.flush += e - a;
      st.submits++;
      if (tl) for (let k = k0; k < k1; k++) tl[k]![3] = e - t0;
    }
    for (let k = Math.max(0, C - ring); k < C; k++) {
      const slot = this.slots[k % ring]!;
      if (slot.pending >= 0) await this.#collect(slot, out, st);
    }
    const ms = now() - t0;
    this.stats = st;
    return ms;
  }

  /** Host work alone, the least of `runs` after one untimed pass (the mapped ranges' first touch), ms. */
  async hostMs(src: Float32Array, out: Float32Array, runs = 3): Promise<number> {
    await this.hostOnly(src, out);
    return minOf(runs, () => this.hostOnly(src, out));
  }

  /**
   * GPU work alone at `iterations` in one submit (what the balance weighs against the host work:
   * at few iterations, a submit per group would time the host's submits instead), the least of
   * `runs` after one untimed run (it compiles that override value), ms.
   */
  async gpuMsAt(iterations: number, up: PinnedBuffer, down: PinnedBuffer, runs = 2): Promise<number> {
    (this.plan as ChunkPlan).iterations = iterations;
    await this.gpuOnly(up, down, true);
    return minOf(runs, async () => (await this.gpuOnly(up, down, true)).ms);
  }

  /** Host work alone: fill the ring's upload buffers from src and read the download buffers out, no GPU. Returns ms. */
  async hostOnly(src: Float32Array, out: Float32Array): Promise<number> {
    for (const s of this.slots) {
      await s.up.ready();
      await s.down.ready();
    }
    const { ring, chunks } = this.plan;
    const t0 = performance.now();
    for (let k = 0; k < chunks.length; k++) {
      const slot = this.slots[k % ring]!;
      const ce = chunks[k]!;
      const off = this.offsets[k]!;
      slot.up.f32.set(src.subarray(off, off + ce));
      const view = slot.down.f32;
      out.set(ce === view.length ? view : view.subarray(0, ce), off);
    }
    const ms = performance.now() - t0;
    for (const s of this.slots) s.down.unmap(); // as after a pipeline run (see #readOut)
    return ms;
  }

  /**
   * GPU work alone: every chunk's upload, kernel and download, with no host work in between: the
   * chunks come from / go to whole-size pinned buffers (offsets), on one stream, all enqueued at
   * once and submitted in the plan's groups (one submit each, as `run` submits them: the GPU's
   * time between two submits is part of the plan's GPU work). Timed with timing events when the
   * device has timestamps (else wall). `oneSubmit`: all chunks in one submit. Returns ms.
   */
  async gpuOnly(upAll: PinnedBuffer, downAll: PinnedBuffer, oneSubmit = false): Promise<{ ms: number; method: 'timestamps' | 'wall' }> {
    const ctx = this.ctx;
    const { ring, chunks, iterations } = this.plan;
    const s = (this.#gpuStream ??= ctx.createStream({ label: 'gpu-only', nonBlocking: true }));
    const ts = ctx.features.timestampQuery;
    if (ts && !this.#t0) {
      this.#t0 = ctx.createEvent({ timing: true, label: 'gpu-only.t0' });
      this.#t1 = ctx.createEvent({ timing: true, label: 'gpu-only.t1' });
    }
    await upAll.ready();
    await downAll.ready();
    for (const slot of this.slots) await slot.stream.synchronize();
    const ci = benchKernels(ctx).computeIntensive;
    const t0 = performance.now();
    if (ts) s.record(this.#t0!);
    for (const [k0, k1] of oneSubmit ? [[0, chunks.length] as const] : groupsOf(this.plan)) {
      for (let k = k0; k < k1; k++) {
        const slot = this.slots[k % ring]!;
        const ce = chunks[k]!;
        const at = this.offsets[k]! * 4;
        const { din, dout } = slot.dev.get(ce)!;
        s.upload(upAll, din, { srcOffset: at, size: ce * 4 });
        s.launch(ci, { bindings: [din, dout], workgroups: this.#grids.get(ce)!, constants: { iterations } });
        s.download(dout, downAll, { dstOffset: at, size: ce * 4 });
      }
      if (ts && k1 === chunks.length) s.record(this.#t1!);
      ctx.flush();
    }
    await s.synchronize();
    const wall = performance.now() - t0;
    return ts ? { ms: this.#t0!.elapsedTime(this.#t1!), method: 'timestamps' } : { ms: wall, method: 'wall' };
  }

  async destroy(): Promise<void> {
    await this.ctx.synchronize().catch(() => undefined);
    for (const s of this.slots) {
      s.up.destroy();
      s.down.destroy();
      for (const { din, dout } of s.dev.values()) {
        din.destroy();
        dout.destroy();
      }
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
  iterations: number;

  constructor(
    readonly ctx: Context,
    readonly elements: number,
    iterations: number,
  ) {
    const b = elements * 4;
    this.iterations = iterations;
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
    s.launch(benchKernels(this.ctx).computeIntensive, { bindings: [this.din, this.dout], workgroups: this.#grid, constants: { iterations: this.iterations } });
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
  dev: Map<number, { din: GPUBuffer; dout: GPUBuffer; bind: GPUBindGroup }>;
  /** mapAsync(WRITE) of `up` issued after its last submit; null while mapped (or at creation). */
  upMap: Promise<void> | null;
  downMap: Promise<void> | null;
  pending: number;
}

/** The same overlapped pipeline written against `GPUDevice` directly, as a careful user would. */
export class RawPipeline {
  readonly slots: RawSlot[] = [];
  readonly offsets: number[];
  readonly #pipeline: GPUComputePipeline;
  readonly #grids = new Map<number, [number, number]>();
  readonly device: GPUDevice;

  constructor(
    ctx: Context,
    readonly plan: ChunkPlan,
  ) {
    const device = (this.device = ctx.device);
    this.offsets = offsetsOf(plan);
    const module = device.createShaderModule({ code: wgsl.computeIntensive, label: 'raw compute_intensive' });
    this.#pipeline = device.createComputePipeline({
      layout: 'auto',
      compute: { module, entryPoint: 'main', constants: { iterations: plan.iterations } },
      label: 'raw compute_intensive',
    });
    const maxBytes = Math.max(...plan.chunks) * 4;
    for (let r = 0; r < plan.ring; r++) {
      const dev = new Map<number, { din: GPUBuffer; dout: GPUBuffer; bind: GPUBindGroup }>();
      for (const size of new Set(plan.chunks.filter((_, k) => k % plan.ring === r))) {
        const din = device.createBuffer({ size: size * 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST, label: `raw.in[${r}]/${size}` });
        const dout = device.createBuffer({ size: size * 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC, label: `raw.out[${r}]/${size}` });
        const bind = device.createBindGroup({
          layout: this.#pipeline.getBindGroupLayout(0),
          entries: [
            { binding: 0, resource: { buffer: din } },
            { binding: 1, resource: { buffer: dout } },
          ],
        });
        dev.set(size, { din, dout, bind });
      }
      this.slots.push({
        up: device.createBuffer({ size: maxBytes, usage: GPUBufferUsage.MAP_WRITE | GPUBufferUsage.COPY_SRC, mappedAtCreation: true, label: `raw.up[${r}]` }),
        down: device.createBuffer({ size: maxBytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST, label: `raw.down[${r}]` }),
        dev,
        upMap: null,
        downMap: null,
        pending: -1,
      });
    }
    for (const size of new Set(plan.chunks)) this.#grids.set(size, grid(size, 'computeIntensive'));
  }

  /** As {@link LibPipeline.timeline}. */
  timeline: number[][] | null = null;
  /**
   * The host's fill and read-out in the last `run` (ms), timed as LibPipeline times its own: fill =
   * getMappedRange + copy in (the unmap after it is the library's enqueue), read = getMappedRange +
   * copy out + unmap; `calls`: the other WebGPU calls (the upload's unmap, encoding, submit,
   * mapAsync), as LibPipeline's enqueue + flush; `ends`: as RunStats.ends.
   */
  stats = { fill: 0, read: 0, calls: 0, ends: 0 };

  /**
   * One overlapped pass: src -> out. Returns wall ms. Chunks go in the plan's groups (`batch`,
   * `edges`), one submit per group, as {@link LibPipeline.run} does.
   */
  async run(src: Float32Array, out: Float32Array): Promise<number> {
    const { ring, chunks } = this.plan;
    const C = chunks.length;
    const device = this.device;
    const tl = this.timeline;
    if (tl) tl.length = 0;
    const st = { fill: 0, read: 0, calls: 0, ends: 0 };
    const first = firstSubmitEnd(this.plan);
    const t0 = performance.now();
    /** Reads the slot's previous result out; its read map has resolved (awaited before). */
    const readOut = (slot: RawSlot): void => {
      const a = performance.now();
      slot.downMap = null;
      const k = slot.pending;
      const ce = chunks[k]!;
      out.set(new Float32Array(slot.down.getMappedRange(0, ce * 4)), this.offsets[k]!);
      slot.down.unmap();
      slot.pending = -1;
      const ms = performance.now() - a;
      st.read += ms;
      if (k === C - 1) st.ends += ms;
    };
    for (const [k0, k1] of groupsOf(this.plan)) {
      for (let k = k0; k < k1; k++) {
        const slot = this.slots[k % ring]!;
        await slot.downMap;
        await slot.upMap;
        slot.upMap = null;
        if (tl) tl[k] = [k, performance.now() - t0, 0, 0];
      }
      const enc = device.createCommandEncoder();
      // The order of LibPipeline.run: fill the upload, then read the previous result out, chunk by
      // chunk, or (grouped) the group's copies first, then its calls.
      const grouped = this.plan.grouped ?? false;
      const fill = (slot: RawSlot, k: number): void => {
        const a = performance.now();
        const off = this.offsets[k]!;
        new Float32Array(slot.up.getMappedRange(0, chunks[k]! * 4)).set(src.subarray(off, off + chunks[k]!));
        const ms = performance.now() - a;
        st.fill += ms;
        if (k < first) st.ends += ms;
      };
      if (grouped) {
        for (let k = k0; k < k1; k++) {
          const slot = this.slots[k % ring]!;
          fill(slot, k);
          if (slot.pending >= 0) readOut(slot);
        }
      }
      for (let k = k0; k < k1; k++) {
        const slot = this.slots[k % ring]!;
        if (!grouped) fill(slot, k);
        const b = performance.now();
        slot.up.unmap();
        st.calls += performance.now() - b;
        if (slot.pending >= 0) readOut(slot);
        const c = performance.now();
        if (tl) tl[k]![2] = c - t0;
        this.#encodeChunk(enc, slot, chunks[k]!);
        st.calls += performance.now() - c;
      }
      const d = performance.now();
      device.queue.submit([enc.finish()]);
      for (let k = k0; k < k1; k++) {
        const slot = this.slots[k % ring]!;
        slot.upMap = slot.up.mapAsync(GPUMapMode.WRITE);
        slot.downMap = slot.down.mapAsync(GPUMapMode.READ);
        slot.pending = k;
        if (tl) tl[k]![3] = performance.now() - t0;
      }
      st.calls += performance.now() - d;
    }
    for (let k = Math.max(0, C - ring); k < C; k++) {
      const slot = this.slots[k % ring]!;
      await slot.downMap;
      readOut(slot);
    }
    const ms = performance.now() - t0;
    this.stats = st;
    return ms;
  }

  /** A chunk of `ce` elements through `slot`: upload copy, kernel, download copy. */
  #encodeChunk(enc: GPUCommandEncoder, slot: RawSlot, ce: number): void {
    const cb = ce * 4;
    const { din, dout, bind } = slot.dev.get(ce)!;
    const [gx, gy] = this.#grids.get(ce)!;
    enc.copyBufferToBuffer(slot.up, 0, din, 0, cb);
    const pass = enc.beginComputePass();
    pass.setPipeline(this.#pipeline);
    pass.setBindGroup(0, bind);
    pass.dispatchWorkgroups(gx, gy);
    pass.end();
    enc.copyBufferToBuffer(dout, 0, slot.down, 0, cb);
  }

  /**
   * One chunk (the plan's first) through slot 0 with the host waiting for nothing it does not
   * need: waits for the previous round's maps, fills, encodes, submits, maps. Returns the host
   * time of unmap + encode + submit + mapAsync calls, ms.
   */
  async encodeOneChunk(src: Float32Array): Promise<number> {
    const slot = this.slots[0]!;
    const ce = this.plan.chunks[0]!;
    const cb = ce * 4;
    if (slot.downMap) {
      await slot.downMap;
      slot.downMap = null;
      slot.down.unmap();
    }
    if (slot.upMap) {
      await slot.upMap;
      slot.upMap = null;
    }
    new Float32Array(slot.up.getMappedRange(0, cb)).set(src.subarray(0, ce));
    // Timed from the unmap: the library's upload() unmaps too, inside its enqueue.
    const t0 = performance.now();
    slot.up.unmap();
    const enc = this.device.createCommandEncoder();
    this.#encodeChunk(enc, slot, ce);
    this.device.queue.submit([enc.finish()]);
    slot.upMap = slot.up.mapAsync(GPUMapMode.WRITE);
    slot.downMap = slot.down.mapAsync(GPUMapMode.READ);
    const ms = performance.now() - t0;
    slot.pending = 0;
    return ms;
  }

  /** After {@link encodeOneChunk}: copies its result into `out`. */
  async readLast(out: Float32Array): Promise<void> {
    const slot = this.slots[0]!;
    const ce = this.plan.chunks[0]!;
    await slot.downMap;
    slot.downMap = null;
    out.set(new Float32Array(slot.down.getMappedRange(0, ce * 4)));
    slot.down.unmap();
    slot.pending = -1;
  }

  async destroy(): Promise<void> {
    for (const s of this.slots) {
      await s.upMap?.catch(() => undefined);
      await s.downMap?.catch(() => undefined);
      s.up.destroy();
      s.down.destroy();
      for (const { din, dout } of s.dev.values()) {
        din.destroy();
        dout.destroy();
      }
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
 * alone) about equal to its host work (fill + read-out, measured alone), with `balanceIterations`.
 */
export async function balancePipeline(
  ctx: Context,
  plan: ChunkPlan,
  input: Float32Array,
  o: { probeIterations: number; maxIterations: number },
): Promise<{ iterations: number; hostMs: number; gpuMs: number; note: string }> {
  const n = plan.elements;
  const sync = new SyncPass(ctx, n, 1);
  const pipe = new LibPipeline(ctx, { ...plan, chunks: [...plan.chunks], iterations: 1 }, 'balance');
  const scratch = new Float32Array(n);
  try {
    const host = await pipe.hostMs(input, scratch);
    const bal = await balanceIterations((it) => pipe.gpuMsAt(it, sync.up, sync.down), host, { ...o, tolerance: 0.1 });
    const what = `host ${num(host)} ms, GPU ${num(bal.gpuMs)} ms`;
    return { iterations: bal.iterations, hostMs: host, gpuMs: bal.gpuMs, note: bal.reachable ? `balanced: ${what}` : `not balanceable: ${what} at ${bal.iterations} iteration(s)` };
  } finally {
    await pipe.destroy();
    await sync.destroy();
  }
}
