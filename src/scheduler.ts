/**
 * The heart of the runtime: turns several host-side streams into one well-ordered, well-batched
 * submission order on WebGPU's single queue.
 *
 * - The DAG: stream order + event/stream edges + CUDA legacy default-stream edges + host readiness
 *   (a pinned buffer that is still being mapped, a kernel pipeline still being validated). Edges
 *   may cross contexts: an op waiting on another context's op is woken by that context.
 * - Flush: on a microtask after an enqueue, on synchronize, on `ctx.flush()`, and whenever
 *   something completes. Every ready op (priority first, then enqueue order) goes into one command
 *   encoder and one `queue.submit`. No timers, no polling loops.
 * - A stream blocked on a host condition never delays another stream's ready work.
 * - Completion: `onSubmittedWorkDone` for the batch (plus its error scope), `mapAsync` for
 *   read-backs, timestamp read-back for timed ops. Iterative: a chain of any length completes
 *   without recursion.
 * - Isolation: an op whose validity the call could not fully check goes in a submit of its own,
 *   and what depends on it waits for that submit's validation, so WebGPU rejecting it fails that
 *   op and its dependents only.
 */
import { AbortError, AggregateStreamError, DeadlockError, DependencyError, DeviceLostError, GpuValidationError, HostFnError, InvalidArgumentError, type StreamError } from './errors.js';
import { BufferUsage, MapMode } from './gpu-constants.js';
import { awaitHostFn, callHostFn, hostBudget, hostCaller, hostFnEnded, resumeNextTurn } from './host.js';
import type { DeviceBuffer, StagingPool } from './memory.js';
import { NONE, Op, OpTimes, withItem, type Payload } from './op.js';
import type { PinnedBuffer } from './pinned.js';
import type { Trace } from './trace.js';
import { showValue } from './validate.js';

/** Consecutive failed ops of one stream (ids `first`..`last`), reported as `error`. */
interface FailureRun {
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
  /** Failed ops not yet reported to every kind of waiter (see `Scheduler.#failure`). */
  failures: FailureRun[] = [];
  /** Id of the last op of this stream that became done (ops of a stream become done in order). */
  lastDoneId = 0;
  /** Failures up to these ids were reported to a stream / context synchronize. */
  reportedStream = 0;
  reportedCtx = 0;
  /** Synchronize calls (stream or context) waiting on this stream. */
  waiting = 0;

  constructor(
    readonly owner: Scheduler,
    readonly label: string,
    readonly priority: number,
    readonly nonBlocking: boolean,
    readonly isDefault: boolean,
  ) {}

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

const QUERIES_PER_BATCH = 512;

/** `deps` with `d` added when `d` is a dependency to wait on (not done, or failed) and new. */
function addDep(deps: Op[], d: Op | null | undefined): Op[] {
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
  readonly pinnedDownloads = new Map<PinnedBuffer, Op[]>();
  readonly pinnedUploads = new Map<PinnedBuffer, Op[]>();
  readonly readbacks: Op[] = [];
  /** Ops whose GPU timestamps (begin/end query indices) come back with this batch. */
  readonly timed: { op: Op; begin: number; end: number }[] = [];
  ts: TimestampSet | null = null;
  queries = 0;
  tSubmit = 0;
  constructor(
    readonly id: number,
    readonly encoder: GPUCommandEncoder,
    /** Carries one isolated op (see Op.isolated). */
    readonly isolated: boolean,
  ) {}
}

export interface SchedulerOptions {
  maxSubmitsInFlight: number;
  maxOpsPerSubmit: number;
  timestampQuery: boolean;
  traceGpu: boolean;
}

type Resolver = { resolve: () => void; reject: (e: unknown) => void };

/** A readable one-line description of something a host function threw. */
function describe(err: unknown): string {
  if (err instanceof Error) {
    try {
      return String(err.message);
    } catch {
      return err.name;
    }
  }
  return showValue(err);
}

export class Scheduler {
  /** Op ids are unique across contexts (host functions are found by id; see host.ts). */
  static #nextOpId = 1;
  /** Ops to look at for completion, in every context: one worklist, so completion never recurses. */
  static #completions: Op[] = [];
  static #completionHead = 0;
  static #completing = false;

  /** Live streams (destroyed ones are dropped once their work is done and reported). */
  streams: StreamQueue[] = [];
  /** Prune when the list reaches this length (doubling: amortized O(1) per stream). */
  #pruneAt = 64;
  /** Streams with ops not yet ordered. */
  readonly #busy = new Set<StreamQueue>();
  /** Streams to look at in the next flush (an enqueue, a dependency ordered or done). */
  readonly #dirty = new Set<StreamQueue>();
  /** Look at every busy stream in the next flush (a submit finished, a map or a pipeline resolved). */
  #rescanAll = false;
  #nextBatchId = 1;
  #flushScheduled = false;
  #flushing = false;
  #inFlight = 0;
  /** Set once the device is lost or the context destroyed: every wait rejects with it. */
  #closed: StreamError | null = null;
  #hostQueue: (Op | undefined)[] = [];
  #hostHead = 0;
  #runningHostFns = false;
  /** Host functions started and not finished; submits not completed: what `close` fails besides queued ops. */
  readonly #runningHost = new Set<Op>();
  readonly #inFlightBatches = new Set<Batch>();
  #tsPool: TimestampSet[] = [];
  /** Host-clock offset of the GPU clock, ns (min over batches of host completion - GPU end). */
  #clockOffsetNs: number | null = null;
  #clockLowerNs = -Infinity;
  /** Pipelines whose validation already wakes a flush. */
  readonly #awaitedPipelines = new WeakSet<object>();
  readonly #waiters = new Set<Resolver>();
  readonly defaultQueue: StreamQueue;

  constructor(
    readonly device: GPUDevice,
    readonly staging: StagingPool,
    readonly options: SchedulerOptions,
    readonly trace: Trace | null,
    /** The context's label, for messages. */
    readonly label: string,
  ) {
    this.defaultQueue = this.createQueue('default', 0, false, true);
  }

  /** Every submit, in order, as op ids (kept only while tracing; the last `trace.limit`). */
  get submitLog(): number[][] | null {
    return this.trace ? this.trace.submits : null;
  }

  /** The device-loss or destroy error once no more work can run, else null. */
  get closed(): StreamError | null {
    return this.#closed;
  }

  get submitsInFlight(): number {
    return this.#inFlight;
  }

  createQueue(label: string, priority: number, nonBlocking: boolean, isDefault = false): StreamQueue {
    const q = new StreamQueue(this, label, priority, nonBlocking, isDefault);
    this.streams.push(q);
    if (this.streams.length >= this.#pruneAt) {
      this.prune();
      this.#pruneAt = Math.max(64, 2 * this.streams.length);
    }
    return q;
  }

  /** Forgets destroyed streams whose work is done and whose failures were reported. */
  prune(): void {
    this.streams = this.streams.filter((q) => !(q.destroyed && q.active === 0 && q.waiting === 0 && !q.failures.some((f) => f.last > q.reportedCtx)));
  }

  // ---------------------------------------------------------------- enqueue

  /**
   * Adds an op to a stream. `extraDeps` are cross-stream dependencies (events, waitStream), of
   * this context or another. Never blocks; schedules a flush on a microtask.
   */
  enqueue(q: StreamQueue, payload: Payload, extraDeps: readonly (Op | null | undefined)[], buffers: DeviceBuffer[], callSite: Error | undefined, subject: string, target = '', isolated = false): Op {
    // Exact-size arrays, built without a closure: queued ops live until they complete, so each
    // byte per op is copied by every young-generation GC while they wait.
    let deps: Op[] = addDep(NONE, q.tail);
    for (const d of extraDeps) deps = addDep(deps, d);
    // CUDA legacy default stream: it waits for all blocking streams, and they wait for it.
    // A failed tail counts even when done, as event and waitStream edges do (addDep skips the rest).
    if (q.isDefault) {
      for (const s of this.streams) if (!s.isDefault && !s.nonBlocking) deps = addDep(deps, s.tail);
    } else if (!q.nonBlocking) deps = addDep(deps, this.defaultQueue.tail);
    const op = new Op(Scheduler.#nextOpId++, q, payload, deps, buffers, callSite, subject, target);
    op.isolated = isolated;
    if (this.trace) op.times = new OpTimes(performance.now());
    for (const d of deps) if (!d.done) d.dependents = withItem(d.dependents ?? NONE, op);
    for (const b of buffers) b.retain();
    if (op.kind === 'hostFn') q.hostFnsUndone++;
    const pinned = op.pinned;
    if (pinned) {
      pinned.claim(op);
      // Hand the mapping back now, not at the flush, when nothing can use the views before this op
      // runs: it is the buffer's only claimant and no host function of its stream is undone. Each
      // mapped range is an ArrayBuffer that V8 counts as external memory while attached; detaching
      // it early keeps a pipeline's attached ranges below V8's 64 MiB trigger for a GC
      // (docs/PERFORMANCE.md). Otherwise a host function ahead may fill it; views handed out
      // before now must not: they detach, and the stream's host functions wait for the re-map.
      if (pinned.claims === 1 && q.hostFnsUndone === 0) pinned.unmapForGpu();
      else if (pinned.hasViews && pinned.state === 'mapped') {
        q.remaps++;
        const remapped = (): void => {
          q.remaps--;
          this.scheduleFlush(true);
        };
        pinned.detachViews().then(remapped, remapped);
      }
    }
    q.pending.push(op);
    q.tail = op;
    q.lastId = op.id;
    q.active++;
    this.#busy.add(q);
    this.#dirty.add(q);
    this.scheduleFlush();
    return op;
  }

  /** Flushes on a microtask; `all`: look at every busy stream, not only those something happened to. */
  scheduleFlush(all = false): void {
    if (all) this.#rescanAll = true;
    if (this.#flushScheduled) return;
    this.#flushScheduled = true;
    queueMicrotask(() => {
      this.#flushScheduled = false;
      this.flush();
    });
  }

  /** Stream `q` may be able to go on (something it waits for was ordered or completed). */
  #wake(q: StreamQueue): void {
    this.#dirty.add(q);
    this.scheduleFlush();
  }

  // ---------------------------------------------------------------- flush

  /** Orders every ready op: one command encoder and one submit for all ready GPU work. */
  flush(): void {
    if (this.#flushing || this.#closed) return;
    this.#flushing = true;
    let batch: Batch | null = null;
    try {
      // Ready heads, best first: lower priority number, then older op. Ordering an op pushes the
      // streams it made ready, so a chain of any length is ordered in one pass.
      const heap = new StreamHeap();
      const scan = this.#rescanAll ? this.#busy : this.#dirty;
      this.#rescanAll = false;
      for (const q of scan) {
        const op = q.headOp;
        if (!op) this.#busy.delete(q);
        else if (!q.inHeap && this.#canOrder(op)) heap.push(q);
      }
      this.#dirty.clear();
      let q: StreamQueue | undefined;
      while ((q = heap.pop())) {
        const op = q.headOp;
        if (!op || !this.#canOrder(op)) continue;
        if (op.isGpu && !op.error) {
          if (op.isolated) {
            if (batch) {
              this.#submit(batch);
              batch = null;
              // That submit started mapping its pinned buffers back: this op may use one.
              if (!this.#canOrder(op)) continue;
            }
            if (this.#inFlight >= this.options.maxSubmitsInFlight) continue; // retried when a submit completes
            q.shift();
            const alone = this.#newBatch(true);
            this.#order(op, alone);
            this.#submit(alone);
            continue; // what follows it waits for its validation
          }
          if (batch && batch.queries + 2 > QUERIES_PER_BATCH && this.#wantsTimestamps(op)) {
            this.#submit(batch);
            batch = null;
            if (!this.#canOrder(op)) continue;
          }
          if (!batch) {
            if (this.#inFlight >= this.options.maxSubmitsInFlight) continue; // the window is full: GPU work waits; host work and markers go on
            batch = this.#newBatch(false);
          }
        }
        q.shift();
        this.#order(op, batch);
        if (batch && batch.ops.length >= this.options.maxOpsPerSubmit) {
          this.#submit(batch);
          batch = null;
        }
        const next = q.headOp;
        if (next && this.#canOrder(next)) heap.push(q);
        if (op.ordered) this.#wakeDependents(op, heap);
      }
    } finally {
      this.#flushing = false;
    }
    if (batch) this.#submit(batch);
    this.#runHostFns();
  }

  #newBatch(isolated: boolean): Batch {
    // One validation scope per submit, from the encoder's creation (bind groups are made while
    // encoding) to the submit: popped in #submit.
    this.device.pushErrorScope('validation');
    // Transient encoders and passes are labelled only while tracing: a label costs Dawn a few
    // microseconds per pass (encode and submit), and errors name their ops anyway.
    return new Batch(this.#nextBatchId++, this.device.createCommandEncoder(this.trace ? { label: 'webgpu-streams batch' } : undefined), isolated);
  }

  /** A pinned buffer was mapped back: every context with an op using it may go on. */
  static wakeClaimants(claimants: Iterable<{ readonly id: number }>): void {
    for (const c of claimants) (c as Op).stream.owner.scheduleFlush(true);
  }

  /** `op` was ordered or completed: the streams waiting on it may go on (pushed on `heap` during a flush). */
  #wakeDependents(op: Op, heap: StreamHeap | null): void {
    const ds = op.dependents;
    if (!ds) return;
    for (const d of ds) {
      const dq = d.stream;
      if (dq.owner !== this || !heap) dq.owner.#wake(dq);
      else if (!dq.inHeap && dq.headOp === d && this.#canOrder(d)) heap.push(dq);
    }
  }

  #wantsTimestamps(op: Op): boolean {
    return (op.kind === 'record' && op.payload.kind === 'record' && op.payload.timing) || (this.options.traceGpu && this.options.timestampQuery && op.isGpu);
  }

  /** May `op` take its place in the order now? Fails it when a dependency failed. */
  #canOrder(op: Op): boolean {
    const hostFn = op.kind === 'hostFn';
    for (const d of op.deps) {
      if (d.error) {
        if (!op.error) op.error = inherit(op, d);
        return true;
      }
      // Queue order covers a dependency on this device once it is ordered; another device's
      // work (another context's queue) must have completed.
      if (hostFn || d.stream.owner.device !== this.device ? !d.done : !d.ordered) return false;
    }
    if (op.error) return true;
    const p = op.payload;
    if (hostFn) return op.stream.remaps === 0;
    const pinned = op.pinned;
    if (pinned && pinned.state === 'mapping') return false;
    if (p.kind === 'launch') {
      const entry = p.pipeline;
      if (!entry.ok) {
        if (entry.error !== undefined) {
          op.error = new GpuValidationError(`kernel '${p.kernel.label}' failed to compile or validate: ${entry.error}`, op.site());
          return true;
        }
        if (!this.#awaitedPipelines.has(entry)) {
          this.#awaitedPipelines.add(entry);
          const wake = (): void => this.scheduleFlush(true);
          entry.validated.then(wake, wake);
        }
        return false;
      }
    }
    return true;
  }

  /** Fixes `op`'s place: encodes GPU ops into `batch`, queues host functions, passes markers. */
  #order(op: Op, batch: Batch | null): void {
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
          this.staging.seal(staging);
          this.#copy(b, op, timed, staging.block.buffer, staging.offset, p.dst, p.dstOffset, p.size);
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
    // An isolated op is ordered once its submit validated (see #submit).
    op.ordered = !b.isolated;
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
    // The validation scope opened with the batch: what the call could check was checked there, so
    // an error here fails the ops of this submit (and what depends on them); an isolated op is
    // alone in its.
    const cmd = b.encoder.finish();
    b.tSubmit = performance.now();
    device.queue.submit([cmd]);
    const validation = device.popErrorScope().then(
      (err) => err,
      (e: unknown) => ({ message: describe(e) }) as GPUError,
    );
    this.#inFlight++;
    this.#inFlightBatches.add(b);
    if (this.trace) {
      this.trace.addSubmit(b.ops);
      for (const op of b.ops) if (op.times) op.times.tSubmit = b.tSubmit;
    }
    if (b.isolated) {
      const op = b.ops[0]!;
      void validation.then((err) => {
        if (err) this.#fail(op, new GpuValidationError(`WebGPU rejected this op: ${err.message}`, op.site()));
        else if (!op.done) {
          op.ordered = true;
          this.#wakeDependents(op, null);
        }
      });
    }

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
    for (const [p, ops] of b.pinnedDownloads) {
      const m = p.map();
      mapped ??= m;
      m.then(
        () => ops.forEach((op) => this.#partDone(op)),
        (e: unknown) => ops.forEach((op) => this.#fail(op, this.#asError(e, op))),
      );
    }
    for (const op of b.readbacks) this.#readBack(op, validation);
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
        this.#inFlightBatches.delete(b);
        const tDone = performance.now();
        for (const op of b.ops) {
          if (op.times) op.times.tDone = tDone;
          if (err) this.#fail(op, new GpuValidationError(`WebGPU rejected the submit that carried this op: ${err.message}`, op.site()));
          else this.#ownDone(op);
        }
        this.scheduleFlush(true);
      },
      (e: unknown) => {
        this.#inFlight--;
        this.#inFlightBatches.delete(b);
        for (const op of b.ops) this.#fail(op, this.#asError(e, op));
        this.scheduleFlush(true);
      },
    );
  }

  /** A pageable download: once the copy validated and the read-back buffer mapped, its bytes go into the user's array. */
  #readBack(op: Op, validation: Promise<GPUError | null>): void {
    const p = op.payload;
    if (p.kind !== 'download') return;
    const rb = p.readback!;
    const view = p.view!;
    const size = p.size;
    p.readback = null;
    Promise.all([validation, rb.mapAsync(MapMode.READ, 0, size)]).then(
      ([err]) => {
        // Nothing is written into the user's array for an op that failed (its copy never ran).
        if (!err && !op.done) {
          if (view.byteLength !== size) {
            this.#fail(op, new InvalidArgumentError(`the destination array was detached (transferred with postMessage or structuredClone, or its buffer resized) before the download completed; keep it until the op completes`, op.site()));
          } else {
            if (op.times) op.times.tHostBegin = performance.now();
            view.set(new Uint8Array(rb.getMappedRange(0, size)));
            if (op.times) op.times.tHostEnd = performance.now();
          }
        }
        this.staging.releaseReadback(rb);
        this.#partDone(op);
      },
      (e: unknown) => {
        if (rb.mapState === 'mapped') rb.unmap();
        this.#fail(op, this.#asError(e, op));
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
    if (this.#closed) return this.#closed;
    if (e instanceof Error && 'op' in e) return e as StreamError;
    return new GpuValidationError(`WebGPU failed: ${describe(e)}`, { ...op.site(), cause: e });
  }

  /** One of the op's extra parts (map, timestamps) finished. */
  #partDone(op: Op): void {
    op.pendingParts--;
    Scheduler.#complete(op);
  }

  #ownDone(op: Op): void {
    op.ownDone = true;
    Scheduler.#complete(op);
  }

  #fail(op: Op, err: StreamError): void {
    if (op.done) return;
    if (!op.error) op.error = err;
    op.ordered = true;
    op.ownDone = true;
    op.pendingParts = 0;
    Scheduler.#complete(op);
  }

  /** Looks at `op` (and, through the worklist, at what it unblocks) for completion. */
  static #complete(op: Op): void {
    Scheduler.#completions.push(op);
    if (Scheduler.#completing) return;
    Scheduler.#completing = true;
    try {
      const list = Scheduler.#completions;
      while (Scheduler.#completionHead < list.length) {
        const next = list[Scheduler.#completionHead]!;
        list[Scheduler.#completionHead++] = undefined as never;
        next.stream.owner.#tryComplete(next);
      }
    } finally {
      Scheduler.#completions = [];
      Scheduler.#completionHead = 0;
      Scheduler.#completing = false;
    }
  }

  /** Marks `op` done once its own part, extra parts and dependencies are all done. */
  #tryComplete(op: Op): void {
    if (op.done || !op.ownDone || op.pendingParts > 0) return;
    for (const d of op.deps) {
      if (!d.done) return;
      if (d.error && !op.error) op.error = inherit(op, d);
    }
    // The last op using a pinned buffer completes once the buffer is mapped again, so the host
    // owns it after a synchronize, even when the op was skipped or failed.
    const pinned = op.pinned;
    if (pinned && pinned.claims === 1 && pinned.state !== 'mapped' && !pinned.destroyRequested && !this.#closed) {
      op.pendingParts++;
      const mapped = (): void => this.#partDone(op);
      pinned.map().then(mapped, mapped);
      return;
    }
    op.done = true;
    const q = op.stream;
    if (op.kind === 'hostFn') q.hostFnsUndone--;
    if (this.trace) {
      if (op.times && !op.times.tDone) op.times.tDone = performance.now();
      this.trace.add(op, this);
    }
    q.active--;
    if (op.error) {
      // Consecutive failures are one run, unless a synchronize has reported the run meanwhile.
      const run = q.failures[q.failures.length - 1];
      if (run && run.last === q.lastDoneId && run.last > Math.max(q.reportedStream, q.reportedCtx)) run.last = op.id;
      else q.failures.push({ first: op.id, last: op.id, error: op.error });
    }
    q.lastDoneId = op.id;
    for (const b of op.buffers) b.release();
    op.buffers = NONE;
    const p = op.payload;
    if (p.kind === 'upload' && p.staging) this.staging.release(p.staging);
    op.pinned?.unclaim(op);
    op.release();
    op.deps = NONE;
    const dependents = op.dependents;
    op.dependents = null;
    const ws = op.waiters;
    op.waiters = null;
    if (ws) for (const w of ws) w();
    if (dependents) {
      for (const d of dependents) {
        Scheduler.#completions.push(d);
        d.stream.owner.#wake(d.stream);
      }
    }
    this.scheduleFlush();
  }

  // ---------------------------------------------------------------- host functions

  /**
   * Runs the host functions whose turn came, each once everything before it is done. Gives the
   * event loop a macrotask after a budget of them (host.ts), so a host function that re-enqueues
   * itself cannot starve timers.
   */
  #runHostFns(): void {
    if (this.#runningHostFns) return; // a host function flushed: the loop below goes on
    this.#runningHostFns = true;
    try {
      while (this.#hostHead < this.#hostQueue.length) {
        if (!hostBudget()) {
          resumeNextTurn(() => this.#runHostFns());
          return;
        }
        const op = this.#hostQueue[this.#hostHead]!;
        this.#hostQueue[this.#hostHead++] = undefined;
        this.#startHostFn(op);
      }
      this.#hostQueue = [];
      this.#hostHead = 0;
    } finally {
      this.#runningHostFns = false;
    }
  }

  #startHostFn(op: Op): void {
    const p = op.payload;
    if (p.kind !== 'hostFn' || op.done) return;
    if (op.times) op.times.tHostBegin = performance.now();
    this.#runningHost.add(op);
    let result: unknown;
    try {
      result = callHostFn(op, p.fn);
    } catch (e) {
      this.#endHostFn(op, e ?? new Error('undefined was thrown'));
      return;
    }
    if (result === null || (typeof result !== 'object' && typeof result !== 'function')) {
      this.#endHostFn(op);
      return;
    }
    // A promise, a thenable (whose `then` may throw) or any object: awaited, so nothing it does
    // escapes as anything but this op's HostFnError.
    awaitHostFn(op, result).then(
      () => this.#endHostFn(op),
      (e: unknown) => this.#endHostFn(op, e ?? new Error('rejected with undefined')),
    );
  }

  #endHostFn(op: Op, err?: unknown): void {
    hostFnEnded(op);
    this.#runningHost.delete(op);
    if (op.times) op.times.tHostEnd = performance.now();
    if (err !== undefined && !op.error) op.error = new HostFnError(`host function threw: ${describe(err)}`, { ...op.site(), cause: err });
    op.ordered = true;
    this.#ownDone(op);
  }

  /**
   * May the code running now touch a pinned buffer whose claimants are all unencoded? Only the
   * host function running now, when each claimant is a later op of that function's own stream.
   */
  hostWindow(claimants: ReadonlySet<{ readonly id: number; readonly ordered: boolean }>): boolean {
    const h = hostCaller();
    if (!h) return false;
    for (const c of claimants) {
      const op = c as Op;
      if (op.ordered || op.stream !== h.stream || op.id < h.id) return false;
    }
    return true;
  }

  // ---------------------------------------------------------------- waiting

  /**
   * A DeadlockError when the code calling now is a running host function and one of `targets`
   * cannot complete before that function returns; else null.
   */
  deadlock(targets: Iterable<Op | null | undefined>, what: string): DeadlockError | null {
    const h = hostCaller();
    if (!h) return null;
    const seen = new Set<Op>();
    const stack: Op[] = [];
    for (const t of targets) if (t) stack.push(t);
    let o: Op | undefined;
    while ((o = stack.pop())) {
      if (o.done || seen.has(o)) continue;
      seen.add(o);
      if (o === h || (o.stream === h.stream && o.id > h.id)) {
        return new DeadlockError(
          `host function #${h.id} waits for ${what}, which waits for that host function to return: it can never resolve. Enqueue what must follow on the stream (a later hostFn) instead of waiting inside the host function.`,
          h.site(),
        );
      }
      for (const d of o.deps) stack.push(d);
    }
    return null;
  }

  /** Throws DeadlockError when the running host function waits for a pinned buffer claimed behind it. */
  checkWait(claimants: Iterable<{ readonly id: number }>, what: string): void {
    const err = this.deadlock(claimants as Iterable<Op>, what);
    if (err) throw err;
  }

  /** Resolves when `op` is done (successfully or not). Flushes first. */
  whenDone(op: Op, signal?: AbortSignal, what = `op '${op.kind}' #${op.id}`): Promise<void> {
    if (op.done) return Promise.resolve();
    if (this.#closed) return Promise.reject(this.#closed);
    const stuck = this.deadlock([op], what);
    if (stuck) return Promise.reject(stuck);
    this.flush();
    if (op.done) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const r: Resolver = { resolve, reject };
      const onAbort = (): void => {
        const ws = op.waiters;
        if (ws) op.waiters = ws.filter((w) => w !== done);
        this.#waiters.delete(r);
        reject(new AbortError(`wait for op '${op.kind}' #${op.id} on stream '${op.stream.label}' was aborted`, { ...op.site(), cause: signal?.reason }));
      };
      const done = (): void => {
        signal?.removeEventListener('abort', onAbort);
        this.#waiters.delete(r);
        resolve();
      };
      if (signal) {
        if (signal.aborted) return onAbort();
        signal.addEventListener('abort', onAbort, { once: true });
      }
      (op.waiters ??= []).push(done);
      this.#waiters.add(r);
    });
  }

  /**
   * Waits for everything enqueued on `q` so far; rejects with the first failure among that work
   * not yet reported to a synchronize of this stream (`ctx.synchronize()` reports it too, and
   * the stream keeps it for its own).
   */
  async synchronizeQueue(q: StreamQueue, signal?: AbortSignal): Promise<void> {
    if (this.#closed) throw this.#closed;
    const from = q.reportedStream;
    const upTo = q.lastId;
    const tail = q.tail;
    q.waiting++;
    try {
      if (tail) await this.whenDone(tail, signal, `stream '${q.label}'.synchronize()`);
    } finally {
      q.waiting--;
    }
    if (this.#closed) throw this.#closed;
    const err = this.#failure(q, from, upTo);
    if (upTo > q.reportedStream) q.reportedStream = upTo;
    this.#reported(q, err);
    if (err) throw err;
  }

  /**
   * Waits for every stream; rejects with the failures among that work not yet reported to a
   * context synchronize: one stream's failure as it is, several as an AggregateStreamError.
   */
  async synchronizeAll(signal?: AbortSignal): Promise<void> {
    if (this.#closed) throw this.#closed;
    const marks = this.streams.map((q) => ({ q, from: q.reportedCtx, upTo: q.lastId }));
    const tails: Op[] = [];
    for (const q of this.streams) if (q.tail && !q.tail.done) tails.push(q.tail);
    const stuck = this.deadlock(tails, `context '${this.label}'.synchronize()`);
    if (stuck) throw stuck;
    for (const m of marks) m.q.waiting++;
    try {
      await Promise.all(tails.map((t) => this.whenDone(t, signal)));
    } finally {
      for (const m of marks) m.q.waiting--;
    }
    if (this.#closed) throw this.#closed;
    const errors: StreamError[] = [];
    for (const { q, from, upTo } of marks) {
      const err = this.#failure(q, from, upTo);
      if (upTo > q.reportedCtx) q.reportedCtx = upTo;
      this.#reported(q, err);
      if (err) errors.push(err);
    }
    this.prune();
    if (errors.length === 1) throw errors[0];
    if (errors.length > 1) throw new AggregateStreamError(errors, { op: 'synchronize', context: this.label });
  }

  /** The first failure of `q` among ops `from` < id <= `upTo`, if any. */
  #failure(q: StreamQueue, from: number, upTo: number): StreamError | undefined {
    for (const f of q.failures) if (f.last > from && f.first <= upTo) return f.error;
    return undefined;
  }

  /**
   * After a report: work enqueued from now on no longer inherits a reported failure, and runs
   * every kind of waiter has seen are forgotten (once no older waiter may still look at them).
   */
  #reported(q: StreamQueue, err: StreamError | undefined): void {
    if (err && q.tail?.done && q.tail.error) q.tail = null;
    if (q.waiting > 0 || q.failures.length === 0) return;
    const firstForStream = q.failures.find((f) => f.last > q.reportedStream);
    q.failures = q.failures.filter((f) => f === firstForStream || f.last > q.reportedCtx);
  }

  /** Device lost: every pending op fails and every wait rejects; nothing hangs. */
  deviceLost(reason: string, message: string): void {
    if (this.#closed) return;
    this.close(new DeviceLostError(`the GPU device was lost (${reason}): ${message || 'no message'}`, { context: this.label }));
  }

  /** No more work runs (device lost, context destroyed): pending ops fail with `err`, waits reject with it. */
  close(err: StreamError): void {
    if (this.#closed) return;
    this.#closed = err;
    const all: Op[] = [];
    for (const q of this.streams) {
      for (let i = q.head; i < q.pending.length; i++) {
        const op = q.pending[i];
        if (!op) continue;
        if (op.pinned) op.pinned.unencoded--;
        all.push(op);
      }
      q.pending = [];
      q.head = 0;
    }
    for (const op of this.#hostQueue) if (op) all.push(op);
    this.#hostQueue = [];
    this.#hostHead = 0;
    all.push(...this.#runningHost);
    for (const b of this.#inFlightBatches) all.push(...b.ops);
    this.#inFlightBatches.clear();
    for (const op of all) this.#fail(op, err);
    for (const r of this.#waiters) r.reject(err);
    this.#waiters.clear();
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

/** A binary heap of streams keyed by (priority, head op id); `inHeap` marks its members. */
class StreamHeap {
  readonly #items: StreamQueue[] = [];

  static #less(a: StreamQueue, b: StreamQueue): boolean {
    if (a.priority !== b.priority) return a.priority < b.priority;
    return (a.headOp?.id ?? Infinity) < (b.headOp?.id ?? Infinity);
  }

  push(q: StreamQueue): void {
    q.inHeap = true;
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
    top.inHeap = false;
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
