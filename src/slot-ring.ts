/**
 * `SlotRing`: device buffers used in turn by a producer stream that fills them and a consumer
 * stream that reads them, ordered by events: the double-buffered weight loading of CUDA's stream
 * samples, for data larger than the device holds (model layers, a video's frames). Use `i` goes
 * to slot `i % count`; its fill waits for use `i - count`, the slot's last reader; its use waits
 * for its fill. Fills may run up to `count` uses ahead, so loading overlaps computing.
 */
import { Context } from './context.js';
import { calledAt, DestroyedError, InvalidArgumentError, type ErrorSite } from './errors.js';
import type { GpuEvent } from './event.js';
import { DeviceBuffer } from './memory.js';
import { Stream } from './stream.js';
import { expectFunction, expectInteger, expectKnownKeys, expectLabel, expectObject, showValue } from './validate.js';

export interface SlotRingOptions {
  /** The stream that fills the slots (uploads, uploadFrom, copies, kernels writing them). */
  producer: Stream;
  /** The stream that reads them. */
  consumer: Stream;
  /** Bytes per slot; the ring allocates `count` device buffers of this size. Or pass `buffers`. */
  bytes?: number;
  /** How many slots. @default 2 */
  count?: number;
  /** The slots, when you allocate them (the ring does not destroy these). */
  buffers?: readonly DeviceBuffer[];
  /** @default 'slot' (buffers are labelled 'slot[0]', 'slot[1]', ...) */
  label?: string;
}

/** What a fill or a use enqueues: `slot` is the use's buffer, `stream` the producer or consumer, `i` the use's index. */
export type SlotWork = (slot: DeviceBuffer, stream: Stream, i: number) => void;

export class SlotRing {
  /** The slots, in order; use `i` gets `buffers[i % count]`. */
  readonly buffers: readonly DeviceBuffer[];
  readonly producer: Stream;
  readonly consumer: Stream;
  readonly label: string;
  #filled = 0;
  #used = 0;
  readonly #loaded: GpuEvent[];
  readonly #freed: GpuEvent[];
  readonly #owned: boolean;
  readonly #context: string;

  constructor(ctx: Context, options: SlotRingOptions) {
    if (!(ctx instanceof Context)) throw new InvalidArgumentError(`Expected \`ctx\` to be a Context, got ${showValue(ctx)}`, calledAt('SlotRing', SlotRing));
    const site = calledAt('SlotRing', SlotRing, { context: ctx.label });
    const o = expectObject('options', options, site) as Partial<SlotRingOptions>;
    expectKnownKeys('options', o, ['producer', 'consumer', 'bytes', 'count', 'buffers', 'label'], site);
    const label = expectLabel(o.label, () => 'slot', site);
    const { producer, consumer } = o;
    for (const [name, s] of [['producer', producer], ['consumer', consumer]] as const) {
      if (!(s instanceof Stream) || s.queue.owner !== ctx.defaultStream.queue.owner) throw new InvalidArgumentError(`Expected \`${name}\` to be a Stream of context '${ctx.label}', got ${showValue(s)}`, site);
    }
    if (producer === consumer) throw new InvalidArgumentError('`producer` and `consumer` are the same stream: one stream orders its own work, no ring needed', site);
    if (o.buffers !== undefined) {
      if (!Array.isArray(o.buffers) || o.buffers.length < 1 || !o.buffers.every((b) => b instanceof DeviceBuffer)) throw new InvalidArgumentError(`Expected \`buffers\` to be a non-empty array of DeviceBuffers, got ${showValue(o.buffers)}`, site);
      if (o.bytes !== undefined || o.count !== undefined) throw new InvalidArgumentError('pass `buffers`, or `bytes` (and `count`), not both', site);
      for (const b of o.buffers) {
        b.checkAlive(site);
        if (b.device !== ctx.device) throw new InvalidArgumentError(`buffer '${b.label}' was allocated on another GPUDevice; a ring's slots are its context's (ctx.alloc)`, site);
      }
      if (new Set(o.buffers).size < o.buffers.length) throw new InvalidArgumentError('`buffers` holds one buffer twice: each slot must be a buffer of its own (a fill would overwrite a slot still being read)', site);
      this.buffers = [...o.buffers];
      this.#owned = false;
    } else {
      const count = o.count === undefined ? 2 : expectInteger('count', o.count, 1, 1 << 16, site);
      const bytes = expectInteger('bytes', o.bytes, 4, Number.MAX_SAFE_INTEGER, site);
      this.buffers = Array.from({ length: count }, (_, k) => ctx.alloc(bytes, { label: `${label}[${k}]` }));
      this.#owned = true;
    }
    this.producer = producer as Stream;
    this.consumer = consumer as Stream;
    this.label = label;
    this.#context = ctx.label;
    this.#ctx = ctx;
    this.#loaded = this.buffers.map((_, k) => ctx.createEvent({ label: `${label}[${k}] filled` }));
    this.#freed = this.buffers.map((_, k) => ctx.createEvent({ label: `${label}[${k}] read` }));
  }

  get count(): number {
    return this.buffers.length;
  }
  /** Fills enqueued so far (the next fill is use `filled`). */
  get filled(): number {
    return this.#filled;
  }
  /** Uses enqueued so far (the next use is use `used`). */
  get used(): number {
    return this.#used;
  }

  /**
   * Enqueues the next use's fill on the producer: `work(slot, producer, i)` after the slot's last
   * use (i - count) completed. Throws when that use is not enqueued yet (call `use` first); when
   * `work` throws, the ring stays where it was (the next fill is use i again).
   * @returns the use's index
   */
  fill(work: SlotWork): number {
    const i = this.#filled;
    const site = calledAt('SlotRing.fill', SlotRing.prototype.fill, { stream: this.producer.label, context: this.#context });
    this.#outside(site);
    expectFunction('work', work, site);
    if (i - this.count >= this.#used) {
      throw new InvalidArgumentError(`fill of use ${i} needs ${this.label}[${i % this.count}], whose use ${i - this.count} is not enqueued yet: call use() first (at most ${this.count} fills ahead)`, site);
    }
    const k = i % this.count;
    if (i >= this.count) this.producer.waitEvent(this.#freed[k]!); // use i - count read this slot
    this.#run(work, this.buffers[k]!, this.producer, i);
    this.#loaded[k]!.record(this.producer);
    this.#filled++;
    return i;
  }

  /**
   * Enqueues the next use on the consumer: `work(slot, consumer, i)` after its fill. Throws when
   * that fill is not enqueued yet (call `fill` first); when `work` throws, the next use is use i again.
   * @returns the use's index
   */
  use(work: SlotWork): number {
    const i = this.#used;
    const site = calledAt('SlotRing.use', SlotRing.prototype.use, { stream: this.consumer.label, context: this.#context });
    this.#outside(site);
    expectFunction('work', work, site);
    if (i >= this.#filled) throw new InvalidArgumentError(`use ${i} of ${this.label}[${i % this.count}] has no fill enqueued: call fill() first`, site);
    const k = i % this.count;
    this.consumer.waitEvent(this.#loaded[k]!);
    this.#run(work, this.buffers[k]!, this.consumer, i);
    this.#freed[k]!.record(this.consumer);
    this.#used++;
    return i;
  }

  #inWork = false;
  readonly #ctx: Context;
  /** Throws when its context was destroyed, or when called from inside a fill's or use's `work` (both calls would take the same index). */
  #outside(site: ErrorSite): void {
    if (this.#ctx.destroyed) throw new DestroyedError(`context '${this.#context}' was destroyed; the ring's streams and slots went with it`, site);
    if (this.#inWork) throw new InvalidArgumentError(`${site.op}() was called from inside a fill() or use() callback; enqueue the next one after it returns`, site);
  }
  /** Runs a fill's or use's `work`; a fill() or use() from inside it is refused (both would take the same index). */
  #run(work: SlotWork, slot: DeviceBuffer, stream: Stream, i: number): void {
    this.#inWork = true;
    try {
      work(slot, stream, i);
    } finally {
      this.#inWork = false;
    }
  }

  /** Destroys the slots the ring allocated (deferred while streams use them); buffers passed in stay yours. */
  destroy(): void {
    if (this.#owned) for (const b of this.buffers) b.destroy();
  }

  /** `using ring = new SlotRing(...)`: destroy() at the end of the block. */
  [Symbol.dispose](): void {
    this.destroy();
  }
}
