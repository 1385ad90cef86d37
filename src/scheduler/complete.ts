/**
 * Submits and completion: a batch's submit, its validation, the maps that hand mapped memory back
 * to the host, timestamps, then each op done once its parts and dependencies are; and the host
 * functions, run once everything before them is done. Completion is iterative (one worklist for
 * every context): chains of any length, across contexts, no recursion.
 */
import { atCall, DependencyError, GpuValidationError, HostFnError, InvalidArgumentError, StreamError, describeThrown, ownWords } from '../errors.js';
import { MapMode } from '../gpu-constants.js';
import { refusedOf } from '../memory.js';
import { NONE, type Op } from '../op.js';
import type { Trace } from '../trace.js';
import type { StagingPool } from '../transfer.js';
import { copyRows } from '../texture.js';
import type { Batch, Encoder } from './encode.js';
import { awaitHostFn, callHostFn, hostBudget, hostFnEnded, resumeNextTurn } from './host.js';

const RESOLVED: Promise<void> = Promise.resolve();
/** A rejected popErrorScope as the error it stands for. */
const asValue = (e: unknown): GPUError => ({ message: describeThrown(e) }) as GPUError;

/** Ops to look at for completion, in every context. */
let worklist: Op[] = [];
let head = 0;
let draining = false;

/** Looks at `op` (and, through the worklist, at what it unblocks) for completion. */
export function complete(op: Op): void {
  worklist.push(op);
  if (draining) return;
  draining = true;
  try {
    while (head < worklist.length) {
      const next = worklist[head]!;
      worklist[head++] = undefined as never;
      next.stream.owner.tryComplete(next);
    }
  } finally {
    worklist = [];
    head = 0;
    draining = false;
  }
}

/** `op` was ordered or completed: the streams waiting on it may go on. */
export function wakeDependents(op: Op): void {
  const ds = op.dependents;
  if (ds) for (let i = 0; i < ds.length; i++) ds[i]!.stream.owner.wake(ds[i]!.stream);
}

/**
 * The error an op takes when its dependency `d` failed: within one stream the same error (one
 * failure, one report); across streams a DependencyError naming this stream, with the cause.
 */
export function inherit(op: Op, d: Op): StreamError {
  const err = d.error!;
  if (d.stream === op.stream && err instanceof DependencyError) return err;
  const root = err instanceof DependencyError && err.cause instanceof Error ? err.cause : err;
  return new DependencyError(`did not run: it depends on op '${d.kind}' #${d.id} on stream '${d.stream.label}'${d.stream.owner === op.stream.owner ? '' : ` of context '${d.stream.owner.label}'`}, which failed: ${root.message.split('\n')[0]}`, { ...op.site(), cause: root });
}

/** What completion needs from its scheduler. */
export interface CompleterHost {
  readonly device: GPUDevice;
  readonly staging: StagingPool;
  readonly trace: Trace | null;
  /** The device-loss or destroy error once no more work can run, else null. */
  readonly closed: StreamError | null;
  scheduleFlush(all?: boolean): void;
}

export class Completer {
  /** Submits not completed. */
  inFlight = 0;
  /** Submits not completed, and host functions started and not finished: what `close` fails besides queued ops. */
  readonly inFlightBatches: Batch[] = [];
  readonly runningHost = new Set<Op>();
  #hostQueue: (Op | undefined)[] = [];
  #hostHead = 0;
  #runningHostFns = false;
  /** Host-clock offset of the GPU clock, ns (min over batches of host completion - GPU end). */
  #clockOffsetNs: number | null = null;
  #clockLowerNs = -Infinity;
  /** The device's queue, read once (a native getter per submit costs on Dawn). */
  readonly #queue: GPUQueue;

  constructor(readonly host: CompleterHost, readonly encoder: Encoder) {
    this.#queue = host.device.queue;
  }

  // ---------------------------------------------------------------- submit

  submit(b: Batch): void {
    const device = this.host.device;
    if (b.thrown) {
      // A stream.encode callback threw: its batch (that op alone) is dropped, unsubmitted.
      const op = b.ops[0]!, e = b.thrown.value;
      void device.popErrorScope().catch(() => undefined);
      if (b.ts) this.encoder.releaseTimestamps(b.ts);
      this.fail(op, e instanceof InvalidArgumentError ? e : new HostFnError(`the encode callback threw: ${describeThrown(e)}`, { ...op.site(), cause: e }));
      return;
    }
    const cmd = this.encoder.finish(b);
    b.tSubmit = performance.now();
    this.#queue.submit(b.extra ? [cmd, ...b.extra] : [cmd]);
    // The validation scope opened with the batch: an error fails the ops of this submit (an isolated op is alone in its).
    const popped = device.popErrorScope();
    // As a value (never rejecting), only for the parts that wait on it: an isolated op, read-backs.
    const validation = b.isolated || b.readbacks.length > 0 ? popped.then((err) => err, asValue) : null;
    this.inFlight++;
    this.inFlightBatches.push(b);
    const trace = this.host.trace;
    if (trace) {
      trace.addSubmit(b.ops);
      for (const op of b.ops) if (op.times) op.times.tSubmit = b.tSubmit;
    }
    if (b.isolated) {
      const op = b.ops[0]!;
      void validation!.then((err) => {
        if (err) this.fail(op, refusedOf(op.buffers, op.site(), op.pinned) ?? new GpuValidationError(`WebGPU rejected this op: ${err.message}`, op.site()));
        else if (!op.done) {
          op.ordered = true;
          wakeDependents(op);
          this.host.scheduleFlush(); // a flush's end answers its order waits (stream.whenSubmitted)
        }
      });
    }

    for (let i = 0; i < b.readbacks.length; i++) this.#readBack(b.readbacks[i]!, validation!);
    if (b.ts) this.#readTimestamps(b, popped);
    // The batch completes once validated and done on the GPU (#finishIfJoined); no Promise.all.
    popped.then((err) => this.#validated(b, err ?? null), (e: unknown) => this.#validated(b, asValue(e)));
    // On a microtask: the code that flushed may enqueue more ops on the same pinned buffers first.
    if (this.#toMapBack.push(b) === 1) void RESOLVED.then(this.#mapBackAll);
  }

  /** Submitted batches whose pinned buffers go back to the host on the next microtask. */
  readonly #toMapBack: Batch[] = [];
  readonly #mapBackAll = (): void => {
    const bs = this.#toMapBack;
    for (let i = 0; i < bs.length; i++) this.#mapBack(bs[i]!); // (maps resolve later: nothing is pushed meanwhile)
    bs.length = 0;
  };

  /** Maps `b`'s pinned buffers back (but PinnedBuffer.staysWithGpu): their ops complete once mapped, so after `synchronize()` the host owns them. A map also serves as the submit's completion. */
  #mapBack(b: Batch): void {
    let mapped: Promise<void> | null = null;
    for (let i = 0; i < b.pinnedUploads.length; i++) {
      const { pinned: p, ops } = b.pinnedUploads[i]!;
      p.lastGroup = null;
      if (p.state !== 'unmapped' || p.staysWithGpu) continue;
      for (let j = 0; j < ops.length; j++) ops[j]!.pendingParts++;
      const m = this.#whenMapped(p.map(), ops);
      mapped ??= m;
    }
    for (let i = 0; i < b.pinnedDownloads.length; i++) {
      const { pinned: p, ops } = b.pinnedDownloads[i]!;
      p.lastGroup = null;
      if (p.staysWithGpu) {
        for (let j = 0; j < ops.length; j++) if (!ops[j]!.done) ops[j]!.pendingParts--; // its part: the submit's GPU work
        continue;
      }
      const m = this.#whenMapped(p.map(), ops);
      mapped ??= m;
    }
    const worked = (): void => {
      b.worked = true;
      this.#finishIfJoined(b);
    };
    const failed = (e: unknown): void => this.#workFailed(b, e);
    // A failed map falls back to onSubmittedWorkDone for the submit's completion.
    if (mapped) mapped.then(worked, () => this.#queue.onSubmittedWorkDone().then(worked, failed));
    else this.#queue.onSubmittedWorkDone().then(worked, failed);
  }

  /** Batch `b`'s validation scope came back: `err`, or null when WebGPU accepted the submit. */
  #validated(b: Batch, err: GPUError | null): void {
    b.validated = true;
    b.error = err;
    this.#finishIfJoined(b);
  }

  /** Completes batch `b`'s ops once it is both validated and done on the GPU. */
  #finishIfJoined(b: Batch): void {
    if (b.finished || !b.validated || !b.worked) return;
    b.finished = true;
    this.#settled(b);
    const tDone = performance.now();
    const error = b.error;
    for (let i = 0; i < b.ops.length; i++) {
      const op = b.ops[i]!;
      if (op.times) op.times.tDone = tDone;
      if (error) this.fail(op, refusedOf(op.buffers, op.site(), op.pinned) ?? new GpuValidationError(`WebGPU rejected the submit that carried this op: ${error.message}`, op.site()));
      else this.ownDone(op);
    }
  }

  /** Batch `b`'s GPU work failed (device lost): its ops fail, as soon as that is known. */
  #workFailed(b: Batch, e: unknown): void {
    if (b.finished) return;
    b.finished = true;
    this.#settled(b);
    for (let i = 0; i < b.ops.length; i++) this.fail(b.ops[i]!, this.#asError(e, b.ops[i]!));
  }

  #settled(b: Batch): void {
    this.inFlight--;
    const i = this.inFlightBatches.indexOf(b); // submits complete in order: at the front
    if (i >= 0) this.inFlightBatches.splice(i, 1);
    this.host.scheduleFlush(true);
  }

  /** `m` (a pinned buffer's map) completes a part of each of `ops`; returns it. */
  #whenMapped(m: Promise<void>, ops: Op[]): Promise<void> {
    const done = (): void => { for (let i = 0; i < ops.length; i++) this.partDone(ops[i]!); }; // indexed: no iterator per map
    m.then(done, (e: unknown) => ops.forEach((op) => this.fail(op, this.#asError(e, op))));
    return m;
  }

  /** A pageable download: once the copy validated and the read-back buffer mapped, its bytes go into the user's array. */
  #readBack(op: Op, validation: Promise<GPUError | null>): void {
    const p = op.payload;
    if (p.kind !== 'download') return;
    const rb = p.readback!;
    const view = p.view!;
    const size = p.size;
    p.readback = null;
    let released = false;
    // .catch, not a second handler: a read failing in the first (its device lost meanwhile) fails the op, never goes unhandled.
    Promise.all([validation, rb.mapAsync(MapMode.READ, 0, size)])
      .then(([err]) => {
        // Nothing is written into the user's array for an op that failed (its copy never ran).
        if (!err && !op.done) {
          if (view.byteLength !== (p.unpack?.bytes ?? size)) {
            this.fail(op, new InvalidArgumentError(`the destination array was detached (transferred with postMessage or structuredClone, or its buffer resized) before the download completed; keep it until the op completes`, op.site()));
          } else {
            if (op.times) op.times.tHostBegin = performance.now();
            const bytes = new Uint8Array(rb.getMappedRange(0, size));
            if (p.unpack) copyRows(p.unpack.region, bytes, p.unpack.region, view, p.unpack.to); else view.set(bytes);
            if (op.times) op.times.tHostEnd = performance.now();
          }
        }
        released = true;
        this.host.staging.releaseReadback(rb);
        this.partDone(op);
      })
      .catch((e: unknown) => {
        if (!released) this.host.staging.releaseReadback(rb); // unmapped there; dropped if its context closed
        this.fail(op, this.#asError(e, op));
      });
  }

  #readTimestamps(b: Batch, validated: Promise<GPUError | null>): void {
    const ts = b.ts!;
    const n = b.queries;
    ts.readback
      .mapAsync(MapMode.READ, 0, n * 8)
      .then(() => validated.then((err) => err, asValue))
      .then((err) => {
        // A submit WebGPU rejected wrote no timestamps: its read-back holds a batch's before it, or zeros.
        const stamps = err ? null : new BigUint64Array(ts.readback.getMappedRange(0, n * 8).slice(0));
        ts.readback.unmap();
        this.encoder.releaseTimestamps(ts);
        let [maxEnd, minBegin] = [0n, null as bigint | null];
        for (const t of stamps ? b.timed : []) {
          const begin = stamps![t.begin]!, end = stamps![t.end]!;
          if (begin === 0n || end < begin) continue;
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
        for (const t of b.timed) this.partDone(t.op);
      })
      .catch((e: unknown) => b.timed.forEach((t) => this.fail(t.op, this.#asError(e, t.op))));
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
    const closed = this.host.closed;
    if (closed) return closed;
    if (e instanceof Error && 'op' in e) return e === op.pinned?.refused ? atCall(e as StreamError, op.site()) : (e as StreamError); // a pinned buffer's refusal, named for this op
    return new GpuValidationError(`WebGPU failed: ${describeThrown(e)}`, { ...op.site(), cause: e });
  }

  // ---------------------------------------------------------------- completion

  /** One of the op's extra parts (map, timestamps) finished. */
  partDone(op: Op): void {
    op.pendingParts--;
    complete(op);
  }

  ownDone(op: Op): void {
    op.ownDone = true;
    complete(op);
  }

  fail(op: Op, err: StreamError): void {
    if (op.done) return;
    if (!op.error) op.error = err;
    op.ordered = true;
    op.ownDone = true;
    op.pendingParts = 0;
    complete(op);
  }

  /** Marks `op` done once its own part, extra parts and dependencies are all done. */
  tryComplete(op: Op): void {
    if (op.done || !op.ownDone || op.pendingParts > 0) return;
    const deps = op.deps;
    for (let i = 0; i < deps.length; i++) {
      const d = deps[i]!;
      if (!d.done) return;
      if (d.error && !op.error) op.error = inherit(op, d);
    }
    // The last op using a pinned buffer completes once it is mapped again: the host owns it after a synchronize, failed or not.
    const pinned = op.pinned;
    if (pinned && op.claimIndex >= 0 && pinned.claims === 1 && pinned.state !== 'mapped' && !pinned.destroyRequested && !this.host.closed && pinned.mapError === null) {
      op.pendingParts++;
      const mapped = (): void => this.partDone(op);
      pinned.map().then(mapped, mapped);
      return;
    }
    op.done = true;
    const q = op.stream;
    if (op.kind === 'hostFn') q.hostFnsUndone--;
    const trace = this.host.trace;
    if (trace) {
      if (op.times && !op.times.tDone) op.times.tDone = performance.now();
      trace.add(op, this);
    }
    q.active--;
    if (op.error) {
      // Consecutive failures are one run, unless a synchronize has reported the run meanwhile.
      const run = q.failures[q.failures.length - 1];
      if (run && run.last === q.lastDoneId && run.last > Math.max(q.reportedStream, q.reportedCtx)) run.last = op.id;
      else q.failures.push({ first: op.id, last: op.id, error: op.error });
    }
    q.lastDoneId = op.id;
    for (let i = 0; i < op.buffers.length; i++) op.buffers[i]!.release();
    op.buffers = NONE;
    const p = op.payload;
    if (p.kind === 'upload' && p.staging) this.host.staging.release(p.staging);
    pinned?.unclaim(op);
    op.release();
    op.deps = NONE;
    const dependents = op.dependents;
    op.dependents = null;
    const ws = op.waiters;
    op.waiters = null;
    if (ws) for (let i = 0; i < ws.length; i++) ws[i]!();
    if (dependents) {
      for (let i = 0; i < dependents.length; i++) {
        const d = dependents[i]!;
        worklist.push(d);
        d.stream.owner.wake(d.stream);
      }
    }
    this.host.scheduleFlush();
  }

  // ---------------------------------------------------------------- host functions

  /** Host function `op` may run once the ordering pass is over. */
  queueHostFn(op: Op): void {
    this.#hostQueue.push(op);
  }

  /** Host functions queued and not started (for `close`). */
  takeQueuedHostFns(): Op[] {
    const ops = this.#hostQueue.slice(this.#hostHead).filter((op): op is Op => op !== undefined);
    this.#hostQueue = [];
    this.#hostHead = 0;
    return ops;
  }

  /** Runs the queued host functions, each once everything before it is done; yields a macrotask after a budget of them (host.ts). */
  runHostFns(): void {
    if (this.#runningHostFns) return; // a host function flushed: the loop below goes on
    this.#runningHostFns = true;
    try {
      while (this.#hostHead < this.#hostQueue.length) {
        if (!hostBudget()) {
          resumeNextTurn(() => this.runHostFns());
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
    this.runningHost.add(op);
    let result: unknown;
    try {
      result = callHostFn(op, p.fn);
    } catch (e) {
      this.#endHostFn(op, e ?? new Error(String(e)));
      return;
    }
    if (result === null || (typeof result !== 'object' && typeof result !== 'function')) {
      this.#endHostFn(op);
      return;
    }
    // A promise, a thenable (whose `then` may throw) or any object: awaited; nothing escapes but this op's HostFnError.
    awaitHostFn(op, result).then(
      () => this.#endHostFn(op),
      (e: unknown) => this.#endHostFn(op, e ?? new Error(String(e))),
    );
  }

  #endHostFn(op: Op, err?: unknown): void {
    hostFnEnded(op);
    this.runningHost.delete(op);
    if (op.times) op.times.tHostEnd = performance.now();
    if (err !== undefined && !op.error) {
      const lib = op.payload.kind === 'hostFn' && op.payload.own; // the library's own op (uploadFrom, copyPeer)
      op.error = lib && err instanceof StreamError ? err : new HostFnError(lib ? `${op.subject} failed: ${describeThrown(err)}` : `host function threw ${err instanceof StreamError ? `${err.name}: ${ownWords(err)}` : describeThrown(err)}`, { ...op.site(), ...(lib ? { op: op.subject } : {}), cause: err });
    }
    op.ordered = true;
    this.ownDone(op);
  }
}
