/**
 * Encoding: GPU ops go into one command encoder per batch (one batch, one submit), each as a copy
 * or a compute pass, with timestamp queries where an event or the GPU trace wants them.
 */
import { InvalidArgumentError } from '../errors.js';
import { BufferUsage } from '../gpu-constants.js';
import type { Op } from '../op.js';
import type { PinnedBuffer } from '../pinned.js';
import type { StagingPool } from '../transfer.js';
import { encodeTextureCopy, TextureRegion } from '../texture.js';

const QUERIES_PER_BATCH = 512;

export interface TimestampSet {
  querySet: GPUQuerySet;
  resolve: GPUBuffer;
  readback: GPUBuffer;
}

/** A pinned buffer and the ops of one batch that use it. */
export interface PinnedGroup {
  readonly batch: number;
  readonly pinned: PinnedBuffer;
  readonly ops: Op[];
}

/** One command encoder, becoming one submit. */
export class Batch {
  readonly ops: Op[] = [];
  /** Pinned buffers this batch uploads from / downloads into, each with its ops (see opsFor). */
  readonly pinnedDownloads: PinnedGroup[] = [];
  readonly pinnedUploads: PinnedGroup[] = [];
  readonly readbacks: Op[] = [];
  /** Ops whose GPU timestamps (begin/end query indices) come back with this batch. */
  readonly timed: { op: Op; begin: number; end: number }[] = [];
  ts: TimestampSet | null = null;
  queries = 0;
  tSubmit = 0;
  /** Completion (Completer.#finishIfJoined): validated (with `error`, null when valid), GPU work done, reported. */
  validated = false;
  error: GPUError | null = null;
  worked = false;
  finished = false;
  /** What a `stream.encode` callback threw (its batch is then not submitted). */
  thrown: { value: unknown } | null = null;
  /** Command buffers of a `stream.encode` from elsewhere, submitted after the batch's own. */
  extra: GPUCommandBuffer[] | null = null;
  constructor(
    readonly id: number,
    readonly encoder: GPUCommandEncoder,
    /** Carries one isolated op (see Op.isolated). */
    readonly isolated: boolean,
  ) {}
}

export interface EncodeOptions {
  /** The device has 'timestamp-query' (and timing is on). */
  timestampQuery: boolean;
  /** The trace, when tracing: its `gpuTimestamps` says whether to time every GPU op now. */
  trace: { readonly gpuTimestamps: boolean } | null;
  /** Label transient encoders and passes (tracing: a label costs Dawn a few microseconds per pass). */
  labels: boolean;
}

export class Encoder {
  #nextBatchId = 1;
  #tsPool: TimestampSet[] = [];

  constructor(
    readonly device: GPUDevice,
    readonly staging: StagingPool,
    readonly options: EncodeOptions,
  ) {}

  /**
   * A batch. One validation scope per submit, from the encoder's creation (bind groups are made
   * while encoding) to the submit (popped by `finish`'s caller).
   */
  newBatch(isolated: boolean): Batch {
    this.device.pushErrorScope('validation');
    return new Batch(this.#nextBatchId++, this.device.createCommandEncoder(this.options.labels ? { label: 'webgpu-streams batch' } : undefined), isolated);
  }

  /** Whether `op` takes timestamp queries (a batch holds at most QUERIES_PER_BATCH). */
  wantsTimestamps(op: Op): boolean {
    return (op.kind === 'record' && op.payload.kind === 'record' && op.payload.timing) || (this.#timed() && op.isGpu);
  }

  /** Room for another timed op in `b`? */
  hasQueryRoom(b: Batch): boolean {
    return b.queries + 2 <= QUERIES_PER_BATCH;
  }

  /** Encodes GPU op `op` into `b`. */
  encode(op: Op, b: Batch): void {
    const enc = b.encoder;
    const p = op.payload;
    if (op.times) op.times.batchId = b.id;
    b.ops.push(op);
    const timed = this.#timed();
    switch (p.kind) {
      case 'launch': {
        const groups = p.kernel.bindGroups(p.bindings);
        const tw = timed ? this.#timestampWrites(b, op) : undefined;
        const pass = enc.beginComputePass(tw ? { label: op.name, timestampWrites: tw } : this.options.labels ? { label: op.name } : undefined);
        pass.setPipeline(p.pipeline.pipeline);
        for (let g = 0; g < groups.length; g++) pass.setBindGroup(g, groups[g]!);
        pass.dispatchWorkgroups(p.workgroups[0], p.workgroups[1], p.workgroups[2]);
        pass.end();
        break;
      }
      case 'copy':
        this.#copy(b, op, timed, p.src, p.srcOffset, p.dst, p.dstOffset, p.size);
        break;
      case 'upload':
        if (p.pinned) {
          p.pinned.unmapForGpu();
          p.pinned.unencoded--;
          opsFor(b, b.pinnedUploads, p.pinned).push(op);
          this.#copy(b, op, timed, p.pinned.buffer, p.srcOffset, p.dst, p.dstOffset, p.size);
        } else {
          const staging = p.staging!;
          this.staging.seal(staging);
          this.#copy(b, op, timed, staging.block.buffer, staging.offset, p.dst, p.dstOffset, p.size);
        }
        break;
      case 'download':
        op.pendingParts++;
        if (p.pinned) {
          p.pinned.unmapForGpu();
          p.pinned.unencoded--;
          opsFor(b, b.pinnedDownloads, p.pinned).push(op);
          this.#copy(b, op, timed, p.src, p.srcOffset, p.pinned.buffer, p.dstOffset, p.size);
        } else {
          p.readback = this.staging.acquireReadback(p.size, op);
          b.readbacks.push(op);
          this.#copy(b, op, timed, p.src, p.srcOffset, p.readback, 0, p.size);
        }
        break;
      case 'record': {
        // An empty pass whose end-of-pass timestamp marks the point after all earlier work.
        const index = this.#allocQueries(b, 1);
        enc.beginComputePass({ label: op.name, timestampWrites: { querySet: b.ts!.querySet, endOfPassWriteIndex: index } }).end();
        b.timed.push({ op, begin: index, end: index });
        op.pendingParts++;
        break;
      }
      case 'encode':
        // The app's own commands (stream.encode), alone in their batch (an isolated op): a throw
        // fails this op, and its command buffer is not submitted (see Completer.submit). Command
        // buffers from elsewhere run after the batch's own: no timestamps around them.
        if (p.commandBuffers) b.extra = p.commandBuffers;
        try {
          this.#bracketed(b, op, timed && p.fn !== null, () => {
            const r: unknown = p.fn?.(enc);
            // A promise: what it records after an await lands in a finished encoder. Fail the op, not silently.
            if (r !== null && (typeof r === 'object' || typeof r === 'function') && typeof (r as PromiseLike<unknown>).then === 'function') {
              void Promise.resolve(r).catch(() => undefined);
              throw new InvalidArgumentError('the encode callback returned a promise: it must record synchronously (what it records after an `await` lands in a finished encoder); await first, then call stream.encode()', op.site());
            }
          });
        } catch (e) {
          b.thrown = { value: e }; // boxed: `throw undefined` is a throw too
        }
        break;
      default:
        throw new Error(`not a GPU op: ${p.kind}`);
    }
  }

  /** Ends `b`'s encoder (resolving its timestamps first): the command buffer to submit. */
  finish(b: Batch): GPUCommandBuffer {
    const ts = b.ts;
    if (ts) {
      b.encoder.resolveQuerySet(ts.querySet, 0, b.queries, ts.resolve, 0);
      b.encoder.copyBufferToBuffer(ts.resolve, 0, ts.readback, 0, b.queries * 8);
    }
    return b.encoder.finish();
  }

  /** A timestamp set whose values were read back is free again. */
  releaseTimestamps(ts: TimestampSet): void {
    this.#tsPool.push(ts);
  }

  destroy(): void {
    for (const ts of this.#tsPool) {
      ts.querySet.destroy();
      ts.resolve.destroy();
      ts.readback.destroy();
    }
    this.#tsPool = [];
  }

  /** Time every GPU op now: the trace asks for it and the device can. */
  #timed(): boolean {
    return this.options.timestampQuery && this.options.trace !== null && this.options.trace.gpuTimestamps;
  }

  #allocQueries(b: Batch, n: number): number {
    if (!b.ts) b.ts = this.#tsPool.pop() ?? this.#createTimestampSet();
    const index = b.queries;
    b.queries += n;
    return index;
  }

  #createTimestampSet(): TimestampSet {
    const d = this.device;
    return {
      querySet: d.createQuerySet({ type: 'timestamp', count: QUERIES_PER_BATCH, label: 'webgpu-streams timestamps' }),
      resolve: d.createBuffer({ size: QUERIES_PER_BATCH * 8, usage: BufferUsage.QUERY_RESOLVE | BufferUsage.COPY_SRC, label: 'webgpu-streams timestamp resolve' }),
      readback: d.createBuffer({ size: QUERIES_PER_BATCH * 8, usage: BufferUsage.MAP_READ | BufferUsage.COPY_DST, label: 'webgpu-streams timestamp readback' }),
    };
  }

  #timestampWrites(b: Batch, op: Op): GPUComputePassTimestampWrites | undefined {
    if (!this.hasQueryRoom(b)) return undefined;
    const index = this.#allocQueries(b, 2);
    b.timed.push({ op, begin: index, end: index + 1 });
    op.pendingParts++;
    return { querySet: b.ts!.querySet, beginningOfPassWriteIndex: index, endOfPassWriteIndex: index + 1 };
  }

  /** Encodes a copy; between two empty timestamp passes when GPU tracing is on. */
  #copy(b: Batch, op: Op, timed: boolean, src: GPUBuffer | TextureRegion, srcOffset: number, dst: GPUBuffer | TextureRegion, dstOffset: number, size: number): void {
    const enc = b.encoder;
    if (src instanceof TextureRegion || dst instanceof TextureRegion) return this.#bracketed(b, op, timed, () => encodeTextureCopy(enc, src, srcOffset, dst, dstOffset));
    if (!timed || !this.hasQueryRoom(b)) return enc.copyBufferToBuffer(src, srcOffset, dst, dstOffset, size);
    this.#bracketed(b, op, true, () => enc.copyBufferToBuffer(src, srcOffset, dst, dstOffset, size));
  }

  /** Runs `body` (encoding `op` into `b`) between two empty timestamp passes when `timed` and the batch has room. */
  #bracketed(b: Batch, op: Op, timed: boolean, body: () => void): void {
    if (!timed || !this.hasQueryRoom(b)) return body();
    const index = this.#allocQueries(b, 2);
    b.encoder.beginComputePass({ label: `${op.name} begin`, timestampWrites: { querySet: b.ts!.querySet, endOfPassWriteIndex: index } }).end();
    body();
    b.encoder.beginComputePass({ label: `${op.name} end`, timestampWrites: { querySet: b.ts!.querySet, endOfPassWriteIndex: index + 1 } }).end();
    b.timed.push({ op, begin: index, end: index + 1 });
    op.pendingParts++;
  }
}

/** The ops of batch `b` using `pinned`: found through the buffer's last group, no map per batch. */
function opsFor(b: Batch, groups: PinnedGroup[], pinned: PinnedBuffer): Op[] {
  const last = pinned.lastGroup as PinnedGroup | null;
  if (last && last.batch === b.id) return last.ops;
  const group: PinnedGroup = { batch: b.id, pinned, ops: [] };
  groups.push(group);
  pinned.lastGroup = group;
  return group.ops;
}
