/**
 * A tiny static HTTP server for a built page, on 127.0.0.1 (WebGPU needs a secure context:
 * http://127.0.0.1 and http://localhost count, about:blank has no `navigator.gpu`).
 *
 * It also takes the page's result: the first POST to `reportPath` resolves {@link StaticServer.report}
 * with the parsed JSON body. Responses carry COOP/COEP so the page gets cross-origin isolation
 * (fine `performance.now()`, SharedArrayBuffer), as `../shared/gpu/chrome/serve.py` does.
 *
 * No dependencies beyond node: builtins, so the Node CLIs stay self-contained.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createReadStream, statSync, type Stats } from 'node:fs';
import { extname, join, normalize, resolve, sep } from 'node:path';
import type { AddressInfo } from 'node:net';
import { WEIGHTS_PATH, parseWeightsSpec, weightsFile } from './weights-file';

/** MIME types by file extension (lower case, with the dot). */
export const MIME_TYPES: Readonly<Record<string, string>> = {
  '.html': 'text/html; charset=utf-8',
  '.htm': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.map': 'application/json; charset=utf-8',
  '.wasm': 'application/wasm',
  '.wgsl': 'text/wgsl; charset=utf-8',
  '.txt': 'text/plain; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.jpeg': 'image/jpeg',
  '.gif': 'image/gif',
  '.webp': 'image/webp',
  '.ico': 'image/x-icon',
  '.woff': 'font/woff',
  '.woff2': 'font/woff2',
};

/** The MIME type for a path, `application/octet-stream` when the extension is unknown. */
export function mimeType(path: string): string {
  return MIME_TYPES[extname(path).toLowerCase()] ?? 'application/octet-stream';
}

export interface ServeOptions {
  /**
   * Port to listen on; 0 picks any free port.
   * @default 0
   */
  port?: number;
  /**
   * Interface to listen on.
   * @default '127.0.0.1'
   */
  host?: string;
  /**
   * Path whose first POST (a JSON body) resolves {@link StaticServer.report}.
   * @default '/result'
   */
  reportPath?: string;
  /**
   * Largest accepted POST body, bytes.
   * @default 268435456 (256 MiB)
   */
  maxReportBytes?: number;
  /** Called for every request served, e.g. for logging: method, URL path, status. */
  onRequest?: (method: string, path: string, status: number) => void;
}

export interface StaticServer {
  /** `http://127.0.0.1:PORT` (no trailing slash). */
  origin: string;
  port: number;
  /** Resolves with the JSON body of the first POST to the report path; rejects on a bad body. */
  report: Promise<unknown>;
  /** Stops listening and drops open connections. Idempotent. */
  close(): Promise<void>;
}

/**
 * Serve `dir` over HTTP. Directories serve their `index.html`; paths outside `dir` are refused.
 *
 * @example
 * const server = await serveDir('dist/page');
 * await page.goto(`${server.origin}/?autorun&report=/result`);
 * const result = await server.report;
 * await server.close();
 */
export async function serveDir(dir: string, options: ServeOptions = {}): Promise<StaticServer> {
  const { port = 0, host = '127.0.0.1', reportPath = '/result', maxReportBytes = 256 * 1024 * 1024 } =
    options;
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new TypeError(`Expected \`port\` to be an integer from 0 to 65535, got \`${port}\` (${typeof port})`);
  }
  const root = resolve(dir);
  let rootStat: Stats;
  try {
    rootStat = statSync(root);
  } catch {
    throw new Error(`serveDir: '${root}' does not exist`);
  }
  if (!rootStat.isDirectory()) throw new Error(`serveDir: '${root}' is not a directory`);

  let settle!: { resolve: (v: unknown) => void; reject: (e: Error) => void };
  const report = new Promise<unknown>((res, rej) => (settle = { resolve: res, reject: rej }));
  // A caller that never awaits the report must not see an unhandled rejection.
  report.catch(() => {});
  let reported = false;

  const send = (req: IncomingMessage, res: ServerResponse, status: number, body: string, path: string) => {
    res.writeHead(status, { 'Content-Type': 'text/plain; charset=utf-8', ...commonHeaders });
    res.end(req.method === 'HEAD' ? undefined : body);
    options.onRequest?.(req.method ?? '?', path, status);
  };

  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    const path = safeDecode(url.pathname);
    if (path === null) return send(req, res, 400, 'bad path\n', url.pathname);

    if (req.method === 'POST' && path === reportPath) {
      const chunks: Buffer[] = [];
      let size = 0;
      let tooBig = false;
      req.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size > maxReportBytes) tooBig = true;
        else chunks.push(chunk);
      });
      req.on('end', () => {
        if (tooBig) {
          send(req, res, 413, `report larger than ${maxReportBytes} bytes\n`, path);
          if (!reported) {
            reported = true;
            settle.reject(new Error(`The page posted a report of more than ${maxReportBytes} bytes to ${path}`));
          }
          return;
        }
        const text = Buffer.concat(chunks).toString('utf8');
        let parsed: unknown;
        try {
          parsed = JSON.parse(text);
        } catch (e) {
          send(req, res, 400, 'body is not JSON\n', path);
          if (!reported) {
            reported = true;
            settle.reject(
              new Error(`The page posted a body that is not JSON to ${path}: ${(e as Error).message}; ` +
                `it starts with ${JSON.stringify(text.slice(0, 200))}`),
            );
          }
          return;
        }
        res.writeHead(204, commonHeaders);
        res.end();
        options.onRequest?.('POST', path, 204);
        if (!reported) {
          reported = true;
          settle.resolve(parsed);
        }
      });
      req.on('error', () => {});
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      return send(req, res, 405, 'method not allowed\n', path);
    }

    if (serveWeights(req, res, url, options.onRequest)) return;
    let file = normalize(join(root, path));
    if (file !== root && !file.startsWith(root + sep)) return send(req, res, 403, 'forbidden\n', path);
    let stat = statOrNull(file);
    if (stat?.isDirectory()) {
      file = join(file, 'index.html');
      stat = statOrNull(file);
    }
    if (!stat?.isFile()) {
      // Browsers ask for a favicon on their own; its absence is not the page's error.
      if (path === '/favicon.ico') {
        res.writeHead(204, commonHeaders);
        return void res.end();
      }
      return send(req, res, 404, `not found: ${path}\n`, path);
    }
    sendFile(req, res, file, stat, path, options.onRequest);
  });

  await new Promise<void>((res, rej) => {
    server.once('error', rej);
    server.listen(port, host, () => {
      server.off('error', rej);
      res();
    });
  });
  const actualPort = (server.address() as AddressInfo).port;
  const urlHost = host.includes(':') ? `[${host}]` : host;

  let closed: Promise<void> | undefined;
  return {
    origin: `http://${urlHost}:${actualPort}`,
    port: actualPort,
    report,
    close() {
      closed ??= new Promise<void>((res) => {
        server.close(() => res());
        server.closeAllConnections();
      });
      return closed;
    },
  };
}

/**
 * GET or HEAD of the synthetic weights file (bench/weights-file.ts) at WEIGHTS_PATH, in byte ranges
 * as httpSource reads it: true when `url` asked for it (answered, 400 for a bad spec). The page's
 * servers share it: serveDir here and `npm run dev` (vite.config.ts).
 */
export function serveWeights(req: IncomingMessage, res: ServerResponse, url: URL, onRequest?: ServeOptions['onRequest']): boolean {
  if (url.pathname !== WEIGHTS_PATH || (req.method !== 'GET' && req.method !== 'HEAD')) return false;
  const spec = parseWeightsSpec(url.searchParams);
  if (!spec) {
    res.writeHead(400, { 'Content-Type': 'text/plain; charset=utf-8', ...commonHeaders });
    res.end('expected ?layers=1..256&elements=N&seed=S (at most 2 GiB)\n');
    onRequest?.(req.method, url.pathname, 400);
    return true;
  }
  const file = weightsFile(spec);
  sendFile(req, res, file, statSync(file), url.pathname, onRequest);
  return true;
}

/** Sends a file whole, or one byte range of it (`Range: bytes=a-b` or `bytes=a-`), as httpSource reads weights. */
function sendFile(req: IncomingMessage, res: ServerResponse, file: string, stat: Stats, path: string, onRequest?: ServeOptions['onRequest']): void {
  const method = req.method ?? 'GET';
  const range = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? '');
  if (range) {
    const start = Number(range[1]);
    const end = range[2] ? Math.min(Number(range[2]), stat.size - 1) : stat.size - 1;
    if (start > end || start >= stat.size) {
      res.writeHead(416, { 'Content-Range': `bytes */${stat.size}`, ...commonHeaders });
      onRequest?.(method, path, 416);
      return void res.end();
    }
    res.writeHead(206, { 'Content-Type': mimeType(file), 'Content-Length': String(end - start + 1), 'Content-Range': `bytes ${start}-${end}/${stat.size}`, 'Accept-Ranges': 'bytes', ...commonHeaders });
    onRequest?.(method, path, 206);
    if (method === 'HEAD') return void res.end();
    const part = createReadStream(file, { start, end });
    part.on('error', () => res.destroy());
    return void part.pipe(res);
  }
  res.writeHead(200, { 'Content-Type': mimeType(file), 'Content-Length': String(stat.size), 'Accept-Ranges': 'bytes', ...commonHeaders });
  onRequest?.(method, path, 200);
  if (method === 'HEAD') return void res.end();
  const stream = createReadStream(file);
  stream.on('error', () => res.destroy());
  stream.pipe(res);
}

const commonHeaders = {
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Embedder-Policy': 'require-corp',
  'Cache-Control': 'no-store',
} as const;

function statOrNull(path: string): Stats | null {
  try {
    return statSync(path);
  } catch {
    return null;
  }
}

function safeDecode(pathname: string): string | null {
  try {
    const decoded = decodeURIComponent(pathname);
    return decoded.includes('\0') ? null : decoded;
  } catch {
    return null;
  }
}
