/**
 * One enqueued operation: a node of the scheduler's DAG. Internal; the public API hands out op ids.
 *
 * Two states matter for dependencies:
 * - `ordered`: the op's place in the single GPU queue is fixed (GPU ops: encoded; host functions:
 *   finished; markers: their dependencies ordered). A GPU op may be encoded once all its
 *   dependencies are ordered: queue order then guarantees the rest, at no GPU cost.
 * - `done`: the op's effects are complete and visible to the host, and so are its dependencies'.
 *   A host function may start only once its dependencies are done.
 */
import type { StreamError } from './errors.js';
import type { DeviceResource } from './memory.js';
import type { PinnedBuffer } from './pinned.js';
import type { Kernel, PipelineEntry } from './kernels.js';
import type { StagingSlice } from './transfer.js';
import type { TextureRegion } from './texture.js';
import type { StreamClock, VectorClock } from './clock.js';

export type OpKind = 'launch' | 'copy' | 'upload' | 'download' | 'encode' | 'hostFn' | 'record' | 'wait';

export interface LaunchPayload {
  kind: 'launch';
  kernel: Kernel;
  pipeline: PipelineEntry;
  /** Resources in the kernel's binding order: buffers, texture views, samplers. */
  bindings: (GPUBuffer | GPUTextureView | GPUSampler)[];
  /** The texture behind each texture binding (null elsewhere), for the sanitizer; null when none. */
  textures: (GPUTexture | null)[] | null;
  workgroups: [number, number, number];
}
export interface CopyPayload {
  kind: 'copy';
  /** A buffer, or a texture region (its offset then unused). */
  src: GPUBuffer | TextureRegion;
  srcOffset: number;
  dst: GPUBuffer | TextureRegion;
  dstOffset: number;
  size: number;
}
export interface UploadPayload {
  kind: 'upload';
  /** Pinned source, or null when `staging` holds a pooled copy of pageable data. */
  pinned: PinnedBuffer | null;
  /** Where a pageable upload's bytes were staged (a whole pooled buffer or a slice of a shared one). */
  staging: StagingSlice | null;
  srcOffset: number;
  dst: GPUBuffer | TextureRegion;
  dstOffset: number;
  size: number;
}
export interface DownloadPayload {
  kind: 'download';
  src: GPUBuffer | TextureRegion;
  srcOffset: number;
  pinned: PinnedBuffer | null;
  /** Pageable destination (when not pinned). */
  view: Uint8Array | null;
  dstOffset: number;
  size: number;
  /** Pooled read-back buffer, taken at encode. */
  readback: GPUBuffer | null;
  /** A texture's rows: from the read-back's aligned layout (`region`) into `view` (`bytes` long) laid out as `to`. */
  unpack?: { region: TextureRegion; to: { bytesPerRow: number; rowsPerImage: number }; bytes: number };
}
/** Bytes [start, end) of a buffer an op touches; or a whole texture ([0, 1), `texture` set). */
export interface ByteRange {
  buffer: GPUBuffer | GPUTexture;
  label: string;
  start: number;
  end: number;
  texture?: true;
}
export interface EncodePayload {
  kind: 'encode';
  /** The app's commands, recorded into the op's own command encoder; or null with `commandBuffers`. */
  fn: ((encoder: GPUCommandEncoder) => void) | null;
  /** Command buffers finished elsewhere, submitted at the op's place. */
  commandBuffers: GPUCommandBuffer[] | null;
  /** What they read and write, as declared (the sanitizer checks them). */
  reads: ByteRange[];
  writes: ByteRange[];
}
export interface HostFnPayload {
  kind: 'hostFn';
  fn: () => unknown;
  /** The library's own host work (`uploadFrom`): a StreamError it throws is the op's error as it is. */
  own?: boolean;
  /** Bytes of a buffer the host work writes through other streams (`uploadFrom`), for the sanitizer. */
  writes?: { buffer: GPUBuffer; label: string; start: number; end: number };
  /** Bytes of a buffer it reads (`copyPeer`'s source, on another context), for the sanitizer. */
  reads?: { buffer: GPUBuffer; label: string; start: number; end: number };
  /** Called once the op is done, run or not (`uploadFrom` gives back what it read ahead). */
  cleanup?: () => void;
  /**
   * Starts once the earlier work of this device it depends on has its place in the queue, not once
   * it is done: all it does to the device is enqueue GPU work, which queue order puts behind that
   * work (`uploadFrom` from a source read ahead).
   */
  afterOrdered?: boolean;
}
export interface RecordPayload {
  kind: 'record';
  /** Timestamp query wanted (timing event on a device with timestamp-query). */
  timing: boolean;
  /** GPU timestamp of the record, ns, once read back. */
  timestamp: bigint | null;
  eventLabel: string;
}
export interface WaitPayload {
  kind: 'wait';
  what: string;
  /** For the sanitizer: the clock of what is waited for (an event's record, a stream), when known. */
  clock: VectorClock | null;
  /** A wait on an event that was never recorded (it orders nothing). */
  unrecorded: boolean;
}

export type Payload = LaunchPayload | CopyPayload | UploadPayload | DownloadPayload | EncodePayload | HostFnPayload | RecordPayload | WaitPayload;

/**
 * What a completed op keeps of its payload: its kind only (a record keeps its timestamp), so a
 * finished op (a stream's tail, an event's last record) holds no user array, function or buffer.
 */
const RELEASED: Record<Exclude<OpKind, 'record'>, Payload> = Object.freeze({
  launch: Object.freeze({ kind: 'launch' }) as unknown as Payload,
  copy: Object.freeze({ kind: 'copy' }) as unknown as Payload,
  upload: Object.freeze({ kind: 'upload', pinned: null, staging: null }) as unknown as Payload,
  download: Object.freeze({ kind: 'download', pinned: null, view: null, readback: null }) as unknown as Payload,
  encode: Object.freeze({ kind: 'encode' }) as unknown as Payload,
  hostFn: Object.freeze({ kind: 'hostFn' }) as unknown as Payload,
  wait: Object.freeze({ kind: 'wait', what: '', clock: null, unrecorded: false }) as unknown as Payload,
});

/** One shared empty list of ops or buffers, for ops with none (frozen: a push would be a bug, and throws). */
export const NONE: never[] = Object.freeze([]) as never[];

/** `list` with `x` appended: a new exact-size array while short (a push onto `[]` reserves 17 slots). */
export function withItem<T>(list: T[], x: T): T[] {
  if (list.length === 0) return [x];
  if (list.length === 1) return [list[0]!, x];
  list.push(x);
  return list;
}

/** An op's stages for the trace: ms on the performance.now() clock; GPU times in ns on the GPU clock. */
export class OpTimes {
  tSubmit = 0;
  tDone = 0;
  tHostBegin = 0;
  tHostEnd = 0;
  gpuBegin: bigint | null = null;
  gpuEnd: bigint | null = null;
  batchId = -1;
  constructor(readonly tEnqueue: number) {}
}

export class Op {
  /** Dependencies not yet done, or failed (see the class comment). */
  deps: Op[];
  /** Ops that list this one in `deps`; made on the first, dropped once this op is done. */
  dependents: Op[] | null = null;
  ordered = false;
  /** This op's own part is complete (GPU work finished, map resolved, function returned). */
  ownDone = false;
  done = false;
  error: StreamError | undefined = undefined;
  waiters: (() => void)[] | null = null;
  /** Extra completions the op waits for beyond its batch (maps, timestamp read-back). */
  pendingParts = 0;
  /** Device buffers retained by this op (released when done). */
  buffers: DeviceResource[];

  /** When the op went through each stage; only while tracing (a queued op stays small otherwise). */
  times: OpTimes | null = null;
  /**
   * WebGPU may reject it where the call could not check everything (a raw GPUBuffer, a binding size
   * the WGSL reflection could not compute): it goes in a submit of its own, and what depends on it
   * waits until that submit validated, so a rejection fails this op alone (see scheduler.ts).
   */
  isolated = false;
  /** Its place in its pinned buffer's claimants, -1 when none (see PinnedBuffer.claim). */
  claimIndex = -1;

  constructor(
    readonly id: number,
    readonly stream: StreamQueue,
    public payload: Payload,
    deps: Op[],
    buffers: DeviceResource[],
    readonly callSite: Error | undefined,
    /** What the op works on, for {@link Op.name}: a kernel, buffer, function or event label. */
    readonly subject: string,
    /** A transfer's destination label, for {@link Op.name}. */
    readonly target: string,
  ) {
    this.deps = deps;
    this.buffers = buffers;
  }

  get kind(): OpKind {
    return this.payload.kind;
  }

  /**
   * `copy a->b`, `upload ->b`, `download a->host`, the kernel's label, `hostFn f`, `wait e`,
   * `record e`. Made when asked (errors, traces, labels while tracing), not per op.
   */
  get name(): string {
    const a = this.subject;
    switch (this.payload.kind) {
      case 'launch':
        return a;
      case 'copy':
      case 'upload':
      case 'download':
        return `${this.payload.kind} ${a}->${this.target}`;
      case 'hostFn':
        return this.payload.own ? a : a ? `hostFn ${a}` : 'hostFn'; // the library's own (uploadFrom, copyPeer) by their call
      case 'encode':
        return a ? `encode ${a}` : 'encode';
      case 'wait':
        return `wait ${a}`;
      case 'record':
        return `record ${a}`;
    }
  }

  /** The pinned buffer this op uses, if any. */
  get pinned(): PinnedBuffer | null {
    const p = this.payload;
    return p.kind === 'upload' || p.kind === 'download' ? p.pinned : null;
  }

  /** True when the op runs on the GPU queue (as opposed to the host or as a marker). */
  get isGpu(): boolean {
    const k = this.payload.kind;
    return k === 'launch' || k === 'copy' || k === 'upload' || k === 'download' || k === 'encode' || (k === 'record' && this.payload.timing);
  }

  site(): { op: string; stream: string; context: string; callSite: Error | undefined; enqueued: true } {
    const p = this.payload;
    const op = p.kind === 'hostFn' && p.own ? this.subject : p.kind === 'wait' ? (p.what.startsWith('event') ? 'waitEvent' : 'waitStream') : this.kind;
    return { op, stream: this.stream.label, context: this.stream.owner.label, callSite: this.callSite, enqueued: true };
  }

  /** Drops the payload's references (user arrays, functions, buffers) once the op is done. */
  release(): void {
    const p = this.payload;
    if (p.kind === 'hostFn' && p.cleanup) p.cleanup();
    const k = p.kind;
    if (k !== 'record') this.payload = RELEASED[k];
  }
}

/** What a stream's queue needs of the scheduler that owns it (the scheduler implements it). */
export interface QueueOwner {
  /** The context's label, for messages. */
  readonly label: string;
  readonly device: GPUDevice;
  /** Stream `q` may be able to go on: something it waits for was ordered or completed. */
  wake(q: StreamQueue): void;
  /** Marks `op` done if its parts and dependencies are (the context's own bookkeeping). */
  tryComplete(op: Op): void;
}

/** Consecutive failed ops of one stream (ids `first`..`last`), reported as `error`. */
export interface FailureRun {
  first: number;
  last: number;
  error: StreamError;
}

/** Internal state of one stream. The public `Stream` wraps it. */
export class StreamQueue {
  /** Ops enqueued and not yet ordered, in stream order (`head` indexes the first). */
  pending: (Op | undefined)[] = [];
  head = 0;
  /** The last op enqueued (the next op's stream-order dependency); null once a reported failure cut it. */
  tail: Op | null = null;
  /** Id of the last op enqueued. */
  lastId = 0;
  /** Ops enqueued and not done. */
  active = 0;
  /** Host functions enqueued and not done (queued, ordered or running). */
  hostFnsUndone = 0;
  /** Pinned buffers being re-mapped to detach stale views; the stream's host functions wait for them. */
  remaps = 0;
  destroyed = false;
  /** In the flush's heap now. */
  inHeap = false;
  /** In the scheduler's list of streams to look at in the next flush. */
  dirty = false;
  /** In the scheduler's list of streams with ops not yet ordered (dropped there lazily once idle). */
  busy = false;
  /** Failed ops not yet reported to every kind of waiter. */
  failures: FailureRun[] = [];
  /** Id of the last op of this stream that became done (ops of a stream become done in order). */
  lastDoneId = 0;
  /** Failures up to these ids were reported to a stream / context synchronize. */
  reportedStream = 0;
  reportedCtx = 0;
  /** Synchronize calls (stream or context) waiting on this stream. */
  waiting = 0;
  /** The sanitizer's clock of this stream, once a sanitized context enqueued on it. */
  clock: StreamClock | null = null;
  /** The library's own stream (the copies of an `uploadFrom`): the sanitizer sees the op that drives it instead. */
  internal = false;

  constructor(
    readonly owner: QueueOwner,
    readonly label: string,
    readonly priority: number,
    readonly nonBlocking: boolean,
    readonly isDefault: boolean,
  ) {}

  /** Removes and returns the ops not yet ordered (the context closes): none will be encoded. */
  takePending(): Op[] {
    const out: Op[] = [];
    for (let i = this.head; i < this.pending.length; i++) {
      const op = this.pending[i];
      if (!op) continue;
      if (op.pinned) op.pinned.unencoded--;
      out.push(op);
    }
    this.pending = [];
    this.head = 0;
    return out;
  }

  /** The first failure among ops `from` < id <= `upTo`, if any. */
  failureIn(from: number, upTo: number): StreamError | undefined {
    for (const f of this.failures) if (f.last > from && f.first <= upTo) return f.error;
    return undefined;
  }

  /**
   * After a report: work enqueued from now on no longer inherits a reported failure, and runs every
   * kind of waiter has seen are forgotten (once no older waiter may still look at them).
   */
  reported(err: StreamError | undefined): void {
    if (err && this.tail?.done && this.tail.error) this.tail = null;
    if (this.waiting > 0 || this.failures.length === 0) return;
    const firstForStream = this.failures.find((f) => f.last > this.reportedStream);
    this.failures = this.failures.filter((f) => f === firstForStream || f.last > this.reportedCtx);
  }

  get headOp(): Op | undefined {
    return this.pending[this.head];
  }

  /** Drops the head (ordered now); the slot is cleared so a done op is not kept alive here. */
  shift(): void {
    this.pending[this.head++] = undefined;
    if (this.head > 1024 && this.head * 2 > this.pending.length) {
      this.pending = this.pending.slice(this.head);
      this.head = 0;
    }
  }
}

/** `deps` with `d` added when `d` is a dependency to wait on (not done, or failed) and new. */
export function addDep(deps: Op[], d: Op | null | undefined): Op[] {
  return d && (!d.done || d.error) && !deps.includes(d) ? withItem(deps, d) : deps;
}
