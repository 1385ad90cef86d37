/**
 * Device memory: `DeviceBuffer` with byte accounting and deferred destroy, and the staging pool
 * behind pageable uploads and downloads.
 */
import { DestroyedError, type ErrorSite } from './errors.js';
import { expectInteger } from './validate.js';
import { BufferUsage, MapMode } from './gpu-constants.js';

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

/** Default usage of `ctx.alloc` buffers: storage for kernels, copy source and destination. */
export const DEFAULT_DEVICE_USAGE = BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST;

/**
 * A buffer in device memory, made by `ctx.alloc`. `destroy()` while streams still use it is
 * deferred until their ops complete (PyTorch's `record_stream` problem, solved by default).
 */
export class DeviceBuffer {
  readonly buffer: GPUBuffer;
  readonly size: number;
  readonly label: string;
  readonly usage: number;
  /** @internal the device that made it: a stream of another device refuses it at the call */
  readonly device: GPUDevice;
  #uses = 0;
  #destroyRequested = false;
  #freed = false;
  readonly #stats: MemoryStats;

  /** @internal use `ctx.alloc` */
  constructor(device: GPUDevice, stats: MemoryStats, size: number, label: string, usage: number) {
    this.size = size;
    this.label = label;
    this.usage = usage;
    this.#stats = stats;
    this.device = device;
    this.buffer = device.createBuffer({ size, usage, label });
    stats.add(size);
  }

  /** True once `destroy()` was called (the memory may still be in use by pending ops). */
  get destroyed(): boolean {
    return this.#destroyRequested;
  }

  /** Pending ops that use this buffer. */
  get pendingUses(): number {
    return this.#uses;
  }

  /** @internal an op that uses the buffer was enqueued */
  retain(): void {
    this.#uses++;
  }

  /** @internal that op completed */
  release(): void {
    this.#uses--;
    if (this.#uses === 0 && this.#destroyRequested) this.#free();
  }

  /** @internal throws when the buffer can no longer be used in new work */
  checkAlive(site: ErrorSite): void {
    if (this.#destroyRequested) throw new DestroyedError(`buffer '${this.label}' was destroyed; allocate a new one with ctx.alloc()`, site);
  }

  /** Frees the buffer once every op that uses it completed. Idempotent. */
  destroy(): void {
    if (this.#destroyRequested) return;
    this.#destroyRequested = true;
    if (this.#uses === 0) this.#free();
  }

  [Symbol.dispose](): void {
    this.destroy();
  }

  #free(): void {
    if (this.#freed) return;
    this.#freed = true;
    this.buffer.destroy();
    this.#stats.sub(this.size);
  }
}

/** Bucket sizes: four steps per power of two from 4 KiB, so at most 25% of a buffer is unused. */
export function bucketSize(bytes: number): number {
  expectInteger('bytes', bytes, 0, Number.MAX_SAFE_INTEGER, { op: 'bucketSize' });
  const min = 4096;
  if (bytes <= min) return min;
  const pow = 2 ** Math.floor(Math.log2(bytes));
  const step = pow / 4;
  return Math.ceil(bytes / step) * step;
}

/** Pageable uploads up to this size share 256 KiB staging blocks instead of a bucket each. */
const SMALL_UPLOAD = 16 * 1024;
const SHARED_BLOCK = 256 * 1024;

/** A mapped MAP_WRITE staging buffer: one pageable upload's (bucketed), or shared by small ones. */
class StagingBlock {
  /** Ops whose bytes are in it and that are not done. */
  users = 0;
  /** Bytes handed out (shared blocks). */
  used = 0;
  /** Unmapped for the GPU: no more bytes go in; it returns to the pool once its users are done. */
  sealed = false;
  bytes: Uint8Array | null = null;
  constructor(readonly buffer: GPUBuffer) {}
}

/** Where one pageable upload's bytes were staged: `offset` into `block.buffer`. */
export interface StagingSlice {
  readonly block: StagingBlock;
  readonly offset: number;
}

/**
 * Staging buffers for pageable transfers. Uploads: bytes are copied in at the call; an upload of
 * up to 16 KiB takes a slice of the current shared block (many small uploads, one buffer), a
 * larger one a size-bucketed buffer of its own. A block is unmapped when the first op using it is
 * encoded and goes back to the pool, re-mapped, once every op using it is done. Read-back buffers
 * are bucketed and kept unmapped, ready for a copy. A buffer returns to the pool only after the
 * GPU is done with it.
 */
export class StagingPool {
  readonly #device: GPUDevice;
  readonly #stats: MemoryStats;
  readonly #uploads = new Map<number, GPUBuffer[]>();
  readonly #readbacks = new Map<number, GPUBuffer[]>();
  #shared: StagingBlock | null = null;
  #pooledBytes = 0;
  #destroyed = false;
  /** Free bytes kept for reuse; more are destroyed on return. @default 512 MiB */
  maxPooledBytes: number;

  constructor(device: GPUDevice, stats: MemoryStats, maxPooledBytes = 512 * 1024 * 1024) {
    this.#device = device;
    this.#stats = stats;
    this.maxPooledBytes = maxPooledBytes;
  }

  /** Copies `src` into staging now (pageable semantics: the caller may reuse it at once). */
  stage(src: Uint8Array, stream: string): StagingSlice {
    const size = src.byteLength;
    if (size <= SMALL_UPLOAD) {
      let block = this.#shared;
      if (!block || block.used + size > SHARED_BLOCK) {
        if (block) this.#seal(block);
        block = this.#shared = this.#mapped(this.#acquireUpload(SHARED_BLOCK, 'shared'));
      }
      const offset = block.used;
      block.used += Math.ceil(size / 4) * 4;
      block.users++;
      block.bytes!.set(src, offset);
      return { block, offset };
    }
    const block = this.#mapped(this.#acquireUpload(size, stream));
    block.users++;
    block.bytes!.set(src);
    this.#seal(block);
    return { block, offset: 0 };
  }

  /** Before the GPU copies out of `slice`: its block leaves the host (later uploads take a new one). */
  seal(slice: StagingSlice): void {
    if (!slice.block.sealed) this.#seal(slice.block);
  }

  /** The op that used `slice` is done (or skipped): its block goes back once its last user is. */
  release(slice: StagingSlice): void {
    const block = slice.block;
    if (--block.users > 0) return;
    if (!block.sealed) {
      if (!this.#destroyed) {
        block.used = 0; // the current shared block, never sent: its space is free again
        return;
      }
      this.#seal(block);
      return this.#drop(block.buffer);
    }
    block.buffer.mapAsync(MapMode.WRITE).then(
      () => this.#keep(this.#uploads, block.buffer),
      () => this.#drop(block.buffer),
    );
  }

  #mapped(buffer: GPUBuffer): StagingBlock {
    const block = new StagingBlock(buffer);
    block.bytes = new Uint8Array(buffer.getMappedRange());
    return block;
  }

  #seal(block: StagingBlock): void {
    block.sealed = true;
    block.bytes = null;
    block.buffer.unmap();
    if (this.#shared === block) this.#shared = null;
  }

  /** A mapped MAP_WRITE | COPY_SRC buffer of at least `bytes`; `stream` (the asker's label) goes into a new buffer's label. */
  #acquireUpload(bytes: number, stream: string): GPUBuffer {
    const size = bytes === SHARED_BLOCK ? SHARED_BLOCK : bucketSize(bytes);
    const buf = this.#uploads.get(size)?.pop();
    if (buf) {
      this.#pooledBytes -= size;
      return buf;
    }
    this.#stats.staging += size;
    return this.#device.createBuffer({ size, usage: BufferUsage.MAP_WRITE | BufferUsage.COPY_SRC, mappedAtCreation: true, label: `staging upload ${size} (${stream})` });
  }

  /** An unmapped MAP_READ | COPY_DST buffer of at least `bytes`; `forOp`'s name goes into a new buffer's label (made only then). */
  acquireReadback(bytes: number, forOp: { readonly name: string }): GPUBuffer {
    const size = bucketSize(bytes);
    const buf = this.#readbacks.get(size)?.pop();
    if (buf) {
      this.#pooledBytes -= size;
      return buf;
    }
    this.#stats.staging += size;
    return this.#device.createBuffer({ size, usage: BufferUsage.MAP_READ | BufferUsage.COPY_DST, label: `staging readback ${size} (${forOp.name})` });
  }

  /** Gives a read-back buffer back once the host copied its data out (it is unmapped here). */
  releaseReadback(buf: GPUBuffer): void {
    if (buf.mapState !== 'unmapped') buf.unmap();
    this.#keep(this.#readbacks, buf);
  }

  /** Destroys every pooled buffer (in-flight ones are destroyed when they come back). */
  trim(): void {
    for (const list of [...this.#uploads.values(), ...this.#readbacks.values()]) {
      for (const b of list) this.#drop(b);
      list.length = 0;
    }
    this.#pooledBytes = 0;
  }

  destroy(): void {
    this.#destroyed = true;
    this.trim();
    const shared = this.#shared;
    if (shared && shared.users === 0) {
      this.#shared = null;
      this.#drop(shared.buffer);
    }
  }

  #keep(map: Map<number, GPUBuffer[]>, buf: GPUBuffer): void {
    if (this.#destroyed || this.#pooledBytes + buf.size > this.maxPooledBytes) return this.#drop(buf);
    let list = map.get(buf.size);
    if (!list) map.set(buf.size, (list = []));
    list.push(buf);
    this.#pooledBytes += buf.size;
  }

  #drop(buf: GPUBuffer): void {
    this.#stats.staging -= buf.size;
    buf.destroy();
  }
}
