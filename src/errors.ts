/**
 * Typed errors. Every error a stream op can raise names the op, the stream and the call site
 * (the stack captured when the op was enqueued), so an asynchronous failure points at the line
 * that caused it.
 */

/** Where an error happened: the op kind, the stream label and the enqueue stack. */
export interface ErrorSite {
  /** Op kind or API name: `upload`, `launch`, `elapsedTime`, ... */
  op?: string;
  /** Label of the stream the op was enqueued on. */
  stream?: string;
  /** Label of the context (`ctx#1`, ... unless labelled), so two contexts' messages differ. */
  context?: string;
  /** Stack captured when the op was enqueued (when stack capture is on): an Error, formatted lazily. */
  callSite?: string | Error | undefined;
  cause?: unknown;
  /** The op failed after its call: `callSite` is where it was enqueued ("enqueued at"; else "called at", the call that threw). */
  enqueued?: boolean;
}

/** Base class of every error this library throws or rejects with. */
export class StreamError extends Error {
  override name = 'StreamError';
  readonly op: string | undefined;
  readonly stream: string | undefined;
  readonly context: string | undefined;
  #callSite: string | undefined | null;

  constructor(message: string, site: ErrorSite = {}) {
    const where = whereOf(site);
    const callSite = formatSite(site.callSite);
    const at = callSite ? `\n  ${site.enqueued ? 'enqueued' : 'called'} ${callSite.split('\n').slice(0, 4).join('\n  ')}` : '';
    super(`${where ? `${where}: ` : ''}${message}${at}`, site.cause === undefined ? undefined : { cause: site.cause });
    this.op = site.op;
    this.stream = site.stream;
    this.context = site.context;
    // An error thrown at a call without a site's stack (context and event calls) takes its own.
    this.#callSite = callSite ?? ('callSite' in site ? undefined : null);
  }

  /**
   * The user's frames where the failing op was enqueued; for an error thrown at the call, the
   * frames of that call (taken from this error's own stack, on first read).
   */
  get callSite(): string | undefined {
    if (this.#callSite === null) this.#callSite = formatSite(this);
    return this.#callSite;
  }
}

/** "op 'x' on stream 's' in context 'c'": the prefix of a StreamError's message. */
function whereOf(site: { op?: string | undefined; stream?: string | undefined; context?: string | undefined }): string {
  return [[site.op && `op '${site.op}'`, site.stream !== undefined && `stream '${site.stream}'`].filter(Boolean).join(' on '), site.context !== undefined && `context '${site.context}'`].filter(Boolean).join(' in ');
}

/** What a StreamError says went wrong: its message without the op/stream/context prefix and the call site. */
export function ownWords(e: StreamError): string {
  const where = whereOf(e);
  const at = e.message.search(/\n {2}(enqueued|called) /);
  const m = at >= 0 ? e.message.slice(0, at) : e.message;
  return where && m.startsWith(`${where}: `) ? m.slice(where.length + 2) : m;
}

/**
 * `e` (the device-loss or destroy error that closed a context) raised again at a later call: the
 * same class and words, naming that call's op and site, with `e` as its cause.
 */
export function atCall(e: StreamError, site: ErrorSite, prefix?: string): StreamError {
  if (e instanceof AggregateStreamError) return e;
  const Same = e.constructor as new (message: string, site: ErrorSite) => StreamError;
  const callSite = site.callSite; // a getter (EntrySite) is not spread
  return new Same(prefix ? `${prefix}: ${ownWords(e)}` : ownWords(e), { ...site, ...(callSite !== undefined ? { callSite } : {}), cause: e });
}

/** A bad argument or option: wrong type, out of range, unaligned, kernel bindings that do not fit the kernel. Thrown at the call. */
export class InvalidArgumentError extends StreamError {
  override name = 'InvalidArgumentError';
}

/** Use of a stream, buffer, event or context after `destroy()`. */
export class DestroyedError extends StreamError {
  override name = 'DestroyedError';
}

/** A pinned buffer's view was touched while the GPU owns the buffer. */
export class PinnedBufferBusyError extends StreamError {
  override name = 'PinnedBufferBusyError';
}

/** `elapsedTime` on events without timing, or on a device without `timestamp-query`. */
export class EventTimingError extends StreamError {
  override name = 'EventTimingError';
}

/** `elapsedTime` before both events completed (CUDA's cudaErrorNotReady). */
export class EventNotReadyError extends StreamError {
  override name = 'EventNotReadyError';
}

/** The GPU device was lost; every pending wait rejects with this. */
export class DeviceLostError extends StreamError {
  override name = 'DeviceLostError';
}

/** WebGPU reported a validation or out-of-memory error for work the library submitted. */
export class GpuValidationError extends StreamError {
  override name = 'GpuValidationError';
}

/** A buffer or texture the device had no memory for (`torch.cuda.OutOfMemoryError`); reported by the ops that use it. */
export class OutOfMemoryError extends StreamError {
  override name = 'OutOfMemoryError';
}

/** A host function (`stream.hostFn`) or an encode callback (`stream.encode`) threw or rejected; `cause` holds what it threw. */
export class HostFnError extends StreamError {
  override name = 'HostFnError';
}

/** The op did not run because an op it depends on failed; `cause` holds that failure. */
export class DependencyError extends StreamError {
  override name = 'DependencyError';
}

/**
 * A wait that could never resolve: a host function waiting (through `synchronize()` or `ready()`)
 * for work that runs only after that same host function returns. Names the host function's stream.
 */
export class DeadlockError extends StreamError {
  override name = 'DeadlockError';
}

/** Several streams failed: `ctx.synchronize()` reports each stream's first failure in `errors`. */
export class AggregateStreamError extends StreamError {
  override name = 'AggregateStreamError';
  readonly errors: readonly StreamError[];
  constructor(errors: readonly StreamError[], site: ErrorSite = {}) {
    const lines = errors.map((e) => `  - ${e.message.split('\n')[0]}`).join('\n');
    super(`${errors.length} streams failed:\n${lines}`, { ...site, cause: errors[0] });
    this.errors = errors;
  }
}

/**
 * `stream.uploadFrom`'s source failed it: it ended before the bytes asked for, its reads failed, it
 * is not what it says (a weights file whose header lies), or it is longer than its destination.
 */
export class UploadSourceError extends StreamError {
  override name = 'UploadSourceError';
}

/** A wait was aborted through its `AbortSignal`. */
export class AbortError extends StreamError {
  override name = 'AbortError';
}

/** No WebGPU implementation or no adapter: says what to do about it. */
export class WebGpuUnavailableError extends StreamError {
  override name = 'WebGpuUnavailableError';
}

/** One side of a race. */
export interface RaceAccess {
  /** The op's id; 0 for the host outside host functions. */
  op: number;
  /** The op's kind (`launch`, `copy`, `upload`, `download`, `hostFn`), or `host`. */
  kind: string;
  /** The op's name (`upload ->w0`, the kernel's label), or `host`. */
  name: string;
  /** Its stream's label; null for the host. */
  stream: string | null;
  /** Its context's label; null for the host. */
  context: string | null;
  write: boolean;
  /** The user's frames where it was enqueued (or where the host touched the buffer). */
  callSite: string | undefined;
}

/** What the sanitizer found. */
export interface RaceReport {
  /** `race`: two unordered accesses; `unrecorded-wait`: a wait on an event never recorded (CUDA proceeds silently). */
  kind: 'race' | 'unrecorded-wait';
  /** The buffer's label (empty for `unrecorded-wait`); a texture's, with `texture` set. */
  buffer: string;
  /** The race is on a texture declared to `stream.encode` (whole: `range` is [0, 1)). */
  texture?: true;
  /** The overlapping bytes [start, end); null for `unrecorded-wait`. */
  range: [number, number] | null;
  /** The earlier access; null for `unrecorded-wait`. */
  first: RaceAccess | null;
  /** The access that found the race (for `unrecorded-wait`, the wait). */
  second: RaceAccess;
  /** The smallest change that orders the two. */
  fix: string;
  /** All of it in words. */
  message: string;
}

/**
 * A race the stream sanitizer found (`createContext({ sanitize: 'throw' })`): two accesses of
 * overlapping bytes of one buffer, one a write, that nothing orders; thrown at the call that made
 * the second. `report` names both ops, the bytes and the fix.
 */
export class StreamRaceError extends StreamError {
  override name = 'StreamRaceError';
  readonly report: RaceReport;
  constructor(report: RaceReport, site: ErrorSite = {}) {
    super(report.message, site);
    this.report = report;
  }
  /** The second access's call site (the report's). */
  override get callSite(): string | undefined {
    return this.report.second.callSite ?? super.callSite;
  }
}

/** A readable one-line description of something thrown, whatever it is (a Symbol, an object whose toString throws). */
export function describeThrown(err: unknown): string {
  if (err instanceof Error) {
    try {
      return String(err.message) || err.name; // a DOMException may carry no message: its name says what it was
    } catch {
      return err.name;
    }
  }
  try {
    return typeof err === 'string' ? err : typeof err === 'symbol' ? err.toString() : `${String(err)}`;
  } catch {
    return Object.prototype.toString.call(err);
  }
}

/**
 * Captures the current stack for a later error. V8 records the frames at construction and formats
 * them only when `.stack` is read, so this is cheap per op; formatting happens on failure only.
 * `above`: the library function the user called; its frames and those inside it are skipped, so
 * only the user's nearest frames are collected (the cost grows with each frame collected).
 */
export function captureSite(enabled: boolean, above?: (...args: never[]) => unknown): Error | undefined {
  if (!enabled) return undefined;
  const E = Error as ErrorConstructor & { captureStackTrace?(o: object, f?: unknown): void };
  const limit = E.stackTraceLimit;
  if (above && typeof E.captureStackTrace === 'function') {
    E.stackTraceLimit = 0;
    const e = new Error('enqueued here');
    E.stackTraceLimit = 2;
    E.captureStackTrace(e, above);
    E.stackTraceLimit = limit;
    return e;
  }
  // Enough frames to get past the library's own (a check can sit 8-10 calls below the public
  // method) to the user's; this path runs only for errors and reports, and launches of a pipeline
  // not yet known to compile.
  E.stackTraceLimit = 32;
  const e = new Error('enqueued here');
  E.stackTraceLimit = limit;
  return e;
}

/** The stack from the caller of `fn` (a public function, method or getter), else the whole stack (`fn` is not on it): the user's line first, bundled or not. For errors: it formats the stack. */
export function stackFrom(fn: unknown): Error | undefined {
  const e = typeof fn === 'function' ? captureSite(true, fn as (...args: never[]) => unknown) : undefined;
  return e && /\n\s+at /.test(e.stack ?? '') ? e : captureSite(true);
}

/** The site of a call of the public `fn` (op `op`, and `more`'s stream and context): its stack, taken when an error reads it, begins at the caller. */
export function calledAt(op: string, fn: unknown, more: { stream?: string; context?: string } = {}): ErrorSite {
  return new CalledAt(op, fn, more.stream, more.context);
}

/** A class, its getter on the prototype (an object literal with a getter costs microseconds a call in V8); the stack, once taken, is kept. */
class CalledAt implements ErrorSite {
  #lazy: Error | undefined;
  constructor(
    readonly op: string,
    readonly fn: unknown,
    readonly stream: string | undefined,
    readonly context: string | undefined,
  ) {}
  get callSite(): Error | undefined {
    return (this.#lazy ??= stackFrom(this.fn));
  }
}

/** A stack frame line: V8's `at ...`, or SpiderMonkey's and JavaScriptCore's `fn@file:line:col` (message lines are not). */
const FRAME = /^at\s|@\S*:\d+:\d+$/;
const INTERNAL_FRAME = /webgpu-streams[\\/]dist[\\/]|^\s*at new |node:internal|\(<anonymous>\)$|\(native\)$/;

/**
 * The library's own source folder where it runs from source (its tests, a bundler's dev server), as
 * URL and path prefixes: its frames there are not the caller's. Null where it runs from a build
 * (installed: `webgpu-streams/dist/`; bundled into an app: its frames and the app's share a file).
 */
const OWN_SOURCE: string[] | null = ((): string[] | null => {
  const url = import.meta.url;
  // Bundled alone into a file named after it (a dev server's prebundled dependency): that file is ours.
  const own = /^(.*[\\/]webgpu-streams[^\\/?]*\.[cm]?js)(\?.*)?$/.exec(url);
  if (own) return [own[1]!];
  const m = /^(.*[\\/]src[\\/])errors\.[tj]s(\?.*)?$/.exec(url);
  if (!m) return null;
  const prefix = m[1]!;
  const path = prefix.startsWith('file://') ? decodeURIComponent(prefix.slice('file://'.length).replace(/^\/([A-Za-z]:)/, '$1')) : null;
  return path ? [prefix, path, path.replaceAll('/', '\\')] : [prefix];
})();

/** A frame of the library's own code, or of the runtime's (builtins, node internals, constructors). */
function internalFrame(line: string): boolean {
  return INTERNAL_FRAME.test(line) || (OWN_SOURCE !== null && OWN_SOURCE.some((p) => line.includes(p)));
}

/** The user's frames of a captured site, innermost first. */
export function formatSite(site: string | Error | undefined): string | undefined {
  if (site === undefined) return undefined;
  if (typeof site === 'string') return site;
  let stack = site.stack;
  if (!stack) return undefined;
  // Past the message: a WebGPU message may quote lines of its own ("    at CheckVkOOM... (file.cpp:119)").
  const m = site.message ? stack.indexOf(site.message) : -1;
  if (m >= 0) stack = stack.slice(m + site.message.length);
  const frames = stack
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => FRAME.test(l) && !internalFrame(l));
  return frames.length ? frames.join('\n') : undefined;
}

/** @internal a site of a context call (or a stream's, checked by its context): `calledAt` with the method `op` of `proto`. */
export class EntrySite extends CalledAt {
  constructor(op: string, context: string, proto: object, stream?: string) {
    super(op, (proto as Record<string, unknown>)[op], stream, context);
  }
}
