/**
 * The heart of the runtime: turns several host-side streams into one well-ordered, well-batched
 * submission order on WebGPU's single queue.
 *
 * - The DAG: stream order + event/stream edges + CUDA legacy default-stream edges + host readiness
 *   (a pinned buffer that is still being mapped, a kernel pipeline still being validated).
 * - Flush: on a microtask after an enqueue, on synchronize, on `ctx.flush()`, and whenever
 *   something completes. Every ready op (priority first, then enqueue order) goes into one command
 *   encoder and one `queue.submit`. No timers, no polling loops.
 * - A stream blocked on a host condition never delays another stream's ready work.
 * - Completion: `onSubmittedWorkDone` for the batch (plus its error scope), `mapAsync` for
 *   read-backs, timestamp read-back for timed ops.
 */
import { DependencyError, DeviceLostError, GpuValidationError, HostFnError, AbortError, type StreamError } from './errors.js';
import { BufferUsage, MapMode } from './gpu-constants.js';
import type { DeviceBuffer, StagingPool } from './memory.js';
import { NONE, Op, OpTimes, withItem, type Payload } from './op.js';
import type { Trace } from './trace.js';

/** Internal state of one stream. The public `Stream` wraps it. */
export class StreamQueue {
  /** Ops enqueued and not yet ordered, in stream order (`head` indexes the first). */
  pending: Op[] = [];
  head = 0;
  /** The last op enqueued (the next op's stream-order dependency). */
  tail: Op | null = null;
  /** First failure since the last synchronize that reported one. */
  firstError: StreamError | undefined = undefined;
  /** Ops enqueued and not done. */
  active = 0;
  /** Host functions enqueued and not done (queued, ordered or running). */
  hostFnsUndone = 0;
  destroyed = false;
  /** Enqueue sequence of the stream's creation, a tie-break for equal priorities. */
  constructor(
    readonly label: string,
    readonly priority: number,
    readonly nonBlocking: boolean,
    readonly isDefault: boolean,
    readonly index: number,
  ) {}

  get headOp(): Op | undefined {
    return this.pending[this.head];
  }

  shift(): void {
    this.head++;
    if (this.head > 1024 && this.head * 2 > this.pending.length) {
      this.pending = this.pending.slice(this.head);
      this.head = 0;
    }
  }
}

const QUERIES_PER_BATCH = 512;

/** `deps` with `d` added when `d` is a dependency to wait on (not done, or failed) and new. */
function addDep(deps: Op[], d: Op | null): Op[] {
  return d && (!d.done || d.error) && !deps.includes(d) ? withItem(deps, d) : deps;
}

interface TimestampSet {
  querySet: GPUQuerySet;
  resolve: GPUBuffer;
  readback: GPUBuffer;
}

/** One command encoder, becoming one submit. */
class Batch {
  readonly ops: Op[] = [];
  readonly pinnedDownloads = new Map<import('./pinned.js').PinnedBuffer, Op[]>();
  readonly pinnedUploads = new Map<import('./pinned.js').PinnedBuffer, Op[]>();
  readonly stagingUploads: GPUBuffer[] = [];
  readonly readbacks: Op[] = [];
  /** Ops whose GPU timestamps (begin/end query indices) come back with this batch. */
  readonly timed: { op: Op; begin: number; end: number }[] = [];
  ts: TimestampSet | null = null;
  queries = 0;
  tSubmit = 0;
  constructor(
    readonly id: number,
    readonly encoder: GPUCommandEncoder,
  ) {}
}

export interface SchedulerOptions {
  maxSubmitsInFlight: number;
  maxOpsPerSubmit: number;
  timestampQuery: boolean;
  traceGpu: boolean;
}

type Resolver = { resolve: () => void; reject: (e: unknown) => void };

export class Scheduler {
  /** Live streams (destroyed ones are dropped once their work is done and reported). */
  streams: StreamQueue[] = [];
  #created = 0;
  /** Streams with ops not yet ordered. */
  readonly #busy = new Set<StreamQueue>();
  #nextOpId = 1;
  #nextBatchId = 1;
  #flushScheduled = false;
  #flushing = false;
  #inFlight = 0;
  #lost: DeviceLostError | null = null;
  #hostQueue: Op[] = [];
  /** Host functions running now (started, not finished), by stream. */
  readonly #runningHost = new Map<StreamQueue, Op>();
  #tsPool: TimestampSet[] = [];
  /** Host-clock offset of the GPU clock, ns (min over batches of host completion - GPU end). */
  #clockOffsetNs: number | null = null;
  #clockLowerNs = -Infinity;
  readonly defaultQueue: StreamQueue;
  /** Every submit, in order, as op ids (kept only while tracing). */
  submitLog: number[][] | null = null;

  constructor(
    readonly device: GPUDevice,
    readonly staging: StagingPool,
    readonly options: SchedulerOptions,
    readonly trace: Trace | null,
  ) {
    this.defaultQueue = this.createQueue('default', 0, false, true);
    if (trace) this.submitLog = [];
  }

  get lost(): DeviceLostError | null {
    return this.#lost;
  }

  get submitsInFlight(): number {
    return this.#inFlight;
  }

  createQueue(label: string, priority: number, nonBlocking: boolean, isDefault = false): StreamQueue {
    const q = new StreamQueue(label, priority, nonBlocking, isDefault, this.#created++);
    this.streams.push(q);
    if ((this.#created & 63) === 0) this.prune();
    return q;
  }

  /** Forgets destroyed streams whose work is done and whose failure (if any) was reported. */
  prune(): void {
    this.streams = this.streams.filter((q) => !(q.destroyed && q.active === 0 && !q.firstError));
  }

  // ---------------------------------------------------------------- enqueue

  /**
   * Adds an op to a stream. `extraDeps` are cross-stream dependencies (events, waitStream).
   * Never blocks; schedules a flush on a microtask.
   */
  enqueue(q: StreamQueue, payload: Payload, extraDeps: (Op | null)[], buffers: DeviceBuffer[], callSite: Error | undefined, subject: string, target = ''): Op {
    // Exact-size arrays, built without a closure: queued ops live until they complete, so each
    // byte per op is copied by every young-generation GC while they wait.
    let deps: Op[] = addDep(NONE, q.tail);
    for (const d of extraDeps) deps = addDep(deps, d);
    // CUDA legacy default stream: it waits for all blocking streams, and they wait for it.
    if (q.isDefault) {
      for (const s of this.streams) if (!s.isDefault && !s.nonBlocking && s.tail && !s.tail.done) deps = addDep(deps, s.tail);
    } else if (!q.nonBlocking) {
      const d = this.defaultQueue.tail;
      if (d && !d.done) deps = addDep(deps, d);
    }
    const op = new Op(this.#nextOpId++, q, payload, deps, buffers, callSite, subject, target);
    if (this.trace) op.times = new OpTimes(performance.now());
    for (const d of deps) if (!d.done) d.dependents = withItem(d.dependents ?? NONE, op);
    for (const b of buffers) b.retain();
    const pinned = op.pinned;
    if (pinned) pinned.claim(op);
    if (op.kind === 'hostFn') q.hostFnsUndone++;
    q.pending.push(op);
    // Hand the mapping back now, not at the flush, when nothing can use the views before this op
    // runs: it is the buffer's only claimant and no host function of its stream is undone (one
    // could open a window to fill it, see hostWindow). Each mapped range is an ArrayBuffer that V8
    // counts as external memory while attached; detaching it early keeps a pipeline's attached
    // ranges below V8's 64 MiB trigger for a GC (BENCHMARKS.md, "Mapped ranges and V8's GC").
    if (pinned && pinned.claims === 1 && q.hostFnsUndone === 0) pinned.unmapForGpu();
    q.tail = op;
    q.active++;
    this.#busy.add(q);
    this.scheduleFlush();
    return op;
  }

  scheduleFlush(): void {
    if (this.#flushScheduled) return;
    this.#flushScheduled = true;
    queueMicrotask(() => {
      this.#flushScheduled = false;
      this.flush();
    });
  }

  // ---------------------------------------------------------------- flush

  /** Orders every ready op: one command encoder and one submit for all ready GPU work. */
  flush(): void {
    if (this.#flushing || this.#lost) return;
    this.#flushing = true;
    let batch: Batch | null = null;
    try {
      let progress = true;
      while (progress) {
        progress = false;
        // Ready heads, best first: lower priority number, then older op.
        const ready: StreamQueue[] = [];
        for (const q of this.#busy) {
          const op = q.headOp;
          if (!op) {
            this.#busy.delete(q);
            continue;
          }
          if (this.#canOrder(op)) ready.push(q);
        }
        if (ready.length === 0) break;
        const heap = new StreamHeap(ready);
        let q: StreamQueue | undefined;
        while ((q = heap.pop())) {
          const op = q.headOp!;
          if (!this.#canOrder(op)) continue;
          if (op.isGpu && !op.error) {
            if (batch && batch.queries + 2 > QUERIES_PER_BATCH && this.#wantsTimestamps(op)) {
              this.#submit(batch);
              batch = null;
            }
            if (!batch) {
              if (this.#inFlight >= this.options.maxSubmitsInFlight) {
                continue; // the window is full: GPU work waits; host work and markers go on
              }
              // Transient encoders and passes are labelled only while tracing: a label costs Dawn
              // a few microseconds per pass (encode and submit), and errors name their ops anyway.
              batch = new Batch(this.#nextBatchId++, this.device.createCommandEncoder(this.trace ? { label: 'webgpu-streams batch' } : undefined));
            }
          }
          q.shift();
          this.#order(op, batch);
          if (batch && batch.ops.length >= this.options.maxOpsPerSubmit) {
            this.#submit(batch);
            batch = null;
          }
          progress = true;
          const next = q.headOp;
          if (next && this.#canOrder(next)) heap.push(q);
        }
      }
    } finally {
      this.#flushing = false;
    }
    if (batch) this.#submit(batch);
    this.#runHostFns();
  }

  #wantsTimestamps(op: Op): boolean {
    return (op.kind === 'record' && op.payload.kind === 'record' && op.payload.timing) || (this.options.traceGpu && this.options.timestampQuery && op.isGpu);
  }

  /** May `op` take its place in the order now? Fails it when a dependency failed. */
  #canOrder(op: Op): boolean {
    for (const d of op.deps) {
      if (d.error) {
        if (!op.error) op.error = inherit(op, d);
        return true;
      }
      if (op.kind === 'hostFn' ? !d.done : !d.ordered) return false;
    }
    if (op.error) return true;
    const p = op.payload;
    const pinned = op.pinned;
    if (pinned && pinned.state === 'mapping') return false;
    if (p.kind === 'launch') {
      const entry = p.pipeline;
      if (!entry.ok) {
        if (entry.error !== undefined) {
          op.error = new GpuValidationError(`kernel '${p.kernel.label}' failed to compile or validate: ${entry.error}`, op.site());
          return true;
        }
        entry.validated.then(() => this.scheduleFlush(), () => this.scheduleFlush());
        return false;
      }
    }
    return true;
  }

  /** Fixes `op`'s place: encodes GPU ops into `batch`, queues host functions, passes markers. */
  #order(op: Op, batch: Batch | null): void {
    const q = op.stream;
    if (op.error) {
      // A dependency failed: the op is skipped.
      op.ordered = true;
      const pinned = op.pinned;
      if (pinned) pinned.unencoded--;
      this.#ownDone(op);
      return;
    }
    const p = op.payload;
    switch (p.kind) {
      case 'hostFn':
        this.#hostQueue.push(op);
        return; // ordered when it finished
      case 'wait':
        op.ordered = true;
        this.#ownDone(op);
        return;
      case 'record':
        if (!p.timing) {
          op.ordered = true;
          this.#ownDone(op);
          return;
        }
        break;
      default:
        break;
    }
    // GPU op.
    const b = batch!;
    const enc = b.encoder;
    if (op.times) op.times.batchId = b.id;
    b.ops.push(op);
    const timed = this.options.traceGpu && this.options.timestampQuery;
    switch (p.kind) {
      case 'launch': {
        const bindGroup = p.kernel.bindGroup(p.bindings);
        const tw = timed ? this.#timestampWrites(b, op, true) : undefined;
        const pass = enc.beginComputePass(tw ? { label: op.name, timestampWrites: tw } : this.trace ? { label: op.name } : undefined);
        pass.setPipeline(p.pipeline.pipeline);
        pass.setBindGroup(0, bindGroup);
        pass.dispatchWorkgroups(p.workgroups[0], p.workgroups[1], p.workgroups[2]);
        pass.end();
        break;
      }
      case 'copy':
        this.#copy(b, op, timed, p.src, p.srcOffset, p.dst, p.dstOffset, p.size);
        break;
      case 'upload': {
        if (p.pinned) {
          p.pinned.unmapForGpu();
          p.pinned.unencoded--;
          let uses = b.pinnedUploads.get(p.pinned);
          if (!uses) b.pinnedUploads.set(p.pinned, (uses = []));
          uses.push(op);
          this.#copy(b, op, timed, p.pinned.buffer, p.srcOffset, p.dst, p.dstOffset, p.size);
        } else {
          const staging = p.staging!;
          b.stagingUploads.push(staging);
          this.#copy(b, op, timed, staging, 0, p.dst, p.dstOffset, p.size);
        }
        break;
      }
      case 'download': {
        if (p.pinned) {
          p.pinned.unmapForGpu();
          p.pinned.unencoded--;
          let list = b.pinnedDownloads.get(p.pinned);
          if (!list) b.pinnedDownloads.set(p.pinned, (list = []));
          list.push(op);
          op.pendingParts++;
          this.#copy(b, op, timed, p.src, p.srcOffset, p.pinned.buffer, p.dstOffset, p.size);
        } else {
          p.readback = this.staging.acquireReadback(p.size, op);
          b.readbacks.push(op);
          op.pendingParts++;
          this.#copy(b, op, timed, p.src, p.srcOffset, p.readback, 0, p.size);
        }
        break;
      }
      case 'record': {
        // An empty pass whose end-of-pass timestamp marks the point after all earlier work.
        const index = this.#allocQueries(b, 1);
        enc.beginComputePass({ label: op.name, timestampWrites: { querySet: b.ts!.querySet, endOfPassWriteIndex: index } }).end();
        b.timed.push({ op, begin: index, end: index });
        op.pendingParts++;
        break;
      }
    }
    op.ordered = true;
    // Ops waiting on this one in other streams may be ready now; the outer flush loop rescans.
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

  #timestampWrites(b: Batch, op: Op, wrap: boolean): GPUComputePassTimestampWrites | undefined {
    if (!wrap || b.queries + 2 > QUERIES_PER_BATCH) return undefined;
    const index = this.#allocQueries(b, 2);
    b.timed.push({ op, begin: index, end: index + 1 });
    op.pendingParts++;
    return { querySet: b.ts!.querySet, beginningOfPassWriteIndex: index, endOfPassWriteIndex: index + 1 };
  }

  /** Encodes a copy; between two empty timestamp passes when GPU tracing is on. */
  #copy(b: Batch, op: Op, timed: boolean, src: GPUBuffer, srcOffset: number, dst: GPUBuffer, dstOffset: number, size: number): void {
    if (!timed || b.queries + 2 > QUERIES_PER_BATCH) return b.encoder.copyBufferToBuffer(src, srcOffset, dst, dstOffset, size);
    const index = this.#allocQueries(b, 2);
    b.encoder.beginComputePass({ label: `${op.name} begin`, timestampWrites: { querySet: b.ts!.querySet, endOfPassWriteIndex: index } }).end();
    b.encoder.copyBufferToBuffer(src, srcOffset, dst, dstOffset, size);
    b.encoder.beginComputePass({ label: `${op.name} end`, timestampWrites: { querySet: b.ts!.querySet, endOfPassWriteIndex: index + 1 } }).end();
    b.timed.push({ op, begin: index, end: index + 1 });
    op.pendingParts++;
  }

  // ---------------------------------------------------------------- submit and completion

  #submit(b: Batch): void {
    const device = this.device;
    const ts = b.ts;
    if (ts) {
      b.encoder.resolveQuerySet(ts.querySet, 0, b.queries, ts.resolve, 0);
      b.encoder.copyBufferToBuffer(ts.resolve, 0, ts.readback, 0, b.queries * 8);
    }
    // One validation scope per submit: launches, copies and transfers were checked at the call, so
    // an error here is unexpected; it fails the ops of this submit (and what depends on them).
    device.pushErrorScope('validation');
    const cmd = b.encoder.finish();
    b.tSubmit = performance.now();
    device.queue.submit([cmd]);
    const validation = device.popErrorScope();
    this.#inFlight++;
    if (this.submitLog) this.submitLog.push(b.ops.map((o) => o.id));
    if (this.trace) for (const op of b.ops) if (op.times) op.times.tSubmit = b.tSubmit;

    // Hand mapped memory back to the host as soon as the GPU is done with it.
    // Pinned upload buffers are re-mapped now (the map resolves once the GPU copied out of them);
    // their ops complete once mapped, so after `synchronize()` the host owns them again, and a
    // host function before a later use of the same buffer can refill it.
    // A map of a buffer this submit used resolves once the submit's work is done: it also serves
    // as the submit's completion, which spares an onSubmittedWorkDone (one fewer native promise
    // per submit, less for the GC to trace in a hot pipeline).
    let mapped: Promise<void> | null = null;
    for (const [p, ops] of b.pinnedUploads) {
      if (p.state !== 'unmapped') continue;
      for (const op of ops) op.pendingParts++;
      const m = p.map();
      mapped ??= m;
      m.then(
        () => ops.forEach((op) => this.#partDone(op)),
        (e: unknown) => ops.forEach((op) => this.#fail(op, this.#asError(e, op))),
      );
    }
    for (const s of b.stagingUploads) this.staging.releaseUpload(s);
    for (const [p, ops] of b.pinnedDownloads) {
      const m = p.map();
      mapped ??= m;
      m.then(
        () => ops.forEach((op) => this.#partDone(op)),
        (e: unknown) => ops.forEach((op) => this.#fail(op, this.#asError(e, op))),
      );
    }
    for (const op of b.readbacks) {
      const p = op.payload;
      if (p.kind !== 'download') continue;
      const rb = p.readback!;
      rb.mapAsync(MapMode.READ, 0, p.size).then(
        () => {
          if (op.times) op.times.tHostBegin = performance.now();
          p.view!.set(new Uint8Array(rb.getMappedRange(0, p.size)));
          if (op.times) op.times.tHostEnd = performance.now();
          this.staging.releaseReadback(rb);
          p.readback = null;
          this.#partDone(op);
        },
        (e: unknown) => this.#fail(op, this.#asError(e, op)),
      );
    }
    if (ts) {
      const n = b.queries;
      ts.readback.mapAsync(MapMode.READ, 0, n * 8).then(
        () => {
          const stamps = new BigUint64Array(ts.readback.getMappedRange(0, n * 8).slice(0));
          ts.readback.unmap();
          this.#tsPool.push(ts);
          let maxEnd = 0n;
          let minBegin: bigint | null = null;
          for (const t of b.timed) {
            const begin = stamps[t.begin]!;
            const end = stamps[t.end]!;
            const times = t.op.times;
            if (times) {
              times.gpuBegin = begin;
              times.gpuEnd = end;
            }
            if (t.op.payload.kind === 'record') t.op.payload.timestamp = end;
            if (end > maxEnd) maxEnd = end;
            if (minBegin === null || begin < minBegin) minBegin = begin;
          }
          this.#alignClocks(b.tSubmit, minBegin, performance.now(), maxEnd);
          for (const t of b.timed) this.#partDone(t.op);
        },
        (e: unknown) => {
          for (const t of b.timed) this.#fail(t.op, this.#asError(e, t.op));
        },
      );
    }
    const workDone = mapped ? mapped.then(undefined, () => device.queue.onSubmittedWorkDone()) : device.queue.onSubmittedWorkDone();
    Promise.all([validation, workDone]).then(
      ([err]) => {
        this.#inFlight--;
        const tDone = performance.now();
        for (const op of b.ops) {
          if (op.times) op.times.tDone = tDone;
          if (err) this.#fail(op, new GpuValidationError(`WebGPU rejected the submit that carried this op: ${err.message}`, op.site()));
          else this.#ownDone(op);
        }
        this.scheduleFlush();
      },
      (e: unknown) => {
        this.#inFlight--;
        for (const op of b.ops) this.#fail(op, this.#asError(e, op));
      },
    );
  }

  #alignClocks(tSubmitMs: number, gpuBegin: bigint | null, tDoneMs: number, gpuEnd: bigint): void {
    if (gpuEnd === 0n) return;
    const upper = tDoneMs * 1e6 - Number(gpuEnd);
    if (this.#clockOffsetNs === null || upper < this.#clockOffsetNs) this.#clockOffsetNs = upper;
    if (gpuBegin !== null) this.#clockLowerNs = Math.max(this.#clockLowerNs, tSubmitMs * 1e6 - Number(gpuBegin));
  }

  /** Converts a GPU timestamp (ns) to the host's performance.now() clock (ms), estimated. */
  gpuToHostMs(ns: bigint): number | null {
    if (this.#clockOffsetNs === null) return null;
    const offset = Math.max(this.#clockOffsetNs, this.#clockLowerNs);
    return (Number(ns) + offset) / 1e6;
  }

  #asError(e: unknown, op: Op): StreamError {
    if (this.#lost) return this.#lost;
    if (e instanceof Error && 'op' in e) return e as StreamError;
    return new GpuValidationError(`WebGPU failed: ${e instanceof Error ? e.message : String(e)}`, { ...op.site(), cause: e });
  }

  /** One of the op's extra parts (map, timestamps) finished. */
  #partDone(op: Op): void {
    op.pendingParts--;
    this.#tryComplete(op);
  }

  #ownDone(op: Op): void {
    op.ownDone = true;
    this.#tryComplete(op);
  }

  #fail(op: Op, err: StreamError): void {
    if (op.done) return;
    if (!op.error) op.error = err;
    op.ordered = true;
    op.ownDone = true;
    op.pendingParts = 0;
    this.#tryComplete(op);
  }

  /** Marks `op` done once its own part, extra parts and dependencies are all done. */
  #tryComplete(op: Op): void {
    if (op.done || !op.ownDone || op.pendingParts > 0) return;
    for (const d of op.deps) {
      if (!d.done) return;
      if (d.error && !op.error) op.error = inherit(op, d);
    }
    op.done = true;
    if (op.kind === 'hostFn') op.stream.hostFnsUndone--;
    if (this.trace) {
      if (op.times && !op.times.tDone) op.times.tDone = performance.now();
      this.trace.add(op, this);
    }
    const q = op.stream;
    q.active--;
    if (op.error && !q.firstError) q.firstError = op.error;
    for (const b of op.buffers) b.release();
    op.pinned?.unclaim(op);
    op.deps = NONE;
    const dependents = op.dependents;
    op.dependents = null;
    const ws = op.waiters;
    op.waiters = null;
    if (ws) for (const w of ws) w();
    if (dependents) for (const d of dependents) this.#tryComplete(d);
    this.scheduleFlush();
  }

  #runHostFns(): void {
    if (this.#hostQueue.length === 0) return;
    const ops = this.#hostQueue;
    this.#hostQueue = [];
    for (const op of ops) {
      const p = op.payload;
      if (p.kind !== 'hostFn') continue;
      if (op.times) op.times.tHostBegin = performance.now();
      this.#runningHost.set(op.stream, op);
      const finish = (err?: unknown): void => {
        if (op.times) op.times.tHostEnd = performance.now();
        this.#runningHost.delete(op.stream);
        if (err !== undefined) op.error = new HostFnError(`host function threw: ${err instanceof Error ? err.message : String(err)}`, { ...op.site(), cause: err });
        op.ordered = true;
        this.#ownDone(op);
      };
      let result: unknown;
      try {
        result = p.fn();
      } catch (e) {
        finish(e ?? new Error('undefined was thrown'));
        continue;
      }
      if (result && typeof (result as PromiseLike<unknown>).then === 'function') {
        (result as PromiseLike<unknown>).then(
          () => finish(),
          (e: unknown) => finish(e ?? new Error('rejected with undefined')),
        );
      } else finish();
    }
  }

  /**
   * The host may touch a pinned buffer whose claimants are all unencoded when each waits behind a
   * host function of its own stream that is running now (it cannot be encoded before that ends).
   */
  hostWindow(claimants: ReadonlySet<{ readonly id: number; readonly ordered: boolean; readonly stream: { readonly label: string } }>): boolean {
    for (const c of claimants) {
      const running = this.#runningHost.get((c as Op).stream);
      if (c.ordered || !running || running.id > c.id) return false;
    }
    return true;
  }

  // ---------------------------------------------------------------- waiting

  /** Resolves when `op` is done (successfully or not). Flushes first. */
  whenDone(op: Op, signal?: AbortSignal): Promise<void> {
    if (op.done) return Promise.resolve();
    if (this.#lost) return Promise.reject(this.#lost);
    this.flush();
    if (op.done) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const r: Resolver = { resolve, reject };
      const onAbort = (): void => {
        const ws = op.waiters;
        if (ws) op.waiters = ws.filter((w) => w !== done);
        this.#lostWaiters.delete(r);
        reject(new AbortError(`wait for op '${op.kind}' #${op.id} on stream '${op.stream.label}' was aborted`, { ...op.site(), cause: signal?.reason }));
      };
      const done = (): void => {
        signal?.removeEventListener('abort', onAbort);
        this.#lostWaiters.delete(r);
        resolve();
      };
      if (signal) {
        if (signal.aborted) return onAbort();
        signal.addEventListener('abort', onAbort, { once: true });
      }
      (op.waiters ??= []).push(done);
      this.#lostWaiters.add(r);
    });
  }

  readonly #lostWaiters = new Set<Resolver>();

  /** Waits for everything enqueued on `q` so far; rejects with its first unreported failure. */
  async synchronizeQueue(q: StreamQueue, signal?: AbortSignal): Promise<void> {
    const tail = q.tail;
    if (tail) await this.whenDone(tail, signal);
    this.#reportError(q);
  }

  /** Waits for every stream; rejects with the first unreported failure of any stream. */
  async synchronizeAll(signal?: AbortSignal): Promise<void> {
    const tails = this.streams.map((q) => q.tail).filter((t): t is Op => t !== null && !t.done);
    await Promise.all(tails.map((t) => this.whenDone(t, signal)));
    this.prune();
    let first: StreamError | undefined;
    for (const q of this.streams) {
      try {
        this.#reportError(q);
      } catch (e) {
        first ??= e as StreamError;
      }
    }
    if (first) throw first;
  }

  #reportError(q: StreamQueue): void {
    if (this.#lost) throw this.#lost;
    const err = q.firstError;
    if (!err) return;
    q.firstError = undefined;
    // Reported: work enqueued from now on no longer inherits the failure.
    if (q.tail?.done) q.tail = null;
    throw err;
  }

  /** Device lost: every pending op fails and every wait rejects; nothing hangs. */
  deviceLost(reason: string, message: string): void {
    if (this.#lost) return;
    this.#lost = new DeviceLostError(`the GPU device was lost (${reason}): ${message || 'no message'}`);
    const all: Op[] = [];
    for (const q of this.streams) {
      for (let i = q.head; i < q.pending.length; i++) all.push(q.pending[i]!);
      q.pending = [];
      q.head = 0;
      if (q.tail && !q.tail.done) all.push(q.tail);
    }
    for (const op of all) this.#fail(op, this.#lost);
    for (const r of this.#lostWaiters) r.reject(this.#lost);
    this.#lostWaiters.clear();
  }

  destroy(): void {
    for (const ts of this.#tsPool) {
      ts.querySet.destroy();
      ts.resolve.destroy();
      ts.readback.destroy();
    }
    this.#tsPool = [];
  }
}

/**
 * The error an op takes when its dependency `d` failed: within one stream the same error (one
 * failure, one report); across streams a DependencyError naming this stream, with the cause.
 */
function inherit(op: Op, d: Op): StreamError {
  const err = d.error!;
  if (d.stream === op.stream && err instanceof DependencyError) return err;
  const root = err instanceof DependencyError && err.cause instanceof Error ? err.cause : err;
  return new DependencyError(`did not run: it depends on op '${d.kind}' #${d.id} on stream '${d.stream.label}', which failed: ${root.message.split('\n')[0]}`, { ...op.site(), cause: root });
}

/** A binary heap of streams keyed by (priority, head op id). */
class StreamHeap {
  readonly #items: StreamQueue[] = [];
  constructor(items: StreamQueue[]) {
    for (const q of items) this.push(q);
  }

  static #less(a: StreamQueue, b: StreamQueue): boolean {
    if (a.priority !== b.priority) return a.priority < b.priority;
    return (a.headOp?.id ?? Infinity) < (b.headOp?.id ?? Infinity);
  }

  push(q: StreamQueue): void {
    const h = this.#items;
    h.push(q);
    let i = h.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!StreamHeap.#less(h[i]!, h[parent]!)) break;
      [h[i], h[parent]] = [h[parent]!, h[i]!];
      i = parent;
    }
  }

  pop(): StreamQueue | undefined {
    const h = this.#items;
    if (h.length === 0) return undefined;
    const top = h[0]!;
    const last = h.pop()!;
    if (h.length > 0) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && StreamHeap.#less(h[l]!, h[m]!)) m = l;
        if (r < h.length && StreamHeap.#less(h[r]!, h[m]!)) m = r;
        if (m === i) break;
        [h[i], h[m]] = [h[m]!, h[i]!];
        i = m;
      }
    }
    return top;
  }
}
