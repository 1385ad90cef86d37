/** Device memory: `DeviceBuffer` with byte accounting and deferred destroy. */
import { atCall, captureSite, DestroyedError, GpuValidationError, InvalidArgumentError, OutOfMemoryError, type ErrorSite, type StreamError } from './errors.js';
import { BufferUsage } from './gpu-constants.js';

/** Bytes of device buffers allocated through a context: now and at the peak since the last reset. */
export class MemoryStats {
  current = 0;
  peak = 0;
  /** Bytes held by the staging pool (mapped upload / read-back buffers), not in `current`. */
  staging = 0;

  /** Sets `peak` to `current`, to measure the peak of what follows. */
  resetPeak(): void {
    this.peak = this.current;
    for (const p of this.#pending) p.peakBefore = 0; // the peaks before the reset no longer count
  }

  /** @internal */
  sub(bytes: number): void {
    this.current -= bytes;
  }

  /** Resources WebGPU has not judged yet, in allocation order, each with the peak before it. */
  readonly #pending = new Set<{ peakBefore: number }>();

  /** @internal counts `bytes` of a resource WebGPU judges later; its record goes to `judged` */
  addPending(bytes: number): { peakBefore: number } {
    const r = { peakBefore: this.peak };
    this.#pending.add(r);
    this.current += bytes;
    if (this.current > this.peak) this.peak = this.current;
    return r;
  }

  /**
   * @internal WebGPU judged `r`'s resource; `refused` bytes (0: it was made) were never allocated:
   * out of `current` (`counted`: not yet subtracted) and of the peaks since, its later ones' included
   */
  judged(r: { peakBefore: number }, refused: number, counted: boolean): void {
    if (refused > 0) {
      if (counted) this.current -= refused;
      this.peak = Math.max(this.current, this.peak - refused, Math.min(r.peakBefore, this.peak));
      let after = false;
      for (const p of this.#pending) {
        if (after) p.peakBefore = Math.max(0, p.peakBefore - refused);
        else after = p === r;
      }
    }
    this.#pending.delete(r);
  }
}

/** @internal what a buffer's context lends a peer copy (peer.ts) */
export interface PeerHost {
  readonly label: string;
  /** Throws DestroyedError (or the device loss) at `site`, a call on another context's stream reading `src` of this one. */
  checkAlive(site: ErrorSite, src: string): void;
  /** Reads bytes [offset, offset + into.byteLength) of `src` back into `into`, on an internal stream. */
  readBack(src: GPUBuffer, into: Uint8Array, offset: number): Promise<void>;
}

/**
 * `device.createBuffer(desc)` in an 'out-of-memory' error scope: the buffer, and WebGPU's verdict on it
 * (its error, or null). One mapped at creation that the host has no memory to map throws
 * OutOfMemoryError at `site` (WebGPU throws a RangeError).
 */
export function createBufferJudged(device: GPUDevice, desc: GPUBufferDescriptor, site: ErrorSite = {}): { buffer: GPUBuffer; outOfMemory: Promise<GPUError | null> } {
  device.pushErrorScope('out-of-memory');
  let buffer: GPUBuffer;
  try {
    buffer = device.createBuffer(desc);
  } catch (e) {
    void device.popErrorScope().catch(() => undefined);
    if (e instanceof RangeError && desc.mappedAtCreation) throw new OutOfMemoryError(`no host memory to map '${desc.label ?? ''}' (${desc.size} bytes): ${e.message}`, { ...site, callSite: site.callSite, cause: e });
    throw e;
  }
  return { buffer, outOfMemory: device.popErrorScope() };
}

/** Default usage of `ctx.alloc` buffers: storage for kernels, copy source and destination. */
export const DEFAULT_DEVICE_USAGE = BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST;

/**
 * A WebGPU buffer or texture collected without `destroy()`: its memory went with it, and so do its
 * bytes in the stats (held: the stats and the bytes, never the resource).
 */
const collected = new FinalizationRegistry<{ stats: MemoryStats; bytes: number }>((h) => h.stats.sub(h.bytes));
/** A resource WebGPU refused, collected without `destroy()`: it leaves `judging`. */
const dropped = new FinalizationRegistry<undefined>(() => judging.count--);

/**
 * Resources whose creation WebGPU has not judged yet (an out-of-memory or validation error comes
 * back later) or refused (until freed), across contexts, and the schedulers to wake once one is
 * judged: while none, ops skip the check.
 */
export const judging = { count: 0, wakes: new Set<() => void>() };

/**
 * `rs`' first resource WebGPU refused, else null; false while a texture among them is not judged
 * yet (its ops wait: `wake` runs once it is). A buffer's ops do not wait for its verdict (a first
 * use a round trip later on every new buffer): if WebGPU refuses it, the op's submit fails and the
 * op reports the refusal (refusedOf).
 */
export function verdictOf(rs: readonly DeviceResource[], wake: () => void): DeviceResource | null | false {
  for (let i = 0; i < rs.length; i++) {
    const v = rs[i]!.verdict;
    if (v === undefined && rs[i]!.noun === 'texture') {
      judging.wakes.add(wake);
      return false;
    }
    if (v) return rs[i]!;
  }
  return null;
}

/** The error of an op using `rs` (and `pinned`) whose submit WebGPU rejected, when one of them is a resource WebGPU refused. */
export function refusedOf(rs: readonly DeviceResource[], site: ErrorSite, pinned: { refused: StreamError | null } | null): StreamError | null {
  for (let i = 0; i < rs.length; i++) if (rs[i]!.verdict) return rs[i]!.refusal(site, false);
  return pinned?.refused ? atCall(pinned.refused, site) : null;
}

/**
 * Device memory with deferred destroy: `destroy()` while streams still use it is deferred until
 * their ops complete (PyTorch's `record_stream` problem, solved by default). Counted in `ctx.memory`.
 */
export abstract class DeviceResource {
  readonly label: string;
  /** Bytes it holds on the device (a texture's: every mip level, texel bytes times texels). */
  readonly byteSize: number;
  /** @internal the device that made it: a stream of another device refuses it at the call */
  readonly device: GPUDevice;
  #uses = 0;
  #destroyRequested = false;
  #freed = false;
  #outOfMemory = false;
  readonly #stats: MemoryStats;
  readonly #pending: { peakBefore: number };
  /** @internal its context's label, for errors */
  context = '';
  /** @internal what WebGPU said of its creation: undefined until it has, null when it was made, else why not */
  verdict: string | null | undefined = undefined;
  #judged: (() => void)[] | null = null;

  /** @internal */
  constructor(device: GPUDevice, stats: MemoryStats, byteSize: number, label: string) {
    this.label = label;
    this.byteSize = byteSize;
    this.device = device;
    this.#stats = stats;
    this.#pending = stats.addPending(byteSize); // judged later (judge)
  }

  /** True once `destroy()` was called (the memory may still be in use by pending ops). */
  get destroyed(): boolean {
    return this.#destroyRequested;
  }

  /** Pending ops that use it. */
  get pendingUses(): number {
    return this.#uses;
  }

  /** @internal an op that uses it was enqueued */
  retain(): void {
    this.#uses++;
  }

  /** @internal that op completed */
  release(): void {
    this.#uses--;
    if (this.#uses === 0 && this.#destroyRequested) this.#free();
  }

  /**
   * Resolves once WebGPU has made it; rejects with OutOfMemoryError (a texture WebGPU refused:
   * InvalidArgumentError) when it could not: cudaMalloc's error, which WebGPU gives only later. Ops
   * need not wait for it; await it after allocating what may not fit.
   */
  allocated(): Promise<void> {
    if (this.verdict === null) return Promise.resolve();
    const site: ErrorSite = { op: 'allocated', context: this.context, callSite: captureSite(true, DeviceResource.prototype.allocated) };
    if (this.verdict !== undefined) return Promise.reject(this.refusal(site, true));
    return new Promise((resolve, reject) => (this.#judged ??= []).push(() => (this.verdict ? reject(this.refusal(site, true)) : resolve())));
  }

  /** @internal throws when it can no longer be used in new work */
  checkAlive(site: ErrorSite): void {
    if (this.#destroyRequested) throw new DestroyedError(`${this.noun} '${this.label}' was destroyed; allocate a new one with ctx.${this.#alloc}()`, site);
    if (this.verdict) throw this.refusal(site, true);
  }

  /** @internal the error of an op using it once WebGPU refused it (`atCall`: refused at the call, after the verdict) */
  refusal(site: ErrorSite, atCall: boolean): StreamError {
    if (this.#outOfMemory) {
      return new OutOfMemoryError(`${this.noun} '${this.label}' (${this.byteSize} bytes) could not be allocated: the device is out of memory. ctx.${this.#alloc}() returns before WebGPU says so, and the ops that use it fail; free memory (destroy() what is no longer needed) or allocate less. WebGPU: ${this.verdict!.trim()}`, site);
    }
    const what = `${this.noun} '${this.label}' is one WebGPU refused at ctx.${this.#alloc}(): ${this.verdict}`;
    return atCall ? new InvalidArgumentError(what, site) : new GpuValidationError(what, site);
  }

  /** @internal WebGPU's verdict on its creation: its error scopes ('out-of-memory' first), popped */
  protected judge(outOfMemory: Promise<GPUError | null>, validation: Promise<GPUError | null> | null): void {
    judging.count++;
    const settle = (oom: GPUError | null, invalid: GPUError | null): void => {
      const e = oom ?? invalid;
      this.verdict = e ? e.message || (oom ? 'out of memory' : 'invalid') : null;
      this.#outOfMemory = oom !== null;
      // Refused: never allocated, so out of the stats now (not again when freed).
      this.#stats.judged(this.#pending, this.verdict ? this.byteSize : 0, !this.#freed);
      if (!this.verdict || this.#freed) judging.count--;
      else {
        // It counts in `judging` until freed or collected, as ops enqueued before the verdict check it.
        collected.unregister(this);
        dropped.register(this, undefined, this);
      }
      const judged = this.#judged;
      this.#judged = null;
      if (judged) for (const f of judged) f();
      const wakes = [...judging.wakes];
      judging.wakes.clear();
      for (const w of wakes) w();
    };
    // A scope that cannot be read (the device lost meanwhile) blames nothing: the loss is reported.
    // A buffer's verdict settles in the reaction to its scope, before a later submit's is read.
    const unread = (): void => settle(null, null);
    if (validation) Promise.all([outOfMemory, validation]).then(([o, v]) => settle(o, v), unread);
    else outOfMemory.then((o) => settle(o, null), unread);
  }

  /** Frees it once every op that uses it completed. Idempotent. */
  destroy(): void {
    if (this.#destroyRequested) return;
    this.#destroyRequested = true;
    if (this.#uses === 0) this.#free();
  }

  [Symbol.dispose](): void {
    this.destroy();
  }

  /** @internal counts `obj` (the WebGPU object) until it is destroyed or collected */
  protected track(obj: object): void {
    collected.register(obj, { stats: this.#stats, bytes: this.byteSize }, this);
  }

  /** @internal 'buffer' or 'texture', for messages */
  abstract get noun(): 'buffer' | 'texture';
  /** @internal destroys the WebGPU object */
  protected abstract destroyNow(): void;

  #free(): void {
    if (this.#freed) return;
    this.#freed = true;
    this.destroyNow();
    if (this.verdict) {
      judging.count--;
      dropped.unregister(this);
      return;
    }
    collected.unregister(this);
    this.#stats.sub(this.byteSize);
  }

  get #alloc(): string {
    return this.noun === 'buffer' ? 'alloc' : 'allocTexture';
  }
}

/** A buffer in device memory, made by `ctx.alloc`; `destroy()` is deferred while streams use it. */
export class DeviceBuffer extends DeviceResource {
  readonly buffer: GPUBuffer;
  readonly size: number;
  readonly usage: number;
  /** @internal its context, for a peer copy's read-back (peer.ts) */
  peer: PeerHost | null = null;

  /** @internal use `ctx.alloc` */
  constructor(device: GPUDevice, stats: MemoryStats, size: number, label: string, usage: number) {
    super(device, stats, size, label);
    this.size = size;
    this.usage = usage;
    const made = createBufferJudged(device, { size, usage, label });
    this.buffer = made.buffer;
    this.track(this.buffer);
    this.judge(made.outOfMemory, null);
  }

  /** @internal */
  get noun(): 'buffer' {
    return 'buffer';
  }
  protected destroyNow(): void {
    this.buffer.destroy();
  }
}
