/**
 * `stream.uploadFrom(source, dst)`: bytes from a file, a fetch body or any stream of chunks into a
 * device buffer, through a small ring of pinned staging buffers, so neither the JS heap nor the
 * device ever holds more than the ring of a transfer of any size.
 *
 * The op is a host function of the stream; the stream's later work waits for it. A random-access
 * source has been read ahead into the ring by the stream's reader (reader.ts): the op starts once
 * the stream's earlier work has its place in the queue (it need not be done: the op only enqueues
 * copies, which queue order puts behind it) and hands each piece, once read, to an internal stream
 * that copies it into `dst`. A stream of chunks (or a source not read ahead) is read by the op
 * itself, once the stream's earlier work is done. Reading piece k + 1 overlaps the GPU's copy of
 * piece k; the op ends once the last copy completed.
 */
import { atCall, InvalidArgumentError, StreamError, UploadSourceError, type ErrorSite } from './errors.js';
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
  /** Read before the op's turn, while earlier work runs (a file's bytes do not change). false: only once the op runs. @default true */
  readonly readAhead?: boolean;
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
   * Pinned staging buffers (8 MiB pieces; one of the transfer's size, rounded up to a power of two,
   * below that) this transfer may use: reads run that far ahead of the GPU's copies, which queue
   * behind earlier kernels on WebGPU's one queue. @default 4
   */
  ring?: number;
}

/** The ring's buffers: taken for a transfer, given back after it. */
export interface StagingRing {
  readonly pieceBytes: number;
  /** A buffer for a transfer of `bytes`: a whole piece from `pieceBytes` up, a smaller one below. @default pieceBytes */
  take(bytes?: number): PinnedBuffer;
  give(p: PinnedBuffer): void;
}

/** What the transfer copies with: an internal stream's pinned upload and its synchronize. */
export interface CopyStream {
  upload(src: PinnedBuffer, dst: DeviceBuffer | GPUBuffer, options: { srcOffset: number; dstOffset: number; size: number }): number;
  /** Resolves once its last op has its place in the GPU queue (encoded), or is done. */
  whenSubmitted(): Promise<void>;
  synchronize(): Promise<void>;
}

export function isRandomAccess(s: unknown): s is RandomAccessSource {
  return typeof s === 'object' && s !== null && typeof (s as RandomAccessSource).read === 'function' && typeof (s as RandomAccessSource).size === 'number';
}

/** Read before the op's turn (a random-access source that allows it): the op only enqueues copies. */
export const readsAhead = (s: unknown): boolean => isRandomAccess(s) && s.readAhead !== false;

export function isChunkSource(s: unknown): s is ReadableStream<Uint8Array> | AsyncIterable<Uint8Array> {
  return typeof s === 'object' && s !== null && (typeof (s as ReadableStream).getReader === 'function' || typeof (s as AsyncIterable<Uint8Array>)[Symbol.asyncIterator] === 'function');
}

/** Single-use sources (a ReadableStream, an async generator) already given to an uploadFrom: each is read once. */
const claimed = new WeakSet<object>();

/** A source read once: a ReadableStream, or an iterator (an async generator) rather than an iterable. */
const singleUse = (s: object): boolean => typeof (s as ReadableStream).getReader === 'function' || typeof (s as { next?: unknown }).next === 'function';

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
  /** Ring buffers taken (piece k uses `taken[k % ringSize]`); given back by `release`. */
  taken: PinnedBuffer[];
  /** Pieces whose copy is enqueued; piece k may reuse its ring buffer once k - ringSize's is (see `slot`). */
  copied: number;
  /** The reader waits for the next piece's copy to be enqueued. */
  onCopied: (() => void) | null;
  /** Pieces the reader started, by index (random-access sources). */
  pieces: Piece[];
  /** The op waits for the reader's next piece. */
  onPiece: (() => void) | null;
  /** The op failed, or will not run: read no more of it. */
  stopped: boolean;
  /** A read failed: the reader stops there (the op fails on that piece). */
  failed: boolean;
  /** Resolves once the reader is done with it (no read in flight touches its buffers). */
  readerDone: Promise<void>;
  finishReader: () => void;
  /** The reader starts on it once this resolved: the `ended` of the stream's transfer three before. */
  gate: Promise<void>;
  /** Resolves once the op ran or was dropped (a source not read ahead is read from then on). */
  started: Promise<void>;
  markStarted: () => void;
  /** Resolves once the op is done, run or not: its ring goes back (the transfer three after may be read). */
  ended: Promise<void>;
  markEnded: () => void;
  /** The op ran (its host function started): it reads a chunk source itself, and cancels it on failure. */
  ran: boolean;
}

/** A piece being read (or read) into a staging buffer. */
export interface Piece {
  k: number;
  /** null for a piece that failed before it had staging (`done` rejects). */
  buf: PinnedBuffer | null;
  n: number;
  /** Read and unmapped; rejects with the read's UploadSourceError as soon as one fails. */
  done: Promise<void>;
  /** Every read of the piece settled: none writes into `buf` any more. */
  idle: Promise<unknown>;
  /** `done` resolved: its copy can be enqueued without waiting. */
  read: boolean;
}

/**
 * Checks a call's source and options (InvalidArgumentError at the call) and plans the transfer:
 * where it starts, how much, where it lands, how many staging buffers (the caller adds `dst` as given and `copies`).
 */
export function planTransfer(source: unknown, dst: { buffer: GPUBuffer; label: string; size: number }, options: unknown, site: ErrorSite & { callSite?: Error | string }, ring: StagingRing): Omit<Transfer, 'copies' | 'dst'> {
  const dstSize = dst.size;
  const dstLabel = dst.label;
  const random = isRandomAccess(source);
  if (typeof source === 'string' || (!random && typeof (source as { stat?: unknown } | null)?.stat === 'function')) {
    throw new InvalidArgumentError(`A file path or FileHandle is opened first: \`uploadFrom(await openFile(${typeof source === 'string' ? JSON.stringify(source) : 'handle'}), dst, range)\` with openFile from 'webgpu-streams/node' (reads several ranges at once into the staging ring)`, site);
  }
  if (!random && !isChunkSource(source)) {
    throw new InvalidArgumentError(`Expected \`source\` to be a ReadableStream, an async iterable of Uint8Array or a random-access source ({ size, read(into, position) }, e.g. openFile() in 'webgpu-streams/node'), got ${showValue(source)}`, site);
  }
  if (!random && (source as { locked?: unknown }).locked === true) throw new InvalidArgumentError('the ReadableStream is locked: a reader (getReader(), pipeTo, or a Response that read it) holds it; pass a stream no one reads', site);
  if (!random && claimed.has(source)) throw new InvalidArgumentError('this source was given to an earlier uploadFrom: a ReadableStream or async generator is read once; make one per transfer (or pass a random-access source, e.g. openFile or httpSource)', site);
  const o = expectObject('options', options ?? {}, site);
  expectKnownKeys('options', o, ['offset', 'size', 'dstOffset', 'ring'], site);
  const ringMax = expectInteger('ring', o.ring ?? 4, 1, 64, site);
  const offset = expectInteger('offset', o.offset ?? 0, 0, Number.MAX_SAFE_INTEGER, site);
  const dstOffset = expectAligned('dstOffset', expectInteger('dstOffset', o.dstOffset ?? 0, 0, dstSize, site), 4, site);
  const room = dstSize - dstOffset;
  let size: number | null = o.size === undefined ? null : expectAligned('size', expectInteger('size', o.size, 0, Number.MAX_SAFE_INTEGER, site), 4, site);
  if (random) {
    const r = source as RandomAccessSource;
    // Read when the op runs: a NaN `parallel` read nothing, and the op moved the ring's stale bytes.
    if (r.parallel !== undefined) expectInteger('source.parallel', r.parallel, 1, 256, site);
    if (r.label !== undefined && typeof r.label !== 'string') throw new InvalidArgumentError(`Expected \`source.label\` to be a string, got ${showValue(r.label)}`, site);
    if (r.readAhead !== undefined && typeof r.readAhead !== 'boolean') throw new InvalidArgumentError(`Expected \`source.readAhead\` to be a boolean, got ${showValue(r.readAhead)}`, site);
    const total = expectInteger('source.size', r.size, 0, Number.MAX_SAFE_INTEGER, site);
    if (offset > total) throw new InvalidArgumentError(`offset ${offset} is past the end of the source (${total} bytes)`, site);
    if (size === null) size = expectAligned('size (the rest of the source)', total - offset, 4, site);
    else if (offset + size > total) throw new InvalidArgumentError(`the source has ${total - offset} bytes from offset ${offset}; ${size} asked for`, site);
  }
  if (size !== null && size > room) throw new InvalidArgumentError(`size ${size} does not fit '${dstLabel}' (${room} bytes from dstOffset ${dstOffset})`, site);
  const pieces = size === null ? ringMax : Math.ceil(size / ring.pieceBytes);
  const at: ErrorSite = { op: site.op ?? 'uploadFrom', stream: site.stream, context: site.context, callSite: site.callSite, enqueued: true };
  let finishReader!: () => void;
  let markStarted!: () => void;
  let markEnded!: () => void;
  const readerDone = new Promise<void>((r) => (finishReader = r));
  const started = new Promise<void>((r) => (markStarted = r));
  const ended = new Promise<void>((r) => (markEnded = r));
  return { source: source as UploadSource, offset, size, dstLabel, dstOffset, room, ring, ringSize: Math.max(1, Math.min(ringMax, pieces)), site: at, gate: Promise.resolve(), taken: [], copied: 0, onCopied: null, pieces: [], onPiece: null, stopped: false, failed: false, readerDone, finishReader, started, markStarted, ended, markEnded, ran: false };
}

/** `t`'s op is enqueued: a single-use source (a stream, a generator) cannot be given to another uploadFrom. */
export function claim(t: Transfer): void {
  if (!isRandomAccess(t.source) && singleUse(t.source)) claimed.add(t.source);
}

/** The op is done, run or not: read no more of it, and give its ring back once no read touches it (a copy still in flight keeps its buffer until done: take() callers wait on ready()). */
export function release(t: Transfer): void {
  if (!t.ran && !isRandomAccess(t.source)) cancelSource(t.source);
  t.stopped = true;
  wakeCopied(t);
  t.markStarted();
  void t.readerDone.then(() => {
    for (const p of t.taken) t.ring.give(p);
    t.taken.length = 0;
    t.markEnded();
  });
}

/** Pieces of a random-access transfer. */
export const pieceCount = (t: Transfer): number => Math.ceil((t.size ?? 0) / t.ring.pieceBytes);

/** Runs a transfer (the op's host function); throws UploadSourceError when the source fails it. */
export async function runTransfer(t: Transfer): Promise<void> {
  t.ran = true;
  t.markStarted();
  try {
    if (isRandomAccess(t.source)) await copyPieces(t);
    else await fromChunks(t, t.source);
    await t.copies.whenSubmitted();
    t.ordered?.();
    await t.copies.synchronize();
  } catch (e) {
    t.stopped = true;
    // A copy's failure on the internal stream is this op's, on the stream it was called on.
    throw e instanceof StreamError && e.stream !== t.site.stream && !(e instanceof UploadSourceError) ? atCall(e, t.site) : e;
  }
}

const sourceName = (t: Transfer): string => (isRandomAccess(t.source) && t.source.label ? `'${t.source.label}'` : 'the source');

function fail(t: Transfer, message: string, cause?: unknown): UploadSourceError {
  return new UploadSourceError(`${message} (${t.site.op ?? 'uploadFrom'} into '${t.dstLabel}')`, cause === undefined ? t.site : { ...t.site, cause });
}

/**
 * The ring buffer for piece `k`, back on the host. It held piece k - ringSize: its copy must be
 * enqueued first (the buffer is the GPU's from then until that copy completed, and `ready()` waits
 * for it); a buffer read but not yet handed to a copy would otherwise be mapped again and overwritten.
 */
export async function slot(t: Transfer, k: number): Promise<PinnedBuffer> {
  while (k - t.ringSize >= t.copied && !t.stopped) await new Promise<void>((r) => (t.onCopied = r));
  const i = k % t.ringSize;
  if (i === t.taken.length) t.taken.push(t.ring.take(t.size ?? t.ring.pieceBytes));
  const p = t.taken[i]!;
  await p.ready();
  return p;
}

/** Copies each piece into `dst` once the reader read it, in order; those read already in one go (one submit). */
async function copyPieces(t: Transfer): Promise<void> {
  const piece = t.ring.pieceBytes;
  const total = pieceCount(t);
  for (let k = 0; k < total; ) {
    const x = t.pieces[k];
    if (x?.read) {
      copy(t, x.buf!, k * piece, x.n);
      k++;
    } else if (x) await x.done;
    else await new Promise<void>((r) => (t.onPiece = r));
  }
}

/** Enqueues the copy of the next piece (`n` bytes in `buf`) to `at` bytes into the transfer's range. */
function copy(t: Transfer, buf: PinnedBuffer, at: number, n: number): void {
  t.copies.upload(buf, t.dst, { srcOffset: 0, dstOffset: t.dstOffset + at, size: n });
  t.copied++;
  wakeCopied(t);
}

function wakeCopied(t: Transfer): void {
  const wake = t.onCopied;
  t.onCopied = null;
  wake?.();
}

/** Fills `into` from `position`, or throws: the source ended or its read failed. */
export async function readFully(t: Transfer, src: RandomAccessSource, into: Uint8Array, position: number): Promise<void> {
  let got = 0;
  while (got < into.byteLength) {
    let n: number;
    try {
      n = await src.read(into.subarray(got), position + got);
    } catch (e) {
      // The library's own error (a peer's read-back: out of memory, device lost) keeps its kind, named for this op.
      throw e instanceof StreamError ? atCall(e, t.site) : fail(t, `reading ${sourceName(t)} at byte ${position + got} failed`, e);
    }
    if (!Number.isInteger(n) || n < 0 || n > into.byteLength - got) throw fail(t, `${sourceName(t)}.read() returned ${String(n)} for ${into.byteLength - got} bytes asked`);
    if (n === 0) throw fail(t, `${sourceName(t)} ended at byte ${position + got}, before the ${t.size} bytes from ${t.offset} asked for`);
    got += n;
  }
}

async function fromChunks(t: Transfer, src: ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>): Promise<void> {
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
    copy(t, buf, moved, fill);
    moved += fill;
    k++;
    buf = null;
    fill = 0;
  };
  let it: AsyncIterator<Uint8Array>;
  try {
    it = chunksOf(src);
  } catch (e) {
    throw fail(t, `${sourceName(t)} could not be read`, e);
  }
  let ended = false;
  /** The source's next chunk, or null at its end. */
  const next = async (): Promise<Uint8Array | null> => {
    let r: IteratorResult<Uint8Array>;
    try {
      r = await it.next();
    } catch (e) {
      throw fail(t, `${sourceName(t)} failed after ${received} bytes`, e);
    }
    if (r.done) return ((ended = true), null);
    if (!(r.value instanceof Uint8Array)) throw fail(t, `${sourceName(t)} gave a chunk that is not a Uint8Array`);
    received += r.value.byteLength;
    return r.value;
  };
  const tooLong = (): UploadSourceError => fail(t, `${sourceName(t)} is longer than the ${t.room} bytes of '${t.dstLabel}' from offset ${t.dstOffset}`);
  try {
    while (moved + fill < limit) {
      let chunk = await next();
      if (!chunk) break;
      if (skip > 0) {
        const s = Math.min(skip, chunk.byteLength);
        skip -= s;
        chunk = chunk.subarray(s);
      }
      let at = 0;
      while (at < chunk.byteLength) {
        if (moved + fill >= limit) {
          if (t.size === null) throw tooLong();
          break; // the rest of the stream is not asked for
        }
        if (!buf) {
          buf = await slot(t, k);
          fill = 0;
        }
        const n = Math.min(chunk.byteLength - at, piece - fill, limit - moved - fill);
        buf.bytes.set(chunk.subarray(at, at + n), fill);
        fill += n;
        at += n;
        if (fill === piece) flushPiece();
      }
    }
    // Without `size`, `dst` full: the stream must end here (a longer one is refused, not cut short).
    while (t.size === null && !ended) if ((await next())?.byteLength) throw tooLong();
    if (t.size !== null && moved + fill < t.size) throw fail(t, `${sourceName(t)} ended after ${moved + fill} of the ${t.size} bytes asked for${t.offset ? ` (from byte ${t.offset})` : ''}`);
    flushPiece();
  } finally {
    if (!ended) await it.return?.().catch(() => undefined);
  }
}

/**
 * A chunk source whose op never ran (skipped behind a failure, or its context destroyed): let its
 * producer go (a fetch body's connection, a Node stream's file), as the op would have on failure.
 */
function cancelSource(src: UploadSource): void {
  const x = src as { locked?: boolean; cancel?: () => Promise<void>; destroy?: () => void; next?: unknown; return?: () => Promise<unknown> };
  try {
    if (typeof x.cancel === 'function') {
      if (!x.locked) void x.cancel().catch(() => undefined);
    } else if (typeof x.destroy === 'function') x.destroy();
    else if (typeof x.next === 'function' && typeof x.return === 'function') void x.return().catch(() => undefined); // an async generator
  } catch {
    // a source that refuses to be let go keeps what it holds
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
