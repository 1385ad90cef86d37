/**
 * `stream.uploadFrom(source, dst)`: bytes from a file, a fetch body or any stream of chunks into a
 * device buffer, through a small ring of pinned staging buffers, so neither the JS heap nor the
 * device ever holds more than the ring of a transfer of any size.
 *
 * The op is a host function of the stream: it starts once the stream's earlier work is done, and
 * the stream's later work waits for it. It fills the ring's buffers (a random-access source reads
 * straight into their mapped ranges, several reads at once; a stream of chunks is copied in) and
 * hands each to an internal stream that copies it into `dst`, so reading piece k + 1 overlaps the
 * GPU's copy of piece k. It ends once the last copy completed.
 */
import { InvalidArgumentError, UploadSourceError, type ErrorSite } from './errors.js';
import { expectAligned, expectInteger, expectKnownKeys, expectObject, showValue } from './validate.js';
import type { PinnedBuffer } from './pinned.js';
import type { DeviceBuffer } from './memory.js';

/** Bytes readable at any position: a file (`openFile` in `webgpu-streams/node`), a Blob, an HTTP resource. */
export interface RandomAccessSource {
  /** Total bytes. */
  readonly size: number;
  /** Reads up to `into.byteLength` bytes at `position` into `into`; resolves with the count read (0: the end). */
  read(into: Uint8Array, position: number): Promise<number>;
  /** Reads worth running at once (a file in Node: libuv's thread pool). @default 1 */
  readonly parallel?: number;
  /** Named in errors. */
  readonly label?: string;
}

/** What `uploadFrom` reads: random access, a `ReadableStream` (a fetch body, `Blob.stream()`), or any async iterable of chunks. */
export type UploadSource = RandomAccessSource | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>;

export interface UploadFromOptions {
  /** Byte position in the source to start at (a stream's first bytes are skipped). @default 0 */
  offset?: number;
  /** Bytes to move, a multiple of 4. @default the rest of a random-access source; all of a stream */
  size?: number;
  /** Byte offset in `dst`, a multiple of 4. @default 0 */
  dstOffset?: number;
  /**
   * Pinned staging buffers (8 MiB pieces) this transfer may use: reads run that far ahead of the
   * GPU's copies, which queue behind earlier kernels on WebGPU's one queue. @default 4
   */
  ring?: number;
}

/** The ring's buffers: taken for a transfer, given back after it. */
export interface StagingRing {
  readonly pieceBytes: number;
  take(): PinnedBuffer;
  give(p: PinnedBuffer): void;
}

/** What the transfer copies with: an internal stream's pinned upload and its synchronize. */
export interface CopyStream {
  upload(src: PinnedBuffer, dst: DeviceBuffer | GPUBuffer, options: { srcOffset: number; dstOffset: number; size: number }): number;
  /** Resolves once its last op has its place in the GPU queue (encoded), or is done. */
  whenOrdered(): Promise<void>;
  synchronize(): Promise<void>;
}

export function isRandomAccess(s: unknown): s is RandomAccessSource {
  return typeof s === 'object' && s !== null && typeof (s as RandomAccessSource).read === 'function' && typeof (s as RandomAccessSource).size === 'number';
}

export function isChunkSource(s: unknown): s is ReadableStream<Uint8Array> | AsyncIterable<Uint8Array> {
  return typeof s === 'object' && s !== null && (typeof (s as ReadableStream).getReader === 'function' || typeof (s as AsyncIterable<Uint8Array>)[Symbol.asyncIterator] === 'function');
}

export interface Transfer {
  source: UploadSource;
  offset: number;
  /** Bytes to move; null: a stream's whole rest, up to `room`. */
  size: number | null;
  /** As the call gave it: a DeviceBuffer's copies batch with other work; a raw GPUBuffer's each go alone (see Op.isolated). */
  dst: DeviceBuffer | GPUBuffer;
  dstLabel: string;
  dstOffset: number;
  /** Bytes of `dst` from `dstOffset` on. */
  room: number;
  copies: CopyStream;
  ring: StagingRing;
  /** At most this many staging buffers. */
  ringSize: number;
  site: ErrorSite;
  /**
   * The op's GPU work is all in the queue: the stream's later GPU ops may take their places after
   * it (queue order does the rest) while the op itself is done only once the copies completed.
   */
  ordered?: () => void;
  /** Pieces read before the op ran (random-access sources, see readAhead). */
  ahead?: ReadAhead;
  /** Resolves once this transfer read all it will read (or will read nothing): the next may read ahead. */
  readsDone: Promise<void>;
  finishReads: () => void;
  /** Resolves once the op ran or was dropped: the transfer after next may read ahead (at most three rings per stream). */
  started: Promise<void>;
  markStarted: () => void;
}

/** A piece being read (or read) into a staging buffer. */
interface Piece {
  k: number;
  buf: PinnedBuffer;
  n: number;
  done: Promise<void>;
  /** Read (and unmapped where read ahead): its copy can be enqueued without waiting. */
  read: boolean;
}

/** The first pieces of a transfer, read while the stream's earlier work still runs. */
interface ReadAhead {
  /** Resolves once the buffers are taken and the reads issued. */
  started: Promise<void>;
  taken: PinnedBuffer[];
  pieces: Piece[];
  /** The op ran (it adopts the pieces) or was dropped (they go back). */
  settled: boolean;
}

/**
 * Checks a call's source and options (InvalidArgumentError at the call) and plans the transfer:
 * where it starts, how much, where it lands, how many staging buffers (the caller adds `dst` as given and `copies`).
 */
export function planTransfer(source: unknown, dst: { buffer: GPUBuffer; label: string; size: number }, options: unknown, site: ErrorSite & { callSite?: Error | string }, ring: StagingRing): Omit<Transfer, 'copies' | 'dst'> {
  const dstSize = dst.size;
  const dstLabel = dst.label;
  const random = isRandomAccess(source);
  if (!random && !isChunkSource(source)) {
    throw new InvalidArgumentError(`Expected \`source\` to be a ReadableStream, an async iterable of Uint8Array or a random-access source ({ size, read(into, position) }, e.g. openFile() in 'webgpu-streams/node'), got ${showValue(source)}`, site);
  }
  const o = expectObject('options', options ?? {}, site);
  expectKnownKeys('options', o, ['offset', 'size', 'dstOffset', 'ring'], site);
  const ringMax = expectInteger('ring', o.ring ?? 4, 1, 64, site);
  const offset = expectInteger('offset', o.offset ?? 0, 0, Number.MAX_SAFE_INTEGER, site);
  const dstOffset = expectAligned('dstOffset', expectInteger('dstOffset', o.dstOffset ?? 0, 0, dstSize, site), 4, site);
  const room = dstSize - dstOffset;
  let size: number | null = o.size === undefined ? null : expectAligned('size', expectInteger('size', o.size, 0, Number.MAX_SAFE_INTEGER, site), 4, site);
  if (random) {
    const total = (source as RandomAccessSource).size;
    if (offset > total) throw new InvalidArgumentError(`offset ${offset} is past the end of the source (${total} bytes)`, site);
    if (size === null) size = expectAligned('size (the rest of the source)', total - offset, 4, site);
    else if (offset + size > total) throw new InvalidArgumentError(`the source has ${total - offset} bytes from offset ${offset}; ${size} asked for`, site);
  }
  if (size !== null && size > room) throw new InvalidArgumentError(`size ${size} does not fit '${dstLabel}' (${room} bytes from dstOffset ${dstOffset})`, site);
  const pieces = size === null ? ringMax : Math.ceil(size / ring.pieceBytes);
  const at: ErrorSite = { op: 'uploadFrom', stream: site.stream, context: site.context, callSite: site.callSite };
  let finishReads!: () => void;
  let markStarted!: () => void;
  const readsDone = new Promise<void>((r) => (finishReads = r));
  const started = new Promise<void>((r) => (markStarted = r));
  return { source: source as UploadSource, offset, size, dstLabel, dstOffset, room, ring, ringSize: Math.max(1, Math.min(ringMax, pieces)), site: at, readsDone, finishReads, started, markStarted };
}

/**
 * Starts reading a random-access transfer's first pieces (up to its ring) into staging buffers
 * once `after` resolved (the stream's previous transfer read its own, and the one before it ran),
 * before the op's turn: the file is read while earlier work runs, and only the copies into `dst`
 * wait for it. A transfer read whole this way lets the next one start reading at once. Each piece
 * is unmapped once read (a mapped range is V8 external memory). `dropped()` gives them back if the
 * op never runs.
 */
function readAhead(t: Transfer, after: Promise<unknown>): void {
  const src = t.source;
  if (!isRandomAccess(src) || !t.size) return;
  const ahead: ReadAhead = { started: Promise.resolve(), taken: [], pieces: [], settled: false };
  t.ahead = ahead;
  const total = Math.ceil(t.size / t.ring.pieceBytes);
  ahead.started = (async () => {
    await after;
    const count = Math.min(t.ringSize, total);
    const window = readWindow(t, src);
    for (let k = 0; k < count && !ahead.settled; k++) {
      ahead.pieces.push(startPiece(t, src, await slot(t, ahead.taken, k), k, true));
      if (ahead.pieces.length >= window) await ahead.pieces[ahead.pieces.length - window]!.done.catch(() => undefined);
    }
  })();
  ahead.started.catch(() => undefined);
  // All of it read ahead: the next transfer need not wait for this op's turn to start reading.
  void ahead.started.then(async () => {
    if (ahead.pieces.length < total) return;
    await Promise.allSettled(ahead.pieces.map((x) => x.done));
    t.finishReads();
  }, () => undefined);
}

/**
 * Pieces being read at once: enough for `parallel` reads of a part each, and one more to keep
 * them going while the oldest completes; at most 4 (each a mapped range V8 counts as external
 * memory: more starts major GCs), and fewer than the ring.
 */
function readWindow(t: Transfer, src: RandomAccessSource): number {
  const piece = t.ring.pieceBytes;
  const parallel = Math.max(1, Math.floor(src.parallel ?? 1));
  const need = Math.ceil((parallel * partBytes(piece, parallel)) / piece) + 1;
  return Math.max(1, Math.min(4, need, t.ringSize - 1));
}

/** Reads of at least 2 MiB (smaller ones cost more per byte than they gain in concurrency), 64 KiB-aligned. */
const partBytes = (n: number, parallel: number): number => Math.max(2 << 20, Math.ceil(n / parallel / 65536) * 65536);

/**
 * A stream's transfers read ahead in call order: each after the previous one's reads, and once the
 * one before that ran, so a stream holds at most three rings (one copying, one read, one reading).
 */
export class ReadOrder {
  #reads: Promise<void> = Promise.resolve();
  #started: [Promise<void>, Promise<void>] = [Promise.resolve(), Promise.resolve()];
  add(t: Transfer): void {
    readAhead(t, Promise.all([this.#reads, this.#started[0]]));
    this.#reads = t.readsDone;
    this.#started = [this.#started[1], t.started];
  }
}

/** The op will not run (a dependency failed, the context closed): read-ahead buffers go back. */
export function dropped(t: Transfer): void {
  t.markStarted();
  const ahead = t.ahead;
  if (!ahead || ahead.settled) return t.finishReads();
  ahead.settled = true;
  void ahead.started.then(async () => {
    await Promise.allSettled(ahead.pieces.map((x) => x.done));
    for (const p of ahead.taken) t.ring.give(p);
    t.finishReads();
  });
}

/** Starts reading piece `k` into `buf` (then unmapping it, when read ahead); its failure is awaited later, in order. */
function startPiece(t: Transfer, src: RandomAccessSource, buf: PinnedBuffer, k: number, unmap = false): Piece {
  const n = Math.min(t.ring.pieceBytes, t.size! - k * t.ring.pieceBytes);
  const read = readPiece(t, src, buf, k, n);
  const piece: Piece = { k, buf, n, done: unmap ? read.then(() => buf.unmap()) : read, read: false };
  piece.done.then(() => (piece.read = true), () => undefined); // a failure is awaited later, in order
  return piece;
}

/** Reads piece `k` (`n` bytes) of `src` into `buf`, `parallel` reads at once. */
async function readPiece(t: Transfer, src: RandomAccessSource, buf: PinnedBuffer, k: number, n: number): Promise<void> {
  const at = t.offset + k * t.ring.pieceBytes;
  const part = partBytes(n, Math.max(1, Math.floor(src.parallel ?? 1)));
  const view = buf.bytes;
  const parts: Promise<void>[] = [];
  for (let a = 0; a < n; a += part) parts.push(readFully(t, src, view.subarray(a, Math.min(n, a + part)), at + a));
  await Promise.all(parts);
}

/** Runs a transfer (the op's host function); throws UploadSourceError when the source fails it. */
export async function runTransfer(t: Transfer): Promise<void> {
  const taken: PinnedBuffer[] = [];
  t.markStarted();
  try {
    if (isRandomAccess(t.source)) await fromRandomAccess(t, t.source, taken);
    else await fromChunks(t, t.source, taken);
    t.finishReads();
    await t.copies.whenOrdered();
    t.ordered?.();
    await t.copies.synchronize();
  } finally {
    t.finishReads();
    for (const p of taken) t.ring.give(p);
  }
}

const sourceName = (t: Transfer): string => (isRandomAccess(t.source) && t.source.label ? `'${t.source.label}'` : 'the source');

function fail(t: Transfer, message: string, cause?: unknown): UploadSourceError {
  return new UploadSourceError(`${message} (uploadFrom into '${t.dstLabel}')`, cause === undefined ? t.site : { ...t.site, cause });
}

/** The ring buffer for piece `k`, back on the host (its previous copy completed). */
async function slot(t: Transfer, taken: PinnedBuffer[], k: number): Promise<PinnedBuffer> {
  const i = k % t.ringSize;
  if (i === taken.length) taken.push(t.ring.take());
  const p = taken[i]!;
  await p.ready();
  return p;
}

async function fromRandomAccess(t: Transfer, src: RandomAccessSource, taken: PinnedBuffer[]): Promise<void> {
  const size = t.size!;
  const piece = t.ring.pieceBytes;
  const pieces = Math.ceil(size / piece);
  let first = 0;
  const reading: Piece[] = [];
  const ahead = t.ahead;
  if (ahead && !ahead.settled) {
    ahead.settled = true;
    await ahead.started;
    taken.push(...ahead.taken);
    reading.push(...ahead.pieces);
    first = ahead.pieces.length;
  }
  // Each piece's copy is enqueued once read, in order.
  const window = readWindow(t, src);
  const copy = (x: Piece): void => {
    t.copies.upload(x.buf, t.dst, { srcOffset: 0, dstOffset: t.dstOffset + x.k * piece, size: x.n });
  };
  /**
   * Copies the oldest pieces that are read, in order, while more than `left` are left; returns the
   * next one's read to wait for, or null. Never awaits between copies: those read already go out in one submit.
   */
  const drain = (left: number): Promise<void> | null => {
    while (reading.length > left && reading[0]!.read) copy(reading.shift()!);
    return reading.length > left ? reading[0]!.done : null;
  };
  try {
    // Pieces read ahead first; then the rest, `window` reads at a time.
    let wait: Promise<void> | null;
    for (let k = first; k < pieces; k++) {
      while ((wait = drain(window - 1))) await wait;
      reading.push(startPiece(t, src, await slot(t, taken, k), k));
    }
    while ((wait = drain(0))) await wait;
  } finally {
    // Reads still running write into ring buffers: let them settle before the ring is given back.
    await Promise.allSettled(reading.map((x) => x.done));
  }
}

/** Fills `into` from `position`, or throws: the source ended or its read failed. */
async function readFully(t: Transfer, src: RandomAccessSource, into: Uint8Array, position: number): Promise<void> {
  let got = 0;
  while (got < into.byteLength) {
    let n: number;
    try {
      n = await src.read(into.subarray(got), position + got);
    } catch (e) {
      throw fail(t, `reading ${sourceName(t)} at byte ${position + got} failed`, e);
    }
    if (!Number.isInteger(n) || n < 0 || n > into.byteLength - got) throw fail(t, `${sourceName(t)}.read() returned ${String(n)} for ${into.byteLength - got} bytes asked`);
    if (n === 0) throw fail(t, `${sourceName(t)} ended at byte ${position + got}, before the ${t.size} bytes from ${t.offset} asked for`);
    got += n;
  }
}

async function fromChunks(t: Transfer, src: ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>, taken: PinnedBuffer[]): Promise<void> {
  const piece = t.ring.pieceBytes;
  const limit = t.size ?? t.room;
  let skip = t.offset;
  let received = 0; // bytes the source gave
  let moved = 0; // bytes enqueued to copy
  let k = 0;
  let buf: PinnedBuffer | null = null;
  let fill = 0;
  const flushPiece = (): void => {
    if (!buf || fill === 0) return;
    if (fill % 4 !== 0) throw fail(t, `${sourceName(t)} ended after ${moved + fill} bytes, not a multiple of 4`);
    t.copies.upload(buf, t.dst, { srcOffset: 0, dstOffset: t.dstOffset + moved, size: fill });
    moved += fill;
    k++;
    buf = null;
    fill = 0;
  };
  const it = chunksOf(src);
  let ended = false;
  try {
    while (moved + fill < limit) {
      let r: IteratorResult<Uint8Array>;
      try {
        r = await it.next();
      } catch (e) {
        throw fail(t, `${sourceName(t)} failed after ${received} bytes`, e);
      }
      if (r.done) {
        ended = true;
        break;
      }
      let chunk = r.value;
      if (!(chunk instanceof Uint8Array)) throw fail(t, `${sourceName(t)} gave a chunk that is not a Uint8Array`);
      received += chunk.byteLength;
      if (skip > 0) {
        const s = Math.min(skip, chunk.byteLength);
        skip -= s;
        chunk = chunk.subarray(s);
      }
      let at = 0;
      while (at < chunk.byteLength) {
        if (moved + fill >= limit) {
          if (t.size === null) throw fail(t, `${sourceName(t)} is longer than the ${t.room} bytes of '${t.dstLabel}' from offset ${t.dstOffset}`);
          break; // the rest of the stream is not asked for
        }
        if (!buf) {
          buf = await slot(t, taken, k);
          fill = 0;
        }
        const n = Math.min(chunk.byteLength - at, piece - fill, limit - moved - fill);
        buf.bytes.set(chunk.subarray(at, at + n), fill);
        fill += n;
        at += n;
        if (fill === piece) flushPiece();
      }
    }
    if (t.size !== null && moved + fill < t.size) throw fail(t, `${sourceName(t)} ended after ${moved + fill} of the ${t.size} bytes asked for${t.offset ? ` (from byte ${t.offset})` : ''}`);
    flushPiece();
  } finally {
    if (!ended) await it.return?.().catch(() => undefined);
  }
}

/** An async iterator over a ReadableStream (which Node and some browsers cannot iterate directly) or an async iterable. */
function chunksOf(src: ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>): AsyncIterator<Uint8Array> {
  if (typeof (src as ReadableStream).getReader === 'function') {
    const reader = (src as ReadableStream<Uint8Array>).getReader();
    return {
      next: () => reader.read() as Promise<IteratorResult<Uint8Array>>,
      return: async () => {
        await reader.cancel().catch(() => undefined);
        return { done: true, value: undefined };
      },
    };
  }
  return (src as AsyncIterable<Uint8Array>)[Symbol.asyncIterator]();
}
