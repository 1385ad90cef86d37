/**
 * `Context`: one `GPUDevice` and everything the runtime keeps per device: the default stream, the
 * scheduler, the staging pool, the built-in kernels, memory accounting and the trace.
 */
import { atCall, DestroyedError, EntrySite, InvalidArgumentError, WebGpuUnavailableError, type ErrorSite } from './errors.js';
import { GpuEvent, type EventOptions } from './event.js';
import { BufferUsage } from './gpu-constants.js';
import { builtinShaders, Kernel, type KernelOptions } from './kernels.js';
import { DEFAULT_DEVICE_USAGE, DeviceBuffer, MemoryStats, type PeerHost } from './memory.js';
import { DeviceTexture, textureOptions, type TextureOptions } from './texture.js';
import type { Op } from './op.js';
import { PinnedBuffer, type PinnedHost } from './pinned.js';
import type { Sanitizer, SanitizeMode } from './sanitizer.js';
import { Scheduler } from './scheduler/scheduler.js';
import { unwatchDeviceLoss, watchDeviceLoss } from './scheduler/loss.js';
import { synchronizeAll } from './scheduler/wait.js';
import { deadlock, hostWindow } from './scheduler/host.js';
import { StagingPool } from './transfer.js';
import { Stream, type StreamHost } from './stream.js';
import { peerReadBack } from './peer.js';
import { checkUsage, parseOptions } from './options.js';
import { UploadRing } from './upload-ring.js';
import { Trace } from './trace.js';
import { expectBoolean, expectInteger, expectKnownKeys, expectLabel, expectObject, expectString, namedAbort, showValue, syncSignal, type SyncOptions } from './validate.js';

/**
 * Priorities run from -5 (highest) to 0 (lowest, the default), as `cudaDeviceGetStreamPriorityRange`.
 * An integer outside is clamped to the nearest, as CUDA and PyTorch do.
 */
export const PRIORITY_RANGE = { greatest: -5, least: 0 } as const;

/** Contexts made so far, for default labels (`ctx#1`, `ctx#2`, ...). */
let contexts = 0;

/** A context's scheduler and staging pool: not public API; tests reach them through {@link contextInternals}. */
const internals = new WeakMap<Context, { scheduler: Scheduler; staging: StagingPool }>();

/** @internal for tests only (not exported by the package): a context's scheduler and staging pool. */
export function contextInternals(ctx: Context): { scheduler: Scheduler; staging: StagingPool } {
  return internals.get(ctx)!;
}

export interface ContextOptions {
  /** Use this device (it is never destroyed by us). @default request one from `gpu` */
  device?: GPUDevice;
  /** The WebGPU entry point. @default navigator.gpu */
  gpu?: GPU;
  /** Adapter preference when requesting a device. @default undefined (the browser's choice) */
  powerPreference?: GPUPowerPreference;
  /** Request 'timestamp-query' when the adapter has it (event timing, GPU trace). @default true */
  timing?: boolean;
  /**
   * Record trace spans per op; `{ gpuTimestamps: true }` also times every GPU op; `limit`: op
   * records and submits kept (the oldest are dropped). @default false (limit 100000)
   */
  trace?: boolean | { gpuTimestamps?: boolean; limit?: number };
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
   * It pays where the GPU's copy out of staging is slow next to the host's copy into it, and loses where
   * the host fills smaller staging buffers more slowly than one big one (docs/PERFORMANCE.md, "Pageable
   * uploads"). @default 0; in Node, 32 MiB when glibc's memcpy goes non-temporal from 32 MiB or less
   */
  uploadPieceBytes?: number;
  /**
   * Free staging kept for reuse by pageable uploads and downloads, bytes, and by `uploadFrom` beyond
   * 24 pieces; past it, the free buffers used longest ago go (`ctx.emptyCache()`: all of them). A
   * transfer larger than this gets a new staging buffer on every call, and a new mapped buffer
   * costs far more than the copy (docs/PERFORMANCE.md, "Pageable uploads"). Raise it for repeated
   * transfers that large, or upload from a pinned buffer. @default 512 MiB
   */
  stagingPoolBytes?: number;
  /**
   * The stream sanitizer: finds two accesses of overlapping bytes of one buffer, one a write, that
   * no stream order, event, wait or host synchronization orders, when the second is enqueued:
   * `'throw'` a `StreamRaceError` at that call, `'warn'` on the console, or call a function with
   * the `RaceReport`. It also reports waits on events not recorded yet (warned once per stream and
   * event unless a function takes the reports: often meant, as in the first turns of a ring). A report names where the
   * second access was made; the first one's call site too with `captureStacks: 'all'` (a stack
   * per op costs about as much as the rest of the op). @default false (off; no cost)
   */
  sanitize?: false | SanitizeMode;
  /** The context's label, in error messages and on the device it requests. @default 'ctx#<n>' */
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

/** createContext's options (`keepAlive`, internal, is accepted but not listed in errors). */
export const OPTION_KEYS = ['device', 'gpu', 'powerPreference', 'timing', 'trace', 'maxSubmitsInFlight', 'maxOpsPerSubmit', 'captureStacks', 'uploadPieceBytes', 'stagingPoolBytes', 'sanitize', 'label'] as const;

/**
 * Creates a context: requests an adapter and device (or borrows `options.device`) and sets up the
 * default stream. In Node, use `createNodeContext` from 'webgpu-streams/node'.
 */
export async function createContext(options: ContextOptions = {}): Promise<Context> {
  const site = { op: 'createContext' };
  const o = expectObject('options', options, site);
  expectKnownKeys('options', o, OPTION_KEYS, site, ['keepAlive']);
  const wantTiming = o.timing === undefined ? true : expectBoolean('timing', o.timing, site);
  if (o.device !== undefined && !isDevice(o.device)) throw new InvalidArgumentError(`Expected \`device\` to be a GPUDevice, got ${showValue(o.device)}`, site);
  if (o.gpu !== undefined && typeof (o.gpu as GPU | null)?.requestAdapter !== 'function') throw new InvalidArgumentError(`Expected \`gpu\` to be a GPU (navigator.gpu), got ${showValue(o.gpu)}`, site);
  if (o.powerPreference !== undefined && o.powerPreference !== 'low-power' && o.powerPreference !== 'high-performance') {
    throw new InvalidArgumentError(`Expected \`powerPreference\` to be 'low-power' or 'high-performance', got ${showValue(o.powerPreference)}`, site);
  }
  if (o.label !== undefined) expectString('label', o.label, site);
  // The sanitizer's code is loaded only when it is on: a bundle without it leaves it out.
  const sanitizer = parseOptions(o as ContextOptions, site).sanitize === false ? null : (await import('./sanitizer.js')).Sanitizer;
  const label = options.label || `ctx#${++contexts}`;
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
    device = await adapter.requestDevice({ requiredFeatures: features, requiredLimits, label });
    info = readInfo((adapter as { info?: GPUAdapterInfo }).info);
  }
  return new Context(device, { ...options, timing: wantTiming, label }, owned, info ?? readInfo((device as { adapterInfo?: GPUAdapterInfo }).adapterInfo), sanitizer);
}

function isDevice(d: unknown): d is GPUDevice {
  return typeof d === 'object' && d !== null && typeof (d as GPUDevice).createBuffer === 'function' && typeof (d as GPUDevice).queue === 'object';
}

function readInfo(i: GPUAdapterInfo | undefined): AdapterInfo {
  return { vendor: i?.vendor ?? '', architecture: i?.architecture ?? '', device: (i?.device ?? '').replace(/[-_\s]+$/, ''), description: i?.description ?? '' }; // Dawn's SwiftShader name ends in '-'
}

/** The built-in kernels from shaders/, compiled on first use. */
export interface BuiltinKernels {
  /** out[i] = a[i] + b[i]; bindings (a, b, out); workgroup 256. */
  readonly vectorAdd: Kernel;
}

export class Context {
  /** The context's label (`ctx#<n>` unless given): error messages name it. */
  readonly label: string;
  readonly device: GPUDevice;
  readonly queue: GPUQueue;
  readonly adapterInfo: AdapterInfo;
  readonly features: { readonly timestampQuery: boolean };
  readonly limits: GPUSupportedLimits;
  /** Pageable uploads above this many bytes go in pieces (0: whole): the `uploadPieceBytes` it was made with (0 with sanitize 'throw'). */
  readonly uploadPieceBytes: number;
  readonly memory = new MemoryStats();
  readonly priorityRange = PRIORITY_RANGE;
  /** Trace spans, when the context was created with `trace`. */
  readonly trace: Trace;
  readonly defaultStream: Stream;
  readonly #scheduler: Scheduler;
  readonly #staging: StagingPool;
  readonly #owned: boolean;
  readonly #keepAlive: unknown;
  #destroyed = false;
  readonly #made = { streams: 0, events: 0, buffers: 0 };
  #kernels: Partial<Record<keyof BuiltinKernels, Kernel>> = {};
  readonly #host: StreamHost;
  readonly #pinnedHost: PinnedHost;
  readonly #ring: UploadRing;
  readonly #peer: PeerHost;
  /** Resolves with the loss reason when the device is lost. */
  readonly lost: Promise<{ reason: string; message: string }>;

  /** @internal use `createContext()` */
  constructor(device: GPUDevice, options: ContextOptions, owned: boolean, info: AdapterInfo, Sanitizing: typeof Sanitizer | null) {
    const site = { op: 'createContext' };
    const { maxSubmitsInFlight, maxOpsPerSubmit, captureStacks, uploadPieceBytes, stagingPoolBytes, traceOn, traceGpu, traceLimit, sanitize } = parseOptions(options, site);
    const label = (this.label = options.label || `ctx#${++contexts}`);
    this.uploadPieceBytes = sanitize === 'throw' ? 0 : uploadPieceBytes; // whole: a race in a later piece would throw after the first was enqueued
    this.device = device;
    this.queue = device.queue;
    this.adapterInfo = info;
    this.#owned = owned;
    this.#keepAlive = options.keepAlive ?? options.gpu; // Dawn's instance must outlive its device
    this.features = { timestampQuery: options.timing !== false && device.features.has('timestamp-query') };
    this.limits = device.limits;
    this.trace = new Trace();
    if (traceLimit !== undefined) this.trace.limit = traceLimit;
    this.#staging = new StagingPool(device, this.memory, stagingPoolBytes);
    this.trace.gpuTimestamps = traceGpu;
    const sanitizer = sanitize === false || !Sanitizing ? null : new Sanitizing(sanitize, label, traceOn ? this.trace : null, captureStacks === 'all');
    const scheduler = (this.#scheduler = new Scheduler(device, this.#staging, { maxSubmitsInFlight, maxOpsPerSubmit, timestampQuery: this.features.timestampQuery }, traceOn ? this.trace : null, label, sanitizer));
    internals.set(this, { scheduler, staging: this.#staging });
    this.#pinnedHost = {
      device,
      label,
      closed: () => scheduler.closed,
      onMapped: (claimants) => {
        // Every context with an op using the buffer may go on (one device, several contexts).
        scheduler.scheduleFlush(true);
        for (const c of claimants) (c as Op).stream.owner.wake((c as Op).stream);
      },
      hostWindow,
      sanitizer,
      checkWait: (claimants, what) => {
        const err = deadlock(claimants as Iterable<Op>, what);
        if (err) throw err;
      },
    };
    this.#ring = new UploadRing(this.#pinnedHost, this.memory, this.limits.maxBufferSize, this.#staging.maxPooledBytes);
    this.#host = {
      scheduler,
      staging: this.#staging,
      device,
      label,
      captureStacks,
      uploadPieceBytes: this.uploadPieceBytes,
      limits: {
        maxUniformBufferBindingSize: device.limits.maxUniformBufferBindingSize,
        maxStorageBufferBindingSize: device.limits.maxStorageBufferBindingSize,
        maxComputeWorkgroupsPerDimension: device.limits.maxComputeWorkgroupsPerDimension,
      },
      timestampQuery: this.features.timestampQuery,
      checkAlive: (op, stream) => this.#checkAlive(op, stream),
      uploadRing: this.#ring,
    };
    this.defaultStream = new Stream(this.#host, this.#scheduler.defaultQueue);
    let peerStream: Stream | null = null;
    const peerQueue = (): Stream => {
      if (!peerStream) (peerStream = new Stream(this.#host, scheduler.createQueue(`${label} (copyPeer)`, 0, true))).queue.internal = true;
      return peerStream;
    };
    const peerAlive = (site: ErrorSite, src: string): void => {
      const whose = `src '${src}' belongs to context '${label}'`;
      if (this.#destroyed) throw new DestroyedError(`${whose}, which was destroyed`, site);
      if (this.#scheduler.closed) throw atCall(this.#scheduler.closed, site, whose);
    };
    this.#peer = { label, checkAlive: peerAlive, readBack: peerReadBack(peerQueue, () => this.createEvent({ label: 'copyPeer' })) };
    this.lost = watchDeviceLoss(device, this.#scheduler);
  }

  /**
   * A new stream (`cudaStreamCreateWithPriority`). `priority`: lower number = higher priority, from
   * `priorityRange.greatest` (-5) to `least` (0, the default); integers outside are clamped, as in
   * CUDA and PyTorch. `nonBlocking`: do not synchronize with the default stream.
   */
  createStream(options: { label?: string; priority?: number; nonBlocking?: boolean } = {}): Stream {
    const site = this.#at('createStream');
    this.#checkAlive('createStream');
    const o = expectObject('options', options, site);
    expectKnownKeys('options', o, ['label', 'priority', 'nonBlocking'], site);
    if (o.priority !== undefined && !Number.isInteger(o.priority)) {
      throw new InvalidArgumentError(`Expected \`priority\` to be an integer from ${PRIORITY_RANGE.greatest} (highest) to ${PRIORITY_RANGE.least} (the default; others are clamped), got ${showValue(o.priority)}`, site);
    }
    const asked = o.priority === undefined ? 0 : (o.priority as number);
    const priority = Math.min(PRIORITY_RANGE.least, Math.max(PRIORITY_RANGE.greatest, asked)) || 0; // never -0
    const nonBlocking = o.nonBlocking === undefined ? false : expectBoolean('nonBlocking', o.nonBlocking, site);
    const label = expectLabel(o.label, () => `stream#${++this.#made.streams}`, site);
    return new Stream(this.#host, this.#scheduler.createQueue(label, priority, nonBlocking));
  }

  /** A new event; `timing: true` for `elapsedTime`. */
  createEvent(options: EventOptions = {}): GpuEvent {
    const site = this.#at('createEvent');
    this.#checkAlive('createEvent');
    const o = expectObject('options', options, site);
    expectKnownKeys('options', o, ['timing', 'label'], site);
    const timing = o.timing === undefined ? false : expectBoolean('timing', o.timing, site);
    const label = expectLabel(o.label, () => `event#${++this.#made.events}`, site);
    return new GpuEvent(
      {
        scheduler: this.#scheduler,
        timestampQuery: this.features.timestampQuery,
        defaultStream: this.defaultStream,
        checkAlive: (op: string) => this.#checkAlive(op),
      },
      label,
      timing,
    );
  }

  /**
   * A device buffer of `bytes` (multiple of 4): STORAGE | COPY_SRC | COPY_DST unless `usage` says
   * otherwise (checked as WebGPU does: MAP_READ goes only with COPY_DST, MAP_WRITE only with COPY_SRC).
   */
  alloc(bytes: number, options: { label?: string; usage?: number } = {}): DeviceBuffer {
    const site = this.#at('alloc');
    this.#checkAlive('alloc');
    const o = expectObject('options', options, site);
    expectKnownKeys('options', o, ['label', 'usage'], site);
    expectInteger('bytes', bytes, 4, this.limits.maxBufferSize, site);
    if (bytes % 4 !== 0) throw new InvalidArgumentError(`Expected \`bytes\` to be a multiple of 4, got ${bytes}`, site);
    const usage = o.usage === undefined ? DEFAULT_DEVICE_USAGE : checkUsage(expectInteger('usage', o.usage, 1, 0x3ff, site), site);
    const label = expectLabel(o.label, () => `buffer#${++this.#made.buffers}`, site);
    const buffer = new DeviceBuffer(this.device, this.memory, bytes, label, usage);
    buffer.peer = this.#peer;
    buffer.context = this.label;
    return buffer;
  }

  /** A texture in device memory, counted in `ctx.memory`; `destroy()` deferred while streams use it. */
  allocTexture(options: TextureOptions): DeviceTexture {
    const site = this.#at('allocTexture');
    this.#checkAlive('allocTexture');
    const o = expectObject('options', options, site);
    expectKnownKeys('options', o, ['size', 'format', 'usage', 'mipLevelCount', 'dimension', 'label'], site);
    const label = expectLabel(o.label, () => `texture#${++this.#made.buffers}`, site);
    return new DeviceTexture(this.device, this.memory, textureOptions(o as unknown as TextureOptions, this.device, label, site), site);
  }

  /**
   * Pinned host memory: a mapped staging buffer for `'upload'` (fill it, then `stream.upload`) or
   * `'download'` (`stream.download` into it, read it once the op completed).
   */
  allocHost(bytes: number, kind: 'upload' | 'download', options: { label?: string } = {}): PinnedBuffer {
    const site = this.#at('allocHost');
    this.#checkAlive('allocHost');
    expectInteger('bytes', bytes, 4, this.limits.maxBufferSize, site);
    if (bytes % 4 !== 0) throw new InvalidArgumentError(`Expected \`bytes\` to be a multiple of 4, got ${bytes}`, site);
    if (kind !== 'upload' && kind !== 'download') throw new InvalidArgumentError(`Expected \`kind\` to be 'upload' or 'download', got ${showValue(kind)}`, site);
    const o = expectObject('options', options, site);
    expectKnownKeys('options', o, ['label'], site);
    const label = expectLabel(o.label, () => `pinned#${++this.#made.buffers}`, site);
    return new PinnedBuffer(this.#pinnedHost, bytes, kind, label);
  }

  /** A kernel from WGSL (bindings in @group(0), numbered from 0). */
  kernel(wgsl: string, options: KernelOptions = {}): Kernel {
    this.#checkAlive('kernel');
    return new Kernel(this.device, wgsl, options, this.#at('kernel')); // it checks `wgsl` and its options
  }

  /** The built-in kernels (shaders/), compiled on first use. */
  get kernels(): BuiltinKernels {
    const get = (name: keyof BuiltinKernels): Kernel => (this.#kernels[name] ??= new Kernel(this.device, builtinShaders[name], { label: name }, this.label));
    return {
      get vectorAdd() {
        return get('vectorAdd');
      },
    };
  }

  /** Encodes and submits all ready work now (it also happens by itself on a microtask). */
  flush(): void {
    this.#checkAlive('flush');
    this.#scheduler.flush();
  }

  /** Frees the staging kept for reuse (pageable pool, `uploadFrom` ring), and what is in use when it comes back (`torch.cuda.empty_cache`). */
  emptyCache(): void {
    this.#checkAlive('emptyCache');
    this.#staging.trim();
    this.#ring.trim();
  }

  /**
   * Resolves when every stream is idle (`cudaDeviceSynchronize`); rejects with the failures among
   * that work not yet reported by a context synchronize: one stream's as it is, several streams'
   * as an `AggregateStreamError`. Each stream keeps its failure for its own `synchronize()`.
   */
  synchronize(options: SyncOptions = {}): Promise<void> {
    try {
      const site = this.#at('synchronize'), signal = syncSignal(options, site);
      this.#checkAlive('synchronize');
      return namedAbort(synchronizeAll(this.#scheduler, signal), signal, site);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** True once `destroy()` was called. */
  get destroyed(): boolean {
    return this.#destroyed;
  }

  /**
   * Ends the context. Idempotent, and it never blocks: work not yet completed fails with
   * `DestroyedError` (await `synchronize()` first to let it finish), every wait rejects with it,
   * the staging pool is freed and, when the context created the device, the device is destroyed,
   * once the GPU finished what was submitted (Dawn's `device.destroy()` blocks the thread until
   * then: a kernel that never ends would hold it forever) and no `uploadFrom` read is still writing
   * into its staging.
   */
  destroy(): void {
    if (this.#destroyed) return;
    this.#destroyed = true;
    const busy = this.#scheduler.submitsInFlight > 0;
    this.#scheduler.close(new DestroyedError('destroyed by ctx.destroy() before this work completed', { context: this.label }));
    this.#staging.destroy();
    const reading = this.#ring.close();
    this.#scheduler.destroy();
    unwatchDeviceLoss(this.device, this.#scheduler);
    if (this.#owned) {
      const device = this.device;
      const keepAlive = this.#keepAlive;
      if (!busy && !reading) device.destroy();
      else
        void Promise.allSettled([busy && device.queue.onSubmittedWorkDone(), reading]).then(() => {
          device.destroy();
          void keepAlive; // the native instance (Dawn) must outlive its device
        });
    }
  }

  [Symbol.dispose](): void {
    this.destroy();
  }

  /** Where a call of `op` came from: its stack cut above the method (a bundle's file names cannot tell the library's frames). */
  #at = (op: string, stream?: string): ErrorSite => new EntrySite(op, this.label, stream === undefined ? Context.prototype : Stream.prototype, stream);

  #checkAlive(op: string, stream?: string): void {
    const site = this.#at(op, stream);
    if (this.#destroyed) throw new DestroyedError('the context was destroyed; create a new one with createContext()', site);
    if (this.#scheduler.closed) throw atCall(this.#scheduler.closed, site);
  }
}
