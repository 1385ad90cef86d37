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
 */
import { rng, sleepStep, type Rng } from '../bench/reference.js';

/** Element class of a buffer: f32 buffers feed vectorAdd, u32 buffers feed sleep. Copies stay in class. */
export type Cls = 'f32' | 'u32';

export interface StreamSpec {
  /** 0 is the context's default stream. */
  id: number;
  name: string;
  priority: number;
  nonBlocking: boolean;
  isDefault: boolean;
}

/** dev: ctx.alloc; arr: a typed array (a view inside a padded ArrayBuffer); pinUp/pinDown: ctx.allocHost. */
export type ResKind = 'dev' | 'arr' | 'pinUp' | 'pinDown';

export interface ResSpec {
  id: number;
  name: string;
  kind: ResKind;
  cls: Cls;
  words: number;
  /** arr: initial contents (host memory at program start); others start at zero. */
  init: Uint32Array | null;
  /** arr: words of padding before and after the view in its ArrayBuffer (must stay untouched). */
  padBefore: number;
  padAfter: number;
}

export interface EventSpec {
  id: number;
  name: string;
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
  | { on: 'ctx' }
  | { on: 'ready'; res: number };

export type Step = (
  | { k: 'upload'; s: number; src: { arr: Uint32Array; padBefore: number } | { pin: number }; dst: number; range: Range }
  | { k: 'download'; s: number; src: number; dst: number; range: Range }
  | { k: 'copy'; s: number; src: number; dst: number; range: Range }
  | { k: 'add'; s: number; a: number; b: number; out: number; extraGroups: number }
  | { k: 'sleep'; s: number; buf: number; iterations: number }
  | { k: 'record'; s: number; e: number }
  | { k: 'waitEvent'; s: number; e: number }
  | { k: 'waitStream'; s: number; t: number }
  | { k: 'hostFn'; s: number; mode: 'sync' | 'asyncBefore' | 'asyncAfter'; checks: { res: number; expect: Uint32Array }[] }
  | { k: 'fill'; res: number; off: number; data: Uint32Array }
  | { k: 'hostWait'; w: HostWait }
  /** Host perturbations, no synchronization: `ctx.flush()`, or yield to the event loop `turns` times. */
  | { k: 'flush' }
  | { k: 'yield'; turns: number }
) & {
  /** Why the generator inserted this step (synchronizations), for the listing. */
  why?: string;
};

export interface Program {
  seed: number;
  streams: StreamSpec[];
  res: ResSpec[];
  events: EventSpec[];
  steps: Step[];
  /** Model state of every resource after the last step, as 32-bit words. */
  final: Uint32Array[];
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

const join = (into: number[], from: readonly number[]): void => {
  for (let i = 0; i < into.length; i++) if (from[i]! > into[i]!) into[i] = from[i]!;
};

/** Size in words that a transfer moves with `range` between resources of `srcWords` and `dstWords`. */
export function rangeSize(r: Range, srcWords: number, dstWords: number): number {
  return r.size ?? Math.min(srcWords - r.srcOff, dstWords - r.dstOff);
}

export class Generator {
  readonly r: Rng;
  readonly streams: StreamSpec[] = [];
  readonly res: ResSpec[] = [];
  readonly events: EventSpec[] = [];
  readonly steps: Step[] = [];
  /** Model contents of each resource. */
  readonly data: Uint32Array[] = [];
  readonly #acc: Access[][] = [];
  /** Pinned: enqueued ops claimed it since the last `ready()` the host awaited. */
  readonly #claimed: boolean[] = [];
  /** Pinned: join of the clocks of every op that claimed it. */
  readonly #claimVC: number[][] = [];
  #vc: number[][] = [];
  #hostVC: number[] = [];
  #evVC: (number[] | null)[] = [];
  #H = 0;

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
    return opts[opts.length - 1]![0];
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
  setup(): void {
    const nStreams = this.int(2, 4);
    this.streams.push({ id: 0, name: 'D', priority: 0, nonBlocking: false, isDefault: true });
    for (let i = 1; i <= nStreams; i++) {
      const priority = this.chance(0.5) ? 0 : this.int(-5, -1);
      this.streams.push({ id: i, name: `s${i}`, priority, nonBlocking: this.chance(0.3), isDefault: false });
    }
    this.#H = this.streams.length;
    const P = this.streams.length + 1;
    this.#vc = this.streams.map(() => new Array<number>(P).fill(0));
    this.#hostVC = new Array<number>(P).fill(0);

    const size = (): number => (this.chance(0.3) ? this.pick([16, 17, 64, 255, 256, 257, 1024]) : this.int(16, 1024));
    const nDev = this.int(4, 8);
    for (let i = 0; i < nDev; i++) this.#addRes('dev', i < 2 ? 'f32' : i === 2 ? 'u32' : this.chance(0.6) ? 'f32' : 'u32', size());
    const nArr = this.int(1, 3);
    for (let i = 0; i < nArr; i++) this.#addRes('arr', this.chance(0.5) ? 'f32' : 'u32', size());
    const nUp = this.int(0, 2);
    for (let i = 0; i < nUp; i++) this.#addRes('pinUp', this.chance(0.5) ? 'f32' : 'u32', size());
    const nDown = this.int(0, 2);
    for (let i = 0; i < nDown; i++) this.#addRes('pinDown', this.chance(0.5) ? 'f32' : 'u32', size());

    const nEvents = this.int(2, 5);
    for (let i = 0; i < nEvents; i++) this.events.push({ id: i, name: i === 0 ? 'e0never' : `e${i}`, never: i === 0, timing: this.chance(0.3) });
    this.#evVC = this.events.map(() => null);
  }

  #addRes(kind: ResKind, cls: Cls, words: number): void {
    const id = this.res.length;
    const prefix = { dev: 'b', arr: 'h', pinUp: 'pu', pinDown: 'pd' }[kind];
    const n = this.res.filter((x) => x.kind === kind).length;
    const init = kind === 'arr' ? this.randomWords(cls, words) : null;
    const pad = kind === 'arr' && this.chance(0.5);
    this.res.push({ id, name: `${prefix}${n}`, kind, cls, words, init, padBefore: pad ? this.int(1, 8) : 0, padAfter: pad ? this.int(0, 8) : 0 });
    this.data.push(init ? init.slice() : new Uint32Array(words));
    this.#acc.push([]);
    this.#claimed.push(false);
    this.#claimVC.push(new Array<number>(this.streams.length + 1).fill(0));
  }

  byKind(kind: ResKind, cls?: Cls): ResSpec[] {
    return this.res.filter((x) => x.kind === kind && (cls === undefined || x.cls === cls));
  }

  // ------------------------------------------------------------- clocks
  /** The clock the next op enqueued on `s` would get (its own entry already counted). */
  #nextVC(s: number, extra?: readonly number[] | null): number[] {
    const v = this.#vc[s]!.slice();
    join(v, this.#hostVC);
    const spec = this.streams[s]!;
    if (spec.isDefault) {
      for (const t of this.streams) if (!t.isDefault && !t.nonBlocking) join(v, this.#vc[t.id]!);
    } else if (!spec.nonBlocking) join(v, this.#vc[0]!);
    if (extra) join(v, extra);
    v[s]!++;
    return v;
  }

  #conflicts(s: number, needs: Need[]): Conflict[] {
    const v = this.#nextVC(s);
    const out: Conflict[] = [];
    for (const need of needs) {
      for (const a of this.#acc[need.res]!) {
        if (a.lo < need.hi && need.lo < a.hi && (a.w || need.w) && v[a.p]! < a.idx) out.push({ a, need });
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

  // ------------------------------------------------------------- emitting
  /** Appends a step: updates clocks, access history and the model state. */
  #emit(step: Step, needs: Need[] = []): void {
    const idx = this.steps.length;
    this.steps.push(step);
    if (step.k === 'fill') {
      this.#hostVC[this.#H]!++;
      this.#acc[step.res]!.push({ p: this.#H, idx: this.#hostVC[this.#H]!, lo: step.off, hi: step.off + step.data.length, w: true, hostFnRead: false, step: idx });
      this.data[step.res]!.set(step.data, step.off);
      return;
    }
    if (step.k === 'flush' || step.k === 'yield') return;
    if (step.k === 'hostWait') {
      const w = step.w;
      if (w.on === 'stream') join(this.#hostVC, this.#vc[w.s]!);
      else if (w.on === 'event') {
        const e = this.#evVC[w.e];
        if (e) join(this.#hostVC, e);
      } else if (w.on === 'ctx') for (const v of this.#vc) join(this.#hostVC, v);
      else join(this.#hostVC, this.#claimVC[w.res]!);
      // A pinned buffer is host-owned again once the host knows every op that claimed it completed.
      for (const r of this.res) {
        if (this.#claimed[r.id] && this.#claimVC[r.id]!.every((x, i) => this.#hostVC[i]! >= x)) this.#claimed[r.id] = false;
      }
      return;
    }
    const s = step.s;
    const extra = step.k === 'waitEvent' ? this.#evVC[step.e] : step.k === 'waitStream' ? this.#vc[step.t] : null;
    const v = this.#nextVC(s, extra);
    this.#vc[s] = v;
    const me = v[s]!;
    for (const n of needs) this.#acc[n.res]!.push({ p: s, idx: me, lo: n.lo, hi: n.hi, w: n.w, hostFnRead: n.hostFnRead ?? false, step: idx });
    switch (step.k) {
      case 'record':
        this.#evVC[step.e] = v.slice();
        break;
      case 'upload': {
        const dst = this.res[step.dst]!;
        if ('pin' in step.src) {
          const p = this.res[step.src.pin]!;
          const n = rangeSize(step.range, p.words, dst.words);
          this.data[step.dst]!.set(this.data[p.id]!.subarray(step.range.srcOff, step.range.srcOff + n), step.range.dstOff);
          this.#claim(p.id, v);
        } else {
          const n = rangeSize(step.range, step.src.arr.length - step.src.padBefore, dst.words);
          const from = step.src.padBefore + step.range.srcOff;
          this.data[step.dst]!.set(step.src.arr.subarray(from, from + n), step.range.dstOff);
        }
        break;
      }
      case 'download':
      case 'copy': {
        const src = this.res[step.src]!;
        const dst = this.res[step.dst]!;
        const n = rangeSize(step.range, src.words, dst.words);
        this.data[dst.id]!.set(this.data[src.id]!.slice(step.range.srcOff, step.range.srcOff + n), step.range.dstOff);
        if (dst.kind === 'pinDown') this.#claim(dst.id, v);
        break;
      }
      case 'add': {
        const a = new Float32Array(this.data[step.a]!.buffer);
        const b = new Float32Array(this.data[step.b]!.buffer);
        const out = new Float32Array(this.data[step.out]!.buffer);
        for (let i = 0; i < out.length; i++) out[i] = Math.fround(a[i]! + b[i]!);
        break;
      }
      case 'sleep': {
        const d = this.data[step.buf]!;
        for (let i = 0; i < d.length; i++) d[i] = sleepStep(d[i]!, step.iterations);
        break;
      }
      case 'hostFn':
        for (const c of step.checks) c.expect = this.data[c.res]!.slice();
        break;
      default:
        break;
    }
  }

  #claim(res: number, v: number[]): void {
    this.#claimed[res] = true;
    join(this.#claimVC[res]!, v);
  }

  /** Streams whose work so far includes op `idx` of participant `p`. */
  #covering(p: number, idx: number, except: number): number[] {
    return this.streams.filter((t) => t.id !== except && this.#vc[t.id]![p]! >= idx).map((t) => t.id);
  }

  #coveringEvents(p: number, idx: number): number[] {
    return this.events.filter((e) => !e.never && (this.#evVC[e.id]?.[p] ?? -1) >= idx).map((e) => e.id);
  }

  #recordableEvent(): number {
    return this.pick(this.events.filter((e) => !e.never)).id;
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
        const e = this.#recordableEvent();
        this.#emit({ k: 'record', s: u, e, why });
        this.#emit({ k: 'waitEvent', s, e, why });
        return;
      }
      case 'waitStream':
        this.#emit({ k: 'waitStream', s, t: covering.includes(a.p) && this.chance(0.5) ? a.p : this.pick(covering), why });
        return;
      case 'legacy': {
        // An op on the default stream; `s` (blocking) then waits for it by legacy semantics.
        const why2 = `${why} (via default stream)`;
        const blockingCover = covering.filter((u) => !this.streams[u]!.nonBlocking && u !== 0);
        if (blockingCover.length > 0 && this.chance(0.7)) {
          // The default stream waits for every blocking stream by itself: any op there will do.
          const form = this.weighted([
            ['record', 1],
            ['waitNever', 1],
            ['waitStream', 1],
          ]);
          if (form === 'record') this.#emit({ k: 'record', s: 0, e: this.#recordableEvent(), why: why2 });
          else if (form === 'waitNever') this.#emit({ k: 'waitEvent', s: 0, e: 0, why: why2 });
          else this.#emit({ k: 'waitStream', s: 0, t: this.pick(this.streams).id, why: why2 });
        } else if (covering.includes(0) && this.chance(0.3)) {
          // The default stream already covers it: `s` waits for it anyway on its next op;
          // make that explicit with a no-op on the default stream.
          this.#emit({ k: 'waitEvent', s: 0, e: 0, why: why2 });
        } else {
          const others = covering.filter((u) => u !== 0);
          if (evs.length > 0 && this.chance(0.4)) this.#emit({ k: 'waitEvent', s: 0, e: this.pick(evs), why: why2 });
          else if (others.length > 0) this.#emit({ k: 'waitStream', s: 0, t: this.pick(others), why: why2 });
          else this.#emit({ k: 'waitEvent', s: 0, e: 0, why: why2 }); // covering is only the default stream
        }
        return;
      }
      case 'host':
        this.#hostSync(a, `host ${why}`);
        return;
    }
  }

  /** Inserts a host wait after which the host knows op (p, idx) completed. */
  #hostSync(a: Access, why: string): void {
    const covering = this.#covering(a.p, a.idx, -1);
    const evs = this.#coveringEvents(a.p, a.idx);
    const kind = this.weighted([
      ['stream', 4],
      ['event', evs.length > 0 ? 2 : 0],
      ['recordSync', 2],
      ['ctx', 1],
    ]);
    if (kind === 'stream') this.#emit({ k: 'hostWait', w: { on: 'stream', s: this.pick(covering) }, why });
    else if (kind === 'event') this.#emit({ k: 'hostWait', w: { on: 'event', e: this.pick(evs) }, why });
    else if (kind === 'recordSync') {
      const e = this.#recordableEvent();
      this.#emit({ k: 'record', s: this.pick(covering), e, why });
      this.#emit({ k: 'hostWait', w: { on: 'event', e }, why });
    } else this.#emit({ k: 'hostWait', w: { on: 'ctx' }, why });
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
      const why = `host owns ${this.res[res]!.name} again before filling it`;
      const form = this.weighted([
        ['ready', 6],
        ['stream', streams.length > 0 ? 2 : 0],
        ['ctx', 1],
      ]);
      if (form === 'ready') this.#emit({ k: 'hostWait', w: { on: 'ready', res }, why });
      else if (form === 'stream') this.#emit({ k: 'hostWait', w: { on: 'stream', s: this.pick(streams) }, why });
      else this.#emit({ k: 'hostWait', w: { on: 'ctx' }, why });
    }
    this.#emit({ k: 'fill', res, off, data, ...(why ? { why } : {}) });
  }

  // ------------------------------------------------------------- ops
  #stream(): number {
    return this.chance(0.15) ? 0 : this.int(1, this.streams.length - 1);
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
    if (form === 'none') return { srcOff: 0, dstOff: 0, size: null, withOptions: false };
    if (form === 'full') return { srcOff: 0, dstOff: 0, size: Math.min(srcWords, dstWords), withOptions: true };
    const size = form === 'empty' ? 0 : this.int(1, Math.min(srcWords, dstWords));
    const srcOff = this.int(0, srcWords - size);
    const dstOff = this.int(0, dstWords - size);
    if (form === 'defaultSize') return { srcOff, dstOff, size: null, withOptions: true };
    return { srcOff, dstOff, size, withOptions: true };
  }

  #transferNeeds(src: number, dst: number, range: Range, srcWords: number, dstWords: number): { src: Need; dst: Need } {
    const n = rangeSize(range, srcWords, dstWords);
    return {
      src: { res: src, lo: range.srcOff, hi: range.srcOff + n, w: false },
      dst: { res: dst, lo: range.dstOff, hi: range.dstOff + n, w: true },
    };
  }

  uploadArr(s = this.#stream(), dst = this.pick(this.byKind('dev')), full = false): void {
    const pad = this.chance(0.3) ? this.int(1, 8) : 0;
    const srcWords = full ? dst.words : this.chance(0.5) ? dst.words : this.int(1, 1100);
    const arr = new Uint32Array(pad + srcWords);
    arr.set(this.randomWords(dst.cls, srcWords), pad);
    const range: Range = full ? { srcOff: 0, dstOff: 0, size: null, withOptions: this.chance(0.5) } : this.#range(srcWords, dst.words);
    const n = this.#transferNeeds(-1, dst.id, range, srcWords, dst.words);
    this.#op({ k: 'upload', s, src: { arr, padBefore: pad }, dst: dst.id, range }, [n.dst]);
  }

  uploadPin(): boolean {
    const pins = this.byKind('pinUp');
    if (pins.length === 0) return false;
    const p = this.pick(pins);
    const dsts = this.byKind('dev', p.cls);
    if (dsts.length === 0) return false;
    const dst = this.pick(dsts);
    const range = this.#range(p.words, dst.words);
    const n = this.#transferNeeds(p.id, dst.id, range, p.words, dst.words);
    this.#op({ k: 'upload', s: this.#stream(), src: { pin: p.id }, dst: dst.id, range }, [n.dst, { res: p.id, lo: 0, hi: p.words, w: false }], true);
    return true;
  }

  download(toPinned: boolean, s = this.#stream()): ResSpec | null {
    const dsts = this.byKind(toPinned ? 'pinDown' : 'arr');
    if (dsts.length === 0) return null;
    const dst = this.pick(dsts);
    const src = this.pick(this.byKind('dev'));
    const range = this.#range(src.words, dst.words);
    const n = this.#transferNeeds(src.id, dst.id, range, src.words, dst.words);
    this.#op({ k: 'download', s, src: src.id, dst: dst.id, range }, [n.src, n.dst], toPinned);
    return dst;
  }

  copy(): boolean {
    const cls: Cls = this.chance(0.5) ? 'f32' : 'u32';
    const bufs = this.byKind('dev', cls);
    if (bufs.length === 0) return false;
    if (bufs.length < 2) return false;
    // Distinct buffers: WebGPU rejects copyBufferToBuffer with source === destination, whatever the ranges.
    const src = this.pick(bufs);
    const dst = this.pick(bufs.filter((b) => b.id !== src.id));
    const range = this.#range(src.words, dst.words);
    const n = this.#transferNeeds(src.id, dst.id, range, src.words, dst.words);
    this.#op({ k: 'copy', s: this.#stream(), src: src.id, dst: dst.id, range }, [n.src, n.dst]);
    return true;
  }

  add(): boolean {
    const f = this.byKind('dev', 'f32');
    const out = this.pick(f);
    const ins = f.filter((x) => x.id !== out.id && x.words >= out.words);
    if (ins.length === 0) return false;
    const a = this.pick(ins);
    const b = this.chance(0.15) ? a : this.pick(ins);
    const needs: Need[] = [
      { res: a.id, lo: 0, hi: out.words, w: false },
      { res: b.id, lo: 0, hi: out.words, w: false },
      { res: out.id, lo: 0, hi: out.words, w: true },
    ];
    this.#op({ k: 'add', s: this.#stream(), a: a.id, b: b.id, out: out.id, extraGroups: this.chance(0.2) ? this.int(1, 3) : 0 }, needs);
    return true;
  }

  sleep(): boolean {
    const bufs = this.byKind('dev', 'u32');
    if (bufs.length === 0) return false;
    const buf = this.pick(bufs);
    const iterations = this.pick(SLEEP_ITERATIONS);
    this.#op({ k: 'sleep', s: this.#stream(), buf: buf.id, iterations }, [{ res: buf.id, lo: 0, hi: buf.words, w: true }]);
    return true;
  }

  hostFn(s = this.#stream(), check?: ResSpec): void {
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
    this.#op({ k: 'hostFn', s, mode, checks: checks.map((c) => ({ res: c.id, expect: new Uint32Array(0) })) }, needs);
  }

  fillPinned(): boolean {
    const pins = [...this.byKind('pinUp'), ...this.byKind('pinDown')];
    if (pins.length === 0) return false;
    const p = this.pick(pins);
    const n = this.chance(0.5) ? p.words : this.int(1, p.words);
    this.#fill(p.id, this.int(0, p.words - n), this.randomWords(p.cls, n));
    return true;
  }

  /** Synchronization that is not needed for correctness: it only adds edges (or is a no-op). */
  noiseSync(): void {
    const kind = this.weighted([
      ['record', 3],
      ['waitEvent', 3],
      ['waitNever', 1],
      ['waitStream', 2],
      ['waitSelf', 0.3],
      ['hostWait', 1],
      ['flush', 1],
      ['yield', 1],
    ]);
    const s = this.#stream();
    switch (kind) {
      case 'record':
        this.#emit({ k: 'record', s, e: this.#recordableEvent() });
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
        this.#emit({ k: 'flush' });
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
        else this.#emit({ k: 'hostWait', w: { on: 'ctx' } });
        break;
      }
    }
  }

  /** A whole program: setup, initial contents of everything, then random steps. */
  generate(): Program {
    this.setup();
    // Initial contents: never zeros. Pinned buffers are filled by the host while it owns them.
    for (const p of this.res) if (p.kind === 'pinUp' || p.kind === 'pinDown') this.#fill(p.id, 0, this.randomWords(p.cls, p.words), 'initial contents');
    for (const b of this.byKind('dev')) {
      const src = this.byKind('pinUp', b.cls).find((p) => p.words >= b.words);
      const s = this.#stream();
      if (src && this.chance(0.3)) {
        const range: Range = { srcOff: 0, dstOff: 0, size: b.words, withOptions: true };
        this.#op({ k: 'upload', s, src: { pin: src.id }, dst: b.id, range, why: 'initial contents' }, [{ res: b.id, lo: 0, hi: b.words, w: true }, { res: src.id, lo: 0, hi: src.words, w: false }], true);
      } else this.uploadArr(s, b, true);
    }
    const nOps = this.int(20, 60);
    for (let i = 0; i < nOps; i++) {
      const kind = this.weighted([
        ['uploadArr', 8],
        ['uploadPin', 6],
        ['downloadArr', 6],
        ['downloadPin', 5],
        ['downloadCheck', 5],
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
          const dst = this.download(this.chance(0.5) && this.byKind('pinDown').length > 0, s);
          if (dst) this.hostFn(s, dst);
          break;
        }
        case 'copy':
          if (!this.copy()) this.add();
          break;
        case 'add':
          this.add();
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
    return { seed: this.seed, streams: this.streams, res: this.res, events: this.events, steps: this.steps, final: this.data.map((d) => d.slice()) };
  }
}

/** Generates the program for `seed`. */
export function generateProgram(seed: number): Program {
  return new Generator(seed).generate();
}

// ------------------------------------------------------------- listing

function showRange(r: Range, srcWords: number, dstWords: number): string {
  const n = rangeSize(r, srcWords, dstWords);
  if (!r.withOptions) return `(no options: ${n} words)`;
  return `{srcOffset ${r.srcOff * 4}, dstOffset ${r.dstOff * 4}, size ${r.size === null ? `default=${n * 4}` : n * 4}} (words [${r.srcOff}..${r.srcOff + n}) -> [${r.dstOff}..${r.dstOff + n}))`;
}

/** One line per step, for failure messages. */
export function describeStep(p: Program, step: Step): string {
  const S = (s: number): string => p.streams[s]!.name;
  const R = (r: number): ResSpec => p.res[r]!;
  const E = (e: number): string => p.events[e]!.name;
  let t: string;
  switch (step.k) {
    case 'upload': {
      const dst = R(step.dst);
      if ('pin' in step.src) {
        const src = R(step.src.pin);
        t = `${S(step.s)}.upload(${src.name}, ${dst.name}, ${showRange(step.range, src.words, dst.words)})`;
      } else {
        const words = step.src.arr.length - step.src.padBefore;
        t = `${S(step.s)}.upload(${dst.cls === 'f32' ? 'Float32Array' : 'Uint32Array'}[${words}]${step.src.padBefore ? ` @byteOffset ${step.src.padBefore * 4}` : ''}, ${dst.name}, ${showRange(step.range, words, dst.words)})`;
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
      t = `${S(step.s)}.launch(vectorAdd, [${R(step.a).name}, ${R(step.b).name}, ${R(step.out).name}])${step.extraGroups ? ` +${step.extraGroups} extra workgroups` : ''}`;
      break;
    case 'sleep':
      t = `${S(step.s)}.launch(sleep, [${R(step.buf).name}], iterations ${step.iterations})`;
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
      t = 'host: ctx.flush()';
      break;
    case 'yield':
      t = `host: yield to the event loop ${step.turns}x (no synchronization)`;
      break;
    case 'hostWait': {
      const w = step.w;
      t = `host: await ${w.on === 'stream' ? `${S(w.s)}.synchronize()` : w.on === 'event' ? `${E(w.e)}.synchronize()` : w.on === 'ctx' ? 'ctx.synchronize()' : `${R(w.res).name}.ready()`}`;
      break;
    }
  }
  return step.why ? `${t}   // ${step.why}` : t;
}

/** A readable listing of the whole program. */
export function describeProgram(p: Program): string {
  const lines: string[] = [];
  lines.push(`streams: ${p.streams.map((s) => (s.isDefault ? 'D (ctx.defaultStream)' : `${s.name} (priority ${s.priority}${s.nonBlocking ? ', nonBlocking' : ''})`)).join(', ')}`);
  lines.push(
    `resources: ${p.res
      .map((r) => `${r.name} ${r.kind} ${r.cls}[${r.words}]${r.padBefore || r.padAfter ? ` (padding ${r.padBefore}+${r.padAfter} words)` : ''}`)
      .join(', ')}`,
  );
  lines.push(`events: ${p.events.map((e) => `${e.name}${e.timing ? ' (timing)' : ''}`).join(', ')}`);
  p.steps.forEach((s, i) => lines.push(`#${String(i).padStart(3)} ${describeStep(p, s)}`));
  return lines.join('\n');
}
