/**
 * Host cost of the scheduler: many small ops (256-byte copies) enqueued over some streams,
 * flushed, completed; each phase per op in microseconds, and every copy checked.
 */
import type { Context, DeviceBuffer, Stream } from 'webgpu-streams';
import type { Check } from '../scenarios/common';
import { median, pairedRatio, randomBytes, type HeapProbe } from './common';

export const OP_BYTES = 256;
/** Distinct source slices. */
const SRC_SLICES = 4096;

export interface OpCost {
  ops: number;
  streams: number;
  /** us per op of the enqueue calls. */
  enqueueUs: number;
  /** us per op of `ctx.flush()` (encode + submit), synchronous. */
  flushUs: number;
  /** us per op of enqueue + flush: the host cost of an op. */
  hostUs: number;
  /** us per op from the end of the flush until every op completed (GPU + completion handling). */
  completeUs: number;
  check: Check;
}

/** Which source slice op `i` copies (a fixed scramble, so a misplaced copy shows). */
function sliceOf(i: number, seed: number): number {
  return (Math.imul(i ^ seed, 2654435761) >>> 0) % SRC_SLICES;
}

/** Each figure's median over `runs`; the last run's check. */
function medianCost(runs: OpCost[]): OpCost {
  const m = (k: 'enqueueUs' | 'flushUs' | 'hostUs' | 'completeUs'): number => median(runs.map((x) => x[k]));
  const last = runs[runs.length - 1]!;
  return { ops: last.ops, streams: last.streams, enqueueUs: m('enqueueUs'), flushUs: m('flushUs'), hostUs: m('hostUs'), completeUs: m('completeUs'), check: last.check };
}

/**
 * Reusable buffers for op-cost runs of up to `maxOps` ops on one context.
 */
export class OpBench {
  readonly src: DeviceBuffer;
  readonly dst: DeviceBuffer;
  readonly data: Uint8Array<ArrayBuffer>;
  #streams: Stream[] = [];

  constructor(
    readonly ctx: Context,
    readonly maxOps: number,
    readonly seed: number,
  ) {
    this.data = randomBytes(seed, SRC_SLICES * OP_BYTES);
    this.src = ctx.alloc(SRC_SLICES * OP_BYTES, { label: 'ops.src' });
    this.dst = ctx.alloc(maxOps * OP_BYTES, { label: 'ops.dst' });
    ctx.queue.writeBuffer(this.src.buffer, 0, this.data);
  }

  #streamsFor(n: number): Stream[] {
    while (this.#streams.length < n) this.#streams.push(this.ctx.createStream({ label: `ops ${this.#streams.length}`, nonBlocking: true }));
    return this.#streams.slice(0, n);
  }

  /** One run: `ops` copies round-robin over `streams` streams. With `check`, reads dst back and compares. */
  async run(ops: number, streams: number, check: boolean, salt = 0): Promise<OpCost> {
    if (ops > this.maxOps) throw new RangeError(`ops ${ops} > maxOps ${this.maxOps}`);
    const ss = this.#streamsFor(streams);
    const { src, dst, ctx } = this;
    const seed = this.seed ^ salt;
    const offs = new Int32Array(ops);
    for (let i = 0; i < ops; i++) offs[i] = sliceOf(i, seed) * OP_BYTES;
    await ctx.synchronize();
    const t0 = performance.now();
    for (let i = 0; i < ops; i++) ss[i % streams]!.copy(src, dst, { srcOffset: offs[i]!, dstOffset: i * OP_BYTES, size: OP_BYTES });
    const t1 = performance.now();
    ctx.flush();
    const t2 = performance.now();
    await Promise.all(ss.map((s) => s.synchronize()));
    const t3 = performance.now();
    const per = (ms: number): number => (ms * 1000) / ops;
    let c: Check = { ok: true, detail: 'not checked' };
    if (check) {
      const got = await this.readDst(ops * OP_BYTES);
      c = { ok: true, detail: `${ops} copies of ${OP_BYTES} B over ${streams} stream${streams > 1 ? 's' : ''} land where they should` };
      for (let i = 0; i < ops; i++) {
        const want = this.data.subarray(offs[i]!, offs[i]! + OP_BYTES);
        const at = i * OP_BYTES;
        for (let b = 0; b < OP_BYTES; b += 4) {
          if (got[at + b] !== want[b] || got[at + b + 1] !== want[b + 1] || got[at + b + 2] !== want[b + 2] || got[at + b + 3] !== want[b + 3]) {
            c = { ok: false, detail: c.detail, mismatch: `op ${i} (${streams} streams): byte ${at + b} of dst differs from source slice ${offs[i]! / OP_BYTES}` };
            break;
          }
        }
        if (!c.ok) break;
      }
    }
    return { ops, streams, enqueueUs: per(t1 - t0), flushUs: per(t2 - t1), hostUs: per(t2 - t0), completeUs: per(t3 - t2), check: c };
  }

  /**
   * JS heap retained per queued op: a full GC, `ops` copies enqueued over `streams` streams (not
   * flushed, so all of them are queued), a full GC again; the difference per op, in bytes. Then
   * they are flushed and completed. Untimed; needs a runner that can force a GC.
   */
  async retainedBytes(ops: number, streams: number, heap: HeapProbe): Promise<number> {
    const ss = this.#streamsFor(streams);
    const { src, dst, ctx } = this;
    await ctx.synchronize();
    // Collections leave work for the next one (weak callbacks, finalizers, sweeping): settle twice.
    const settled = (): number => {
      heap.collect();
      heap.collect();
      return heap.used();
    };
    const h0 = settled();
    for (let i = 0; i < ops; i++) ss[i % streams]!.copy(src, dst, { srcOffset: (i % SRC_SLICES) * OP_BYTES, dstOffset: i * OP_BYTES, size: OP_BYTES });
    const h1 = settled();
    ctx.flush();
    await ctx.synchronize();
    return (h1 - h0) / ops;
  }

  /** Median of `repeats` runs (after one warm-up); the last run is checked. */
  async measure(ops: number, streams: number, repeats: number): Promise<OpCost> {
    await this.run(Math.min(ops, 1000), streams, false, 0x51);
    const runs: OpCost[] = [];
    for (let r = 0; r < repeats; r++) runs.push(await this.run(ops, streams, r === repeats - 1, r + 1));
    return medianCost(runs);
  }

  /**
   * This bench and `other` (on another context) in alternating runs, each first equally often,
   * after a warm-up each: their medians, and the median of the rounds' host us/op this / other
   * (a slow spell of a shared host falls on both sides of a round, not on one side's block).
   */
  async measurePaired(other: OpBench, ops: number, streams: number, repeats: number): Promise<{ a: OpCost; b: OpCost; ratio: number }> {
    await this.run(Math.min(ops, 1000), streams, false, 0x51);
    await other.run(Math.min(ops, 1000), streams, false, 0x51);
    const as: OpCost[] = [];
    const bs: OpCost[] = [];
    for (let r = 0; r < repeats; r++) {
      const last = r === repeats - 1;
      const a = (): Promise<number> => this.run(ops, streams, last, r + 1).then((x) => as.push(x));
      const b = (): Promise<number> => other.run(ops, streams, last, r + 1).then((x) => bs.push(x));
      if (r % 2 === 0) await a().then(b);
      else await b().then(a);
    }
    return { a: medianCost(as), b: medianCost(bs), ratio: pairedRatio(as.map((x) => x.hostUs), bs.map((x) => x.hostUs)) };
  }

  /** The same copies encoded by hand into one command encoder and one submit: the raw floor, us per op. */
  async raw(ops: number): Promise<{ hostUs: number; completeUs: number; check: Check }> {
    const { src, dst, ctx } = this;
    const offs = new Int32Array(ops);
    for (let i = 0; i < ops; i++) offs[i] = sliceOf(i, this.seed ^ 0x77) * OP_BYTES;
    await ctx.synchronize();
    const once = async (): Promise<{ host: number; done: number }> => {
      const t0 = performance.now();
      const enc = ctx.device.createCommandEncoder();
      for (let i = 0; i < ops; i++) enc.copyBufferToBuffer(src.buffer, offs[i]!, dst.buffer, i * OP_BYTES, OP_BYTES);
      ctx.queue.submit([enc.finish()]);
      const t1 = performance.now();
      await ctx.queue.onSubmittedWorkDone();
      return { host: t1 - t0, done: performance.now() - t1 };
    };
    await once();
    const hs: number[] = [];
    const ds: number[] = [];
    for (let r = 0; r < 5; r++) {
      const x = await once();
      hs.push(x.host);
      ds.push(x.done);
    }
    const got = await this.readDst(ops * OP_BYTES);
    let check: Check = { ok: true, detail: `raw: ${ops} copies land where they should` };
    for (let i = 0; i < ops && check.ok; i++) {
      for (let b = 0; b < OP_BYTES; b++) {
        if (got[i * OP_BYTES + b] !== this.data[offs[i]! + b]) {
          check = { ok: false, detail: 'raw copies', mismatch: `raw op ${i}: byte ${b} differs` };
          break;
        }
      }
    }
    return { hostUs: (median(hs) * 1000) / ops, completeUs: (median(ds) * 1000) / ops, check };
  }

  async readDst(bytes: number): Promise<Uint8Array> {
    const ctx = this.ctx;
    const rb = ctx.device.createBuffer({ size: bytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST, label: 'ops.check' });
    try {
      await ctx.synchronize();
      const enc = ctx.device.createCommandEncoder();
      enc.copyBufferToBuffer(this.dst.buffer, 0, rb, 0, bytes);
      ctx.queue.submit([enc.finish()]);
      await rb.mapAsync(0x0001);
      return new Uint8Array(rb.getMappedRange()).slice();
    } finally {
      rb.destroy();
    }
  }

  async destroy(): Promise<void> {
    await this.ctx.synchronize().catch(() => undefined);
    this.src.destroy();
    this.dst.destroy();
    for (const s of this.#streams) s.destroy();
  }
}
