/**
 * Waiting for streams: `stream.synchronize()` and `ctx.synchronize()` (cudaStreamSynchronize,
 * cudaDeviceSynchronize), with each failure reported once to each kind of wait.
 */
import { AggregateStreamError, atCall, ownWords, type ErrorSite, type StreamError } from '../errors.js';
import type { Op, StreamQueue } from '../op.js';
import { joinHost, hostSaw } from '../clock.js';
import { deadlock } from './host.js';
import type { Scheduler } from './scheduler.js';

/**
 * Waits for everything enqueued on `q` so far; rejects with the first failure among that work
 * not yet reported to a synchronize of this stream (`ctx.synchronize()` reports it too, and
 * the stream keeps it for its own).
 */
export async function synchronizeQueue(s: Scheduler, q: StreamQueue, signal?: AbortSignal): Promise<void> {
  // Closed: the stream's work cut short (its error names the op), else the close raised at this call.
  if (s.closed) throw q.failureIn(q.reportedStream, q.lastId) ?? atCall(s.closed, { op: 'synchronize', stream: q.label, context: s.label });
  const from = q.reportedStream;
  const upTo = q.lastId;
  const tail = q.tail;
  const clock = q.clock?.vc;
  q.waiting++;
  try {
    if (tail) await s.whenDone(tail, signal, `stream '${q.label}'.synchronize()`);
  } catch (e) {
    // Closed meanwhile: the stream's own failure where its work was cut short (it names the op).
    throw (e === s.closed && q.failureIn(from, upTo)) || e;
  } finally {
    q.waiting--;
  }
  hostSaw(q, clock);
  const err = q.failureIn(from, upTo);
  if (s.closed) throw err ?? s.closed;
  if (upTo > q.reportedStream) q.reportedStream = upTo;
  q.reported(err);
  if (err) throw err;
}

/**
 * Resolves once `q`'s work enqueued so far has its place in the GPU queue (or is done, failed or
 * not: synchronize() reports failures); rejects once its context closed, and when a running host
 * function waits on work queued behind it.
 */
export async function submittedQueue(s: Scheduler, q: StreamQueue): Promise<void> {
  const site = { op: 'whenSubmitted', stream: q.label, context: s.label };
  if (s.closed) throw atCall(s.closed, site);
  const tail = q.tail;
  if (!tail) return;
  const stuck = deadlock([tail], `stream '${q.label}'.whenSubmitted()`);
  if (stuck) throw stuck;
  await s.whenOrdered(tail);
  if (s.closed) throw atCall(s.closed, site);
}

/**
 * Waits for every stream; rejects with the failures among that work not yet reported to a
 * context synchronize: one stream's failure as it is, several as an AggregateStreamError.
 */
export async function synchronizeAll(s: Scheduler, signal?: AbortSignal): Promise<void> {
  if (s.closed) throw s.closed;
  const marks = s.streams.map((q) => ({ q, from: q.reportedCtx, upTo: q.lastId, clock: q.clock?.vc }));
  const pruned = s.prunedClock.slice(); // streams forgotten before the call: their work is done
  const tails: Op[] = [];
  for (const q of s.streams) if (q.tail && !q.tail.done) tails.push(q.tail);
  const stuck = deadlock(tails, `context '${s.label}'.synchronize()`);
  if (stuck) throw stuck;
  for (const m of marks) m.q.waiting++;
  try {
    await Promise.all(tails.map((t) => s.whenDone(t, signal)));
  } catch (e) {
    // Closed meanwhile: the streams' own failures where their work was cut short (each names its op).
    throw (e === s.closed && cutShort(s, marks)) || e;
  } finally {
    for (const m of marks) m.q.waiting--;
  }
  joinHost(pruned);
  for (const m of marks) joinHost(m.clock);
  for (const m of marks) hostSaw(m.q);
  if (s.closed) throw cutShort(s, marks) ?? s.closed;
  const errors: (StreamError | undefined)[] = [];
  for (const { q, from, upTo } of marks) {
    const err = q.failureIn(from, upTo);
    if (upTo > q.reportedCtx) q.reportedCtx = upTo;
    q.reported(err);
    if (!q.internal) errors.push(err); // an internal stream's failure is reported by the op it worked for
  }
  s.prune();
  const err = oneOrAll(s, errors);
  if (err) throw err;
}

/**
 * The context closed during a `ctx.synchronize()`: one stream's work cut short as its own error;
 * several as one error of the close's kind (DeviceLostError stays one) naming each cut-short op.
 */
function cutShort(s: Scheduler, marks: readonly { q: StreamQueue; from: number; upTo: number }[]): StreamError | null {
  const closed = s.closed!;
  const errors = marks.filter(({ q }) => !q.internal).map(({ q, from, upTo }) => q.failureIn(from, upTo)).filter((e): e is StreamError => e !== undefined && e.cause === closed);
  if (errors.length <= 1) return errors[0] ?? null;
  const Same = closed.constructor as new (message: string, site: ErrorSite) => StreamError;
  const ops = errors.map((e) => `op '${e.op}' on stream '${e.stream}'${e.callSite ? ` (${e.callSite.split('\n')[0]})` : ''}`);
  return new Same(`${ownWords(closed)}; work cut short: ${ops.join('; ')}`, { op: 'synchronize', context: s.label, cause: closed });
}

/** One stream's failure as it is, several as an AggregateStreamError, none as null. */
function oneOrAll(s: Scheduler, failures: (StreamError | undefined)[]): StreamError | null {
  const errors = failures.filter((e): e is StreamError => e !== undefined);
  if (errors.length <= 1) return errors[0] ?? null;
  return new AggregateStreamError(errors, { op: 'synchronize', context: s.label });
}
