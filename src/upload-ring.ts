/**
 * `uploadFrom`'s staging ring: pinned upload buffers of 8 MiB (less where the device's buffers are
 * smaller), or for a transfer under that, one of its size rounded up to a power of two (64 KiB at
 * least), counted in `memory.staging`. Free ones are kept for the next transfer: at least 24 (three
 * rings of 8 per stream: one copying, one read ahead, one reading), and as many as were ever in use
 * at once up to `stagingPoolBytes`, so a workload that repeats never creates (maps and zeroes)
 * buffers again, and a burst of transfers long past does not keep its pinned memory.
 */
import type { MemoryStats } from './memory.js';
import { PinnedBuffer, type PinnedHost } from './pinned.js';
import type { StagingRing } from './upload-from.js';

/** The smallest staging buffer a small transfer takes. */
const MIN_BYTES = 64 * 1024;

export class UploadRing implements StagingRing {
  readonly pieceBytes: number;
  /** Free buffers by size: whole pieces, and the powers of two below one. */
  readonly #free = new Map<number, PinnedBuffer[]>();
  /** Free buffers, all sizes. */
  #freeCount = 0;
  #closed = false;
  /** Buffers taken since the last trim and not given back (only these are kept when they are), and the most there were. */
  readonly #taken = new Set<PinnedBuffer>();
  #peakInUse = 0;
  /** Buffers taken and not given back (reads may be writing into them), and who waits for none. */
  #out = 0;
  #drained: (() => void) | null = null;
  /** Free buffers kept beyond the 24, at most (`stagingPoolBytes` / piece). */
  readonly #maxFree: number;

  constructor(
    readonly host: PinnedHost,
    readonly memory: MemoryStats,
    maxBufferSize: number,
    maxFreeBytes: number,
  ) {
    this.pieceBytes = Math.min(8 << 20, maxBufferSize - (maxBufferSize % 4));
    this.#maxFree = Math.floor(maxFreeBytes / this.pieceBytes);
  }

  /** The size of buffer a transfer of `bytes` takes: a whole piece, or the power of two that holds a smaller one. */
  sizeFor(bytes: number): number {
    return bytes >= this.pieceBytes ? this.pieceBytes : Math.min(this.pieceBytes, Math.max(MIN_BYTES, 2 ** Math.ceil(Math.log2(bytes))));
  }

  /** A free buffer of `sizeFor(bytes)`, or a new one. */
  take(bytes = this.pieceBytes): PinnedBuffer {
    const size = this.sizeFor(bytes);
    let p = this.#free.get(size)?.pop();
    if (p) this.#freeCount--;
    else {
      p = new PinnedBuffer(this.host, size, 'upload', `${this.host.label} uploadFrom staging`); // counted once made
      this.memory.staging += size;
      p.internal = true;
    }
    this.#out++;
    this.#taken.add(p);
    if (this.#taken.size > this.#peakInUse) this.#peakInUse = this.#taken.size;
    return p;
  }

  give(p: PinnedBuffer): void {
    if (this.#taken.delete(p) && !this.#closed && this.#freeCount < Math.max(24, Math.min(this.#peakInUse, this.#maxFree))) {
      let free = this.#free.get(p.size);
      if (!free) this.#free.set(p.size, (free = []));
      free.push(p);
      this.#freeCount++;
    } else this.#drop(p);
    if (--this.#out === 0) this.#drained?.();
  }

  /** Drops the free buffers now and those in use when they come back (`ctx.emptyCache()`). */
  trim(): void {
    this.#taken.clear();
    this.#peakInUse = 0;
    this.#dropFree();
  }

  /**
   * The context is destroyed: free buffers go now, buffers in use when given back. Returns, when
   * some are in use, a promise of their return: until then a read (a thread-pool read from a file)
   * may still write into one, so its device must not be destroyed yet.
   */
  close(): Promise<void> | null {
    this.#closed = true;
    this.#dropFree();
    return this.#out === 0 ? null : new Promise<void>((r) => (this.#drained = r));
  }

  #dropFree(): void {
    for (const free of this.#free.values()) for (const p of free.splice(0)) this.#drop(p);
    this.#freeCount = 0;
  }

  #drop(p: PinnedBuffer): void {
    p.destroy();
    this.memory.staging -= p.size;
  }
}
