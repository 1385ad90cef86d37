/**
 * Pinned (page-locked) host memory, WebGPU style: a mapped staging buffer. On discrete GPUs a
 * MAP_WRITE buffer often lives in device or PCIe memory, so the CPU's write into the mapped range
 * *is* the host-to-device transfer; the GPU copy out of it is nearly free.
 *
 * Ownership moves between host and GPU. The host owns the buffer (views usable) when it is mapped
 * and no enqueued op uses it. Enqueuing an op that uses it hands it to the GPU: the views throw
 * `PinnedBufferBusyError` naming the op and stream holding it; once the GPU is done with those ops
 * the buffer is mapped back by itself and `ready()` resolves.
 */
import { atCall, calledAt, describeThrown, DestroyedError, GpuValidationError, OutOfMemoryError, PinnedBufferBusyError, StreamError, type ErrorSite } from './errors.js';
import { BufferUsage, MapMode } from './gpu-constants.js';
import { joinHost } from './clock.js';
import { createBufferJudged } from './memory.js';

/**
 * Each view handed out keeps its pinned buffer (and so its GPUBuffer) alive: Dawn's Node binding
 * frees a collected buffer's memory under a mapped range still in use (a crash on the next access).
 * The view itself holds it, in a private field no user code sees (cheaper than a WeakMap entry per
 * view, and views are made anew after every map). Not the range: the binding holds each mapped range
 * itself while mapped. A base class whose constructor returns its argument lets a subclass add a
 * private field to any object.
 */
class Stamp {
  constructor(o: object) {
    return o as Stamp;
  }
}
class OwnedView extends Stamp {
  readonly #owner: PinnedBuffer;
  constructor(view: ArrayBufferView, owner: PinnedBuffer) {
    super(view);
    this.#owner = owner;
  }
}

/** The mapped range and the views made of it so far (each made on first use). */
interface Views {
  range: ArrayBuffer;
  bytes?: Uint8Array;
  f32?: Float32Array;
  u32?: Uint32Array;
}

/** What a pinned buffer needs to know of an op that claims it. */
export interface Claimant {
  readonly id: number;
  readonly kind: string;
  readonly ordered: boolean;
  readonly stream: { readonly label: string; readonly hostFnsUndone: number };
  /** Its place in its pinned buffer's `claimants` (an op claims at most one buffer), -1 when none. */
  claimIndex: number;
  /** Its failure, once it failed. */
  readonly error: unknown;
}

/** @internal what a pinned buffer needs from its context */
export interface PinnedHost {
  readonly device: GPUDevice;
  /** The context's label, for messages. */
  readonly label: string;
  /** The device-loss or destroy error once the context can no longer run work, else null. */
  closed(): StreamError | null;
  /** The buffer was mapped back while ops using it are still to be encoded: they (in any context) may go on. */
  onMapped(claimants: readonly Claimant[]): void;
  /**
   * May the code running now touch a buffer whose claimants are all unencoded? Only the host
   * function running now, when each claimant is a later op of its own stream (it fills the buffer
   * that op uploads, as CUDA allows).
   */
  hostWindow(claimants: readonly Claimant[]): boolean;
  /** Throws DeadlockError when a running host function waits for a claimant queued behind it. */
  checkWait(claimants: readonly Claimant[], what: string): void;
  /** The context's stream sanitizer, told of each view the host takes; null when off. */
  readonly sanitizer: { hostAccess(p: PinnedBuffer, view?: (...args: never[]) => unknown): void } | null;
}

export class PinnedBuffer {
  readonly kind: 'upload' | 'download';
  readonly size: number;
  readonly label: string;
  /** @internal */
  readonly buffer: GPUBuffer;
  /** @internal 'mapped' (CPU side), 'unmapped' (in GPU use), 'mapping' (mapAsync in flight) */
  state: 'mapped' | 'unmapped' | 'mapping' = 'mapped';
  /** @internal enqueued ops that use the buffer and have not completed */
  claims = 0;
  /** @internal enqueued ops that use the buffer and are not encoded yet */
  unencoded = 0;
  /** @internal enqueued ops that use the buffer and have not completed (unordered: removal swaps in the last) */
  readonly claimants: Claimant[] = [];
  #views: Views | null = null;
  /** @internal the sanitizer's join of the clocks of the ops that used it (handed to the host's clock with the buffer) */
  usersClock: number[] | null = null;
  /** @internal the library's own staging (uploadFrom's ring): the sanitizer sees the ops it serves instead */
  internal = false;
  /** @internal the ops of the last batch that used it (encode.ts) */
  lastGroup: { readonly batch: number; readonly ops: unknown[] } | null = null;
  #mapping: Promise<void> | null = null;
  #waiters: (() => void)[] = [];
  /** @internal why its last map failed (then it is not mapped again), or null */
  mapError: unknown = null;
  /** @internal set when WebGPU had no memory for it: its ops, maps, ready() and views fail with this */
  refused: StreamError | null = null;
  /** WebGPU's verdict on its creation came: no map before it (a map of a refused buffer is a WebGPU error) goes unscoped. */
  #judged = false;
  /** The failure of an op using the buffer when its context closed: it names the op and its line. */
  #cutShort: unknown = null;
  #failWaiters: ((e: unknown) => void)[] = [];
  #destroyRequested = false;
  #freed = false;
  readonly #host: PinnedHost;

  /** @internal use `ctx.allocHost` */
  constructor(host: PinnedHost, size: number, kind: 'upload' | 'download', label: string) {
    this.kind = kind;
    this.size = size;
    this.label = label;
    this.#host = host;
    const usage = kind === 'upload' ? BufferUsage.MAP_WRITE | BufferUsage.COPY_SRC : BufferUsage.MAP_READ | BufferUsage.COPY_DST;
    const made = createBufferJudged(host.device, { size, usage, mappedAtCreation: true, label }, { op: 'allocHost', context: host.label });
    this.buffer = made.buffer;
    made.outOfMemory.then((e) => {
      this.#judged = true;
      if (e) this.refused = this.mapError = new OutOfMemoryError(`pinned buffer '${label}' (${size} bytes) could not be allocated: out of memory. ctx.allocHost() returns before WebGPU says so, and the ops that use it fail; free memory or allocate less. WebGPU: ${e.message.trim()}`, { op: 'allocHost', context: host.label, callSite: undefined });
    }, () => undefined);
  }

  /** @internal the device that made it: a stream of another device refuses it at the call */
  get device(): GPUDevice {
    return this.#host.device;
  }

  /**
   * @internal after a submit that used it: ops still to be encoded use it too, and no host function
   * can write it before them (none is undone on their streams), so mapping it back now would only
   * hold them back (no op using a buffer is encoded while it maps). The submit of its last op maps it.
   */
  get staysWithGpu(): boolean {
    if (this.unencoded === 0) return false;
    const cs = this.claimants;
    for (let i = 0; i < cs.length; i++) if (!cs[i]!.ordered && cs[i]!.stream.hostFnsUndone > 0) return false;
    return true;
  }

  /** True when the host owns the buffer: mapped, and no enqueued op uses it. `ready()` waits for this. */
  get isHostOwned(): boolean {
    const owned = this.#owned();
    if (owned) joinHost(this.usersClock);
    return owned;
  }

  #owned(): boolean {
    return this.state === 'mapped' && this.claims === 0 && !this.#destroyRequested && !this.#host.closed();
  }

  /**
   * The views are usable when the host owns the buffer, and also from inside a host function while
   * every op that uses the buffer is a later op of that function's own stream: fill the buffer
   * there for the op after it (as CUDA allows). Any other code should `await ready()`.
   */
  #viewsUsable(): boolean {
    if (this.#owned()) return true;
    return this.state === 'mapped' && !this.#destroyRequested && !this.#host.closed() && this.claims === this.unencoded && this.#host.hostWindow(this.claimants);
  }

  /** The whole buffer as bytes. Valid only while the host owns the buffer: re-read after `ready()`. */
  get bytes(): Uint8Array {
    const v = this.#viewsOrThrow('bytes');
    return (v.bytes ??= this.#own(new Uint8Array(v.range)));
  }

  /** The whole buffer as 32-bit floats (size / 4 elements). */
  get f32(): Float32Array {
    const v = this.#viewsOrThrow('f32');
    return (v.f32 ??= this.#own(new Float32Array(v.range, 0, this.size >>> 2)));
  }

  /** The whole buffer as 32-bit unsigned integers. */
  get u32(): Uint32Array {
    const v = this.#viewsOrThrow('u32');
    return (v.u32 ??= this.#own(new Uint32Array(v.range, 0, this.size >>> 2)));
  }

  /**
   * Resolves when the host owns the buffer again: the GPU is done with every op using it, and it is
   * mapped (those ops' own completion, seen by events and `query()`, can follow a moment later).
   * Resolves at once when it already does.
   */
  ready(): Promise<void> {
    if (this.#destroyRequested) return Promise.reject(new DestroyedError(`pinned buffer '${this.label}' was destroyed`, this.#at('ready')));
    const closed = this.#host.closed();
    if (closed) return Promise.reject(atCall(closed, this.#at('ready')));
    if (this.refused || (this.mapError !== null && this.state !== 'mapped')) return Promise.reject(this.#mapFailure());
    if (this.#owned()) {
      joinHost(this.usersClock);
      return Promise.resolve();
    }
    try {
      this.#host.checkWait(this.claimants, `pinned buffer '${this.label}'.ready()`);
    } catch (e) {
      return Promise.reject(e);
    }
    const p = new Promise<void>((resolve, reject) => {
      this.#waiters.push(resolve);
      this.#failWaiters.push(reject);
    });
    // Unmapped by `unmap()` and not in GPU use: nothing else will map it back.
    if (this.state === 'unmapped' && this.claims === 0) this.map().catch(() => {});
    return p;
  }

  /**
   * Gives up the host's mapping now, when the host is done with the views: they detach (length 0)
   * until `await ready()` maps the buffer back, contents kept. Does nothing unless the host owns
   * the buffer (an op using it unmaps it anyway).
   *
   * Why: in Node (and Chrome), V8 counts each mapped range as external memory and starts a major GC
   * whenever that grows 64 MiB above its low point. A ring of large download buffers left mapped
   * after their read-out can cross that step; unmapping each after reading it, as hand-written
   * WebGPU does, keeps one range attached at a time (docs/PERFORMANCE.md, "Keep one large mapped range attached at a time").
   *
   * @example
   * await down.ready();
   * out.set(down.f32);
   * down.unmap(); // the next download into it needs no unmap, and V8 sees the memory go
   */
  unmap(): void {
    if (this.#destroyRequested) throw new DestroyedError(`pinned buffer '${this.label}' was destroyed; allocate a new one with ctx.allocHost()`, this.#at('unmap'));
    if (this.#owned()) this.unmapForGpu();
  }

  /** Frees the buffer once no op uses it. Idempotent; later use throws `DestroyedError`. */
  destroy(): void {
    if (this.#destroyRequested) return;
    this.#destroyRequested = true;
    const err = new DestroyedError(`pinned buffer '${this.label}' was destroyed while waiting for ready()`, this.#at('ready'));
    for (const f of this.#failWaiters) f(err);
    this.#waiters = [];
    this.#failWaiters = [];
    if (this.claims === 0) this.#free();
  }

  [Symbol.dispose](): void {
    this.destroy();
  }

  /** @internal */
  get destroyRequested(): boolean {
    return this.#destroyRequested;
  }

  /** @internal an op that uses it was enqueued */
  claim(op: Claimant): void {
    this.claims++;
    this.unencoded++;
    op.claimIndex = this.claimants.length;
    this.claimants.push(op);
  }

  /** @internal that op completed (or was skipped); nothing when its claim already ended with a map (#onMapped) */
  unclaim(op: Claimant): void {
    const i = op.claimIndex;
    if (i < 0) return;
    if (op.error && this.#host.closed()) this.#cutShort ??= op.error; // what ready() waiters get: the op cut short, named
    this.claims--;
    if (this.claimants[i] === op) {
      const last = this.claimants.pop()!;
      if (last !== op) {
        this.claimants[i] = last;
        last.claimIndex = i;
      }
      op.claimIndex = -1;
    }
    if (this.claims === 0) {
      if (this.#destroyRequested) this.#free();
      else if (this.state === 'unmapped') this.map().catch(() => {});
      else this.#settle();
    }
  }

  /** @internal views were handed out since the buffer was last mapped */
  get hasViews(): boolean {
    return this.#views !== null;
  }

  /**
   * @internal an op that uses it was enqueued while the mapping stays (a host function ahead may
   * fill it): views taken before now detach, so only that host function writes what is uploaded.
   * Resolves once mapped again, contents kept.
   */
  detachViews(): Promise<void> {
    this.unmapForGpu();
    return this.map();
  }

  /** @internal before encoding a copy that uses it: the host loses the mapping */
  unmapForGpu(): void {
    if (this.state === 'mapped') {
      this.#views = null;
      this.buffer.unmap();
      this.state = 'unmapped';
    }
  }

  /** @internal maps the buffer back for the host; resolves when mapped */
  map(): Promise<void> {
    if (this.state === 'mapped') return Promise.resolve();
    if (this.#mapping) return this.#mapping;
    // Freed (destroyed once its ops ended, a context's close among them): no mapAsync on a destroyed buffer.
    if (this.#freed) return Promise.reject(new DestroyedError(`pinned buffer '${this.label}' was destroyed`, this.#at('map')));
    if (this.mapError !== null || this.refused) return Promise.reject(this.mapError ?? this.refused);
    this.state = 'mapping';
    const mode = this.kind === 'upload' ? MapMode.WRITE : MapMode.READ;
    const scoped = !this.#judged;
    if (scoped) this.#host.device.pushErrorScope('validation');
    this.#mapping = this.buffer.mapAsync(mode).then(this.#onMapped, this.#onMapFailed);
    if (scoped) void this.#host.device.popErrorScope().catch(() => undefined);
    return this.#mapping;
  }

  // Made once per buffer: a map per GPU use of the buffer allocates no closures.
  readonly #onMapped = (): void => {
    this.#mapping = null;
    this.state = 'mapped';
    this.#views = null;
    // No op using the buffer is encoded while it maps (Scheduler's canOrder), so with none left to
    // encode, every one was submitted before this map and the GPU is done with them: the host owns
    // the buffer now, without waiting for the ops' own completion (their batch's bookkeeping).
    if (this.claims > 0 && this.unencoded === 0) {
      const cs = this.claimants;
      for (let i = 0; i < cs.length; i++) cs[i]!.claimIndex = -1;
      cs.length = 0;
      this.claims = 0;
      if (this.#destroyRequested) return this.#free();
    }
    this.#settle();
    // Ops still to be encoded may have waited for the map (Scheduler's canOrder); encoded ones complete on their own.
    if (this.unencoded > 0) this.#host.onMapped(this.claimants);
  };

  readonly #onMapFailed = (err: unknown): never => {
    this.#mapping = null;
    this.state = 'unmapped';
    const e = (this.mapError = this.refused ?? err); // a buffer that cannot map (invalid: out of memory, its device lost) is not mapped again
    const closed = this.#host.closed();
    if (closed || e instanceof StreamError) this.#rejectWaiters(closed ? (this.#cutShort ?? closed) : this.#mapFailure());
    else {
      // A map cut short by the device's loss can fail before the loss is known (Chrome): if the loss comes at once, it is the reason.
      const settle = (): void => this.#rejectWaiters(this.#host.closed() ? (this.#cutShort ?? this.#host.closed()) : this.#mapFailure());
      void Promise.race([this.#host.device.lost, new Promise((r) => setTimeout(r, 100))]).then(settle, settle);
    }
    throw e;
  };

  /** Why it cannot be mapped, typed: its refusal, or WebGPU's map failure (`cause`). */
  #mapFailure(): StreamError {
    const e = this.mapError;
    return e instanceof StreamError ? atCall(e, this.#at('ready')) : new GpuValidationError(`pinned buffer '${this.label}' could not be mapped back: ${describeThrown(e)}`, { ...this.#at('ready'), cause: e });
  }

  /** Resolves `ready()` waiters once the host owns the buffer; rejects them once the context is lost or destroyed. */
  #settle(): void {
    if (this.#waiters.length === 0) return;
    const closed = this.#host.closed();
    if (closed) return this.#rejectWaiters(this.#cutShort ?? closed);
    if (!this.#owned()) return;
    joinHost(this.usersClock);
    const ws = this.#waiters;
    this.#waiters = [];
    this.#failWaiters = [];
    for (const w of ws) w();
  }

  #rejectWaiters(err: unknown): void {
    const fs = this.#failWaiters;
    this.#waiters = [];
    this.#failWaiters = [];
    for (const f of fs) f(err);
  }

  #free(): void {
    if (this.#freed) return;
    this.#freed = true;
    this.#views = null;
    this.buffer.destroy();
  }

  #own<T extends ArrayBufferView>(view: T): T {
    new OwnedView(view, this);
    return view;
  }

  /** Where this buffer's errors happen: `op` in its context. */
  #at(op: string): { op: string; context: string } {
    return { op, context: this.#host.label };
  }

  #viewsOrThrow(view: 'bytes' | 'f32' | 'u32'): Views {
    const at = (stream?: string): ErrorSite => calledAt('view', VIEW_GETTERS[view], { context: this.#host.label, stream });
    if (this.#destroyRequested) throw new DestroyedError(`pinned buffer '${this.label}' was destroyed; allocate a new one with ctx.allocHost()`, at());
    const closed = this.#host.closed();
    if (closed) throw atCall(closed, at());
    if (this.refused) throw atCall(this.refused, at());
    // Before the ownership check: a race is reported even where this run happens to catch it.
    if (!this.internal) this.#host.sanitizer?.hostAccess(this, VIEW_GETTERS[view]);
    if (!this.#viewsUsable()) {
      let h: Claimant | undefined;
      for (const c of this.claimants) if (!h || c.id < h.id) h = c; // the first holder: the others wait behind it
      if (!h && this.state === 'unmapped') {
        throw new PinnedBufferBusyError(`pinned buffer '${this.label}' was unmapped by unmap(); \`await pinned.ready()\` maps it back (its contents are kept)`, at());
      }
      const more = this.claimants.length - 1;
      const who = h ? `op '${h.kind}' #${h.id} on stream '${h.stream.label}'${more > 0 ? ` (and ${more} more op${more > 1 ? 's' : ''} after it)` : ''}` : 'the GPU (mapping it back)';
      throw new PinnedBufferBusyError(
        `pinned buffer '${this.label}' is in use by ${who} until it completes; \`await pinned.ready()\` (or synchronize that stream) before touching its views, fill it from a hostFn enqueued on that stream before that op, or use another buffer`,
        at(h?.stream.label), // not a spread: its callSite is a getter
      );
    }
    return (this.#views ??= { range: this.buffer.getMappedRange() });
  }
}

/** The view getters, where a stack taken for a view's error or race begins at their caller. */
const VIEW_GETTERS = {
  bytes: Object.getOwnPropertyDescriptor(PinnedBuffer.prototype, 'bytes')!.get!,
  f32: Object.getOwnPropertyDescriptor(PinnedBuffer.prototype, 'f32')!.get!,
  u32: Object.getOwnPropertyDescriptor(PinnedBuffer.prototype, 'u32')!.get!,
};
