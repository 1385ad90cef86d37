/**
 * Device memory: `DeviceBuffer` with byte accounting and deferred destroy, and the staging pool
 * behind pageable uploads and downloads.
 */
import { DestroyedError, type ErrorSite } from './errors.js';
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
  const min = 4096;
  if (bytes <= min) return min;
  const pow = 2 ** Math.floor(Math.log2(bytes));
  const step = pow / 4;
  return Math.ceil(bytes / step) * step;
}

/**
 * Staging buffers for pageable transfers, bucketed by size. Upload buffers are kept mapped (ready
 * for the CPU to fill); read-back buffers unmapped (ready for a copy). A buffer returns to the pool
 * only after the GPU is done with it: uploads through `mapAsync(WRITE)`, which resolves after the
 * copy that read it, read-backs after the host copied the data out.
 */
export class StagingPool {
  readonly #device: GPUDevice;
  readonly #stats: MemoryStats;
  readonly #uploads = new Map<number, GPUBuffer[]>();
  readonly #readbacks = new Map<number, GPUBuffer[]>();
  #pooledBytes = 0;
  #destroyed = false;
  /** Free bytes kept for reuse; more are destroyed on return. @default 512 MiB */
  maxPooledBytes: number;

  constructor(device: GPUDevice, stats: MemoryStats, maxPooledBytes = 512 * 1024 * 1024) {
    this.#device = device;
    this.#stats = stats;
    this.maxPooledBytes = maxPooledBytes;
  }

  /** A mapped MAP_WRITE | COPY_SRC buffer of at least `bytes`; `stream` (the asker's label) goes into a new buffer's label. */
  acquireUpload(bytes: number, stream: string): GPUBuffer {
    const size = bucketSize(bytes);
    const free = this.#uploads.get(size);
    const buf = free?.pop();
    if (buf) {
      this.#pooledBytes -= size;
      return buf;
    }
    this.#stats.staging += size;
    return this.#device.createBuffer({ size, usage: BufferUsage.MAP_WRITE | BufferUsage.COPY_SRC, mappedAtCreation: true, label: `staging upload ${size} (${stream} upload)` });
  }

  /** Gives an upload buffer back after the submit that reads it; it is re-mapped first. */
  releaseUpload(buf: GPUBuffer): void {
    buf.mapAsync(MapMode.WRITE).then(
      () => this.#keep(this.#uploads, buf),
      () => this.#drop(buf),
    );
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
