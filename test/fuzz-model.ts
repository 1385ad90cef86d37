/**
 * Generator and sequential CPU model for the stream fuzzer (test/fuzz.test.ts). Pure TypeScript,
 * no GPU: a program is plain data, so a failing seed can be listed and replayed.
 *
 * Every generated program is race-free: before an op touches a resource (device buffer, host
 * array, pinned buffer) whose last conflicting access came from another stream, the generator
 * inserts a synchronization that the library's semantics guarantee (an event, waitStream, the
 * default stream's legacy semantics, or a host-side wait). Happens-before is tracked with one
 * vector clock per stream plus one for the host. Dependencies always point at earlier-enqueued
 * ops, so the GPU result must equal running every step one after the other in enqueue order:
 * that sequential run is the model, computed here while generating.
 *
 * Program families (drawn from the seed):
 * - Contexts: one (the majority), two on one device (the second borrows the first's GPUDevice, so
 *   device buffers, pinned buffers and kernels are shared), two on two devices (data crosses only
 *   through host memory), or three (two on one device, one on another). Streams of every context
 *   are participants of one happens-before model: a wait on another context's event or stream is an
 *   edge like any other. The legacy default stream is per context, and so is `ctx.synchronize()`.
 * - Injected failures: a few ops bind or copy a raw GPUBuffer that is destroyed right after the
 *   call (or left mapped, or made on the other device), so the call accepts them and the submit is
 *   rejected. The model knows which ops fail (the bad op: GpuValidationError; whatever depends on
 *   a failed op through its stream, an event, waitStream or a default-stream edge:
 *   DependencyError), what each synchronize reports (a stream's and a context's reports are
 *   independent, and a report makes the stream's later work start clean), and which words a failed
 *   op would have written: those are unknown until rewritten and are never compared.
 */
import { rng, sleepStep, type Rng } from '../bench/reference.js';

/** Element class of a buffer: f32 buffers feed vectorAdd, u32 buffers feed sleep. Copies stay in class. */
export type Cls = 'f32' | 'u32';

/** How many contexts a program uses, and on how many devices. */
export type CtxVariant = 'single' | 'sameDevice' | 'twoDevice' | 'threeCtx';
export const CTX_VARIANTS: readonly CtxVariant[] = ['single', 'sameDevice', 'twoDevice', 'threeCtx'];

/** Forces a family (FUZZ_VARIANT): the seed still draws its own, so other draws stay as they were. */
export interface Force {
  ctx?: CtxVariant;
  failing?: boolean;
}

export interface CtxSpec {
  id: number;
  /** A: the fixture's context; B: borrows A's device; C: a context on a second device. */
  name: string;
  device: number;
}

export interface StreamSpec {
  id: number;
  name: string;
  ctx: number;
  priority: number;
  nonBlocking: boolean;
  /** The context's default stream (`ctx.defaultStream`). Stream 0 is context 0's. */
  isDefault: boolean;
}

/**
 * dev: ctx.alloc; raw: a GPUBuffer from device.createBuffer (its ops go in a submit of their own);
 * doom: a raw GPUBuffer made for one bad op (see ResSpec.doom); arr: a typed array (a view inside
 * a padded ArrayBuffer); pinUp/pinDown: ctx.allocHost.
 */
export type ResKind = 'dev' | 'raw' | 'doom' | 'arr' | 'pinUp' | 'pinDown';

/** destroyed: destroy() right after the call; mapped: made mappedAtCreation and never unmapped; foreign: made on the other device. */
export type Doom = 'destroyed' | 'mapped' | 'foreign';

export interface ResSpec {
  id: number;
  name: string;
  kind: ResKind;
  cls: Cls;
  words: number;
  /** The context that allocates it (-1: host memory). */
  ctx: number;
  /** Its device (-1: host memory). */
  device: number;
  /** arr: initial contents (host memory at program start); others start at zero. */
  init: Uint32Array | null;
  /** arr: words of padding before and after the view in its ArrayBuffer (must stay untouched). */
  padBefore: number;
  padAfter: number;
  /** doom: why the submit is rejected. The buffer is made at its step. */
  doom?: Doom;
}

export interface EventSpec {
  id: number;
  name: string;
  ctx: number;
  /** Never recorded by any step: waiting on it is a no-op. */
  never: boolean;
  /** Created with `timing: true`: its records are GPU ops (timestamp queries), not markers. */
  timing: boolean;
}

/** Offsets and sizes in 4-byte words; `size: null` leaves the option out (the library's default). */
export interface Range {
  srcOff: number;
  dstOff: number;
  size: number | null;
  /** Whether the options object is passed at all (false: all defaults; then offsets are 0). */
  withOptions: boolean;
}

export type HostWait =
  | { on: 'stream'; s: number }
  | { on: 'event'; e: number }
  | { on: 'ctx'; c: number }
  | { on: 'ready'; res: number };

export type ErrName = 'GpuValidationError' | 'DependencyError';

/** What a host check of a hostFn compares: the model's words, and which of them are unknown. */
export interface Check {
  res: number;
  expect: Uint32Array;
  /** 1 per word that a failed op may have left as it was (not compared); null: all known. */
  unknown: Uint8Array | null;
}

export type Step = (
  | { k: 'upload'; s: number; src: { arr: Uint32Array; padBefore: number } | { pin: number } | { host: number }; dst: number; range: Range }
  | { k: 'download'; s: number; src: number; dst: number; range: Range }
  | { k: 'copy'; s: number; src: number; dst: number; range: Range }
  /** `kc`: the context whose built-in kernel is launched (any context of the stream's device). */
  | { k: 'add'; s: number; kc: number; a: number; b: number; out: number; extraGroups: number }
  | { k: 'sleep'; s: number; kc: number; buf: number; iterations: number }
  | { k: 'record'; s: number; e: number }
  | { k: 'waitEvent'; s: number; e: number }
  | { k: 'waitStream'; s: number; t: number }
  | { k: 'hostFn'; s: number; mode: 'sync' | 'asyncBefore' | 'asyncAfter'; checks: Check[] }
  | { k: 'fill'; res: number; off: number; data: Uint32Array }
  | { k: 'hostWait'; w: HostWait }
  /** Host perturbations, no synchronization: a context's `flush()`, or yield to the event loop `turns` times. */
  | { k: 'flush'; c: number }
  | { k: 'yield'; turns: number }
) & {
  /** Why the generator inserted this step (synchronizations), for the listing. */
  why?: string;
  /** Stream ops: the op fails (the model's verdict); absent: it runs. */
  fail?: ErrName;
  /**
   * Host waits: the errors it rejects with; absent: it resolves. One name: that error; several: an
   * AggregateStreamError listing them (a context synchronize with several failed streams).
   */
  expect?: ErrName[];
};

export interface Program {
  seed: number;
  variant: CtxVariant;
  /** Ops with injected failures (see the file comment). */
  failing: boolean;
  contexts: CtxSpec[];
  streams: StreamSpec[];
  res: ResSpec[];
  events: EventSpec[];
  steps: Step[];
  /** Model state of every resource after the last step, as 32-bit words. */
  final: Uint32Array[];
  /** Per resource, 1 per word not compared (written by a failed op and not rewritten since); null: all known. */
  unknown: (Uint8Array | null)[];
}

export const SLEEP_ITERATIONS = [0, 1, 17, 256, 1500] as const;

interface Access {
  /** Participant: a stream id, or the host (streams.length). */
  p: number;
  /** The op's position in its participant's clock. */
  idx: number;
  lo: number;
  hi: number;
  w: boolean;
  /** A hostFn read of a host-visible resource. */
  hostFnRead: boolean;
  /**
   * The op claims this pinned buffer (whatever its range, even an empty one): views throw until
   * it completes, so a hostFn that reads the buffer must come after it.
   */
  claim?: boolean;
  step: number;
}

interface Need {
  res: number;
  lo: number;
  hi: number;
  w: boolean;
  hostFnRead?: boolean;
}

type Conflict = { a: Access; need: Need };

/** A failed op of a stream: its place in the stream's clock, and the error it failed with. */
interface Failure {
  idx: number;
  err: ErrName;
}

const join = (into: number[], from: readonly number[]): void => {
  for (let i = 0; i < into.length; i++) if (from[i]! > into[i]!) into[i] = from[i]!;
};

/** Size in words that a transfer moves with `range` between resources of `srcWords` and `dstWords`. */
export function rangeSize(r: Range, srcWords: number, dstWords: number): number {
  return r.size ?? srcWords - r.srcOff; // the library's default: the rest of the source (it fits, or the call throws)
}

/** Device-side resources: what ops of a stream on that device may bind, copy, upload to and download from. */
const onDevice = (r: ResSpec): boolean => r.kind === 'dev' || r.kind === 'raw';

export class Generator {
  readonly r: Rng;
  variant: CtxVariant = 'single';
  failing = false;
  readonly contexts: CtxSpec[] = [];
  readonly streams: StreamSpec[] = [];
  readonly res: ResSpec[] = [];
  readonly events: EventSpec[] = [];
  readonly steps: Step[] = [];
  /** Model contents of each resource. */
  readonly data: Uint32Array[] = [];
  /** 1 per word written by a failed op (and not rewritten since): its value is not known. */
  readonly unknown: Uint8Array[] = [];
  readonly #acc: Access[][] = [];
  /** Pinned: enqueued ops claimed it since the last `ready()` the host awaited. */
  readonly #claimed: boolean[] = [];
  /** Pinned: join of the clocks of every op that claimed it. */
  readonly #claimVC: number[][] = [];
  #vc: number[][] = [];
  #hostVC: number[] = [];
  #evVC: (number[] | null)[] = [];
  #H = 0;
  /** Each context's default stream. */
  #defaultOf: number[] = [];
  // Failure model (see the file comment).
  /** The stream's last op failed and no report cut it off: its next op inherits the failure. */
  #tailFailed: boolean[] = [];
  #failures: Failure[][] = [];
  /** Failures up to this clock entry were reported by the stream's own synchronize / by its context's. */
  #reportedStream: number[] = [];
  #reportedCtx: number[] = [];
  /** The event's most recent record failed (waiting on it fails; its synchronize rejects). */
  #evFailed: boolean[] = [];

  constructor(readonly seed: number) {
    this.r = rng(seed);
  }

  // ------------------------------------------------------------- random helpers
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.r.next() * (hi - lo + 1));
  }
  chance(p: number): boolean {
    return this.r.next() < p;
  }
  pick<T>(xs: readonly T[]): T {
    if (xs.length === 0) throw new Error('pick from empty list');
    return xs[Math.floor(this.r.next() * xs.length)]!;
  }
  weighted<T extends string>(opts: [T, number][]): T {
    const total = opts.reduce((s, [, w]) => s + w, 0);
    let x = this.r.next() * total;
    for (const [v, w] of opts) {
      if ((x -= w) < 0) return v;
    }
    // Rounding can leave x at 0 after the last option: never return an option of weight 0 (not available here).
    return opts.filter(([, w]) => w > 0).pop()![0];
  }
  shuffle<T>(xs: T[]): T[] {
    for (let i = xs.length - 1; i > 0; i--) {
      const j = this.int(0, i);
      [xs[i], xs[j]] = [xs[j]!, xs[i]!];
    }
    return xs;
  }
  randomWords(cls: Cls, n: number): Uint32Array {
    if (cls === 'u32') {
      const a = this.r.u32Array(n);
      for (let i = 0; i < n; i++) if (a[i] === 0) a[i] = 1; // never zeros
      return a;
    }
    const f = this.r.f32Array(n, -100, 100);
    for (let i = 0; i < n; i++) if (f[i] === 0) f[i] = 0.5;
    return new Uint32Array(f.buffer);
  }

  // ------------------------------------------------------------- setup
  /** The program's family: the first draws of the seed, so a test can name it before generating. */
  chooseFamily(force: Force = {}): { variant: CtxVariant; failing: boolean } {
    const variant = this.weighted<CtxVariant>([
      ['single', 60],
      ['sameDevice', 17],
      ['twoDevice', 15],
      ['threeCtx', 8],
    ]);
    const failing = this.chance(0.25);
    this.variant = force.ctx ?? variant;
    this.failing = force.failing ?? failing;
    return { variant: this.variant, failing: this.failing };
  }

  setup(): void {
    const devices = { single: [0], sameDevice: [0, 0], twoDevice: [0, 1], threeCtx: [0, 0, 1] }[this.variant];
    devices.forEach((device, id) => this.contexts.push({ id, name: device === 1 ? 'C' : 'AB'[id]!, device }));
    const multi = this.contexts.length > 1;
    for (const c of this.contexts) {
      const prefix = c.id === 0 ? '' : `${c.name}.`;
      this.#defaultOf.push(this.streams.length);
      this.streams.push({ id: this.streams.length, name: `${prefix}D`, ctx: c.id, priority: 0, nonBlocking: false, isDefault: true });
      const n = multi ? this.int(1, 3) : this.int(2, 4);
      for (let i = 1; i <= n; i++) {
        const priority = this.chance(0.5) ? 0 : this.int(-5, -1);
        this.streams.push({ id: this.streams.length, name: `${prefix}s${i}`, ctx: c.id, priority, nonBlocking: this.chance(0.3), isDefault: false });
      }
    }
    this.#H = this.streams.length;
    const P = this.streams.length + 1;
    this.#vc = this.streams.map(() => new Array<number>(P).fill(0));
    this.#hostVC = new Array<number>(P).fill(0);
    this.#tailFailed = this.streams.map(() => false);
    this.#failures = this.streams.map(() => []);
    this.#reportedStream = this.streams.map(() => 0);
    this.#reportedCtx = this.streams.map(() => 0);

    const size = (): number => (this.chance(0.3) ? this.pick([16, 17, 64, 255, 256, 257, 1024]) : this.int(16, 1024));
    for (const device of [...new Set(devices)]) {
      const nDev = multi ? this.int(3, 6) : this.int(4, 8);
      for (let i = 0; i < nDev; i++) this.#addRes('dev', i < 2 ? 'f32' : i === 2 ? 'u32' : this.chance(0.6) ? 'f32' : 'u32', size(), device);
      // Raw GPUBuffers that work: their ops are isolated (a submit each), and must land like any other.
      if (this.chance(0.35)) for (let i = this.int(1, 2); i > 0; i--) this.#addRes('raw', this.chance(0.5) ? 'f32' : 'u32', size(), device);
      const nUp = multi ? this.int(0, 1) : this.int(0, 2);
      for (let i = 0; i < nUp; i++) this.#addRes('pinUp', this.chance(0.5) ? 'f32' : 'u32', size(), device);
      const nDown = multi ? this.int(0, 1) : this.int(0, 2);
      for (let i = 0; i < nDown; i++) this.#addRes('pinDown', this.chance(0.5) ? 'f32' : 'u32', size(), device);
    }
    const nArr = this.int(1, 3);
    for (let i = 0; i < nArr; i++) this.#addRes('arr', this.chance(0.5) ? 'f32' : 'u32', size(), -1);

    for (const c of this.contexts) {
      const n = c.id === 0 ? (multi ? this.int(2, 4) : this.int(2, 5)) : this.int(1, 3);
      for (let i = 0; i < n; i++) {
        const id = this.events.length;
        const never = c.id === 0 && i === 0;
        this.events.push({ id, name: never ? 'e0never' : `${c.id === 0 ? '' : `${c.name}.`}e${id}`, ctx: c.id, never, timing: this.chance(0.3) });
      }
    }
    this.#evVC = this.events.map(() => null);
    this.#evFailed = this.events.map(() => false);
  }

  #addRes(kind: ResKind, cls: Cls, words: number, device: number, doom?: Doom): ResSpec {
    const id = this.res.length;
    const prefix = { dev: 'b', raw: 'r', doom: 'x', arr: 'h', pinUp: 'pu', pinDown: 'pd' }[kind];
    const n = this.res.filter((x) => x.kind === kind).length;
    const init = kind === 'arr' ? this.randomWords(cls, words) : null;
    const pad = kind === 'arr' && this.chance(0.5);
    const ctx = device < 0 ? -1 : this.pick(this.contexts.filter((c) => c.device === device)).id;
    const spec: ResSpec = { id, name: `${prefix}${n}`, kind, cls, words, ctx, device, init, padBefore: pad ? this.int(1, 8) : 0, padAfter: pad ? this.int(0, 8) : 0, ...(doom ? { doom } : {}) };
    this.res.push(spec);
    this.data.push(init ? init.slice() : new Uint32Array(words));
    this.unknown.push(new Uint8Array(words));
    this.#acc.push([]);
    this.#claimed.push(false);
    this.#claimVC.push(new Array<number>(this.streams.length + 1).fill(0));
    return spec;
  }

  byKind(kind: ResKind, cls?: Cls): ResSpec[] {
    return this.res.filter((x) => x.kind === kind && (cls === undefined || x.cls === cls));
  }

  /** Device buffers (ctx.alloc or raw) of `device`. */
  devs(device: number, cls?: Cls): ResSpec[] {
    return this.res.filter((x) => onDevice(x) && x.device === device && (cls === undefined || x.cls === cls));
  }

  pinned(kind: 'pinUp' | 'pinDown', device?: number): ResSpec[] {
    return this.res.filter((x) => x.kind === kind && (device === undefined || x.device === device));
  }

  deviceOf(s: number): number {
    return this.contexts[this.streams[s]!.ctx]!.device;
  }

  // ------------------------------------------------------------- clocks
  /** The clock the next op enqueued on `s` would get (its own entry already counted). */
  #nextVC(s: number, extra?: readonly number[] | null): number[] {
    const v = this.#vc[s]!.slice();
    join(v, this.#hostVC);
    for (const t of this.#legacyEdges(s)) join(v, this.#vc[t]!);
    if (extra) join(v, extra);
    v[s]!++;
    return v;
  }

  /** The streams an op on `s` waits for by the legacy default stream of its context. */
  #legacyEdges(s: number): number[] {
    const spec = this.streams[s]!;
    if (spec.isDefault) return this.streams.filter((t) => t.ctx === spec.ctx && !t.isDefault && !t.nonBlocking).map((t) => t.id);
    return spec.nonBlocking ? [] : [this.#defaultOf[spec.ctx]!];
  }

  #conflicts(s: number, needs: Need[]): Conflict[] {
    const v = this.#nextVC(s);
    const out: Conflict[] = [];
    for (const need of needs) {
      for (const a of this.#acc[need.res]!) {
        const hazard = a.claim ? need.hostFnRead : a.w || need.w;
        if (a.lo < need.hi && need.lo < a.hi && hazard && v[a.p]! < a.idx) out.push({ a, need });
      }
    }
    return out;
  }

  /**
   * Host-side hazards of `needs` when enqueued now: a pinned download buffer is claimed at enqueue,
   * so a hostFn that reads it must have run (the host must know it completed) before another op
   * claims it; and a host write must follow every hostFn read of it.
   */
  #hostConflicts(needs: Need[], claim: boolean): Access[] {
    const out: Access[] = [];
    for (const need of needs) {
      const r = this.res[need.res]!;
      if (r.kind !== 'pinDown' || !claim) continue;
      for (const a of this.#acc[need.res]!) if (a.hostFnRead && this.#hostVC[a.p]! < a.idx) out.push(a);
    }
    return out;
  }

  // ------------------------------------------------------------- failures
  /** Whether the op `step` would fail if enqueued now, and with what. */
  #verdict(step: Step & { s: number }): ErrName | undefined {
    const s = step.s;
    let inherited = this.#tailFailed[s]! || this.#legacyEdges(s).some((t) => this.#tailFailed[t]);
    if (step.k === 'waitEvent') inherited ||= this.#evFailed[step.e]!;
    if (step.k === 'waitStream') inherited ||= this.#tailFailed[step.t]!;
    if (inherited) return 'DependencyError'; // skipped before it reaches the GPU, bad or not
    const doomed = (id: number): boolean => this.res[id]!.kind === 'doom';
    switch (step.k) {
      case 'upload':
        return doomed(step.dst) ? 'GpuValidationError' : undefined;
      case 'download':
      case 'copy':
        return doomed(step.src) || doomed(step.dst) ? 'GpuValidationError' : undefined;
      case 'add':
        return doomed(step.a) || doomed(step.b) || doomed(step.out) ? 'GpuValidationError' : undefined;
      case 'sleep':
        return doomed(step.buf) ? 'GpuValidationError' : undefined;
      default:
        return undefined;
    }
  }

  /**
   * A report of `s`'s failures (by its own synchronize, or its context's): the first one not yet
   * reported that way, if any. After a report the stream's next op starts clean.
   */
  #report(s: number, marks: number[]): ErrName | undefined {
    const f = this.#failures[s]!.find((x) => x.idx > marks[s]!);
    marks[s] = this.#vc[s]![s]!;
    if (f) this.#tailFailed[s] = false;
    return f?.err;
  }

  #setUnknown(res: number, lo: number, hi: number, v: 0 | 1): void {
    if (this.res[res]!.kind === 'doom') return;
    this.unknown[res]!.fill(v, lo, hi);
  }

  // ------------------------------------------------------------- emitting
  /** Appends a step: updates clocks, access history, the failure model and the model state. */
  #emit(step: Step, needs: Need[] = []): void {
    const idx = this.steps.length;
    this.steps.push(step);
    if (step.k === 'fill') {
      this.#hostVC[this.#H]!++;
      this.#acc[step.res]!.push({ p: this.#H, idx: this.#hostVC[this.#H]!, lo: step.off, hi: step.off + step.data.length, w: true, hostFnRead: false, step: idx });
      this.data[step.res]!.set(step.data, step.off);
      this.#setUnknown(step.res, step.off, step.off + step.data.length, 0);
      return;
    }
    if (step.k === 'flush' || step.k === 'yield') return;
    if (step.k === 'hostWait') {
      const w = step.w;
      let expect: ErrName[] = [];
      if (w.on === 'stream') {
        join(this.#hostVC, this.#vc[w.s]!);
        const err = this.#report(w.s, this.#reportedStream);
        if (err) expect = [err];
      } else if (w.on === 'event') {
        const e = this.#evVC[w.e];
        if (e) join(this.#hostVC, e);
        if (this.#evFailed[w.e]) expect = ['DependencyError']; // a record fails only by inheriting
      } else if (w.on === 'ctx') {
        for (const t of this.streams) {
          if (t.ctx !== w.c) continue;
          join(this.#hostVC, this.#vc[t.id]!);
          const err = this.#report(t.id, this.#reportedCtx);
          if (err) expect.push(err);
        }
      } else join(this.#hostVC, this.#claimVC[w.res]!);
      if (expect.length > 0) step.expect = expect;
      // A pinned buffer is host-owned again once the host knows every op that claimed it completed.
      for (const r of this.res) {
        if (this.#claimed[r.id] && this.#claimVC[r.id]!.every((x, i) => this.#hostVC[i]! >= x)) this.#claimed[r.id] = false;
      }
      return;
    }
    const s = step.s;
    const fail = this.#verdict(step);
    if (fail) step.fail = fail;
    const extra = step.k === 'waitEvent' ? this.#evVC[step.e] : step.k === 'waitStream' ? this.#vc[step.t] : null;
    const v = this.#nextVC(s, extra);
    this.#vc[s] = v;
    const me = v[s]!;
    for (const n of needs) this.#acc[n.res]!.push({ p: s, idx: me, lo: n.lo, hi: n.hi, w: n.w, hostFnRead: n.hostFnRead ?? false, step: idx });
    if (fail) {
      this.#tailFailed[s] = true;
      this.#failures[s]!.push({ idx: me, err: fail });
    }
    switch (step.k) {
      case 'record':
        this.#evVC[step.e] = v.slice();
        this.#evFailed[step.e] = fail !== undefined;
        break;
      case 'upload': {
        const dst = this.res[step.dst]!;
        const src = step.src;
        const srcWords = 'pin' in src ? this.res[src.pin]!.words : 'host' in src ? this.res[src.host]!.words : src.arr.length - src.padBefore;
        const n = rangeSize(step.range, srcWords, dst.words);
        const lo = step.range.dstOff;
        if ('pin' in src) this.#claim(src.pin, s, v);
        if (fail) this.#setUnknown(dst.id, lo, lo + n, 1);
        else if (dst.kind !== 'doom') {
          const from = step.range.srcOff;
          if ('arr' in src) {
            this.data[dst.id]!.set(src.arr.subarray(src.padBefore + from, src.padBefore + from + n), lo);
            this.#setUnknown(dst.id, lo, lo + n, 0);
          } else {
            const id = 'pin' in src ? src.pin : src.host;
            this.data[dst.id]!.set(this.data[id]!.subarray(from, from + n), lo);
            this.unknown[dst.id]!.set(this.unknown[id]!.subarray(from, from + n), lo);
          }
        }
        break;
      }
      case 'download':
      case 'copy': {
        const src = this.res[step.src]!;
        const dst = this.res[step.dst]!;
        const n = rangeSize(step.range, src.words, dst.words);
        const { srcOff, dstOff } = step.range;
        if (dst.kind === 'pinDown') this.#claim(dst.id, s, v);
        if (fail) this.#setUnknown(dst.id, dstOff, dstOff + n, 1);
        else if (dst.kind !== 'doom') {
          this.data[dst.id]!.set(this.data[src.id]!.slice(srcOff, srcOff + n), dstOff);
          this.unknown[dst.id]!.set(this.unknown[src.id]!.slice(srcOff, srcOff + n), dstOff);
        }
        break;
      }
      case 'add': {
        const words = this.res[step.out]!.words;
        if (fail) this.#setUnknown(step.out, 0, words, 1);
        else {
          const a = new Float32Array(this.data[step.a]!.buffer);
          const b = new Float32Array(this.data[step.b]!.buffer);
          const out = new Float32Array(this.data[step.out]!.buffer);
          const [ua, ub, uo] = [this.unknown[step.a]!, this.unknown[step.b]!, this.unknown[step.out]!];
          for (let i = 0; i < words; i++) {
            out[i] = Math.fround(a[i]! + b[i]!);
            uo[i] = ua[i]! | ub[i]!;
          }
        }
        break;
      }
      case 'sleep': {
        const d = this.data[step.buf]!;
        if (fail) this.#setUnknown(step.buf, 0, d.length, 1);
        else for (let i = 0; i < d.length; i++) d[i] = sleepStep(d[i]!, step.iterations);
        break;
      }
      case 'hostFn':
        for (const c of step.checks) {
          c.expect = this.data[c.res]!.slice();
          c.unknown = this.unknown[c.res]!.includes(1) ? this.unknown[c.res]!.slice() : null;
        }
        break;
      default:
        break;
    }
  }

  /** Op (s, v) claims pinned buffer `res` from its enqueue until it completes. */
  #claim(res: number, s: number, v: number[]): void {
    this.#claimed[res] = true;
    join(this.#claimVC[res]!, v);
    this.#acc[res]!.push({ p: s, idx: v[s]!, lo: 0, hi: this.res[res]!.words, w: false, hostFnRead: false, claim: true, step: this.steps.length - 1 });
  }

  /** Streams whose work so far includes op `idx` of participant `p`. */
  #covering(p: number, idx: number, except: number): number[] {
    return this.streams.filter((t) => t.id !== except && this.#vc[t.id]![p]! >= idx).map((t) => t.id);
  }

  #coveringEvents(p: number, idx: number): number[] {
    return this.events.filter((e) => !e.never && (this.#evVC[e.id]?.[p] ?? -1) >= idx).map((e) => e.id);
  }

  /** An event that a stream of context `ctx` may record (an event belongs to its context). */
  #recordableEvent(ctx: number): number {
    return this.pick(this.events.filter((e) => !e.never && e.ctx === ctx)).id;
  }

  /** Inserts one synchronization after which op (p, idx) happens before the next op on `s`. */
  #syncStream(s: number, c: Conflict): void {
    const { a } = c;
    const what = `${this.#describeNeed(c.need)} on ${this.streams[s]!.name} vs step #${a.step} (${this.streams[a.p]?.name ?? 'host'})`;
    const covering = this.#covering(a.p, a.idx, s);
    const evs = this.#coveringEvents(a.p, a.idx);
    const spec = this.streams[s]!;
    const opts: ['existingEvent' | 'recordWait' | 'waitStream' | 'legacy' | 'host', number][] = [
      ['recordWait', 4],
      ['waitStream', 3],
      ['host', 0.6],
    ];
    if (evs.length > 0) opts.push(['existingEvent', 3]);
    if (!spec.isDefault && !spec.nonBlocking) opts.push(['legacy', 2]);
    const kind = this.weighted(opts);
    const why = `sync: ${what}`;
    switch (kind) {
      case 'existingEvent':
        this.#emit({ k: 'waitEvent', s, e: this.pick(evs), why });
        return;
      case 'recordWait': {
        // Record on the stream that did the access, or (transitively) on one that already waited for it.
        const u = covering.includes(a.p) && this.chance(0.6) ? a.p : this.pick(covering);
        const e = this.#recordableEvent(this.streams[u]!.ctx);
        this.#emit({ k: 'record', s: u, e, why });
        this.#emit({ k: 'waitEvent', s, e, why });
        return;
      }
      case 'waitStream':
        this.#emit({ k: 'waitStream', s, t: covering.includes(a.p) && this.chance(0.5) ? a.p : this.pick(covering), why });
        return;
      case 'legacy': {
        // An op on the default stream of `s`'s context; `s` (blocking) then waits for it by legacy semantics.
        const why2 = `${why} (via default stream)`;
        const d = this.#defaultOf[spec.ctx]!;
        const blockingCover = covering.filter((u) => this.#legacyEdges(d).includes(u));
        if (blockingCover.length > 0 && this.chance(0.7)) {
          // The default stream waits for every blocking stream of its context by itself: any op there will do.
          const form = this.weighted([
            ['record', 1],
            ['waitNever', 1],
            ['waitStream', 1],
          ]);
          if (form === 'record') this.#emit({ k: 'record', s: d, e: this.#recordableEvent(spec.ctx), why: why2 });
          else if (form === 'waitNever') this.#emit({ k: 'waitEvent', s: d, e: 0, why: why2 });
          else this.#emit({ k: 'waitStream', s: d, t: this.pick(this.streams).id, why: why2 });
        } else if (covering.includes(d) && this.chance(0.3)) {
          // The default stream already covers it: `s` waits for it anyway on its next op;
          // make that explicit with a no-op on the default stream.
          this.#emit({ k: 'waitEvent', s: d, e: 0, why: why2 });
        } else {
          const others = covering.filter((u) => u !== d);
          if (evs.length > 0 && this.chance(0.4)) this.#emit({ k: 'waitEvent', s: d, e: this.pick(evs), why: why2 });
          else if (others.length > 0) this.#emit({ k: 'waitStream', s: d, t: this.pick(others), why: why2 });
          else this.#emit({ k: 'waitEvent', s: d, e: 0, why: why2 }); // covering is only the default stream
        }
        return;
      }
      case 'host':
        this.#hostSync(a, `host ${why}`);
        return;
    }
  }

  /** Contexts whose `synchronize()` covers every stream clock entry in `need` (only streams of that context are waited for). */
  #ctxCovering(covers: (v: readonly number[]) => boolean): number[] {
    return this.contexts
      .filter((c) => {
        const v = new Array<number>(this.streams.length + 1).fill(0);
        for (const t of this.streams) if (t.ctx === c.id) join(v, this.#vc[t.id]!);
        return covers(v);
      })
      .map((c) => c.id);
  }

  /** Inserts a host wait after which the host knows op (p, idx) completed. */
  #hostSync(a: Access, why: string): void {
    const covering = this.#covering(a.p, a.idx, -1);
    const evs = this.#coveringEvents(a.p, a.idx);
    const ctxs = this.#ctxCovering((v) => v[a.p]! >= a.idx);
    const kind = this.weighted([
      ['stream', 4],
      ['event', evs.length > 0 ? 2 : 0],
      ['recordSync', 2],
      ['ctx', ctxs.length > 0 ? 1 : 0],
    ]);
    if (kind === 'stream') this.#emit({ k: 'hostWait', w: { on: 'stream', s: this.pick(covering) }, why });
    else if (kind === 'event') this.#emit({ k: 'hostWait', w: { on: 'event', e: this.pick(evs) }, why });
    else if (kind === 'recordSync') {
      const u = this.pick(covering);
      const e = this.#recordableEvent(this.streams[u]!.ctx);
      this.#emit({ k: 'record', s: u, e, why });
      this.#emit({ k: 'hostWait', w: { on: 'event', e }, why });
    } else this.#emit({ k: 'hostWait', w: { on: 'ctx', c: this.pick(ctxs) }, why });
  }

  #describeNeed(n: Need): string {
    const r = this.res[n.res]!;
    return `${n.w ? 'write' : 'read'} ${r.name}[${n.lo}..${n.hi})`;
  }

  /** Emits the syncs that make `needs` race-free on `s`, then the op itself. */
  #op(step: Step & { s: number }, needs: Need[], claim = false): void {
    for (let guard = 0; ; guard++) {
      if (guard > 100) throw new Error(`generator: could not resolve conflicts for step ${this.steps.length}`);
      const hc = this.#hostConflicts(needs, claim);
      if (hc.length > 0) {
        this.#hostSync(hc[0]!, `host sync: ${this.res[needs.find((n) => this.res[n.res]!.kind === 'pinDown')!.res]!.name} is claimed at enqueue, after the hostFn of step #${hc[0]!.step} read it`);
        continue;
      }
      const cs = this.#conflicts(step.s, needs);
      if (cs.length === 0) break;
      this.#syncStream(step.s, this.pick(cs));
    }
    this.#emit(step, needs);
  }

  /** Host-side accesses (a pageable upload reads its array at the call): the host must know every conflicting op completed. */
  #hostAccess(needs: Need[]): void {
    for (let guard = 0; ; guard++) {
      if (guard > 100) throw new Error(`generator: could not resolve host conflicts for step ${this.steps.length}`);
      const open = needs.flatMap((need) => this.#acc[need.res]!.filter((a) => a.lo < need.hi && need.lo < a.hi && (a.w || need.w) && this.#hostVC[a.p]! < a.idx));
      if (open.length === 0) return;
      this.#hostSync(open[0]!, `host sync: the call reads ${this.res[needs[0]!.res]!.name}, written by step #${open[0]!.step}`);
    }
  }

  /** A host write of a pinned buffer: needs the host to own it (`await ready()`), and its hostFn readers done. */
  #fill(res: number, off: number, data: Uint32Array, why?: string): void {
    for (;;) {
      const hc = this.#acc[res]!.filter((a) => a.hostFnRead && this.#hostVC[a.p]! < a.idx);
      if (hc.length === 0) break;
      this.#hostSync(hc[0]!, `host sync: fill of ${this.res[res]!.name} after the hostFn of step #${hc[0]!.step} read it`);
    }
    if (this.#claimed[res]) {
      // The host may touch the views again once every op that claimed the buffer completed:
      // `await ready()`, or a stream / context synchronize that covers those ops.
      const claims = this.#claimVC[res]!;
      const covers = (v: readonly number[]): boolean => this.streams.every((t) => v[t.id]! >= claims[t.id]!);
      const streams = this.streams.filter((t) => covers(this.#vc[t.id]!)).map((t) => t.id);
      const ctxs = this.#ctxCovering(covers);
      const why = `host owns ${this.res[res]!.name} again before filling it`;
      const form = this.weighted([
        ['ready', 6],
        ['stream', streams.length > 0 ? 2 : 0],
        ['ctx', ctxs.length > 0 ? 1 : 0],
      ]);
      if (form === 'ready') this.#emit({ k: 'hostWait', w: { on: 'ready', res }, why });
      else if (form === 'stream') this.#emit({ k: 'hostWait', w: { on: 'stream', s: this.pick(streams) }, why });
      else this.#emit({ k: 'hostWait', w: { on: 'ctx', c: this.pick(ctxs) }, why });
    }
    this.#emit({ k: 'fill', res, off, data, ...(why ? { why } : {}) });
  }

  // ------------------------------------------------------------- ops
  /** A random stream (a default stream 15% of the time), of `device` when given. */
  #stream(device?: number): number {
    const ok = (t: StreamSpec): boolean => device === undefined || this.contexts[t.ctx]!.device === device;
    const defaults = this.streams.filter((t) => t.isDefault && ok(t));
    const others = this.streams.filter((t) => !t.isDefault && ok(t));
    return (this.chance(0.15) ? this.pick(defaults) : this.pick(others)).id;
  }

  /** A context on the device of stream `s`, whose built-in kernels a launch on `s` uses. */
  #kernelCtx(s: number): number {
    return this.pick(this.contexts.filter((c) => c.device === this.deviceOf(s))).id;
  }

  /** A random transfer range between resources of `srcWords` and `dstWords` words. */
  #range(srcWords: number, dstWords: number): Range {
    const form = this.weighted([
      ['none', 2],
      ['full', 2],
      ['sub', 6],
      ['defaultSize', 2],
      ['empty', 0.3],
    ]);
    // Without a size, a source larger than the destination's room is refused at the call: give it one.
    if (form === 'none') return srcWords <= dstWords ? { srcOff: 0, dstOff: 0, size: null, withOptions: false } : { srcOff: 0, dstOff: 0, size: dstWords, withOptions: true };
    if (form === 'full') return { srcOff: 0, dstOff: 0, size: Math.min(srcWords, dstWords), withOptions: true };
    const size = form === 'empty' ? 0 : this.int(1, Math.min(srcWords, dstWords));
    const srcOff = this.int(0, srcWords - size);
    const dstOff = this.int(0, dstWords - size);
    if (form === 'defaultSize') return { srcOff, dstOff, size: srcWords - srcOff <= dstWords - dstOff ? null : size, withOptions: true };
    return { srcOff, dstOff, size, withOptions: true };
  }

  #transferNeeds(src: number, dst: number, range: Range, srcWords: number, dstWords: number): Need[] {
    const n = rangeSize(range, srcWords, dstWords);
    const needs: Need[] = [];
    // A doomed buffer is the bad op's alone: nothing else touches it.
    if (src >= 0 && this.res[src]!.kind !== 'doom') needs.push({ res: src, lo: range.srcOff, hi: range.srcOff + n, w: false });
    if (this.res[dst]!.kind !== 'doom') needs.push({ res: dst, lo: range.dstOff, hi: range.dstOff + n, w: true });
    return needs;
  }

  #freshArray(cls: Cls, words: number): { arr: Uint32Array; padBefore: number } {
    const pad = this.chance(0.3) ? this.int(1, 8) : 0;
    const arr = new Uint32Array(pad + words);
    arr.set(this.randomWords(cls, words), pad);
    return { arr, padBefore: pad };
  }

  uploadArr(s = this.#stream(), dst = this.pick(this.devs(this.deviceOf(s))), full = false): void {
    const srcWords = full ? dst.words : this.chance(0.5) ? dst.words : this.int(1, 1100);
    const src = this.#freshArray(dst.cls, srcWords);
    const range: Range = full ? { srcOff: 0, dstOff: 0, size: null, withOptions: this.chance(0.5) } : this.#range(srcWords, dst.words);
    this.#op({ k: 'upload', s, src, dst: dst.id, range }, this.#transferNeeds(-1, dst.id, range, srcWords, dst.words));
  }

  /**
   * A pageable upload from a host array that downloads write: the call reads it, so the host must
   * know those landed. Into u32 buffers only: a download into a host array may come from either
   * class, and u32 bits in an f32 buffer can be NaNs or denormals, which the GPU's vectorAdd need
   * not treat as JavaScript does (copies and sleep move any bits exactly).
   */
  uploadHost(): boolean {
    const s = this.#stream();
    const src = this.pick(this.byKind('arr'));
    const dsts = this.devs(this.deviceOf(s), 'u32');
    if (dsts.length === 0) return false;
    const dst = this.pick(dsts);
    const range = this.#range(src.words, dst.words);
    const [read, write] = this.#transferNeeds(src.id, dst.id, range, src.words, dst.words);
    this.#hostAccess([read!]);
    this.#op({ k: 'upload', s, src: { host: src.id }, dst: dst.id, range }, [write!]);
    return true;
  }

  uploadPin(): boolean {
    const pins = this.pinned('pinUp');
    if (pins.length === 0) return false;
    const p = this.pick(pins);
    const dsts = this.devs(p.device, p.cls);
    if (dsts.length === 0) return false;
    const dst = this.pick(dsts);
    const range = this.#range(p.words, dst.words);
    const needs = this.#transferNeeds(p.id, dst.id, range, p.words, dst.words);
    needs.push({ res: p.id, lo: 0, hi: p.words, w: false });
    this.#op({ k: 'upload', s: this.#stream(p.device), src: { pin: p.id }, dst: dst.id, range }, needs, true);
    return true;
  }

  download(toPinned: boolean, s = this.#stream()): ResSpec | null {
    const dsts = toPinned ? this.pinned('pinDown', this.deviceOf(s)) : this.byKind('arr');
    if (dsts.length === 0) return null;
    const dst = this.pick(dsts);
    const src = this.pick(this.devs(this.deviceOf(s)));
    const range = this.#range(src.words, dst.words);
    this.#op({ k: 'download', s, src: src.id, dst: dst.id, range }, this.#transferNeeds(src.id, dst.id, range, src.words, dst.words), toPinned);
    return dst;
  }

  copy(): boolean {
    const s = this.#stream();
    const cls: Cls = this.chance(0.5) ? 'f32' : 'u32';
    const bufs = this.devs(this.deviceOf(s), cls);
    if (bufs.length < 2) return false;
    // Distinct buffers: WebGPU rejects copyBufferToBuffer with source === destination, whatever the ranges.
    const src = this.pick(bufs);
    const dst = this.pick(bufs.filter((b) => b.id !== src.id));
    const range = this.#range(src.words, dst.words);
    this.#op({ k: 'copy', s, src: src.id, dst: dst.id, range }, this.#transferNeeds(src.id, dst.id, range, src.words, dst.words));
    return true;
  }

  add(): boolean {
    const s = this.#stream();
    const f = this.devs(this.deviceOf(s), 'f32');
    const out = this.pick(f);
    const ins = f.filter((x) => x.id !== out.id && x.words >= out.words);
    if (ins.length === 0) return false;
    const a = this.pick(ins);
    const b = this.chance(0.15) ? a : this.pick(ins);
    // A launch counts as touching its whole bindings (the stream sanitizer cannot know which
    // elements a shader reads), so the inputs' synchronizations cover them whole.
    const needs: Need[] = [
      { res: a.id, lo: 0, hi: a.words, w: false },
      { res: b.id, lo: 0, hi: b.words, w: false },
      { res: out.id, lo: 0, hi: out.words, w: true },
    ];
    this.#op({ k: 'add', s, kc: this.#kernelCtx(s), a: a.id, b: b.id, out: out.id, extraGroups: this.chance(0.2) ? this.int(1, 3) : 0 }, needs);
    return true;
  }

  sleep(): boolean {
    const s = this.#stream();
    const bufs = this.devs(this.deviceOf(s), 'u32');
    if (bufs.length === 0) return false;
    const buf = this.pick(bufs);
    const iterations = this.pick(SLEEP_ITERATIONS);
    this.#op({ k: 'sleep', s, kc: this.#kernelCtx(s), buf: buf.id, iterations }, [{ res: buf.id, lo: 0, hi: buf.words, w: true }]);
    return true;
  }

  hostFn(s = this.#stream(), check?: ResSpec): void {
    // Any host-visible memory: a host function of one device may read another device's pinned buffer.
    const hosts = [...this.byKind('arr'), ...this.byKind('pinDown')];
    const checks = check ? [check] : this.chance(0.8) ? [this.pick(hosts)] : [];
    if (!check && checks.length > 0 && this.chance(0.3)) {
      const other = this.pick(hosts);
      if (!checks.includes(other)) checks.push(other);
    }
    const mode = this.weighted([
      ['sync', 2],
      ['asyncBefore', 1],
      ['asyncAfter', 1],
    ]);
    const needs: Need[] = checks.map((c) => ({ res: c.id, lo: 0, hi: c.words, w: false, hostFnRead: true }));
    this.#op({ k: 'hostFn', s, mode, checks: checks.map((c) => ({ res: c.id, expect: new Uint32Array(0), unknown: null })) }, needs);
  }

  /**
   * Data across contexts: a download on one stream, then a hostFn on a stream of another context
   * reads it (on another device this is the only way data crosses). The generator inserts the
   * cross-context wait (an event of the first context, waitStream, or a host wait).
   */
  crossCheck(): boolean {
    if (this.contexts.length < 2) return false;
    const s = this.#stream();
    const dst = this.download(this.chance(0.3) && this.pinned('pinDown', this.deviceOf(s)).length > 0, s);
    if (!dst) return false;
    const others = this.streams.filter((t) => t.ctx !== this.streams[s]!.ctx);
    this.hostFn(this.pick(others).id, dst);
    return true;
  }

  fillPinned(): boolean {
    const pins = [...this.byKind('pinUp'), ...this.byKind('pinDown')];
    if (pins.length === 0) return false;
    const p = this.pick(pins);
    const n = this.chance(0.5) ? p.words : this.int(1, p.words);
    this.#fill(p.id, this.int(0, p.words - n), this.randomWords(p.cls, n));
    return true;
  }

  /**
   * An op the call accepts and WebGPU rejects at submit: it binds or copies a raw GPUBuffer made
   * for it (`doom` says how it is broken). Returns its stream, or null when the stream's device
   * lacks what the chosen form needs.
   */
  bad(): number | null {
    const s = this.#stream();
    const device = this.deviceOf(s);
    const devices = [...new Set(this.contexts.map((c) => c.device))];
    const how = this.weighted<Doom>([
      ['destroyed', 6],
      ['mapped', 3],
      ['foreign', devices.length > 1 ? 2 : 0],
    ]);
    const doomDevice = how === 'foreign' ? devices.find((d) => d !== device)! : device;
    const doom = (cls: Cls, words: number): ResSpec => this.#addRes('doom', cls, words, doomDevice, how);
    const form = this.weighted([
      ['copyFrom', 3],
      ['copyTo', 2],
      ['sleep', 2],
      ['addIn', 2],
      ['addOut', 2],
      ['uploadTo', 1],
      ['downloadFrom', 2],
    ]);
    const why = `injected failure: ${how === 'destroyed' ? 'the GPUBuffer is destroyed after the call' : how === 'mapped' ? 'the GPUBuffer stays mapped' : 'the GPUBuffer is of the other device'}`;
    const devs = this.devs(device);
    const f32 = this.devs(device, 'f32');
    switch (form) {
      case 'copyFrom': {
        const dst = this.pick(devs);
        const x = doom(dst.cls, this.int(1, 1100));
        const range = this.#range(x.words, dst.words);
        this.#op({ k: 'copy', s, src: x.id, dst: dst.id, range, why }, this.#transferNeeds(x.id, dst.id, range, x.words, dst.words));
        return s;
      }
      case 'copyTo': {
        const src = this.pick(devs);
        const x = doom(src.cls, this.int(1, 1100));
        const range = this.#range(src.words, x.words);
        this.#op({ k: 'copy', s, src: src.id, dst: x.id, range, why }, this.#transferNeeds(src.id, x.id, range, src.words, x.words));
        return s;
      }
      case 'sleep': {
        const x = doom('u32', this.int(16, 1024));
        this.#op({ k: 'sleep', s, kc: this.#kernelCtx(s), buf: x.id, iterations: this.pick(SLEEP_ITERATIONS), why }, []);
        return s;
      }
      case 'addIn': {
        const out = this.pick(f32);
        const bs = f32.filter((x) => x.id !== out.id && x.words >= out.words);
        if (bs.length === 0) return null;
        const b = this.pick(bs);
        const x = doom('f32', this.int(out.words, 1100));
        const needs: Need[] = [
          { res: b.id, lo: 0, hi: b.words, w: false },
          { res: out.id, lo: 0, hi: out.words, w: true },
        ];
        this.#op({ k: 'add', s, kc: this.#kernelCtx(s), a: x.id, b: b.id, out: out.id, extraGroups: 0, why }, needs);
        return s;
      }
      case 'addOut': {
        const a = this.pick(f32);
        const b = this.pick(f32);
        const x = doom('f32', this.int(1, Math.min(a.words, b.words)));
        const needs: Need[] = [
          { res: a.id, lo: 0, hi: a.words, w: false },
          { res: b.id, lo: 0, hi: b.words, w: false },
        ];
        this.#op({ k: 'add', s, kc: this.#kernelCtx(s), a: a.id, b: b.id, out: x.id, extraGroups: 0, why }, needs);
        return s;
      }
      case 'uploadTo': {
        const x = doom(this.chance(0.5) ? 'f32' : 'u32', this.int(1, 1100));
        const srcWords = this.chance(0.5) ? x.words : this.int(1, 1100);
        const range = this.#range(srcWords, x.words);
        this.#op({ k: 'upload', s, src: this.#freshArray(x.cls, srcWords), dst: x.id, range, why }, []);
        return s;
      }
      case 'downloadFrom': {
        const pins = this.pinned('pinDown', device);
        const dst = pins.length > 0 && this.chance(0.4) ? this.pick(pins) : this.pick(this.byKind('arr'));
        const x = doom(dst.cls, this.int(1, 1100));
        const range = this.#range(x.words, dst.words);
        this.#op({ k: 'download', s, src: x.id, dst: dst.id, range, why }, this.#transferNeeds(x.id, dst.id, range, x.words, dst.words), dst.kind === 'pinDown');
        return s;
      }
    }
    return null;
  }

  /** Synchronization that is not needed for correctness: it only adds edges (or is a no-op). */
  noiseSync(): void {
    const kind = this.weighted([
      ['record', 3],
      ['waitEvent', 3],
      ['waitNever', 1],
      ['waitStream', 2],
      ['waitSelf', 0.3],
      ['hostWait', this.failing ? 2 : 1],
      ['flush', 1],
      ['yield', 1],
    ]);
    const s = this.#stream();
    switch (kind) {
      case 'record':
        this.#emit({ k: 'record', s, e: this.#recordableEvent(this.streams[s]!.ctx) });
        break;
      case 'waitEvent':
        this.#emit({ k: 'waitEvent', s, e: this.pick(this.events).id });
        break;
      case 'waitNever':
        this.#emit({ k: 'waitEvent', s, e: 0 });
        break;
      case 'waitStream':
        this.#emit({ k: 'waitStream', s, t: this.pick(this.streams.filter((t) => t.id !== s)).id });
        break;
      case 'waitSelf':
        this.#emit({ k: 'waitStream', s, t: s });
        break;
      case 'flush':
        this.#emit({ k: 'flush', c: this.pick(this.contexts).id });
        break;
      case 'yield':
        this.#emit({ k: 'yield', turns: this.int(1, 4) });
        break;
      case 'hostWait': {
        const w = this.weighted([
          ['stream', 3],
          ['event', 2],
          ['ctx', 1],
          ['ready', 1],
        ]);
        const pins = [...this.byKind('pinUp'), ...this.byKind('pinDown')];
        if (w === 'stream') this.#emit({ k: 'hostWait', w: { on: 'stream', s } });
        else if (w === 'event') this.#emit({ k: 'hostWait', w: { on: 'event', e: this.pick(this.events).id } });
        else if (w === 'ready' && pins.length > 0) this.#emit({ k: 'hostWait', w: { on: 'ready', res: this.pick(pins).id } });
        else this.#emit({ k: 'hostWait', w: { on: 'ctx', c: this.pick(this.contexts).id } });
        break;
      }
    }
  }

  /** A whole program: setup, initial contents of everything, random steps, then the final synchronizes. */
  generate(force: Force = {}): Program {
    this.chooseFamily(force);
    this.setup();
    // Initial contents: never zeros. Pinned buffers are filled by the host while it owns them.
    for (const p of this.res) if (p.kind === 'pinUp' || p.kind === 'pinDown') this.#fill(p.id, 0, this.randomWords(p.cls, p.words), 'initial contents');
    for (const b of this.res.filter(onDevice)) {
      const s = this.#stream(b.device);
      const src = this.pinned('pinUp', b.device).find((p) => p.cls === b.cls && p.words >= b.words);
      if (src && this.chance(0.3)) {
        const range: Range = { srcOff: 0, dstOff: 0, size: b.words, withOptions: true };
        this.#op({ k: 'upload', s, src: { pin: src.id }, dst: b.id, range, why: 'initial contents' }, [{ res: b.id, lo: 0, hi: b.words, w: true }, { res: src.id, lo: 0, hi: src.words, w: false }], true);
      } else this.uploadArr(s, b, true);
    }
    const nOps = this.int(20, 60);
    // Injected failures go at points chosen up front; the rest of the program goes on around them.
    const badAt = new Set<number>();
    if (this.failing) {
      const nBad = this.weighted([
        ['1', 13],
        ['2', 5],
        ['3', 2],
      ]);
      while (badAt.size < Number(nBad)) badAt.add(this.int(0, nOps - 1));
    }
    // Most injected failures are reported a few ops later (the doomed stream's synchronize, or its
    // context's): work enqueued after a report starts clean, so more streams stay innocent and are
    // compared exactly, and the programs check that a report ends the failure.
    const reportAt = new Map<number, number[]>();
    const multi = this.contexts.length > 1;
    for (let i = 0; i < nOps; i++) {
      for (const s of reportAt.get(i) ?? []) {
        const w: HostWait = this.chance(0.75) ? { on: 'stream', s } : { on: 'ctx', c: this.streams[s]!.ctx };
        this.#emit({ k: 'hostWait', w, why: 'report the injected failure' });
      }
      if (badAt.has(i)) {
        let s: number | null;
        while ((s = this.bad()) === null);
        if (this.chance(0.6)) {
          const at = i + this.int(1, 6);
          reportAt.set(at, [...(reportAt.get(at) ?? []), s]);
        }
        continue;
      }
      const kind = this.weighted([
        ['uploadArr', 8],
        ['uploadHost', 2],
        ['uploadPin', 6],
        ['downloadArr', 6],
        ['downloadPin', 5],
        ['downloadCheck', 5],
        ['crossCheck', multi ? 5 : 0],
        ['copy', 10],
        ['add', 12],
        ['sleep', 7],
        ['hostFn', 4],
        ['fill', 3],
        ['noise', 8],
      ]);
      switch (kind) {
        case 'uploadArr':
          this.uploadArr();
          break;
        case 'uploadHost':
          if (!this.uploadHost()) this.uploadArr();
          break;
        case 'uploadPin':
          if (!this.uploadPin()) this.uploadArr();
          break;
        case 'downloadArr':
          this.download(false);
          break;
        case 'downloadPin':
          if (!this.download(true)) this.download(false);
          break;
        case 'downloadCheck': {
          // The classic callback pattern: download, then a hostFn on the same stream reads the data.
          const s = this.#stream();
          const dst = this.download(this.chance(0.5) && this.pinned('pinDown', this.deviceOf(s)).length > 0, s);
          if (dst) this.hostFn(s, dst);
          break;
        }
        case 'crossCheck':
          this.crossCheck();
          break;
        case 'copy':
          if (!this.copy()) this.add();
          break;
        case 'add':
          if (!this.add()) this.uploadArr();
          break;
        case 'sleep':
          if (!this.sleep()) this.add();
          break;
        case 'hostFn':
          this.hostFn();
          break;
        case 'fill':
          this.fillPinned();
          break;
        case 'noise':
          this.noiseSync();
          break;
      }
    }
    // The end: every context synchronizes (one context's does not wait for another's streams).
    // With failures, every stream's own synchronize first: the doomed ones reject, innocent ones
    // resolve; then each context reports what its streams did not yet report to it.
    if (this.failing) for (const t of this.shuffle(this.streams.map((t) => t.id))) this.#emit({ k: 'hostWait', w: { on: 'stream', s: t }, why: 'final' });
    for (const c of this.shuffle(this.contexts.map((c) => c.id))) this.#emit({ k: 'hostWait', w: { on: 'ctx', c }, why: 'final' });
    return {
      seed: this.seed,
      variant: this.variant,
      failing: this.failing,
      contexts: this.contexts,
      streams: this.streams,
      res: this.res,
      events: this.events,
      steps: this.steps,
      final: this.data.map((d) => d.slice()),
      unknown: this.unknown.map((u) => (u.includes(1) ? u.slice() : null)),
    };
  }
}

/** Generates the program for `seed` (`force`: a family other than the seed's own). */
export function generateProgram(seed: number, force: Force = {}): Program {
  return new Generator(seed).generate(force);
}

/** The family of `seed`'s program, without generating it. */
export function programFamily(seed: number, force: Force = {}): string {
  const f = new Generator(seed).chooseFamily(force);
  return f.failing ? `${f.variant}+failing` : f.variant;
}

// ------------------------------------------------------------- listing

function showRange(r: Range, srcWords: number, dstWords: number): string {
  const n = rangeSize(r, srcWords, dstWords);
  if (!r.withOptions) return `(no options: ${n} words)`;
  return `{srcOffset ${r.srcOff * 4}, dstOffset ${r.dstOff * 4}, size ${r.size === null ? `default=${n * 4}` : n * 4}} (words [${r.srcOff}..${r.srcOff + n}) -> [${r.dstOff}..${r.dstOff + n}))`;
}

/** An expected outcome, as the listing and failure messages say it. */
export function showOutcome(errs: readonly ErrName[] | undefined): string {
  if (!errs || errs.length === 0) return 'resolves';
  return errs.length === 1 ? `rejects with ${errs[0]}` : `rejects with AggregateStreamError [${errs.join(', ')}]`;
}

/** One line per step, for failure messages. */
export function describeStep(p: Program, step: Step): string {
  const S = (s: number): string => p.streams[s]!.name;
  const R = (r: number): ResSpec => p.res[r]!;
  const E = (e: number): string => p.events[e]!.name;
  const C = (c: number): string => p.contexts[c]!.name;
  const K = (kc: number, s: number): string => (kc === p.streams[s]!.ctx ? '' : `${C(kc)}.kernels.`);
  let t: string;
  switch (step.k) {
    case 'upload': {
      const dst = R(step.dst);
      const src = step.src;
      if ('pin' in src) t = `${S(step.s)}.upload(${R(src.pin).name}, ${dst.name}, ${showRange(step.range, R(src.pin).words, dst.words)})`;
      else if ('host' in src) t = `${S(step.s)}.upload(${R(src.host).name}, ${dst.name}, ${showRange(step.range, R(src.host).words, dst.words)})`;
      else {
        const words = src.arr.length - src.padBefore;
        t = `${S(step.s)}.upload(${dst.cls === 'f32' ? 'Float32Array' : 'Uint32Array'}[${words}]${src.padBefore ? ` @byteOffset ${src.padBefore * 4}` : ''}, ${dst.name}, ${showRange(step.range, words, dst.words)})`;
      }
      break;
    }
    case 'download':
    case 'copy': {
      const src = R(step.src);
      const dst = R(step.dst);
      t = `${S(step.s)}.${step.k}(${src.name}, ${dst.name}, ${showRange(step.range, src.words, dst.words)})`;
      break;
    }
    case 'add':
      t = `${S(step.s)}.launch(${K(step.kc, step.s)}vectorAdd, [${R(step.a).name}, ${R(step.b).name}, ${R(step.out).name}])${step.extraGroups ? ` +${step.extraGroups} extra workgroups` : ''}`;
      break;
    case 'sleep':
      t = `${S(step.s)}.launch(${K(step.kc, step.s)}sleep, [${R(step.buf).name}], iterations ${step.iterations})`;
      break;
    case 'record':
      t = `${S(step.s)}.record(${E(step.e)})`;
      break;
    case 'waitEvent':
      t = `${S(step.s)}.waitEvent(${E(step.e)})`;
      break;
    case 'waitStream':
      t = `${S(step.s)}.waitStream(${S(step.t)})`;
      break;
    case 'hostFn':
      t = `${S(step.s)}.hostFn(${step.mode}: check ${step.checks.map((c) => R(c.res).name).join(', ') || 'nothing'})`;
      break;
    case 'fill':
      t = `host: ${R(step.res).name}.u32.set(random[${step.data.length}], ${step.off})`;
      break;
    case 'flush':
      t = `host: ${C(step.c)}.flush()`;
      break;
    case 'yield':
      t = `host: yield to the event loop ${step.turns}x (no synchronization)`;
      break;
    case 'hostWait': {
      const w = step.w;
      t = `host: await ${w.on === 'stream' ? `${S(w.s)}.synchronize()` : w.on === 'event' ? `${E(w.e)}.synchronize()` : w.on === 'ctx' ? `${C(w.c)}.synchronize()` : `${R(w.res).name}.ready()`}`;
      if (p.failing) t += ` -> ${showOutcome(step.expect)}`;
      break;
    }
  }
  if (step.fail) t += ` -> fails: ${step.fail}`;
  return step.why ? `${t}   // ${step.why}` : t;
}

/** A readable listing of the whole program. */
export function describeProgram(p: Program): string {
  const lines: string[] = [];
  const multi = p.contexts.length > 1;
  lines.push(`family: ${p.variant}${p.failing ? ' + injected failures' : ''}`);
  if (multi) lines.push(`contexts: ${p.contexts.map((c) => `${c.name} (device ${c.device}${c.id > 0 && c.device === 0 ? `, borrows ${p.contexts[0]!.name}'s device` : ''})`).join(', ')}`);
  lines.push(`streams: ${p.streams.map((s) => (s.isDefault ? `${s.name} (${p.contexts[s.ctx]!.name}.defaultStream)` : `${s.name} (priority ${s.priority}${s.nonBlocking ? ', nonBlocking' : ''})`)).join(', ')}`);
  lines.push(
    `resources: ${p.res
      .map((r) => {
        const where = multi && r.ctx >= 0 ? `, ${p.contexts[r.ctx]!.name}` : '';
        const extra = r.padBefore || r.padAfter ? ` (padding ${r.padBefore}+${r.padAfter} words)` : r.doom ? ` (${r.doom}${where})` : where ? ` (${where.slice(2)})` : '';
        return `${r.name} ${r.kind} ${r.cls}[${r.words}]${extra}`;
      })
      .join(', ')}`,
  );
  lines.push(`events: ${p.events.map((e) => `${e.name}${e.timing ? ' (timing)' : ''}`).join(', ')}`);
  p.steps.forEach((s, i) => lines.push(`#${String(i).padStart(3)} ${describeStep(p, s)}`));
  return lines.join('\n');
}

// ------------------------------------------------------------- races

/** A conflicting pair of accesses that nothing orders, found by {@link findRaces}. */
export interface ModelRace {
  res: string;
  /** The later step's index, and the earlier one's. */
  step: number;
  other: number;
  /** A device buffer or pinned buffer (the stream sanitizer tracks it), or a host array (it cannot). */
  tracked: boolean;
}

/**
 * Every race of `p` under the stream sanitizer's access model, by an implementation of its own
 * (vector clocks over the steps, as documented in src/sanitizer.ts): for a program generated
 * race-free and then changed (a wait dropped). A launch touches its whole bindings; a transfer
 * its byte range; a view of a pinned buffer the whole buffer, as a write for an upload buffer and
 * a read for a download buffer; a host array (pageable download destination, pageable upload
 * source) is a resource the sanitizer cannot see. Returns at most one race per step and resource.
 */
export function findRaces(p: Program): ModelRace[] {
  const H = p.streams.length;
  const n = H + 1;
  const zero = (): number[] => new Array<number>(n).fill(0);
  const vc = p.streams.map(zero);
  const host = zero();
  const events: (number[] | null)[] = p.events.map(() => null);
  const users: number[][] = p.res.map(zero);
  type Acc = { p: number; idx: number; vc: number[]; lo: number; hi: number; w: boolean; step: number };
  const acc: Acc[][] = p.res.map(() => []);
  const races: ModelRace[] = [];
  const join = (into: number[], from: readonly number[]): void => {
    for (let i = 0; i < n; i++) if (from[i]! > into[i]!) into[i] = from[i]!;
  };
  /** A new op on stream `s`: its clock. */
  const tick = (s: number): number[] => {
    const spec = p.streams[s]!;
    const v = vc[s]!;
    v[s]!++;
    join(v, host);
    for (const t of p.streams) {
      if (t.ctx !== spec.ctx || t.id === s) continue;
      if (spec.isDefault ? !t.isDefault && !t.nonBlocking : t.isDefault && !spec.nonBlocking) join(v, vc[t.id]!);
    }
    return v.slice();
  };
  const touch = (step: number, res: number, who: number, clock: number[], lo: number, hi: number, w: boolean): void => {
    const r = p.res[res]!;
    if (r.kind === 'doom' || hi <= lo) return;
    const idx = clock[who]!;
    const list = acc[res]!;
    const found = list.find((a) => a.lo < hi && lo < a.hi && (a.w || w) && !(a.idx <= clock[a.p]!) && !(idx <= a.vc[who]!));
    if (found && !races.some((x) => x.step === step && x.res === r.name)) races.push({ res: r.name, step, other: found.step, tracked: r.kind !== 'arr' });
    list.push({ p: who, idx, vc: clock, lo, hi, w, step });
  };
  const whole = (res: number): number => p.res[res]!.words;
  p.steps.forEach((st, i) => {
    switch (st.k) {
      case 'upload': {
        const dst = p.res[st.dst]!;
        if ('host' in st.src) {
          // The call copies the host array out: a host read, now.
          host[H]!++;
          const src = p.res[st.src.host]!;
          const m = rangeSize(st.range, src.words, dst.words);
          touch(i, src.id, H, host.slice(), st.range.srcOff, st.range.srcOff + m, false);
        }
        const c = tick(st.s);
        if ('pin' in st.src) {
          const src = p.res[st.src.pin]!;
          const m = rangeSize(st.range, src.words, dst.words);
          touch(i, src.id, st.s, c, st.range.srcOff, st.range.srcOff + m, false);
          join(users[src.id]!, c);
          touch(i, dst.id, st.s, c, st.range.dstOff, st.range.dstOff + m, true);
        } else {
          const srcWords = 'host' in st.src ? p.res[st.src.host]!.words : st.src.arr.length - st.src.padBefore;
          const m = rangeSize(st.range, srcWords, dst.words);
          touch(i, dst.id, st.s, c, st.range.dstOff, st.range.dstOff + m, true);
        }
        break;
      }
      case 'download':
      case 'copy': {
        const c = tick(st.s);
        const src = p.res[st.src]!;
        const dst = p.res[st.dst]!;
        const m = rangeSize(st.range, src.words, dst.words);
        touch(i, src.id, st.s, c, st.range.srcOff, st.range.srcOff + m, false);
        touch(i, dst.id, st.s, c, st.range.dstOff, st.range.dstOff + m, true);
        if (dst.kind === 'pinDown') join(users[dst.id]!, c);
        break;
      }
      case 'add': {
        const c = tick(st.s);
        touch(i, st.a, st.s, c, 0, whole(st.a), false);
        touch(i, st.b, st.s, c, 0, whole(st.b), false);
        touch(i, st.out, st.s, c, 0, whole(st.out), true);
        break;
      }
      case 'sleep': {
        const c = tick(st.s);
        touch(i, st.buf, st.s, c, 0, whole(st.buf), true);
        break;
      }
      case 'record':
        events[st.e] = tick(st.s);
        break;
      case 'waitEvent':
        tick(st.s);
        if (events[st.e]) join(vc[st.s]!, events[st.e]!);
        break;
      case 'waitStream':
        tick(st.s);
        join(vc[st.s]!, vc[st.t]!.slice());
        break;
      case 'hostFn': {
        const c = tick(st.s);
        for (const ch of st.checks) {
          const r = p.res[ch.res]!;
          touch(i, r.id, st.s, c, 0, r.words, r.kind === 'pinUp');
        }
        break;
      }
      case 'fill': {
        host[H]!++;
        const r = p.res[st.res]!;
        touch(i, r.id, H, host.slice(), 0, r.words, r.kind === 'pinUp');
        break;
      }
      case 'hostWait': {
        const w = st.w;
        if (w.on === 'stream') join(host, vc[w.s]!);
        else if (w.on === 'event') {
          if (events[w.e]) join(host, events[w.e]!);
        } else if (w.on === 'ctx') {
          for (const s of p.streams) if (s.ctx === w.c) join(host, vc[s.id]!);
        } else join(host, users[w.res]!);
        break;
      }
    }
  });
  return races;
}
