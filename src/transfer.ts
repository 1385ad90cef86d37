/**
 * Pageable transfers: the staging pool behind `stream.upload(array)` and `stream.download(src,
 * array)`, and the pageable upload itself (bytes copied into staging at the call, whole or in
 * pieces).
 */
import { BufferUsage, MapMode } from './gpu-constants.js';
import type { MemoryStats } from './memory.js';
import { describeThrown, OutOfMemoryError, type ErrorSite } from './errors.js';
import { expectInteger } from './validate.js';

/**
 * Bucket sizes: four steps per power of two from 4 KiB (at most 25% of a buffer unused), whole MiB
 * above 64 MiB (a quarter of a large transfer is memory a device may not have: 897 MiB is no 1 GiB).
 */
export function bucketSize(bytes: number): number {
  expectInteger('bytes', bytes, 0, Number.MAX_SAFE_INTEGER, { op: 'bucketSize' });
  const min = 4096;
  if (bytes <= min) return min;
  if (bytes > 64 << 20) return Math.ceil(bytes / (1 << 20)) * (1 << 20);
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
 * GPU is done with it. Past `maxPooledBytes`, the free buffers used longest ago go first, so one
 * large transfer long past does not leave every later size to be created and destroyed per call.
 */
export class StagingPool {
  readonly #device: GPUDevice;
  /** A staging buffer's largest size: the device's maxBufferSize. */
  readonly maxBufferSize: number;
  readonly #stats: MemoryStats;
  readonly #uploads = new Map<number, GPUBuffer[]>();
  readonly #readbacks = new Map<number, GPUBuffer[]>();
  /** Every free buffer, least recently returned first, with the list it sits in. */
  readonly #free = new Map<GPUBuffer, GPUBuffer[]>();
  /** Buffers handed out since the last trim: only these go back to the pool when returned. */
  readonly #out = new Set<GPUBuffer>();
  #shared: StagingBlock | null = null;
  #pooledBytes = 0;
  #destroyed = false;
  /** Free bytes kept for reuse; more are destroyed on return. @default 512 MiB */
  maxPooledBytes: number;

  constructor(device: GPUDevice, stats: MemoryStats, maxPooledBytes = 512 * 1024 * 1024) {
    this.#device = device;
    this.maxBufferSize = device.limits.maxBufferSize;
    this.#stats = stats;
    this.maxPooledBytes = maxPooledBytes;
  }

  /** Copies `src` into staging now (pageable semantics: the caller may reuse it at once). */
  stage(src: Uint8Array, site: ErrorSite): StagingSlice {
    const size = src.byteLength;
    if (size <= SMALL_UPLOAD) {
      let block = this.#shared;
      if (!block || block.used + size > SHARED_BLOCK) {
        if (block) this.#seal(block);
        block = this.#shared = this.#mapped(this.#acquireUpload(SHARED_BLOCK, site, 'shared'));
      }
      const offset = block.used;
      block.used += Math.ceil(size / 4) * 4;
      block.users++;
      block.bytes!.set(src, offset);
      return { block, offset };
    }
    return this.stageWith(size, site, (bytes) => bytes.set(src));
  }

  /** Stages `size` bytes that `fill` writes (a texture's rows, laid out for the copy) in a buffer of their own. */
  stageWith(size: number, site: ErrorSite, fill: (bytes: Uint8Array) => void): StagingSlice {
    const block = this.#mapped(this.#acquireUpload(size, site));
    block.users++;
    fill(block.bytes!);
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

  /** A mapped MAP_WRITE | COPY_SRC buffer of at least `bytes` for the call at `site`; `label` (the asker's stream) goes into a new buffer's label. */
  #acquireUpload(bytes: number, site: ErrorSite, label = site.stream): GPUBuffer {
    const size = bytes === SHARED_BLOCK ? SHARED_BLOCK : this.#sizeFor(bytes);
    let buf = this.#uploads.get(size)?.pop();
    if (buf) {
      this.#free.delete(buf);
      this.#pooledBytes -= size;
    } else {
      try {
        buf = this.#device.createBuffer({ size, usage: BufferUsage.MAP_WRITE | BufferUsage.COPY_SRC, mappedAtCreation: true, label: `staging upload ${size} (${label})` });
      } catch (e) {
        // Mapped at creation: no host memory for its mapping throws here (a RangeError).
        throw new OutOfMemoryError(`no memory for the ${size}-byte staging buffer a pageable upload copies into: ${describeThrown(e)}; upload less at once, or from a pinned buffer`, { ...site, callSite: site.callSite, cause: e });
      }
      this.#stats.staging += size;
    }
    this.#out.add(buf);
    return buf;
  }

  /** An unmapped MAP_READ | COPY_DST buffer of at least `bytes`; `forOp`'s name goes into a new buffer's label (made only then). */
  acquireReadback(bytes: number, forOp: { readonly name: string }): GPUBuffer {
    const size = this.#sizeFor(bytes);
    let buf = this.#readbacks.get(size)?.pop();
    if (buf) {
      this.#free.delete(buf);
      this.#pooledBytes -= size;
    } else {
      this.#stats.staging += size;
      buf = this.#device.createBuffer({ size, usage: BufferUsage.MAP_READ | BufferUsage.COPY_DST, label: `staging readback ${size} (${forOp.name})` });
    }
    this.#out.add(buf);
    return buf;
  }

  /** Gives a read-back buffer back once the host copied its data out (it is unmapped here). */
  releaseReadback(buf: GPUBuffer): void {
    if (buf.mapState !== 'unmapped') buf.unmap();
    this.#keep(this.#readbacks, buf);
  }

  /** Destroys every pooled buffer (and the shared block when none of its bytes are in use); those in use now are destroyed when they come back. */
  trim(): void {
    const shared = this.#shared;
    if (shared && shared.users === 0) {
      this.#seal(shared);
      this.#drop(shared.buffer);
    }
    this.#out.clear();
    for (const [b, list] of this.#free) {
      list.length = 0;
      this.#drop(b);
    }
    this.#free.clear();
    this.#pooledBytes = 0;
  }

  destroy(): void {
    this.#destroyed = true;
    this.trim();
  }

  #keep(map: Map<number, GPUBuffer[]>, buf: GPUBuffer): void {
    const size = buf.size;
    if (!this.#out.delete(buf) || this.#destroyed || size > this.maxPooledBytes) return this.#drop(buf);
    // Make room by dropping the free buffers returned longest ago (Map order is insertion order).
    for (const [old, list] of this.#free) {
      if (this.#pooledBytes + size <= this.maxPooledBytes) break;
      list.splice(list.indexOf(old), 1);
      this.#free.delete(old);
      this.#pooledBytes -= old.size;
      this.#drop(old);
    }
    let list = map.get(size);
    if (!list) map.set(size, (list = []));
    list.push(buf);
    this.#free.set(buf, list);
    this.#pooledBytes += size;
  }

  /** A staging buffer's size for `bytes`: its bucket, never past the device's maxBufferSize. */
  #sizeFor(bytes: number): number {
    return Math.min(bucketSize(bytes), this.maxBufferSize);
  }

  #drop(buf: GPUBuffer): void {
    this.#out.delete(buf);
    this.#stats.staging -= buf.size;
    buf.destroy();
  }
}

/** Most pieces of one pageable upload (see ContextOptions.uploadPieceBytes). */
const MAX_UPLOAD_PIECES = 8;

/**
 * Enqueues the copy of one staged piece to `dstOffset` of the destination; `eager`: order it now
 * when its stream lets it run; `hostBegin`/`hostEnd`: when the host staged it. Returns the op id.
 */
export type EnqueueStaged = (slice: StagingSlice, dstOffset: number, size: number, eager: boolean, hostBegin: number, hostEnd: number) => number;

/**
 * A pageable upload of `size` bytes of `src` (from `srcOffset`) to `dstOffset` of its destination:
 * the bytes are copied into staging now, at the call (CUDA's pageable `cudaMemcpyAsync`). Above
 * `pieceBytes` (0: never) it goes as up to 8 pieces, each ordered as soon as it is staged when its
 * stream lets it run, so the GPU copies one piece while the host copies the next in.
 * @returns the last piece's op id
 */
export function uploadPageable(staging: StagingPool, site: ErrorSite, src: ArrayBufferView, srcOffset: number, dstOffset: number, size: number, pieceBytes: number, enqueue: EnqueueStaged): number {
  // At most MAX_UPLOAD_PIECES pieces, so they fit the submit window: completions that would free
  // it cannot be seen before this call returns, and pieces past it would wait until then.
  const count = pieceBytes === 0 || size <= pieceBytes ? 1 : Math.min(MAX_UPLOAD_PIECES, Math.ceil(size / pieceBytes));
  const piece = Math.max(4, Math.ceil(size / count / 4) * 4);
  let id = 0;
  for (let at = 0; at === 0 || at < size; at += piece) {
    const n = Math.min(piece, size - at);
    const t0 = performance.now();
    const slice = staging.stage(new Uint8Array(src.buffer, src.byteOffset + srcOffset + at, n), site);
    id = enqueue(slice, dstOffset + at, n, at + piece < size, t0, performance.now());
  }
  return id;
}
