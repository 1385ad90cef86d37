/** Argument checks with messages that quote the option, the value and its type (p-queue style). */
import { AbortError, InvalidArgumentError, ownWords, type ErrorSite } from './errors.js';

function show(value: unknown): string {
  let text: string;
  try {
    text = typeof value === 'bigint' ? `${value}n` : typeof value === 'string' ? JSON.stringify(value) : String(value);
  } catch {
    text = Object.prototype.toString.call(value);
  }
  return `\`${text.length > 60 ? `${text.slice(0, 57)}...` : text}\` (${value === null ? 'null' : typeof value})`;
}

export function expectInteger(name: string, value: unknown, min: number, max: number, site: ErrorSite = {}): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `>= ${min}` : `from ${min} to ${max}`;
    throw new InvalidArgumentError(`Expected \`${name}\` to be an integer ${range}, got ${show(value)}`, site);
  }
  return value;
}

export function expectBoolean(name: string, value: unknown, site: ErrorSite = {}): boolean {
  if (typeof value !== 'boolean') throw new InvalidArgumentError(`Expected \`${name}\` to be a boolean, got ${show(value)}`, site);
  return value;
}

export function expectString(name: string, value: unknown, site: ErrorSite = {}): string {
  if (typeof value !== 'string') throw new InvalidArgumentError(`Expected \`${name}\` to be a string, got ${show(value)}`, site);
  return value;
}

/** A `label` option: a string, or (absent or empty, so messages never name '') the default `fallback()` makes. */
export function expectLabel(value: unknown, fallback: () => string, site: ErrorSite = {}): string {
  return value === undefined || value === '' ? fallback() : expectString('label', value, site);
}

export function expectFunction(name: string, value: unknown, site: ErrorSite = {}): (...args: never[]) => unknown {
  if (typeof value !== 'function') throw new InvalidArgumentError(`Expected \`${name}\` to be a function, got ${show(value)}`, site);
  return value as (...args: never[]) => unknown;
}

export function expectObject(name: string, value: unknown, site: ErrorSite = {}): Record<string, unknown> {
  if (value === undefined) return {};
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new InvalidArgumentError(`Expected \`${name}\` to be an options object, got ${show(value)}`, site);
  }
  return value as Record<string, unknown>;
}

/**
 * Throws on a key not in `allowed` (listed in the message) or `hidden` (allowed, not listed: internal
 * options): a typo in an option name should not pass silently.
 */
export function expectKnownKeys(name: string, obj: Record<string, unknown>, allowed: readonly string[], site: ErrorSite = {}, hidden: readonly string[] = []): void {
  for (const key of Object.keys(obj)) {
    if (!allowed.includes(key) && !hidden.includes(key)) {
      throw new InvalidArgumentError(`Unknown option \`${name}.${key}\`; expected one of ${allowed.map((k) => `\`${k}\``).join(', ')}`, site);
    }
  }
}

export function expectAligned(name: string, value: number, alignment: number, site: ErrorSite = {}): number {
  if (value % alignment !== 0) {
    throw new InvalidArgumentError(`Expected \`${name}\` to be a multiple of ${alignment} bytes (WebGPU copies are ${alignment}-byte aligned), got ${value}`, site);
  }
  return value;
}

export interface SyncOptions {
  /** Stops waiting (rejects with AbortError); the work itself still runs. */
  signal?: AbortSignal;
}

/** Checks a `{ signal? }` options object (`synchronize()`); returns the signal. */
export function syncSignal(options: unknown, site: ErrorSite): AbortSignal | undefined {
  const o = expectObject('options', options, site);
  expectKnownKeys('options', o, ['signal'], site);
  const signal = o.signal;
  if (signal !== undefined && !(typeof signal === 'object' && signal !== null && typeof (signal as AbortSignal).addEventListener === 'function' && 'aborted' in signal)) {
    throw new InvalidArgumentError(`Expected \`signal\` to be an AbortSignal, got ${show(signal)}`, site);
  }
  // As the platform's APIs do: an aborted signal rejects at once (failures stay for the next wait).
  if ((signal as AbortSignal | undefined)?.aborted) throw new AbortError('synchronize was aborted before it began (the signal was already aborted)', { ...site, callSite: site.callSite, cause: (signal as AbortSignal).reason }); // a getter (EntrySite) is not spread
  return signal as AbortSignal | undefined;
}

/** Each signal's waits, behind one 'abort' listener however many share it (Node warns past 10 listeners). */
const aborts = new WeakMap<AbortSignal, { fns: Set<() => void>; listener: () => void }>();

/** Calls `fn` once `signal` aborts (not yet aborted); returns what takes it back. */
export function whenAborted(signal: AbortSignal, fn: () => void): () => void {
  let a = aborts.get(signal);
  if (!a) {
    const fns = new Set<() => void>();
    a = { fns, listener: () => (aborts.delete(signal), fns.forEach((f) => f())) };
    aborts.set(signal, a);
    signal.addEventListener('abort', a.listener, { once: true });
  }
  const { fns, listener } = a;
  fns.add(fn);
  return () => {
    if (fns.delete(fn) && fns.size === 0 && aborts.get(signal)?.fns === fns) {
      aborts.delete(signal);
      signal.removeEventListener('abort', listener);
    }
  };
}

/**
 * `wait` (a synchronize given `signal`) with its AbortError naming that synchronize and the line
 * that called it (the wait's own names the op it waited for); the line is captured only when there is a signal.
 */
export function namedAbort(wait: Promise<void>, signal: AbortSignal | undefined, site: ErrorSite): Promise<void> {
  if (!signal) return wait;
  const at = site.callSite ?? new Error('synchronize'); // taken now, in the call: cut at the public method
  return wait.catch((e: unknown) => {
    throw e instanceof AbortError ? new AbortError(ownWords(e), { ...site, callSite: at, cause: e.cause }) : e;
  });
}

export { show as showValue };

/** Throws when `view`'s buffer was detached (transferred or resized away): its bytes are gone. */
export function checkAttached(view: ArrayBufferView, name: string, site: ErrorSite): void {
  const outOfBounds = (): InvalidArgumentError => new InvalidArgumentError(`\`${name}\` is a view past the end of its ArrayBuffer, which was resized below it: it has no bytes (JavaScript refuses to read it too)`, site);
  let bytes: number;
  try {
    bytes = view.byteLength; // a DataView out of bounds throws here
  } catch {
    throw outOfBounds();
  }
  if (bytes !== 0) return;
  const buf = view.buffer as ArrayBuffer & { detached?: boolean; resizable?: boolean };
  if (buf.detached ?? isDetached(buf)) {
    throw new InvalidArgumentError(`\`${name}\` is a view of a detached ArrayBuffer (transferred with postMessage or structuredClone): its bytes are gone`, site);
  }
  // A fixed-length typed array past a shrunk buffer's end reads as empty; slice() refuses it.
  if (buf.resizable && !(view instanceof DataView)) {
    try {
      TYPED_SLICE.call(view, 0, 0);
    } catch {
      throw outOfBounds();
    }
  }
}

const TYPED_SLICE = (Object.getPrototypeOf(Uint8Array.prototype) as { slice: (this: ArrayBufferView, a: number, b: number) => unknown }).slice;

/** Detachment where `ArrayBuffer.prototype.detached` is missing: a detached buffer cannot be viewed. */
function isDetached(buf: ArrayBufferLike): boolean {
  try {
    new Uint8Array(buf, 0, 0);
    return false;
  } catch {
    return true;
  }
}
