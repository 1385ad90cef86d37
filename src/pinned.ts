/**
 * Pinned (page-locked) host memory, WebGPU style: a mapped staging buffer. On discrete GPUs a
 * MAP_WRITE buffer often lives in device or PCIe memory, so the CPU's write into the mapped range
 * *is* the host-to-device transfer; the GPU copy out of it is nearly free.
 *
 * Ownership moves between host and GPU. The host owns the buffer (views usable) when it is mapped
 * and no enqueued op uses it. Enqueuing an op that uses it hands it to the GPU: the views throw
 * `PinnedBufferBusyError` naming the op and stream holding it; once those ops completed the buffer
 * is re-mapped by itself and `ready()` resolves.
 */
import { DestroyedError, PinnedBufferBusyError } from './errors.js';
import { BufferUsage, MapMode } from './gpu-constants.js';

interface Views {
  bytes: Uint8Array;
  f32: Float32Array;
  u32: Uint32Array;
}

/** Describes the op that holds a pinned buffer, for error messages. */
export interface Holder {
  op: string;
  stream: string;
  id: number;
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
  /** @internal the latest op that claimed the buffer */
  holder: Holder | null = null;
  #views: Views | null = null;
  #mapping: Promise<void> | null = null;
  #waiters: (() => void)[] = [];
  #failWaiters: ((e: unknown) => void)[] = [];
  #destroyRequested = false;
  #freed = false;
  readonly #onMapped: () => void;

  /** @internal use `ctx.allocHost` */
  constructor(device: GPUDevice, size: number, kind: 'upload' | 'download', label: string, onMapped: () => void) {
    this.kind = kind;
    this.size = size;
    this.label = label;
    this.#onMapped = onMapped;
    const usage = kind === 'upload' ? BufferUsage.MAP_WRITE | BufferUsage.COPY_SRC : BufferUsage.MAP_READ | BufferUsage.COPY_DST;
    this.buffer = device.createBuffer({ size, usage, mappedAtCreation: true, label });
  }

  /** True when the host may use the views now. */
  get isHostOwned(): boolean {
    return this.state === 'mapped' && this.claims === 0 && !this.#destroyRequested;
  }

  /** The whole buffer as bytes. Valid only while the host owns the buffer: re-read after `ready()`. */
  get bytes(): Uint8Array {
    return this.#viewsOrThrow().bytes;
  }

  /** The whole buffer as 32-bit floats (size / 4 elements). */
  get f32(): Float32Array {
    return this.#viewsOrThrow().f32;
  }

  /** The whole buffer as 32-bit unsigned integers. */
  get u32(): Uint32Array {
    return this.#viewsOrThrow().u32;
  }

  /**
   * Resolves when the host owns the buffer again (all ops using it completed and it is mapped).
   * Resolves at once when it already does.
   */
  ready(): Promise<void> {
    if (this.#destroyRequested) return Promise.reject(new DestroyedError(`pinned buffer '${this.label}' was destroyed`, { op: 'ready' }));
    if (this.isHostOwned) return Promise.resolve();
    return new Promise((resolve, reject) => {
      this.#waiters.push(resolve);
      this.#failWaiters.push(reject);
    });
  }

  /** Frees the buffer once no op uses it. Idempotent; later use throws `DestroyedError`. */
  destroy(): void {
    if (this.#destroyRequested) return;
    this.#destroyRequested = true;
    const err = new DestroyedError(`pinned buffer '${this.label}' was destroyed while waiting for ready()`, { op: 'ready' });
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
  claim(holder: Holder): void {
    this.claims++;
    this.unencoded++;
    this.holder = holder;
  }

  /** @internal that op completed (or was skipped) */
  unclaim(): void {
    this.claims--;
    if (this.claims === 0) {
      if (this.#destroyRequested) this.#free();
      else if (this.state === 'unmapped') this.map().catch(() => {});
      else this.#settle();
    }
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
    this.state = 'mapping';
    const mode = this.kind === 'upload' ? MapMode.WRITE : MapMode.READ;
    return (this.#mapping = this.buffer.mapAsync(mode).then(
      () => {
        this.#mapping = null;
        this.state = 'mapped';
        this.#views = null;
        this.#settle();
        this.#onMapped();
      },
      (err: unknown) => {
        this.#mapping = null;
        this.state = 'unmapped';
        for (const f of this.#failWaiters) f(err);
        this.#waiters = [];
        this.#failWaiters = [];
        throw err;
      },
    ));
  }

  #settle(): void {
    if (!this.isHostOwned || this.#waiters.length === 0) return;
    const ws = this.#waiters;
    this.#waiters = [];
    this.#failWaiters = [];
    for (const w of ws) w();
  }

  #free(): void {
    if (this.#freed) return;
    this.#freed = true;
    this.#views = null;
    this.buffer.destroy();
  }

  #viewsOrThrow(): Views {
    if (this.#destroyRequested) throw new DestroyedError(`pinned buffer '${this.label}' was destroyed; allocate a new one with ctx.allocHost()`, { op: 'view' });
    if (!this.isHostOwned) {
      const h = this.holder;
      const who = h ? `op '${h.op}' #${h.id} on stream '${h.stream}'` : 'the GPU';
      throw new PinnedBufferBusyError(
        `pinned buffer '${this.label}' is in use by ${who} until it completes; \`await pinned.ready()\` (or synchronize that stream) before touching its views, or use another buffer`,
        h ? { op: 'view', stream: h.stream } : { op: 'view' },
      );
    }
    if (!this.#views) {
      const range = this.buffer.getMappedRange();
      this.#views = { bytes: new Uint8Array(range), f32: new Float32Array(range, 0, this.size >>> 2), u32: new Uint32Array(range, 0, this.size >>> 2) };
    }
    return this.#views;
  }
}
