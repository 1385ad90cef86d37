/**
 * A stream's reader for `uploadFrom` from random-access sources (a file, HTTP byte ranges): it reads
 * the stream's transfers into their staging rings in call order, ahead of the ops' turns, with the
 * source's `parallel` reads in flight all along, across pieces and transfers. So the file is read
 * while earlier work runs and only the copies wait for it (upload-from.ts copies each piece once
 * read). A transfer is read once the one three before it gave its ring back: a stream holds at
 * most three rings (one copying, one read, one being read). A piece is unmapped once read, and at
 * most three are read at once: a mapped range is V8 external memory, and more at once start GCs.
 */
import type { PinnedBuffer } from './pinned.js';
import { isRandomAccess, pieceCount, readFully, readsAhead, slot, type Piece, type RandomAccessSource, type Transfer } from './upload-from.js';

/**
 * Pieces being read at once, at most (each a mapped range of up to 8 MiB, V8 external memory): with
 * more, V8 collected every couple of pieces (docs/PERFORMANCE.md, "Streaming weights from storage").
 */
const MAX_READING = 3;

/** Reads of at least 2 MiB (smaller ones cost more per byte than they gain in concurrency), 64 KiB-aligned. */
const partBytes = (n: number, parallel: number): number => Math.max(2 << 20, Math.ceil(n / parallel / 65536) * 65536);

const RESOLVED: Promise<void> = Promise.resolve();

export class Reader {
  /** Transfers to read, in call order. */
  #queue: Transfer[] = [];
  #running = false;
  /** Reads in flight, and the reader waiting for one to end. */
  #inFlight = 0;
  #readEnded: (() => void) | null = null;
  /** Pieces with reads in flight. */
  #reading: Piece[] = [];
  /** The last three transfers' `ended`. */
  #lastEnded: [Promise<void>, Promise<void>, Promise<void>] = [RESOLVED, RESOLVED, RESOLVED];

  /** Queues a transfer (any source: each holds a ring while it runs). */
  add(t: Transfer): void {
    // A source read ahead waits for the transfer three before to give its ring back; one that may not, for its own op.
    t.gate = readsAhead(t.source) ? this.#lastEnded[0] : t.started;
    this.#lastEnded = [this.#lastEnded[1], this.#lastEnded[2], t.ended];
    if (!isRandomAccess(t.source) || !t.size) return t.finishReader();
    this.#queue.push(t);
    if (!this.#running) void this.#run();
  }

  async #run(): Promise<void> {
    this.#running = true;
    while (this.#queue.length) {
      const t = this.#queue[0]!;
      await t.gate;
      try {
        await this.#read(t, t.source as RandomAccessSource);
      } catch (e) {
        // A mapped range detached under it (the context destroyed mid-read): the op fails on it, not waits.
        this.#add(t, { k: t.pieces.length, buf: null, n: 0, done: Promise.reject(e), idle: RESOLVED, read: false });
        void Promise.all(t.pieces.map((x) => x.idle)).then(t.finishReader);
      }
      this.#queue.shift();
    }
    this.#running = false;
  }

  /** Starts every piece's reads (up to `parallel` in flight); the reader is done with `t` once they settled. */
  async #read(t: Transfer, src: RandomAccessSource): Promise<void> {
    const piece = t.ring.pieceBytes;
    const parallel = Math.max(1, Math.floor(src.parallel ?? 1));
    const part = partBytes(piece, parallel);
    // Enough pieces to keep `parallel` reads going while the oldest completes.
    const window = Math.max(1, Math.min(MAX_READING, Math.ceil((parallel * part) / piece) + 1));
    const total = pieceCount(t);
    for (let k = 0; k < total && !t.stopped && !t.failed; k++) {
      while (this.#reading.length >= window) await this.#reading[0]!.idle;
      let buf: PinnedBuffer;
      let view: Uint8Array;
      try {
        buf = await slot(t, k);
        view = buf.bytes;
      } catch (e) {
        // No staging (the context was destroyed or lost): the op fails on this piece, in order.
        this.#add(t, { k, buf: null, n: 0, done: Promise.reject(e), idle: RESOLVED, read: false });
        break;
      }
      if (t.stopped || t.failed) break;
      const n = Math.min(piece, t.size! - k * piece);
      const parts: Promise<void>[] = [];
      for (let a = 0; a < n; a += part) {
        while (this.#inFlight >= parallel) await new Promise<void>((r) => (this.#readEnded = r));
        // The op ended meanwhile (failed, or its context destroyed): no read starts into its staging.
        if (t.stopped || t.failed) {
          parts.push(Promise.reject(new Error('transfer stopped')));
          break;
        }
        this.#inFlight++;
        const read = readFully(t, src, view.subarray(a, Math.min(n, a + part)), t.offset + k * piece + a).finally(this.#ended);
        read.catch(() => undefined); // awaited through the piece, which may be made after it failed
        parts.push(read);
      }
      // The op learns of a failed read at once; the buffer goes back only once no read writes into it.
      this.#add(t, { k, buf, n, done: Promise.all(parts).then(() => buf.unmap()), idle: Promise.allSettled(parts), read: false });
    }
    void Promise.all(t.pieces.map((x) => x.idle)).then(t.finishReader);
  }

  /** Piece `x` of `t` is being read: the op may take it (in order); the window counts it until it settles. */
  #add(t: Transfer, x: Piece): void {
    x.done.then(
      () => (x.read = true),
      () => (t.failed = true),
    );
    void x.idle.then(() => this.#reading.splice(this.#reading.indexOf(x), 1));
    this.#reading.push(x);
    t.pieces[x.k] = x;
    const wake = t.onPiece;
    t.onPiece = null;
    wake?.();
  }

  readonly #ended = (): void => {
    this.#inFlight--;
    const wake = this.#readEnded;
    this.#readEnded = null;
    wake?.();
  };
}
