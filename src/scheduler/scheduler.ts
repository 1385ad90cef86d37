/**
 * The heart of the runtime: turns several host-side streams into one well-ordered, well-batched
 * submission order on WebGPU's single queue.
 *
 * - The DAG: stream order + event/stream edges + CUDA legacy default-stream edges + host readiness
 *   (a pinned buffer still being mapped, a kernel pipeline still being validated). Edges may cross
 *   contexts: an op waiting on another context's op is woken by that context.
 * - Flush: on a microtask after an enqueue, on synchronize, on `ctx.flush()`, and whenever
 *   something completes. Every ready op (priority first, then enqueue order) goes into one command
 *   encoder and one `queue.submit` (encode.ts). No timers, no polling loops. A stream blocked on a
 *   host condition never delays another stream's ready work.
 * - Completion and host functions: complete.ts. Isolation: an op the call could not fully check
 *   goes in a submit of its own; what depends on it waits for its validation.
 */
import { AbortError, atCall, DeviceLostError, GpuValidationError, type StreamError } from '../errors.js';
import { judging, verdictOf, type DeviceResource } from '../memory.js';
import { NONE, Op, OpTimes, StreamQueue, addDep, withItem, type Payload, type QueueOwner } from '../op.js';
import type { Trace } from '../trace.js';
import type { StagingPool } from '../transfer.js';
import { Completer, inherit, wakeDependents } from './complete.js';
import { Encoder, type Batch } from './encode.js';
import { StreamHeap } from './heap.js';
import { deadlock } from './host.js';
import { whenAborted } from '../validate.js';
import { join, retireStreamClock } from '../clock.js';
import type { Sanitizer } from '../sanitizer.js';

export interface SchedulerOptions {
  maxSubmitsInFlight: number;
  maxOpsPerSubmit: number;
  timestampQuery: boolean;
}

type Resolver = { resolve: () => void; reject: (e: unknown) => void };
const RESOLVED = Promise.resolve();

/** Op ids are unique across contexts (host functions are found by id; see host.ts). */
let nextOpId = 1;

export class Scheduler implements QueueOwner {
  /** Live streams (destroyed ones are dropped once their work is done and reported). */
  streams: StreamQueue[] = [];
  readonly prunedClock: number[] = [];
  /** Prune when the list reaches this length (doubling: amortized O(1) per stream). */
  #pruneAt = 64;
  /** Streams with ops not yet ordered, each once (`busy`); idle ones leave at the next full scan. */
  readonly #busy: StreamQueue[] = [];
  #busyCap = 64;
  /** Streams to look at in the next flush (an enqueue, a dependency ordered or done), each once (`dirty`). */
  readonly #dirty: StreamQueue[] = [];
  /** Look at every busy stream in the next flush (a submit finished, a map or a pipeline resolved). */
  #rescanAll = false;
  #flushScheduled = false;
  #flushing = false;
  /** Set once the device is lost or the context destroyed: every wait rejects with it. */
  #closed: StreamError | null = null;
  /** Pipelines whose validation already wakes a flush. */
  readonly #awaitedPipelines = new WeakSet<object>();
  readonly #waiters = new Set<Resolver>();
  /** Waits for ops' place in the queue (stream.whenSubmitted, uploadFrom's copies). */
  readonly #orderWaits: { op: Op; resolve: () => void }[] = [];
  readonly #encoder: Encoder;
  readonly #completer: Completer;
  readonly defaultQueue: StreamQueue;

  constructor(
    readonly device: GPUDevice,
    readonly staging: StagingPool,
    readonly options: SchedulerOptions,
    readonly trace: Trace | null,
    /** The context's label, for messages. */
    readonly label: string,
    /** The stream sanitizer, when the context has one. */
    readonly sanitizer: Sanitizer | null = null,
  ) {
    this.#encoder = new Encoder(device, staging, { timestampQuery: options.timestampQuery, trace, labels: trace !== null });
    this.#completer = new Completer(this, this.#encoder);
    this.defaultQueue = this.createQueue('default', 0, false, true);
  }

  /** The device-loss or destroy error once no more work can run, else null. */
  get closed(): StreamError | null {
    return this.#closed;
  }

  get submitsInFlight(): number {
    return this.#completer.inFlight;
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

  /** Forgets destroyed streams whose work is done and whose failures were reported; ctx.synchronize() still joins their clocks (prunedClock). */
  prune(): void {
    const gone = (q: StreamQueue): boolean => q.destroyed && q.active === 0 && q.waiting === 0 && !q.failures.some((f) => f.last > q.reportedCtx);
    for (const q of this.streams) if (q.clock && gone(q)) join(this.prunedClock, q.clock.vc);
    this.streams = this.streams.filter((q) => !gone(q));
  }

  // ---------------------------------------------------------------- enqueue

  /**
   * Adds an op to a stream. `extraDeps` are cross-stream dependencies (events, waitStream), of
   * this context or another. Never blocks; schedules a flush on a microtask. `eager`: order it
   * now when it can run (a pageable upload's piece, so the GPU copies it while the next is staged).
   */
  enqueue(q: StreamQueue, payload: Payload, extraDeps: readonly (Op | null | undefined)[], buffers: DeviceResource[], callSite: Error | undefined, subject: string, target = '', isolated = false, eager = false): Op {
    // Exact-size arrays, no closure: queued ops live until they complete (young GCs copy them).
    let deps: Op[] = addDep(NONE, q.tail);
    for (let i = 0; i < extraDeps.length; i++) deps = addDep(deps, extraDeps[i]);
    // CUDA legacy default stream: it waits for all blocking streams, and they wait for it. A
    // failed tail counts even when done, as event and waitStream edges do (addDep skips the rest).
    if (q.isDefault) {
      for (const s of this.streams) if (!s.isDefault && !s.nonBlocking) deps = addDep(deps, s.tail);
    } else if (!q.nonBlocking) deps = addDep(deps, this.defaultQueue.tail);
    const op = new Op(nextOpId++, q, payload, deps, buffers, callSite, subject, target);
    op.isolated = isolated;
    // Checks and clocks the op before anything changes: a race thrown here leaves no trace (its staged bytes go back).
    if (this.sanitizer) {
      try {
        this.sanitizer.enqueue(op, this.streams, this.defaultQueue);
      } catch (e) {
        if (payload.kind === 'upload' && payload.staging) this.staging.release(payload.staging);
        throw e;
      }
    }
    if (this.trace) op.times = new OpTimes(performance.now());
    // Indexed loops on the per-op path: unoptimized for-of allocates an iterator per loop.
    for (let i = 0; i < deps.length; i++) {
      const d = deps[i]!;
      if (!d.done) d.dependents = withItem(d.dependents ?? NONE, op);
    }
    for (let i = 0; i < buffers.length; i++) buffers[i]!.retain();
    if (op.kind === 'hostFn') q.hostFnsUndone++;
    const pinned = op.pinned;
    if (pinned) {
      pinned.claim(op);
      // Unmapped now when nothing can use the views before this op runs (only claimant, no host fn
      // undone; a mapped range is V8 external memory); else views taken before now detach.
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
    if (!q.busy) {
      q.busy = true;
      // Grown past twice its last compacted size: the next flush drops the idle (host-only work never settles a batch, which would).
      if (this.#busy.push(q) > this.#busyCap) this.#rescanAll = true;
    }
    this.#markDirty(q);
    if (eager) this.flush();
    else this.scheduleFlush();
    return op;
  }

  /** Flushes on a microtask; `all`: look at every busy stream, not just those something happened to. */
  scheduleFlush(all = false): void {
    if (all) this.#rescanAll = true;
    if (this.#flushScheduled) return;
    this.#flushScheduled = true;
    // A reaction on a settled promise, not queueMicrotask (Node wraps each in an AsyncResource).
    void RESOLVED.then(this.#microtaskFlush);
  }

  readonly #wake = (): void => this.scheduleFlush(true);
  readonly #microtaskFlush = (): void => {
    this.#flushScheduled = false;
    this.flush();
  };

  /** Stream `q` may be able to go on (something it waits for was ordered or completed). */
  wake(q: StreamQueue): void {
    this.#markDirty(q);
    this.scheduleFlush();
  }

  #markDirty(q: StreamQueue): void {
    if (q.dirty) return;
    q.dirty = true;
    this.#dirty.push(q);
  }

  tryComplete(op: Op): void {
    this.#completer.tryComplete(op);
  }

  /** A host op's GPU work is all encoded (uploadFrom): the GPU ops after it may be ordered now. */
  markOrdered(op: Op): void {
    if (op.ordered || op.done) return;
    op.ordered = true;
    wakeDependents(op); // the stream's later ops among them
  }

  // ---------------------------------------------------------------- flush

  /** Orders every ready op: one command encoder and one submit for all ready GPU work. */
  flush(): void {
    if (this.#flushing || this.#closed) return;
    this.#flushing = true;
    const completer = this.#completer;
    const encoder = this.#encoder;
    let batch: Batch | null = null;
    try {
      // Ready heads, best first (priority, then age); ordering an op pushes the streams it made
      // ready, so a chain of any length is ordered in one pass.
      const heap = new StreamHeap();
      const dirty = this.#dirty;
      if (this.#rescanAll) {
        this.#rescanAll = false;
        const busy = this.#busy;
        let kept = 0;
        for (let i = 0; i < busy.length; i++) {
          const q = busy[i]!;
          const op = q.headOp;
          if (!op) {
            q.busy = false;
            continue;
          }
          busy[kept++] = q;
          if (!q.inHeap && this.#canOrder(op)) heap.push(q);
        }
        busy.length = kept;
        this.#busyCap = Math.max(64, 2 * kept);
      } else {
        for (let i = 0; i < dirty.length; i++) {
          const q = dirty[i]!;
          const op = q.headOp;
          if (op && !q.inHeap && this.#canOrder(op)) heap.push(q);
        }
      }
      for (let i = 0; i < dirty.length; i++) dirty[i]!.dirty = false;
      dirty.length = 0;
      let q: StreamQueue | undefined;
      while ((q = heap.pop())) {
        const op = q.headOp;
        if (!op || !this.#canOrder(op)) continue;
        if (op.isGpu && !op.error) {
          // A new batch goes after the current one: submit it first. That submit starts mapping
          // its pinned buffers back, and this op may use one: check again.
          const alone = op.isolated;
          if (batch && (alone || (!encoder.hasQueryRoom(batch) && encoder.wantsTimestamps(op)))) {
            completer.submit(batch);
            batch = null;
            if (!this.#canOrder(op)) continue;
          }
          if (!batch) {
            if (completer.inFlight >= this.options.maxSubmitsInFlight) continue; // the window is full: retried when a submit completes
            batch = encoder.newBatch(alone);
          }
        }
        q.shift();
        this.#order(op, batch);
        if (batch && (batch.isolated || batch.ops.length >= this.options.maxOpsPerSubmit)) {
          completer.submit(batch);
          if (batch.isolated) {
            batch = null;
            continue; // what follows it waits for its validation
          }
          batch = null;
        }
        const next = q.headOp;
        if (next && this.#canOrder(next)) heap.push(q);
        if (op.ordered) this.#wakeDependents(op, heap);
      }
    } finally {
      this.#flushing = false;
    }
    if (batch) completer.submit(batch);
    if (this.#orderWaits.length > 0) this.#wakeOrdered();
    completer.runHostFns();
  }

  /** `op` was ordered: the streams waiting on it may go on (this context's onto `heap`). */
  #wakeDependents(op: Op, heap: StreamHeap): void {
    const ds = op.dependents;
    if (!ds) return;
    for (let i = 0; i < ds.length; i++) {
      const d = ds[i]!;
      const dq = d.stream;
      if (dq.owner !== this) dq.owner.wake(dq);
      else if (!dq.inHeap && dq.headOp === d && this.#canOrder(d)) heap.push(dq);
    }
  }

  /** May `op` take its place in the order now? Fails it when a dependency failed. */
  #canOrder(op: Op): boolean {
    const p = op.payload;
    const hostFn = p.kind === 'hostFn';
    // A host function starts once its dependencies are done; one that only enqueues GPU work, once they are ordered.
    const mustBeDone = hostFn && !p.afterOrdered;
    const deps = op.deps;
    for (let i = 0; i < deps.length; i++) {
      const d = deps[i]!;
      if (d.error) {
        if (!op.error) op.error = inherit(op, d);
        return true;
      }
      // Queue order covers a dependency on this device once it is ordered (or done: an isolated op
      // can be done before the reaction that marks it ordered runs); another device's must be done.
      if (mustBeDone || d.stream.owner.device !== this.device ? !d.done : !(d.ordered || d.done)) return false;
    }
    if (op.error) return true;
    if (hostFn) return op.stream.remaps === 0;
    // A resource WebGPU refused fails its op unsubmitted; a texture not judged yet holds it back (verdictOf).
    if (judging.count > 0 && op.buffers.length > 0) {
      const refused = verdictOf(op.buffers, this.#wake);
      if (refused === false) return false;
      if (refused) return ((op.error = refused.refusal(op.site(), false)), true);
    }
    const pinned = op.pinned;
    if (pinned?.refused) return ((op.error = atCall(pinned.refused, op.site())), true);
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
          entry.validated.then(this.#wake, this.#wake);
        }
        return false;
      }
    }
    return true;
  }

  /** Fixes `op`'s place: encodes GPU ops into `batch`, queues host functions, passes markers. */
  #order(op: Op, batch: Batch | null): void {
    const p = op.payload;
    if (op.error || p.kind === 'wait' || (p.kind === 'record' && !p.timing)) {
      // Skipped (a dependency failed) or a marker: ordered as soon as its dependencies are.
      op.ordered = true;
      if (op.error && op.pinned) op.pinned.unencoded--;
      this.#completer.ownDone(op);
    } else if (p.kind === 'hostFn') {
      this.#completer.queueHostFn(op); // ordered when it finished
    } else {
      this.#encoder.encode(op, batch!);
      // An isolated op is ordered once its submit validated (see Completer.submit).
      op.ordered = !batch!.isolated;
    }
  }

  // ---------------------------------------------------------------- waiting

  /** Resolves when `op` is done (successfully or not). Flushes first. */
  whenDone(op: Op, signal?: AbortSignal, what = `op '${op.kind}' #${op.id}`): Promise<void> {
    if (op.done) return Promise.resolve();
    if (this.#closed) return Promise.reject(this.#closed);
    const stuck = deadlock([op], what);
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
        off?.();
        this.#waiters.delete(r);
        resolve();
      };
      if (signal?.aborted) return onAbort();
      const off = signal ? whenAborted(signal, onAbort) : null;
      (op.waiters ??= []).push(done);
      this.#waiters.add(r);
    });
  }

  /**
   * Resolves once `op` has its place in the queue (ordered) or is done. Flushes first; with the
   * submit window full, the flush after a submit completes resolves it (no polling).
   */
  whenOrdered(op: Op): Promise<void> {
    this.flush();
    if (op.ordered || op.done) return RESOLVED;
    return new Promise<void>((resolve) => {
      this.#orderWaits.push({ op, resolve });
      (op.waiters ??= []).push(resolve); // done first: failed, or isolated and never woken
    });
  }

  /** Resolves the order waits whose op is ordered or done (end of a flush). */
  #wakeOrdered(): void {
    const ws = this.#orderWaits;
    let kept = 0;
    for (let i = 0; i < ws.length; i++) {
      const w = ws[i]!;
      if (w.op.ordered || w.op.done) w.resolve();
      else ws[kept++] = w;
    }
    ws.length = kept;
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
    const completer = this.#completer;
    const all = this.streams.flatMap((q) => q.takePending());
    for (const q of this.streams) if (q.clock) retireStreamClock(q.clock); // no more ops: the sanitizer may reuse their entries
    all.push(...completer.takeQueuedHostFns(), ...completer.runningHost);
    for (const b of completer.inFlightBatches) all.push(...b.ops);
    completer.inFlightBatches.length = 0;
    // Each stream's ops share one error naming its first op cut short (what its synchronize, an
    // event recorded on it and its pinned buffers' ready() report), the close as its cause.
    const first = new Map<StreamQueue, Op>();
    for (const op of all) if (!op.done && (first.get(op.stream)?.id ?? Infinity) > op.id) first.set(op.stream, op);
    const named = new Map<StreamQueue, StreamError>();
    for (const [q, op] of first) named.set(q, atCall(err, op.site()));
    for (const op of all) completer.fail(op, named.get(op.stream) ?? err);
    for (const r of this.#waiters) r.reject(err);
    this.#waiters.clear();
    this.#orderWaits.length = 0; // their ops failed above: done, waiters called
    this.staging.destroy(); // no more transfers: the staging goes as it comes back
  }

  destroy(): void {
    this.#encoder.destroy();
  }
}
