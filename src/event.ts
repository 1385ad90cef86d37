/**
 * `GpuEvent`: a marker in a stream (`cudaEvent_t`). Record it, wait on it from other streams, query
 * or await it, and measure GPU time between two timing events from timestamp queries.
 */
import { EventNotReadyError, EventTimingError, InvalidArgumentError } from './errors.js';
import type { Op } from './op.js';
import type { Stream, SyncOptions } from './stream.js';

/** @internal what an event needs from its context */
export interface EventHost {
  readonly timestampQuery: boolean;
  readonly defaultStream: Stream;
  whenDone(op: Op, signal?: AbortSignal): Promise<void>;
  checkAlive(op: string, stream: string): void;
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
  readonly #host: EventHost;

  /** @internal use `ctx.createEvent()` */
  constructor(host: EventHost, label: string, timing: boolean) {
    this.#host = host;
    this.label = label;
    this.timing = timing;
  }

  /** Records the event on `stream` (default: the context's default stream). */
  record(stream: Stream = this.#host.defaultStream): number {
    return stream.record(this);
  }

  /** True when the most recent record completed, or the event was never recorded (as in CUDA). */
  query(): boolean {
    return !this.last || this.last.done;
  }

  /** Resolves when the most recent record (at the time of the call) completed. */
  synchronize(options: SyncOptions = {}): Promise<void> {
    const op = this.last;
    if (!op || op.done) return Promise.resolve();
    return this.#host.whenDone(op, options.signal);
  }

  /**
   * Milliseconds of GPU time between this event and `end` (`cudaEventElapsedTime`), from GPU
   * timestamps. Both events need `timing: true`, the device 'timestamp-query', and both records must
   * have completed (await `end.synchronize()` first).
   */
  elapsedTime(end: GpuEvent): number {
    const site = { op: 'elapsedTime' };
    if (!(end instanceof GpuEvent)) throw new InvalidArgumentError(`Expected \`end\` to be a GpuEvent`, site);
    if (!this.#host.timestampQuery) {
      throw new EventTimingError(`the device has no 'timestamp-query' feature, so events carry no GPU time; check ctx.features.timestampQuery (in Chrome it may need --enable-webgpu-developer-features or a newer GPU driver)`, site);
    }
    for (const e of [this, end]) {
      if (!e.timing) throw new EventTimingError(`event '${e.label}' was created without timing; use ctx.createEvent({ timing: true })`, site);
      if (!e.last) throw new EventNotReadyError(`event '${e.label}' was never recorded`, site);
      if (!e.last.done) throw new EventNotReadyError(`event '${e.label}' has not completed yet; await event.synchronize() first`, site);
      if (e.last.error) throw new EventNotReadyError(`event '${e.label}' failed: ${e.last.error.message}`, { ...site, cause: e.last.error });
    }
    const a = this.last!.payload;
    const b = end.last!.payload;
    if (a.kind !== 'record' || b.kind !== 'record' || a.timestamp === null || b.timestamp === null) {
      throw new EventTimingError(`no GPU timestamps were recorded for '${this.label}' / '${end.label}'`, site);
    }
    return Number(b.timestamp - a.timestamp) / 1e6;
  }
}
