/**
 * A random-access source over HTTP byte ranges, for `stream.uploadFrom` in a browser (or Node's
 * fetch): the size from a HEAD request, each read a `Range: bytes=a-b` GET, several at once.
 */
import { InvalidArgumentError, UploadSourceError } from './errors.js';
import type { RandomAccessSource } from './upload-from.js';
import { expectInteger, expectKnownKeys, expectObject, showValue } from './validate.js';

export interface HttpSourceOptions {
  /** Requests in flight at once (browsers open about 6 connections per host). @default 4 */
  parallel?: number;
  /** Headers for every request (authorization, ...). */
  headers?: Record<string, string>;
  /** The fetch to use. @default globalThis.fetch */
  fetch?: typeof fetch;
  /** Aborts every request, the HEAD and the reads (a stalled server): the op reading fails with UploadSourceError. */
  signal?: AbortSignal;
}

/** The response headers that name the version of a file. */
const VERSION_HEADERS = ['etag', 'last-modified'] as const;

/**
 * Opens `url` for `stream.uploadFrom(source, dst, { offset, size })`. The server must answer HEAD
 * with Content-Length and serve byte ranges (206); one that does not is an UploadSourceError here,
 * at the call (pass `(await fetch(url)).body` instead to read it whole, in order). Each read checks
 * the ETag (or Last-Modified) and Content-Range the server shows: the version opened, the bytes asked for.
 */
export async function httpSource(url: string | URL, options: HttpSourceOptions = {}): Promise<RandomAccessSource> {
  const site = { op: 'httpSource' };
  if (typeof url !== 'string' && !(url instanceof URL)) throw new InvalidArgumentError(`Expected \`url\` to be a string or URL, got ${showValue(url)}`, site);
  const o = expectObject('options', options, site);
  expectKnownKeys('options', o, ['parallel', 'headers', 'fetch', 'signal'], site);
  const parallel = expectInteger('parallel', o.parallel ?? 4, 1, 64, site);
  const f = options.fetch ?? globalThis.fetch;
  if (typeof f !== 'function') throw new InvalidArgumentError('no fetch here: pass `fetch`', site);
  const signal = options.signal;
  if (signal !== undefined && !(signal instanceof AbortSignal)) throw new InvalidArgumentError(`Expected \`signal\` to be an AbortSignal, got ${showValue(signal)}`, site);
  const label = String(url);
  const headers = options.headers ?? {};
  let head: Response;
  try {
    head = await f(url, { method: 'HEAD', headers, signal });
  } catch (e) {
    throw new UploadSourceError(`HEAD ${label} failed`, { ...site, cause: e });
  }
  if (!head.ok) throw new UploadSourceError(`HEAD ${label} answered ${head.status} ${head.statusText}`.trimEnd(), site);
  const length = head.headers.get('content-length')?.trim();
  const size = length ? Number(length) : NaN;
  if (!Number.isSafeInteger(size) || size < 0) throw new UploadSourceError(`HEAD ${label} answered without a Content-Length${length ? ` it could read (${length})` : ''}: the size is unknown`, site);
  // Accept-Ranges is optional (and unexposed across origins): without it, one byte asked for says.
  const ranges = head.headers.get('accept-ranges');
  if (ranges !== 'bytes' && (ranges === 'none' || size === 0 || !(await servesRanges(f, url, headers, signal)))) {
    throw new UploadSourceError(`${label} is not served in byte ranges (no Accept-Ranges: bytes, and a request for byte 0 did not answer 206 Partial Content); pass the response body to uploadFrom to read it whole`, site);
  }
  // The version opened: each range must come from it (compared, not sent as If-Range: that header
  // would make every cross-origin request a preflighted one).
  const opened = VERSION_HEADERS.map((k) => head.headers.get(k));
  return {
    size,
    parallel,
    label,
    read: async (into, position) => {
      if (position >= size || into.byteLength === 0) return 0;
      const end = Math.min(size, position + into.byteLength) - 1;
      const res = await f(url, { headers: { ...headers, Range: `bytes=${position}-${end}` }, signal });
      if (res.status !== 206) throw new Error(`GET ${label} bytes ${position}-${end} answered ${res.status}, not 206`);
      // Where the server shows them (cross-origin, only if exposed): the version opened, the range asked for.
      VERSION_HEADERS.forEach((k, i) => {
        const was = opened[i], now = res.headers.get(k);
        if (was && now && now !== was) throw new Error(`${label} changed since it was opened (${k} ${was}, now ${now}): open it again`);
      });
      const range = res.headers.get('content-range');
      const got = range === null ? null : /^bytes (\d+)-\d+\/(\d+|\*)$/.exec(range);
      if (range !== null && (!got || Number(got[1]) !== position || (got[2] !== '*' && Number(got[2]) !== size))) throw new Error(`GET ${label} bytes ${position}-${end} answered Content-Range ${range}`);
      const body = new Uint8Array(await res.arrayBuffer());
      const n = Math.min(body.byteLength, into.byteLength);
      into.set(body.subarray(0, n));
      return n;
    },
  };
}

/** Whether `url` answers a request for its first byte with 206 Partial Content. */
async function servesRanges(f: typeof fetch, url: string | URL, headers: Record<string, string>, signal: AbortSignal | undefined): Promise<boolean> {
  try {
    const res = await f(url, { headers: { ...headers, Range: "bytes=0-0" }, signal });
    await res.arrayBuffer(); // frees the connection
    return res.status === 206;
  } catch {
    return false;
  }
}
