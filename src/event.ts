/**
 * `GpuEvent`: a marker in a stream (`cudaEvent_t`). Record it, wait on it from other streams (of
 * any context), query or await it, and measure GPU time between two timing events from timestamp
 * queries.
 */
import { calledAt, EntrySite, EventNotReadyError, EventTimingError, InvalidArgumentError, type ErrorSite } from './errors.js';
import type { Op } from './op.js';
import { joinHost, type VectorClock } from './clock.js';
import { StreamQueue } from './op.js';
import type { Scheduler } from './scheduler/scheduler.js';
import { namedAbort, showValue, syncSignal, type SyncOptions } from './validate.js';

/** What an event is recorded on: a `Stream` of its context. */
export interface EventRecorder {
  record(event: GpuEvent): number;
}

/** @internal what an event needs from its context */
export interface EventHost {
  readonly scheduler: Scheduler;
  readonly timestampQuery: boolean;
  readonly defaultStream: EventRecorder;
  checkAlive(op: string): void;
}

export interface EventOptions {
  /** Record GPU timestamps so `elapsedTime` works (needs 'timestamp-query'). @default false */
  timing?: boolean;
  /** @default 'event#<n>' */
  label?: string;
}

export class GpuEvent {
  readonly label: string;
  readonly timing: boolean;
  /** @internal the most recent record op */
  last: Op | null = null;
  /** @internal the sanitizer's clock of the most recent record (null when its context is not sanitized) */
  clock: VectorClock | null = null;
  readonly #host: EventHost;

  /** @internal use `ctx.createEvent()` */
  constructor(host: EventHost, label: string, timing: boolean) {
    this.#host = host;
    this.label = label;
    this.timing = timing;
  }

  /** @internal the context (its scheduler) the event belongs to */
  get owner(): Scheduler {
    return this.#host.scheduler;
  }

  /** Records the event on `stream`, a `Stream` of its own context (default: the context's default stream) (`cudaEventRecord`). */
  record(stream: EventRecorder = this.#host.defaultStream): number {
    const queue = (stream as { queue?: unknown } | null)?.queue;
    if (!(queue instanceof StreamQueue)) {
      throw new InvalidArgumentError(`Expected \`stream\` to be a Stream (ctx.createStream()), got ${showValue(stream)}`, calledAt('record', GpuEvent.prototype.record, { context: this.owner.label }));
    }
    return stream.record(this);
  }

  /** @internal throws, before a record is enqueued, when the event cannot take it (frozen: it would run but not be remembered) */
  checkWritable(site: ErrorSite): void {
    try {
      this.last = this.last;
    } catch {
      throw new InvalidArgumentError(`event '${this.label}' is frozen: a record sets its state; record a fresh ctx.createEvent()`, site);
    }
  }

  /** True when the most recent record completed, or the event was never recorded (`cudaEventQuery`). */
  query(): boolean {
    const done = !this.last || this.last.done;
    if (done) joinHost(this.clock);
    return done;
  }

  /**
   * Resolves when the most recent record (at the time of the call) completed
   * (`cudaEventSynchronize`); rejects with the failure that made the record fail, if any.
   */
  synchronize(options: SyncOptions = {}): Promise<void> {
    let signal: AbortSignal | undefined;
    const site = new EntrySite('synchronize', this.owner.label, GpuEvent.prototype);
    try {
      signal = syncSignal(options, site);
      this.#host.checkAlive('synchronize');
    } catch (e) {
      return Promise.reject(e);
    }
    const op = this.last;
    if (!op) return Promise.resolve();
    const clock = this.clock;
    const failed = (): Promise<void> => {
      joinHost(clock);
      return op.error ? Promise.reject(op.error) : Promise.resolve();
    };
    if (op.done) return failed();
    return namedAbort(this.owner.whenDone(op, signal, `event '${this.label}'.synchronize()`), signal, site).then(failed);
  }

  /**
   * Milliseconds of GPU time between this event and `end` (`cudaEventElapsedTime`), from GPU
   * timestamps. Both events need `timing: true`, the device 'timestamp-query', both records must
   * have completed (await `end.synchronize()` first), and both must be of one device (one clock).
   */
  elapsedTime(end: GpuEvent): number {
    const site = calledAt('elapsedTime', GpuEvent.prototype.elapsedTime, { context: this.owner.label });
    if (!(end instanceof GpuEvent)) throw new InvalidArgumentError(`Expected \`end\` to be a GpuEvent, got ${showValue(end)}`, site);
    if (end.owner.device !== this.owner.device) {
      throw new EventTimingError(`events '${this.label}' (context '${this.owner.label}') and '${end.label}' (context '${end.owner.label}') are on two devices, which have two GPU clocks: time each device's work with two events of its own`, site);
    }
    // Only a record not yet done is EventNotReadyError (CUDA's cudaErrorNotReady: ask again later); the rest never change.
    for (const e of [this, end]) {
      if (!e.#host.timestampQuery) {
        throw new EventTimingError(e.owner.device.features.has('timestamp-query') ? `event '${e.label}' belongs to context '${e.owner.label}', created with \`timing: false\`: its events carry no GPU time` : `the device has no 'timestamp-query' feature, so events carry no GPU time; check ctx.features.timestampQuery (in Chrome it may need --enable-webgpu-developer-features or a newer GPU driver)`, site);
      }
      if (!e.timing) throw new EventTimingError(`event '${e.label}' was created without timing; use ctx.createEvent({ timing: true })`, site);
      if (!e.last) throw new EventTimingError(`event '${e.label}' was never recorded`, site);
      if (!e.last.done) throw new EventNotReadyError(`event '${e.label}' has not completed yet; await event.synchronize() first`, site);
      if (e.last.error) throw new EventTimingError(`event '${e.label}' failed, so it has no GPU time: ${e.last.error.message}`, { ...site, cause: e.last.error });
    }
    const a = this.last!.payload;
    const b = end.last!.payload;
    if (a.kind !== 'record' || b.kind !== 'record' || a.timestamp === null || b.timestamp === null) {
      throw new EventTimingError(`no GPU timestamps were recorded for '${this.label}' / '${end.label}'`, site);
    }
    return Number(b.timestamp - a.timestamp) / 1e6;
  }
}
