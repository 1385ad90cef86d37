/**
 * `Stream`: an ordered queue of GPU and host operations, CUDA style. Ops of one stream run in the
 * order they were enqueued; ops of different streams are ordered only by events, `waitStream` and
 * the default stream's legacy semantics. A stream is host-side: WebGPU has one queue per device, and
 * the scheduler merges every stream into it (see scheduler.ts).
 */
import { atCall, captureSite, DestroyedError, EntrySite, InvalidArgumentError, type ErrorSite } from './errors.js';
import { argName, CallSite, type Site } from './call-site.js';
import { checkSyncRecorder, commandBuffers, declaredRanges, type EncodeOptions } from './encode-op.js';
import { copyRange, workgroupCounts, type CopyOptions } from './stream-args.js';
import { GpuEvent } from './event.js';
import { hostSaw, retireStreamClock } from './clock.js';
import { BufferUsage, TextureUsage } from './gpu-constants.js';
import { Kernel } from './kernels.js';
import { launchResources, type Binding, type UnwrapBuffer } from './launch-args.js';
import { DeviceBuffer, type DeviceResource } from './memory.js';
import { NONE, type CopyPayload, type DownloadPayload, type HostFnPayload, type Op, type StreamQueue, type UploadPayload } from './op.js';
import { DeviceTexture, TextureRegion } from './texture.js';
import { bufferTexture, downloadTexture, textureArg, textureOptions, textureToTexture, uploadTexture, type TextureTransferOptions } from './texture-copy.js';
import { PinnedBuffer } from './pinned.js';
import type { Scheduler } from './scheduler/scheduler.js';
import { submittedQueue, synchronizeQueue } from './scheduler/wait.js';
import { uploadPageable, type StagingPool } from './transfer.js';
import { Reader } from './reader.js';
import { peerSource } from './peer.js';
import { claim, planTransfer, readsAhead, release, runTransfer, type StagingRing, type Transfer, type UploadFromOptions, type UploadSource } from './upload-from.js';
import { checkAttached, expectFunction, expectKnownKeys, expectObject, expectString, namedAbort, showValue, syncSignal, type SyncOptions } from './validate.js';

/** A stream collected without `destroy()` is destroyed then: the context forgets it once its work is done. */
const collected = new FinalizationRegistry<StreamQueue>((q) => retire(q));

function retire(q: StreamQueue): void {
  q.destroyed = true;
  if (q.clock) retireStreamClock(q.clock); // the sanitizer's clock entry, for a later stream
}

/**
 * A buffer a kernel can bind or a transfer can use: one of ours, or a raw `GPUBuffer` (not tracked:
 * its op runs in a submit of its own, see docs/API.md).
 */
export type Bindable = DeviceBuffer | GPUBuffer;

/** A texture a transfer can use: one of ours (`ctx.allocTexture`) or a raw `GPUTexture` (its op then runs in a submit of its own). */
export type Texture = DeviceTexture | GPUTexture;

export interface LaunchOptions {
  /** Resources in binding order (@group(0) @binding(0..n-1), then @group(1) ...): buffers, textures or their views, samplers. */
  bindings: readonly Binding[];
  /** Workgroup counts: x, or [x, y?, z?]. */
  workgroups: number | readonly [number, number?, number?];
  /** Values for the kernel's `override` constants, keyed as `kernel.overrides` lists them (an `@id`, else the name). */
  constants?: Record<string, number | boolean>;
}

export type { CopyOptions } from './stream-args.js';

/** @internal what a stream needs from its context */
export interface StreamHost {
  readonly scheduler: Scheduler;
  readonly staging: StagingPool;
  readonly device: GPUDevice;
  /** The context's label, for messages. */
  readonly label: string;
  readonly captureStacks: boolean | 'all';
  /** Pageable uploads above this go in pieces (0: whole); see ContextOptions.uploadPieceBytes. */
  readonly uploadPieceBytes: number;
  /** The limits a launch checks, as plain fields (a native getter per read costs on Dawn). */
  readonly limits: Pick<GPUSupportedLimits, 'maxUniformBufferBindingSize' | 'maxStorageBufferBindingSize' | 'maxComputeWorkgroupsPerDimension'>;
  /** Timing events record GPU timestamps (the device has 'timestamp-query' and timing is on). */
  readonly timestampQuery: boolean;
  /** Pinned staging buffers for `uploadFrom`, shared by the context's streams. */
  readonly uploadRing: StagingRing;
  checkAlive(op: string, stream: string): void;
}

export class Stream {
  /** @internal */
  readonly queue: StreamQueue;
  readonly #host: StreamHost;

  /** @internal use `ctx.createStream()` */
  constructor(host: StreamHost, queue: StreamQueue) {
    this.#host = host;
    this.queue = queue;
    if (!queue.isDefault) collected.register(this, queue, this);
  }

  get label(): string {
    return this.queue.label;
  }
  /** Lower number = higher priority (CUDA / PyTorch). */
  get priority(): number {
    return this.queue.priority;
  }
  /** True when the stream does not synchronize with the default stream. */
  get nonBlocking(): boolean {
    return this.queue.nonBlocking;
  }
  /** True for the context's default (legacy) stream. */
  get isDefault(): boolean {
    return this.queue.isDefault;
  }

  /**
   * Dispatches `kernel` with `bindings` over `workgroups`. Checks the binding count, kinds and sizes
   * here, at the call, so a bad launch throws instead of poisoning the GPU queue.
   * @returns the op id
   */
  launch(kernel: Kernel, options: LaunchOptions): number {
    const site = this.#site('launch');
    const opts = expectObject('options', options, site);
    expectKnownKeys('options', opts, ['bindings', 'workgroups', 'constants'], site);
    if (!(kernel instanceof Kernel)) throw new InvalidArgumentError(`Expected a Kernel (from ctx.kernel() or ctx.kernels), got ${showValue(kernel)}`, site);
    if (kernel.device !== this.#host.device) throw new InvalidArgumentError(`kernel '${kernel.label}' was made on another GPUDevice; make it with this stream's context (ctx.kernel())`, site);
    const bindings = opts.bindings as readonly Binding[] | undefined;
    if (!Array.isArray(bindings)) throw new InvalidArgumentError(`Expected \`bindings\` to be an array of ${kernel.bindingCount} resources, got ${showValue(bindings)}`, site);
    if (bindings.length !== kernel.bindingCount) {
      throw new InvalidArgumentError(`kernel '${kernel.label}' takes ${kernel.bindingCount} bindings (${kernel.bindings.map((b) => b.name).join(', ')}), got ${bindings.length}`, site);
    }
    const r = launchResources(kernel, bindings, this.#host.limits, this.#unwrapBinding, site);
    const workgroups = workgroupCounts(opts.workgroups, this.#host.limits.maxComputeWorkgroupsPerDimension, site);
    const constants = kernel.checkConstants(opts.constants, site);
    const pipeline = kernel.pipeline(constants);
    // A launch can still fail after the call while its pipeline is not known to compile: keep its
    // call site for that error. Once the pipeline validated, later launches of it skip the stack.
    if (!pipeline.ok && this.#host.captureStacks === true) site.enqueueSite = captureSite(true, site.entry);
    return this.#enqueue({ kind: 'launch', kernel, pipeline, bindings: r.resources, textures: r.textures, workgroups }, NONE, r.tracked, site, kernel.label, '', r.isolated).id;
  }

  /**
   * Device-to-device copy (`cudaMemcpyAsync` D2D): buffer to buffer, or with a texture on one side
   * or both (`cudaMemcpy3DAsync`; options name the texels, see TextureTransferOptions).
   * @returns the op id
   */
  copy(src: Bindable, dst: Bindable, options?: CopyOptions): number;
  copy(src: Bindable | Texture, dst: Bindable | Texture, options?: TextureTransferOptions): number;
  copy(src: Bindable | Texture, dst: Bindable | Texture, options?: CopyOptions | TextureTransferOptions): number {
    const site = this.#site('copy');
    const st = textureArg(src, 'src', TextureUsage.COPY_SRC, this.#host.device, site), dt = textureArg(dst, 'dst', TextureUsage.COPY_DST, this.#host.device, site);
    if (st || dt) {
      const o = textureOptions(options, site);
      if (st && dt) return this.#texture(textureToTexture(st.texture, dt.texture, o, site), [...st.tracked, ...dt.tracked], site, 2);
      const t = (st ?? dt)!, b = st ? dst : src;
      const payload = bufferTexture(this.#unwrap(b, st ? 'dst' : 'src', site), t.texture, !st, o, site);
      return this.#texture(payload, b instanceof DeviceBuffer ? [...t.tracked, b] : t.tracked, site, 2);
    }
    const s = this.#unwrap(src, 'src', site);
    const d = this.#unwrap(dst, 'dst', site);
    if (!(s.usage & BufferUsage.COPY_SRC)) throw new InvalidArgumentError(`src '${s.label}' lacks COPY_SRC usage`, site);
    if (!(d.usage & BufferUsage.COPY_DST)) throw new InvalidArgumentError(`dst '${d.label}' lacks COPY_DST usage`, site);
    const r = copyRange(options as CopyOptions | undefined, s.size, d.size, s.label, d.label, site);
    if (s.buffer === d.buffer) {
      throw new InvalidArgumentError(`source and destination are the same buffer '${s.label}'; WebGPU's copyBufferToBuffer forbids that even for disjoint ranges: copy through a second buffer`, site);
    }
    const tracked: DeviceBuffer[] =
      src instanceof DeviceBuffer ? (dst instanceof DeviceBuffer ? [src, dst] : [src]) : dst instanceof DeviceBuffer ? [dst] : NONE;
    const isolated = tracked.length < 2;
    return this.#enqueue({ kind: 'copy', src: s.buffer, srcOffset: r.srcOffset, dst: d.buffer, dstOffset: r.dstOffset, size: r.size }, NONE, tracked, site, s.label, d.label, isolated).id;
  }

  /**
   * Host-to-device transfer. From a `PinnedBuffer` ('upload' kind): the GPU copies straight out of
   * the mapped memory you filled; the buffer is the GPU's until this op completes. From any
   * `ArrayBufferView` (pageable): the data is copied into pooled staging now, at the call, so you
   * may reuse your array at once (as with `cudaMemcpyAsync` from pageable memory). With the
   * context's `uploadPieceBytes` set, a pageable upload above it goes as up to 8 equal pieces, one
   * op each in stream order, each submitted as soon as it is staged when the stream lets it run, so
   * the GPU copies one piece while the host copies the next in.
   * @returns the op id (of the last piece)
   */
  upload(src: PinnedBuffer | ArrayBufferView, dst: Bindable, options?: CopyOptions): number;
  upload(src: PinnedBuffer | ArrayBufferView, dst: Texture, options?: TextureTransferOptions): number;
  upload(src: PinnedBuffer | ArrayBufferView, dst: Bindable | Texture, options?: CopyOptions | TextureTransferOptions): number {
    const site = this.#site('upload');
    const t = textureArg(dst, 'dst', TextureUsage.COPY_DST, this.#host.device, site);
    if (t) {
      this.#checkHostSide(src, 'src', 'upload', site);
      return this.#texture(uploadTexture(src, t.texture, textureOptions(options, site), this.#host.staging, site), t.tracked, site, 1);
    }
    const d = this.#unwrap(dst, 'dst', site);
    if (!(d.usage & BufferUsage.COPY_DST)) throw new InvalidArgumentError(`dst '${d.label}' lacks COPY_DST usage`, site);
    const tracked: DeviceBuffer[] = dst instanceof DeviceBuffer ? [dst] : NONE;
    this.#checkHostSide(src, 'src', 'upload', site);
    if (src instanceof PinnedBuffer) {
      const r = copyRange(options as CopyOptions | undefined, src.size, d.size, src.label, d.label, site);
      return this.#enqueue({ kind: 'upload', pinned: src, staging: null, ...r, dst: d.buffer }, NONE, tracked, site, src.label, d.label, tracked === NONE).id;
    }
    checkAttached(src, 'src', site);
    const r = copyRange(options as CopyOptions | undefined, src.byteLength, d.size, 'src', d.label, site);
    const isolated = tracked === NONE;
    return uploadPageable(this.#host.staging, site, src, r.srcOffset, r.dstOffset, r.size, this.#host.uploadPieceBytes, (staging, dstOffset, size, eager, t0, t1) => {
      const op = this.#host.scheduler.enqueue(this.queue, { kind: 'upload', pinned: null, staging, srcOffset: 0, dst: d.buffer, dstOffset, size }, NONE, tracked, site.enqueueSite, '', d.label, isolated, eager);
      if (op.times) {
        op.times.tHostBegin = t0;
        op.times.tHostEnd = t1;
      }
      return op.id;
    });
  }

  /**
   * Device-to-host transfer into a `PinnedBuffer` ('download' kind: read its views after the op
   * completes) or any `ArrayBufferView` (filled when the op completes). Completion: await
   * `stream.synchronize()`, an event recorded after it, or a later `hostFn`.
   * @returns the op id
   */
  download(src: Bindable, dst: PinnedBuffer | ArrayBufferView, options?: CopyOptions): number;
  download(src: Texture, dst: PinnedBuffer | ArrayBufferView, options?: TextureTransferOptions): number;
  download(src: Bindable | Texture, dst: PinnedBuffer | ArrayBufferView, options?: CopyOptions | TextureTransferOptions): number {
    const site = this.#site('download', ArrayBuffer.isView(dst)); // into an array: can fail at completion (detached)
    const t = textureArg(src, 'src', TextureUsage.COPY_SRC, this.#host.device, site);
    if (t) {
      this.#checkHostSide(dst, 'dst', 'download', site);
      return this.#texture(downloadTexture(t.texture, dst, textureOptions(options, site), this.#host.staging.maxBufferSize, site), t.tracked, site, 1);
    }
    const s = this.#unwrap(src, 'src', site);
    if (!(s.usage & BufferUsage.COPY_SRC)) throw new InvalidArgumentError(`src '${s.label}' lacks COPY_SRC usage`, site);
    const tracked: DeviceBuffer[] = src instanceof DeviceBuffer ? [src] : NONE;
    this.#checkHostSide(dst, 'dst', 'download', site);
    if (dst instanceof PinnedBuffer) {
      const r = copyRange(options as CopyOptions | undefined, s.size, dst.size, s.label, dst.label, site);
      return this.#enqueue({ kind: 'download', src: s.buffer, pinned: dst, view: null, readback: null, ...r }, NONE, tracked, site, s.label, dst.label, tracked === NONE).id;
    }
    checkAttached(dst, 'dst', site);
    const r = copyRange(options as CopyOptions | undefined, s.size, dst.byteLength, s.label, 'dst', site);
    const view = new Uint8Array(dst.buffer, dst.byteOffset + r.dstOffset, r.size);
    return this.#enqueue({ kind: 'download', src: s.buffer, pinned: null, view, readback: null, ...r, dstOffset: 0 }, NONE, tracked, site, s.label, 'host', tracked === NONE).id;
  }

  /**
   * The app's own commands at this point of the stream (a render pass, a texture copy, another
   * library's dispatches): `commands(encoder)` records them when the op is encoded, into a command
   * buffer of their own (do not finish or submit the encoder); or command buffers finished
   * elsewhere, submitted here. `reads` / `writes` declare the buffers or byte ranges they touch:
   * kept alive until the op completes, checked by the sanitizer. A throw fails this op with
   * HostFnError, commands WebGPU rejects with GpuValidationError.
   * @returns the op id
   */
  encode(commands: ((encoder: GPUCommandEncoder) => void) | readonly GPUCommandBuffer[], options: EncodeOptions = {}): number {
    const site = this.#site('encode', true);
    const list = Array.isArray(commands) ? commandBuffers(commands, site) : null;
    if (!list) checkSyncRecorder(expectFunction('commands', commands, site), site);
    const o = expectObject('options', options, site);
    expectKnownKeys('options', o, ['reads', 'writes', 'label'], site);
    const tracked: DeviceBuffer[] = [];
    const unwrap = (b: unknown, what: string, at: ErrorSite): { buffer: GPUBuffer; label: string; size: number } => this.#unwrap(b, what, at);
    const reads = declaredRanges(o.reads, 'reads', unwrap, site, tracked, this.#host.device);
    const writes = declaredRanges(o.writes, 'writes', unwrap, site, tracked, this.#host.device);
    const label = o.label === undefined ? '' : expectString('label', o.label, site);
    const fn = list ? null : (commands as (encoder: GPUCommandEncoder) => void);
    return this.#enqueue({ kind: 'encode', fn, commandBuffers: list, reads, writes }, NONE, tracked.length ? tracked : NONE, site, label, '', true).id;
  }

  /** H2D from a file (`openFile`, Node), a `ReadableStream` or chunks, through pinned staging (upload-from.ts). @returns the op id */
  uploadFrom(source: UploadSource, dst: Bindable, options?: UploadFromOptions): number {
    return this.#transfer(source, dst, options, this.#site('uploadFrom', true), NONE);
  }

  /**
   * Copy from a buffer of another device's context (`cudaMemcpyPeerAsync`): read back there into
   * this context's pinned staging and uploaded here in pieces, both directions overlapping (peer.ts).
   * It starts once this stream's earlier work is done: wait on the other context's event first.
   * @returns the op id
   */
  copyPeer(src: DeviceBuffer, dst: Bindable, options?: CopyOptions): number {
    const site = this.#site('copyPeer', true);
    const source = peerSource(src, this.#host.device, site);
    const r = copyRange(options, src.size, this.#unwrap(dst, 'dst', site).size, src.label, (dst as { label?: string }).label ?? 'dst', site);
    return this.#transfer(source, dst, { offset: r.srcOffset, size: r.size, dstOffset: r.dstOffset }, site, [src], { buffer: src.buffer, label: src.label, start: r.srcOffset, end: r.srcOffset + r.size });
  }

  /** Enqueues a transfer through the staging ring (uploadFrom, copyPeer); `keep`: other resources the op keeps alive. */
  #transfer(source: UploadSource, dst: Bindable, options: UploadFromOptions | undefined, site: Site, keep: DeviceResource[], reads?: HostFnPayload['reads']): number {
    const d = this.#unwrap(dst, 'dst', site);
    if (!(d.usage & BufferUsage.COPY_DST)) throw new InvalidArgumentError(`dst '${d.label}' lacks COPY_DST usage`, site);
    const plan = planTransfer(source, d, options, site, this.#host.uploadRing);
    // The copies go on an internal stream (the sanitizer sees this op's write).
    if (!this.#copies) (this.#copies = new Stream(this.#host, this.#host.scheduler.createQueue(`${this.label} (uploadFrom)`, this.priority, true))).queue.internal = true;
    const t: Transfer = { ...plan, dst, copies: this.#copies };
    const tracked: DeviceResource[] = dst instanceof DeviceBuffer ? [dst, ...keep] : keep, writes = { buffer: d.buffer, label: d.label, start: t.dstOffset, end: t.dstOffset + (t.size ?? t.room) };
    // A source read ahead does not depend on this stream's work: the copies need only their place in the queue behind it.
    const afterOrdered = readsAhead(source);
    const op = this.#enqueue({ kind: 'hostFn', fn: () => runTransfer(t), own: true, reads, writes, cleanup: () => release(t), afterOrdered }, NONE, tracked, site, site.op, d.label);
    claim(t); // not before: a call refused (a race) leaves the source to a later one
    this.#reader.add(t); // a file is read while earlier work runs
    t.ordered = () => this.#host.scheduler.markOrdered(op);
    return op.id;
  }

  /** Resolves once every op enqueued here so far is submitted to WebGPU's queue (or done, failed or not): a `queue.submit` of yours after it runs after them. */
  whenSubmitted(): Promise<void> {
    return submittedQueue(this.#host.scheduler, this.queue);
  }

  #copies: Stream | null = null;
  /** `#unwrap` for launchResources, made once: not a closure per launch. */
  readonly #unwrapBinding: UnwrapBuffer = (b, i, at, name) => this.#unwrap(b, i, at, name);
  #reader = new Reader();

  /**
   * Runs `fn` on the host once all earlier work of this stream completed; later work of the stream
   * waits for it (and for the promise it returns) (`cudaLaunchHostFunc`). A throw or rejection
   * fails the op and reaches `synchronize()` as `HostFnError`; a wait inside `fn` on work queued
   * behind it (this stream's or the context's `synchronize()`) rejects with `DeadlockError`.
   * @returns the op id
   */
  hostFn(fn: () => void | PromiseLike<unknown>): number {
    const site = this.#site('hostFn', true);
    expectFunction('fn', fn, site);
    return this.#enqueue({ kind: 'hostFn', fn }, NONE, NONE, site, fn.name).id;
  }

  /**
   * Records `event` here: it completes when all work enqueued on this stream so far completed
   * (`cudaEventRecord`). The event must belong to this stream's context.
   */
  record(event: GpuEvent): number {
    const site = this.#site('record');
    if (!(event instanceof GpuEvent)) throw new InvalidArgumentError(`Expected \`event\` to be a GpuEvent (ctx.createEvent()), got ${showValue(event)}`, site);
    if (event.owner !== this.queue.owner) {
      throw new InvalidArgumentError(`event '${event.label}' belongs to context '${event.owner.label}'; record it on a stream of that context (another context's stream may waitEvent() it)`, site);
    }
    event.checkWritable(site);
    const timing = event.timing && this.#host.timestampQuery;
    const op = this.#enqueue({ kind: 'record', timing, timestamp: null, eventLabel: event.label }, NONE, NONE, site, event.label);
    event.last = op;
    event.clock = this.queue.clock?.vc ?? null;
    return op.id;
  }

  /**
   * Later work of this stream waits for `event`'s most recent record, taken now
   * (`cudaStreamWaitEvent`). Waiting on a never-recorded event is a no-op, as in CUDA. The event
   * may belong to another context (another device too): its work is submitted by its own context,
   * and its completion wakes this stream. Costs nothing on the GPU within one device: queue order
   * does it.
   */
  waitEvent(event: GpuEvent): number {
    const site = this.#site('waitEvent');
    if (!(event instanceof GpuEvent)) throw new InvalidArgumentError(`Expected \`event\` to be a GpuEvent (ctx.createEvent()), got ${showValue(event)}`, site);
    return this.#enqueue({ kind: 'wait', what: `event '${event.label}'`, clock: event.clock, unrecorded: event.last === null }, [event.last], NONE, site, event.label).id;
  }

  /** Later work of this stream waits for all work enqueued on `other` so far; `other` may belong to another context. */
  waitStream(other: Stream): number {
    const site = this.#site('waitStream');
    if (!(other instanceof Stream)) throw new InvalidArgumentError(`Expected \`other\` to be a Stream, got ${showValue(other)}`, site);
    return this.#enqueue({ kind: 'wait', what: `stream '${other.label}'`, clock: other.queue.clock?.vc ?? null, unrecorded: false }, [other.queue.tail], NONE, site, other.label).id;
  }

  /**
   * Resolves when all work enqueued on this stream so far completed (`cudaStreamSynchronize`);
   * rejects with the first failure among it not yet reported by this stream's `synchronize()`
   * (it is then reported, and later work starts clean).
   */
  synchronize(options: SyncOptions = {}): Promise<void> {
    try {
      const site = new EntrySite('synchronize', this.#host.label, Stream.prototype, this.label);
      const signal = syncSignal(options, site);
      return namedAbort(synchronizeQueue(this.#host.scheduler, this.queue, signal), signal, site);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** True when all work enqueued so far completed (`cudaStreamQuery`). */
  query(): boolean {
    const tail = this.queue.tail;
    const done = !tail || tail.done;
    if (done) hostSaw(this.queue, this.queue.clock?.vc);
    return done;
  }

  /** Enqueued ops not yet complete. */
  get pendingOps(): number {
    return this.queue.active;
  }

  /** No further work may be enqueued; work already enqueued still completes. Idempotent. */
  destroy(): void {
    if (this.queue.isDefault) return;
    collected.unregister(this);
    retire(this.queue);
  }

  [Symbol.dispose](): void {
    this.destroy();
  }

  // ------------------------------------------------------------------ internals

  /**
   * The error site of a call. Ops that can fail after the call keep their enqueue stack
   * (`captureStacks`, default true): host functions always, launches while their pipeline is not
   * yet known to compile (see `launch`). Transfers and markers are fully checked at the call, so
   * theirs is captured only if an error is thrown right there (or always with
   * `captureStacks: 'all'`), which keeps the per-op cost of hot loops low.
   */
  #site(op: string, failsLater = false): Site {
    const mode = this.#host.captureStacks, entry = (Stream.prototype as unknown as Record<string, (...args: never[]) => unknown>)[op];
    const eager = mode === 'all' || (mode === true && failsLater) ? captureSite(true, entry) : undefined;
    const site = new CallSite(op, this.label, this.#host.label, eager, mode !== false, entry);
    if (this.queue.destroyed) throw new DestroyedError(`stream '${this.label}' was destroyed; create a new one with ctx.createStream()`, site);
    this.#host.checkAlive(op, this.label);
    return site;
  }

  /** `subject` and `target` make the op's name (see `Op.name`); no string is built per op. */
  #enqueue(payload: Op['payload'], extraDeps: readonly (Op | null)[], buffers: DeviceResource[], site: Site, subject: string, target = '', isolated = false): Op {
    return this.#host.scheduler.enqueue(this.queue, payload, extraDeps, buffers, site.enqueueSite, subject, target, isolated);
  }

  /** `what`: the argument's name, or a binding's index (then `binding` names it); words are made only for an error. */
  #unwrap(b: unknown, what: string | number, site: ErrorSite, binding?: string): { buffer: GPUBuffer; label: string; size: number; usage: number } {
    if (b instanceof DeviceBuffer) {
      b.checkAlive(site);
      if (b.device !== this.#host.device) throw new InvalidArgumentError(`\`${argName(what, binding)}\` ('${b.label}') was allocated on another GPUDevice; a stream uses its own context's device (stream.copyPeer() copies a buffer across)`, site);
      return b; // size and usage as plain fields: no native getter per op
    }
    if (b instanceof PinnedBuffer) {
      throw new InvalidArgumentError(`\`${argName(what, binding)}\` is pinned host memory ('${b.label}'); use stream.upload()/download() to move it to or from a DeviceBuffer`, site);
    }
    if (b && typeof b === 'object' && 'usage' in b && 'size' in b && typeof (b as GPUBuffer).mapAsync === 'function') {
      const g = b as GPUBuffer;
      return { buffer: g, label: g.label || 'GPUBuffer', size: g.size, usage: g.usage };
    }
    throw new InvalidArgumentError(`Expected \`${argName(what, binding)}\` to be a DeviceBuffer (ctx.alloc) or GPUBuffer, got ${showValue(b)}`, site);
  }

  /** Enqueues a texture transfer; it goes in a submit of its own unless all `resources` of it are tracked ones. */
  #texture(p: CopyPayload | UploadPayload | DownloadPayload, tracked: DeviceResource[], site: Site, resources: number): number {
    const name = (x: GPUBuffer | TextureRegion | null | undefined): string => (x instanceof TextureRegion ? x.label : x?.label || 'host');
    const [from, to] = p.kind === 'upload' ? [p.pinned?.label ?? 'host', name(p.dst)] : p.kind === 'download' ? [name(p.src), p.pinned?.label ?? 'host'] : [name(p.src), name(p.dst)];
    return this.#enqueue(p, NONE, tracked, site, from, to, tracked.length < resources).id;
  }

  /** `p` is a pinned buffer for `kind`s on this device, or an array view (pageable memory); else throws. */
  #checkHostSide(p: unknown, name: 'src' | 'dst', kind: 'upload' | 'download', site: ErrorSite): void {
    if (!(p instanceof PinnedBuffer)) {
      if (!ArrayBuffer.isView(p)) throw new InvalidArgumentError(`Expected \`${name}\` to be a PinnedBuffer or an ArrayBufferView, got ${showValue(p)}`, site);
      return;
    }
    if (p.destroyRequested) throw new DestroyedError(`pinned buffer '${p.label}' was destroyed`, site);
    if (p.refused) throw atCall(p.refused, site);
    if (p.device !== this.#host.device) throw new InvalidArgumentError(`pinned buffer '${p.label}' was allocated on another GPUDevice; allocate it with this stream's context (ctx.allocHost())`, site);
    if (p.kind !== kind) {
      throw new InvalidArgumentError(`pinned buffer '${p.label}' was allocated for ${p.kind}s; allocate one with ctx.allocHost(bytes, '${kind}') for ${kind}s`, site);
    }
  }
}
