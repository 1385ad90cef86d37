/**
 * `uploadFrom`'s staging ring: pinned upload buffers of 8 MiB (less where the device's buffers are
 * smaller), counted in `memory.staging`. Free ones are kept for the next transfer: at least 24 (three
 * rings of 8 per stream: one copying, one read ahead, one reading), and as many as were ever in use
 * at once up to `stagingPoolBytes`, so a workload that repeats never creates (maps and zeroes)
 * buffers again, and a burst of transfers long past does not keep its pinned memory.
 */
import type { MemoryStats } from './memory.js';
import { PinnedBuffer, type PinnedHost } from './pinned.js';
import type { StagingRing } from './upload-from.js';

export class UploadRing implements StagingRing {
  readonly pieceBytes: number;
  readonly #free: PinnedBuffer[] = [];
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

  take(): PinnedBuffer {
    let p = this.#free.pop();
    if (!p) {
      this.memory.staging += this.pieceBytes;
      p = new PinnedBuffer(this.host, this.pieceBytes, 'upload', `${this.host.label} uploadFrom staging`);
      p.internal = true;
    }
    this.#out++;
    this.#taken.add(p);
    if (this.#taken.size > this.#peakInUse) this.#peakInUse = this.#taken.size;
    return p;
  }

  give(p: PinnedBuffer): void {
    if (this.#taken.delete(p) && !this.#closed && this.#free.length < Math.max(24, Math.min(this.#peakInUse, this.#maxFree))) this.#free.push(p);
    else this.#drop(p);
    if (--this.#out === 0) this.#drained?.();
  }

  /** Drops the free buffers now and those in use when they come back (`ctx.emptyCache()`). */
  trim(): void {
    this.#taken.clear();
    this.#peakInUse = 0;
    for (const p of this.#free.splice(0)) this.#drop(p);
  }

  /**
   * The context is destroyed: free buffers go now, buffers in use when given back. Returns, when
   * some are in use, a promise of their return: until then a read (a thread-pool read from a file)
   * may still write into one, so its device must not be destroyed yet.
   */
  close(): Promise<void> | null {
    this.#closed = true;
    for (const p of this.#free.splice(0)) this.#drop(p);
    return this.#out === 0 ? null : new Promise<void>((r) => (this.#drained = r));
  }

  #drop(p: PinnedBuffer): void {
    p.destroy();
    this.memory.staging -= this.pieceBytes;
  }
}
