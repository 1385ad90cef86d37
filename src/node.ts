/**
 * Node entry point: a context on Dawn's `webgpu` package (`npm i webgpu`, an optional peer
 * dependency: it is loaded by createNodeContext, so importing this file never needs it).
 *
 * ```ts
 * import { createNodeContext } from 'webgpu-streams/node';
 * const ctx = await createNodeContext();
 * ```
 * No GPU? SwiftShader's Vulkan driver works: `VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json`
 * (Debian's chromium package ships it). The native instance stays referenced by the context for its
 * whole life: when it is garbage-collected while a device is in use, the process crashes.
 */
import { createContext, OPTION_KEYS, type Context, type ContextOptions } from './context.js';
import { calledAt, InvalidArgumentError, stackFrom, StreamError, UploadSourceError, WebGpuUnavailableError, type ErrorSite } from './errors.js';
import { expectBoolean, expectInteger, expectKnownKeys, expectObject, expectString, showValue } from './validate.js';
import type { RandomAccessSource } from './upload-from.js';

export interface NodeContextOptions extends Omit<ContextOptions, 'gpu' | 'keepAlive'> {
  /**
   * Dawn toggles for `create()`. @default ['disable-dawn-features=timestamp_quantization'] so GPU
   * timestamps are not rounded to 0.1 ms.
   */
  dawnToggles?: string[];
  /** Define WebGPU's globals (GPUBufferUsage, GPUMapMode, ...) when missing. @default true */
  installGlobals?: boolean;
  /**
   * The adapter whose name contains this text (Dawn's `adapter=` flag). Two GPUs of one model share
   * a name: docs/MULTI_GPU.md tags them '[vk0]', '[vk1]' with a small Vulkan layer.
   */
  adapter?: string;
}

export async function createNodeContext(options: NodeContextOptions = {}): Promise<Context> {
  // Taken now: its errors after an await (no adapter of that name) would find no caller's frame.
  const site: ErrorSite = { op: 'createNodeContext', callSite: stackFrom(createNodeContext) };
  const o = expectObject('options', options, site);
  if ('gpu' in o || 'keepAlive' in o) throw new InvalidArgumentError(`createNodeContext makes its own \`gpu\` (and keeps it alive); pass \`device\` to borrow one, or use createContext({ gpu }) for a gpu of yours`, site);
  expectKnownKeys('options', o, [...OPTION_KEYS.filter((k) => k !== 'gpu'), 'dawnToggles', 'installGlobals', 'adapter'], site);
  // Dawn's flags are '<key>=<value>' (it throws a bare Error on any other, and on a hole).
  if (o.dawnToggles !== undefined && !(Array.isArray(o.dawnToggles) && Array.from(o.dawnToggles).every((t) => typeof t === 'string' && /^[\w-]+=/.test(t)))) {
    throw new InvalidArgumentError(`Expected \`dawnToggles\` to be an array of '<key>=<value>' strings (e.g. 'enable-dawn-features=allow_unsafe_apis'), got ${showValue(o.dawnToggles)}`, site);
  }
  if (o.installGlobals !== undefined) expectBoolean('installGlobals', o.installGlobals, site);
  if (o.adapter !== undefined) expectString('adapter', o.adapter, site);
  const { dawnToggles = ['disable-dawn-features=timestamp_quantization'], installGlobals = true, adapter, ...rest } = o as NodeContextOptions;
  if (rest.uploadPieceBytes === undefined && piecesPay()) rest.uploadPieceBytes = PIECE_BYTES;
  if (!installGlobals && rest.device) return createContext(rest);
  const { create, globals } = await loadDawn(site);
  if (installGlobals) {
    const g = globalThis as Record<string, unknown>;
    for (const [k, v] of Object.entries(globals as Record<string, unknown>)) if (!(k in g)) g[k] = v;
  }
  if (rest.device) return createContext(rest);
  if (adapter === undefined) {
    const gpu = create(dawnToggles);
    return createContext({ ...rest, gpu, keepAlive: gpu });
  }
  const gpu = create([...dawnToggles, `adapter=${adapter}`]);
  // Dawn rejects requestAdapter with the adapters it has when none matches.
  return createContext({ ...rest, gpu, keepAlive: gpu }).catch((e: unknown) => {
    if (e instanceof StreamError) throw e;
    throw new WebGpuUnavailableError(`no adapter named '${adapter}' (a part of the name): ${String((e as Error | null)?.message ?? e).replace(/\s+/g, ' ').trim()}`, { ...site, cause: e });
  });
}

/** Pageable uploads' pieces where they pay (see piecesPay). */
const PIECE_BYTES = 32 << 20;

/**
 * Do pageable uploads go faster in pieces here? Where glibc's memcpy goes non-temporal at or below a
 * piece's size (GLIBC_TUNABLES' glibc.cpu.x86_non_temporal_threshold, as docs/PERFORMANCE.md advises),
 * a piece copies as fast as a whole upload, and the GPU copies one piece out while the next goes in.
 */
function piecesPay(tunables = process.env['GLIBC_TUNABLES']): boolean {
  const m = /(?:^|:)glibc\.cpu\.x86_non_temporal_threshold=(0x[0-9a-f]+|\d+)(?::|$)/i.exec(tunables ?? '');
  const threshold = m ? Number(m[1]) : Number.NaN;
  return threshold > 0 && threshold <= PIECE_BYTES;
}

/** Dawn's `webgpu` package, imported on first use; a missing one says what to install. */
async function loadDawn(site: ErrorSite): Promise<typeof import('webgpu')> {
  try {
    return await import('webgpu');
  } catch (e) {
    const code = (e as { code?: unknown } | null)?.code;
    const missing = (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') && /'webgpu'/.test(String((e as Error).message));
    throw new WebGpuUnavailableError(
      missing
        ? "webgpu-streams/node needs Dawn's `webgpu` package: npm i webgpu"
        : `webgpu-streams/node could not load Dawn's \`webgpu\` package (npm i webgpu, and Vulkan's libvulkan1 on Linux): ${String((e as Error | null)?.message ?? e)}`,
      { ...site, cause: e },
    );
  }
}

/** A file opened for `stream.uploadFrom`: reads go straight into the staging buffers' mapped ranges, several at once on libuv's thread pool. */
export interface FileSource extends RandomAccessSource {
  /** Closes the file. Idempotent. */
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** What openFile needs of a `FileHandle` of node:fs/promises (structural: no @types/node needed). */
export interface FileHandleLike {
  readonly fd: number;
  read(buffer: Uint8Array, offset: number, length: number, position: number): Promise<{ bytesRead: number }>;
  stat(): Promise<{ size: number; isFile?(): boolean }>;
  close(): Promise<void>;
}

/**
 * Opens `path` (or wraps a `FileHandle` of node:fs/promises, which stays yours to close) for
 * `stream.uploadFrom(file, dst, { offset, size })`. `parallel`: reads in flight at once, which libuv
 * runs on its thread pool: 4 threads unless UV_THREADPOOL_SIZE is set in the environment Node starts
 * with (an ES module entry starts the pool while loading, before your code runs).
 * @default the thread pool's size, at most 16
 */
export async function openFile(path: string | FileHandleLike, options: { parallel?: number } = {}): Promise<FileSource> {
  const site = calledAt('openFile', openFile);
  const owned = typeof path === 'string'; // opened here, closed here; a FileHandle passed in is the caller's
  const handle = typeof path === 'object' && path !== null && typeof (path as { read?: unknown }).read === 'function' && typeof (path as { stat?: unknown }).stat === 'function';
  if (!owned && !handle) throw new InvalidArgumentError(`Expected \`path\` to be a path or a FileHandle of node:fs/promises, got ${showValue(path)}`, site);
  const o = expectObject('options', options, site);
  expectKnownKeys('options', o, ['parallel'], site);
  const parallel = o.parallel === undefined ? Math.min(16, Math.max(1, Math.floor(Number(process.env['UV_THREADPOOL_SIZE'])) || 4)) : expectInteger('parallel', o.parallel, 1, 256, site);
  const { open } = await import('node:fs/promises');
  let fh: FileHandleLike | undefined;
  let stat: { size: number; isFile?(): boolean };
  try {
    fh = owned ? await open(path, 'r') : path;
    stat = await fh.stat();
  } catch (e) {
    if (owned) await fh?.close().catch(() => undefined);
    throw new UploadSourceError(`cannot open ${owned ? `'${path}'` : 'the FileHandle'}: ${e instanceof Error ? e.message : String(e)}`, { ...site, cause: e }); // cause.code: 'ENOENT', 'EACCES', ...
  }
  if (stat.isFile?.() === false) {
    if (owned) await fh.close();
    throw new UploadSourceError(`'${owned ? path : `FileHandle ${fh.fd}`}' is not a regular file (a directory?)`, site);
  }
  const { size } = stat;
  let closed = false;
  const close = async (): Promise<void> => {
    if (closed) return;
    closed = true;
    if (owned) await fh.close();
  };
  return {
    size,
    parallel,
    label: owned ? path : `FileHandle ${fh.fd}`,
    read: async (into, position) => (await fh.read(into, 0, into.byteLength, position)).bytesRead,
    close,
    [Symbol.asyncDispose]: close,
  };
}

export * from './index.js';
