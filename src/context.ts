/**
 * `Context`: one `GPUDevice` and everything the runtime keeps per device: the default stream, the
 * scheduler, the staging pool, the built-in kernels, memory accounting and the trace.
 */
import { DestroyedError, InvalidArgumentError, WebGpuUnavailableError } from './errors.js';
import { GpuEvent, type EventOptions } from './event.js';
import { builtinShaders, Kernel, type KernelOptions } from './kernels.js';
import { DEFAULT_DEVICE_USAGE, DeviceBuffer, MemoryStats, StagingPool } from './memory.js';
import { NONE, type Op } from './op.js';
import { PinnedBuffer } from './pinned.js';
import { Scheduler } from './scheduler.js';
import { Stream, type StreamHost, type SyncOptions } from './stream.js';
import { Trace } from './trace.js';
import { expectBoolean, expectInteger, expectKnownKeys, expectObject, expectString } from './validate.js';

/** Priorities run from -5 (highest) to 0 (lowest, the default), as `cudaDeviceGetStreamPriorityRange`. */
export const PRIORITY_RANGE = { greatest: -5, least: 0 } as const;

export interface ContextOptions {
  /** Use this device (it is never destroyed by us). @default request one from `gpu` */
  device?: GPUDevice;
  /** The WebGPU entry point. @default navigator.gpu */
  gpu?: GPU;
  /** Adapter preference when requesting a device. @default undefined (the browser's choice) */
  powerPreference?: GPUPowerPreference;
  /** Request 'timestamp-query' when the adapter has it (event timing, GPU trace). @default true */
  timing?: boolean;
  /** Record trace spans per op; `{ gpuTimestamps: true }` also times every GPU op. @default false */
  trace?: boolean | { gpuTimestamps?: boolean };
  /**
   * Submits the GPU may hold at once. More work stays queued on the host, where work of
   * higher-priority streams can overtake it. @default 16
   */
  maxSubmitsInFlight?: number;
  /** Ops per submit at most; smaller values let priorities act sooner. @default Infinity */
  maxOpsPerSubmit?: number;
  /**
   * Keep the enqueue stack (for error messages) of ops that can fail after the call (`true`): host
   * functions, and launches until their pipeline is known to compile; of every op (`'all'`); or of
   * none (`false`). Errors thrown at the call always carry it. A stack costs a few microseconds per
   * op. @default true
   */
  captureStacks?: boolean | 'all';
  /**
   * A pageable upload (`stream.upload(array, dst)`) larger than this goes as equal pieces of at
   * least this many bytes, at most 8, each staged and submitted before the next is copied in, so
   * the GPU's copy of one piece runs while the host copies the next (as CUDA stages pageable
   * `cudaMemcpyAsync`). The pieces are ops of the stream, in order; the call returns the last
   * one's id. A multiple of 4, at least 4096; 0 sends every upload whole.
   *
   * Off by default: it pays where the GPU's copy out of staging is slow next to the host's copy
   * into it (a slow PCIe link; SwiftShader: 64 MiB went 1.5-2.1x faster). On the H100 host it lost:
   * the copy out ran at 50 GB/s, yet the host filled several smaller staging buffers 20% slower than
   * one big one (docs/PERFORMANCE.md, "Pageable uploads"). @default 0
   */
  uploadPieceBytes?: number;
  /**
   * Free staging the pool keeps for reuse (pageable uploads and downloads), bytes; more is
   * destroyed when it comes back (also `ctx.staging.maxPooledBytes`, `ctx.staging.trim()`). A
   * transfer larger than this gets a new staging buffer on every call, and a new mapped buffer
   * costs far more than the copy: a 1 GiB pageable upload took 808 ms against 127 ms with the
   * pool raised to 1 GiB (H100 host, `npm run diag:staging`). Raise it for repeated transfers that
   * large, or upload from a pinned buffer. @default 512 MiB
   */
  stagingPoolBytes?: number;
  /** Device label. @default 'webgpu-streams' */
  label?: string;
  /** @internal keeps a native WebGPU instance (Dawn in Node) alive as long as the context */
  keepAlive?: unknown;
}

/** What the adapter says about itself. */
export interface AdapterInfo {
  vendor: string;
  architecture: string;
  device: string;
  description: string;
}

const OPTION_KEYS = ['device', 'gpu', 'powerPreference', 'timing', 'trace', 'maxSubmitsInFlight', 'maxOpsPerSubmit', 'captureStacks', 'uploadPieceBytes', 'stagingPoolBytes', 'label', 'keepAlive'] as const;

/**
 * Creates a context: requests an adapter and device (or borrows `options.device`) and sets up the
 * default stream. In Node, use `createNodeContext` from 'webgpu-streams/node'.
 */
export async function createContext(options: ContextOptions = {}): Promise<Context> {
  const o = expectObject('options', options, { op: 'createContext' });
  expectKnownKeys('options', o, OPTION_KEYS, { op: 'createContext' });
  const wantTiming = options.timing === undefined ? true : expectBoolean('timing', options.timing, { op: 'createContext' });
  let device = options.device;
  let info: AdapterInfo | undefined;
  const owned = !device;
  if (!device) {
    const gpu = options.gpu ?? (globalThis as { navigator?: { gpu?: GPU } }).navigator?.gpu;
    if (!gpu) {
      throw new WebGpuUnavailableError(
        'WebGPU is not available here (no navigator.gpu). In a browser: use Chrome/Edge 113+ and serve the page from https:// or http://localhost (on Linux add --enable-unsafe-webgpu). In Node: use createNodeContext() from webgpu-streams/node.',
        { op: 'createContext' },
      );
    }
    const adapter = await gpu.requestAdapter(options.powerPreference ? { powerPreference: options.powerPreference } : undefined);
    if (!adapter) {
      throw new WebGpuUnavailableError('no WebGPU adapter was found (no GPU, or it is blocklisted). In Chrome try --enable-unsafe-webgpu --enable-unsafe-swiftshader for a software adapter; in Node set VK_ICD_FILENAMES to a Vulkan driver (e.g. SwiftShader).', { op: 'createContext' });
    }
    const features: GPUFeatureName[] = [];
    if (wantTiming && adapter.features.has('timestamp-query')) features.push('timestamp-query');
    // Ask for the adapter's buffer limits: the defaults (256 MiB) are far below what GPUs allow.
    const requiredLimits: Record<string, number> = {
      maxBufferSize: adapter.limits.maxBufferSize,
      maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
    };
    device = await adapter.requestDevice({ requiredFeatures: features, requiredLimits, label: options.label ?? 'webgpu-streams' });
    info = readInfo((adapter as { info?: GPUAdapterInfo }).info);
  }
  return new Context(device, { ...options, timing: wantTiming }, owned, info ?? readInfo((device as { adapterInfo?: GPUAdapterInfo }).adapterInfo));
}

function readInfo(i: GPUAdapterInfo | undefined): AdapterInfo {
  return { vendor: i?.vendor ?? '', architecture: i?.architecture ?? '', device: i?.device ?? '', description: i?.description ?? '' };
}

/** The built-in kernels from shaders/, compiled on first use. */
export interface BuiltinKernels {
  /** out[i] = a[i] + b[i]; bindings (a, b, out); workgroup 256. */
  readonly vectorAdd: Kernel;
  /** A dependent integer loop of `iterations` steps per element: a calibratable GPU "sleep". */
  readonly sleep: Kernel;
  /** A compute-heavy f32 loop of `iterations` steps per element; bindings (input, out). */
  readonly computeIntensive: Kernel;
}

export class Context {
  readonly device: GPUDevice;
  readonly queue: GPUQueue;
  readonly adapterInfo: AdapterInfo;
  readonly features: { readonly timestampQuery: boolean };
  readonly limits: GPUSupportedLimits;
  readonly memory = new MemoryStats();
  readonly priorityRange = PRIORITY_RANGE;
  /** Trace spans, when the context was created with `trace`. */
  readonly trace: Trace;
  readonly defaultStream: Stream;
  /** @internal */
  readonly scheduler: Scheduler;
  /** @internal */
  readonly staging: StagingPool;
  readonly #owned: boolean;
  readonly #keepAlive: unknown;
  #destroyed = false;
  #streams = 0;
  #events = 0;
  #buffers = 0;
  #kernels: Partial<Record<keyof BuiltinKernels, Kernel>> = {};
  readonly #host: StreamHost;
  /** Resolves with the loss reason when the device is lost. */
  readonly lost: Promise<{ reason: string; message: string }>;

  /** @internal use `createContext()` */
  constructor(device: GPUDevice, options: ContextOptions, owned: boolean, info: AdapterInfo) {
    const site = { op: 'createContext' };
    const maxSubmitsInFlight = options.maxSubmitsInFlight === undefined ? 16 : options.maxSubmitsInFlight === Infinity ? Infinity : expectInteger('maxSubmitsInFlight', options.maxSubmitsInFlight, 1, 1 << 20, site);
    const maxOpsPerSubmit = options.maxOpsPerSubmit === undefined || options.maxOpsPerSubmit === Infinity ? Infinity : expectInteger('maxOpsPerSubmit', options.maxOpsPerSubmit, 1, Number.MAX_SAFE_INTEGER, site);
    const captureStacks = options.captureStacks === undefined || options.captureStacks === 'all' ? (options.captureStacks ?? true) : expectBoolean('captureStacks', options.captureStacks, site);
    const uploadPieceBytes = options.uploadPieceBytes === undefined ? 0 : expectInteger('uploadPieceBytes', options.uploadPieceBytes, 0, Number.MAX_SAFE_INTEGER, site);
    if (uploadPieceBytes !== 0 && (uploadPieceBytes < 4096 || uploadPieceBytes % 4 !== 0)) {
      throw new InvalidArgumentError(`Expected \`uploadPieceBytes\` to be 0 (uploads go whole) or a multiple of 4 of at least 4096, got ${uploadPieceBytes}`, site);
    }
    const stagingPoolBytes = options.stagingPoolBytes === undefined ? undefined : expectInteger('stagingPoolBytes', options.stagingPoolBytes, 0, Number.MAX_SAFE_INTEGER, site);
    const traceOpt = options.trace ?? false;
    const traceOn = traceOpt !== false;
    const traceGpu = typeof traceOpt === 'object' && traceOpt.gpuTimestamps === true;
    this.device = device;
    this.queue = device.queue;
    this.adapterInfo = info;
    this.#owned = owned;
    this.#keepAlive = options.keepAlive;
    this.features = { timestampQuery: options.timing !== false && device.features.has('timestamp-query') };
    this.limits = device.limits;
    this.trace = new Trace();
    this.staging = new StagingPool(device, this.memory, stagingPoolBytes);
    this.scheduler = new Scheduler(device, this.staging, { maxSubmitsInFlight, maxOpsPerSubmit, timestampQuery: this.features.timestampQuery, traceGpu }, traceOn ? this.trace : null);
    this.#host = {
      scheduler: this.scheduler,
      staging: this.staging,
      captureStacks,
      uploadPieceBytes,
      maxWorkgroupsPerDimension: device.limits.maxComputeWorkgroupsPerDimension,
      checkAlive: (op, stream) => this.#checkAlive(op, stream),
      eventOp: (e) => e.last,
      recordEvent: (e, stream, callSite) => {
        if (!(e instanceof GpuEvent)) throw new InvalidArgumentError(`Expected a GpuEvent (ctx.createEvent()), got ${String(e)}`, { op: 'record', stream: stream.label });
        const timing = e.timing && this.features.timestampQuery;
        const op = this.scheduler.enqueue(stream.queue, { kind: 'record', timing, timestamp: null, eventLabel: e.label }, NONE, NONE, callSite, e.label);
        e.last = op;
        return op;
      },
    };
    this.defaultStream = new Stream(this.#host, this.scheduler.defaultQueue);
    this.lost = device.lost.then((info) => {
      this.scheduler.deviceLost(info.reason, info.message);
      return { reason: info.reason, message: info.message };
    });
  }

  /**
   * A new stream. `priority`: lower number = higher priority, from `priorityRange.greatest` (-5) to
   * `least` (0, the default). `nonBlocking`: do not synchronize with the default stream.
   */
  createStream(options: { label?: string; priority?: number; nonBlocking?: boolean } = {}): Stream {
    const site = { op: 'createStream' };
    this.#checkAlive('createStream');
    const o = expectObject('options', options, site);
    expectKnownKeys('options', o, ['label', 'priority', 'nonBlocking'], site);
    const priority = o.priority === undefined ? 0 : expectInteger('priority', o.priority, PRIORITY_RANGE.greatest, PRIORITY_RANGE.least, site);
    const nonBlocking = o.nonBlocking === undefined ? false : expectBoolean('nonBlocking', o.nonBlocking, site);
    const label = o.label === undefined ? `stream#${++this.#streams}` : expectString('label', o.label, site);
    return new Stream(this.#host, this.scheduler.createQueue(label, priority, nonBlocking));
  }

  /** A new event; `timing: true` for `elapsedTime`. */
  createEvent(options: EventOptions = {}): GpuEvent {
    const site = { op: 'createEvent' };
    this.#checkAlive('createEvent');
    const o = expectObject('options', options, site);
    expectKnownKeys('options', o, ['timing', 'label'], site);
    const timing = o.timing === undefined ? false : expectBoolean('timing', o.timing, site);
    const label = o.label === undefined ? `event#${++this.#events}` : expectString('label', o.label, site);
    return new GpuEvent(
      {
        timestampQuery: this.features.timestampQuery,
        defaultStream: this.defaultStream,
        whenDone: (op: Op, signal?: AbortSignal) => this.scheduler.whenDone(op, signal),
        checkAlive: (op: string, stream: string) => this.#checkAlive(op, stream),
      },
      label,
      timing,
    );
  }

  /** A device buffer of `bytes` (multiple of 4): STORAGE | COPY_SRC | COPY_DST unless `usage` says otherwise. */
  alloc(bytes: number, options: { label?: string; usage?: number } = {}): DeviceBuffer {
    const site = { op: 'alloc' };
    this.#checkAlive('alloc');
    const o = expectObject('options', options, site);
    expectKnownKeys('options', o, ['label', 'usage'], site);
    expectInteger('bytes', bytes, 4, this.limits.maxBufferSize, site);
    if (bytes % 4 !== 0) throw new InvalidArgumentError(`Expected \`bytes\` to be a multiple of 4, got ${bytes}`, site);
    const usage = o.usage === undefined ? DEFAULT_DEVICE_USAGE : expectInteger('usage', o.usage, 1, 0x3ff, site);
    const label = o.label === undefined ? `buffer#${++this.#buffers}` : expectString('label', o.label, site);
    return new DeviceBuffer(this.device, this.memory, bytes, label, usage);
  }

  /**
   * Pinned host memory: a mapped staging buffer for `'upload'` (fill it, then `stream.upload`) or
   * `'download'` (`stream.download` into it, read it once the op completed).
   */
  allocHost(bytes: number, kind: 'upload' | 'download', options: { label?: string } = {}): PinnedBuffer {
    const site = { op: 'allocHost' };
    this.#checkAlive('allocHost');
    expectInteger('bytes', bytes, 4, this.limits.maxBufferSize, site);
    if (bytes % 4 !== 0) throw new InvalidArgumentError(`Expected \`bytes\` to be a multiple of 4, got ${bytes}`, site);
    if (kind !== 'upload' && kind !== 'download') throw new InvalidArgumentError(`Expected \`kind\` to be 'upload' or 'download', got \`${String(kind)}\``, site);
    const o = expectObject('options', options, site);
    expectKnownKeys('options', o, ['label'], site);
    const label = o.label === undefined ? `pinned#${++this.#buffers}` : expectString('label', o.label, site);
    return new PinnedBuffer(this.device, bytes, kind, label, () => this.scheduler.scheduleFlush(), (claimants) => this.scheduler.hostWindow(claimants));
  }

  /** A kernel from WGSL (bindings in @group(0), numbered from 0). */
  kernel(wgsl: string, options: KernelOptions = {}): Kernel {
    this.#checkAlive('kernel');
    expectString('wgsl', wgsl, { op: 'kernel' });
    return new Kernel(this.device, wgsl, options);
  }

  /** The built-in kernels (shaders/), compiled on first use. */
  get kernels(): BuiltinKernels {
    const get = (name: keyof BuiltinKernels): Kernel => (this.#kernels[name] ??= new Kernel(this.device, builtinShaders[name], { label: name }));
    return {
      get vectorAdd() {
        return get('vectorAdd');
      },
      get sleep() {
        return get('sleep');
      },
      get computeIntensive() {
        return get('computeIntensive');
      },
    };
  }

  /** Encodes and submits all ready work now (it also happens by itself on a microtask). */
  flush(): void {
    this.#checkAlive('flush');
    this.scheduler.flush();
  }

  /** Resolves when every stream is idle; rejects with the first unreported failure. */
  synchronize(options: SyncOptions = {}): Promise<void> {
    return this.scheduler.synchronizeAll(options.signal);
  }

  /** True once `destroy()` was called. */
  get destroyed(): boolean {
    return this.#destroyed;
  }

  /**
   * Frees the staging pool and, when the context created the device, the device. Idempotent.
   * Await `synchronize()` first if work is pending: destroy does not wait.
   */
  destroy(): void {
    if (this.#destroyed) return;
    this.#destroyed = true;
    this.staging.destroy();
    this.scheduler.destroy();
    if (this.#owned) this.device.destroy();
    void this.#keepAlive;
  }

  [Symbol.dispose](): void {
    this.destroy();
  }

  #checkAlive(op: string, stream?: string): void {
    if (this.#destroyed) throw new DestroyedError('the context was destroyed; create a new one with createContext()', { op, ...(stream !== undefined ? { stream } : {}) });
    const lost = this.scheduler.lost;
    if (lost) throw lost;
  }
}
