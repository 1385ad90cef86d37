/** Device memory: `DeviceBuffer` with byte accounting and deferred destroy. */
import { DestroyedError, type ErrorSite } from './errors.js';
import { BufferUsage } from './gpu-constants.js';

/** Bytes of device buffers allocated through a context: now and at the peak since the last reset. */
export class MemoryStats {
  current = 0;
  peak = 0;
  /** Bytes held by the staging pool (mapped upload / read-back buffers), not in `current`. */
  staging = 0;

  /** Sets `peak` to `current`, to measure the peak of what follows. */
  resetPeak(): void {
    this.peak = this.current;
  }

  /** @internal */
  add(bytes: number): void {
    this.current += bytes;
    if (this.current > this.peak) this.peak = this.current;
  }

  /** @internal */
  sub(bytes: number): void {
    this.current -= bytes;
  }
}

/** @internal what a buffer's context lends a peer copy (peer.ts) */
export interface PeerHost {
  readonly label: string;
  /** Throws DestroyedError when the context was destroyed. */
  checkAlive(op: string): void;
  /** Reads bytes [offset, offset + into.byteLength) of `src` back into `into`, on an internal stream. */
  readBack(src: GPUBuffer, into: Uint8Array, offset: number): Promise<void>;
}

/** Default usage of `ctx.alloc` buffers: storage for kernels, copy source and destination. */
export const DEFAULT_DEVICE_USAGE = BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST;

/**
 * A WebGPU buffer or texture collected without `destroy()`: its memory went with it, and so do its
 * bytes in the stats (held: the stats and the bytes, never the resource).
 */
const collected = new FinalizationRegistry<{ stats: MemoryStats; bytes: number }>((h) => h.stats.sub(h.bytes));

/**
 * Device memory with deferred destroy: `destroy()` while streams still use it is deferred until
 * their ops complete (PyTorch's `record_stream` problem, solved by default). Counted in `ctx.memory`.
 */
export abstract class DeviceResource {
  readonly label: string;
  /** Bytes it holds on the device (a texture's: every mip level, texel bytes times texels). */
  readonly byteSize: number;
  /** @internal the device that made it: a stream of another device refuses it at the call */
  readonly device: GPUDevice;
  #uses = 0;
  #destroyRequested = false;
  #freed = false;
  readonly #stats: MemoryStats;

  /** @internal */
  constructor(device: GPUDevice, stats: MemoryStats, byteSize: number, label: string) {
    this.label = label;
    this.byteSize = byteSize;
    this.device = device;
    this.#stats = stats;
    stats.add(byteSize);
  }

  /** True once `destroy()` was called (the memory may still be in use by pending ops). */
  get destroyed(): boolean {
    return this.#destroyRequested;
  }

  /** Pending ops that use it. */
  get pendingUses(): number {
    return this.#uses;
  }

  /** @internal an op that uses it was enqueued */
  retain(): void {
    this.#uses++;
  }

  /** @internal that op completed */
  release(): void {
    this.#uses--;
    if (this.#uses === 0 && this.#destroyRequested) this.#free();
  }

  /** @internal throws when it can no longer be used in new work */
  checkAlive(site: ErrorSite): void {
    if (this.#destroyRequested) throw new DestroyedError(`${this.noun} '${this.label}' was destroyed; allocate a new one with ctx.${this.noun === 'buffer' ? 'alloc' : 'allocTexture'}()`, site);
  }

  /** Frees it once every op that uses it completed. Idempotent. */
  destroy(): void {
    if (this.#destroyRequested) return;
    this.#destroyRequested = true;
    if (this.#uses === 0) this.#free();
  }

  [Symbol.dispose](): void {
    this.destroy();
  }

  /** @internal counts `obj` (the WebGPU object) until it is destroyed or collected */
  protected track(obj: object): void {
    collected.register(obj, { stats: this.#stats, bytes: this.byteSize }, this);
  }

  /** @internal 'buffer' or 'texture', for messages */
  protected abstract get noun(): string;
  /** @internal destroys the WebGPU object */
  protected abstract destroyNow(): void;

  #free(): void {
    if (this.#freed) return;
    this.#freed = true;
    this.destroyNow();
    collected.unregister(this);
    this.#stats.sub(this.byteSize);
  }
}

/** A buffer in device memory, made by `ctx.alloc`; `destroy()` is deferred while streams use it. */
export class DeviceBuffer extends DeviceResource {
  readonly buffer: GPUBuffer;
  readonly size: number;
  readonly usage: number;
  /** @internal its context, for a peer copy's read-back (peer.ts) */
  peer: PeerHost | null = null;

  /** @internal use `ctx.alloc` */
  constructor(device: GPUDevice, stats: MemoryStats, size: number, label: string, usage: number) {
    super(device, stats, size, label);
    this.size = size;
    this.usage = usage;
    this.buffer = device.createBuffer({ size, usage, label });
    this.track(this.buffer);
  }

  protected get noun(): string {
    return 'buffer';
  }
  protected destroyNow(): void {
    this.buffer.destroy();
  }
}
