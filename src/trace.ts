/**
 * Spans per op: host enqueue/submit/completion times, host work (callbacks, pageable fills and
 * read-outs), and GPU begin/end from timestamp queries where the device has them (estimated from
 * submit and completion where not). Exports Chrome Trace Event JSON (Perfetto, chrome://tracing).
 */
import { calledAt, InvalidArgumentError, type RaceReport } from './errors.js';
import { OpTimes, type Op } from './op.js';
import { expectBoolean, expectFunction, expectInteger, expectKnownKeys, expectObject, expectString, showValue } from './validate.js';

const SPAN_KINDS: readonly TraceSpan['kind'][] = ['upload', 'download', 'copy', 'kernel', 'host', 'event', 'wait', 'fill', 'read'];

/** For an op enqueued before tracing began: no times. */
const NO_TIMES = new OpTimes(0);

/** One span on the timeline; times in ms on the `performance.now()` clock. */
export interface TraceSpan {
  /** Stream label, or 'host' for host-side work. */
  lane: string;
  kind: 'upload' | 'download' | 'copy' | 'kernel' | 'host' | 'event' | 'wait' | 'fill' | 'read';
  name: string;
  start: number;
  end: number;
  /** GPU begin/end estimated from submit/completion times (no timestamp queries). */
  estimated?: boolean;
  /** Op id, where the span belongs to an op. */
  op?: number;
  /** Submit (batch) the op went out in. */
  batch?: number;
}

/** What the trace keeps of a completed op. */
export interface OpRecord {
  id: number;
  stream: string;
  kind: Op['kind'];
  name: string;
  batch: number;
  tEnqueue: number;
  tSubmit: number;
  tDone: number;
  tHostBegin: number;
  tHostEnd: number;
  gpuBegin: bigint | null;
  gpuEnd: bigint | null;
  failed: boolean;
  /** A wait's: the op of another stream it waited for (an event's record, a stream's last op), when not done at the call. */
  after?: number;
}

interface ClockSource {
  gpuToHostMs(ns: bigint): number | null;
}

const GPU_KIND = { launch: 'kernel', copy: 'copy', upload: 'upload', download: 'download', encode: 'kernel' } as const;

/** Appends `x`, dropping the oldest entries in chunks once past `limit` (amortized O(1): a bounded ring that stays an array). */
function pushBounded<T>(list: T[], x: T, limit: number): void {
  if (list.length >= limit + (limit >> 2)) list.splice(0, list.length - limit + 1);
  list.push(x);
}

export class Trace {
  readonly records: OpRecord[] = [];
  /** Every submit, oldest first, as the ids of the ops it carried (the last `limit` op ids' worth). */
  readonly submits: number[][] = [];
  /** Op ids in `submits`. */
  #submitted = 0;
  readonly #marks: TraceSpan[] = [];
  #clock: ClockSource | null = null;
  #limit = 100_000;
  /** Keep about this many op records, submits, races and marks of each (the oldest are dropped, in chunks of a quarter). @default 100000 */
  get limit(): number {
    return this.#limit;
  }
  set limit(n: number) {
    this.#limit = expectInteger('trace.limit', n, 1, Number.MAX_SAFE_INTEGER, SITES.limit);
  }
  /**
   * Time every GPU op with timestamp queries while true (needs the device's 'timestamp-query');
   * else GPU spans are estimated from submit and completion. Each timed op costs an extra empty
   * pass or two: turn it on around the part you want on a timeline. @default the context's
   * `trace.gpuTimestamps` option (false)
   */
  get gpuTimestamps(): boolean {
    return this.#gpuTimestamps;
  }
  set gpuTimestamps(on: boolean) {
    this.#gpuTimestamps = expectBoolean('trace.gpuTimestamps', on, SITES.gpuTimestamps);
  }
  #gpuTimestamps = false;

  /** Races the context's stream sanitizer reported while tracing (the last `limit`). */
  readonly races: RaceReport[] = [];

  /** @internal */
  addRace(r: RaceReport): void {
    pushBounded(this.races, r, this.limit);
  }

  /** Each race between two ops as a link from the first op to the second (host accesses have no op). */
  raceLinks(): TraceLink[] {
    const out: TraceLink[] = [];
    for (const r of this.races) if (r.kind === 'race' && r.first && r.first.op > 0 && r.second.op > 0) out.push({ from: r.first.op, to: r.second.op, name: `race on ${r.buffer} [${r.range![0]}, ${r.range![1]})` });
    return out;
  }

  /** The waits across streams, as links from the op waited for to the wait. */
  waitLinks(): TraceLink[] {
    const out: TraceLink[] = [];
    for (const r of this.records) if (r.after !== undefined) out.push({ from: r.after, to: r.id, name: r.name, kind: 'wait' });
    return out;
  }

  /** @internal */
  addSubmit(ops: readonly Op[]): void {
    this.submits.push(ops.map((o) => o.id));
    this.#submitted += ops.length;
    // Bounded by op ids, not submits (a submit may carry thousands), dropped in chunks as records are.
    if (this.#submitted >= this.limit + (this.limit >> 2)) {
      let drop = 0;
      while (this.#submitted > this.limit && drop < this.submits.length - 1) this.#submitted -= this.submits[drop++]!.length;
      this.submits.splice(0, drop);
    }
  }

  /** @internal */
  add(op: Op, clock: ClockSource): void {
    this.#clock = clock;
    const t = op.times ?? NO_TIMES;
    const rec: OpRecord = {
      id: op.id,
      stream: op.stream.label,
      kind: op.kind,
      name: op.name,
      batch: t.batchId,
      tEnqueue: t.tEnqueue,
      tSubmit: t.tSubmit,
      tDone: t.tDone,
      tHostBegin: t.tHostBegin,
      tHostEnd: t.tHostEnd,
      gpuBegin: t.gpuBegin,
      gpuEnd: t.gpuEnd,
      failed: op.error !== undefined,
    };
    if (op.kind === 'wait') {
      const d = op.deps.find((x) => x.stream !== op.stream); // what it waited for, when not done at the call
      if (d) rec.after = d.id;
    }
    pushBounded(this.records, rec, this.limit);
  }

  /** Adds a span of your own, e.g. the host filling a pinned buffer. */
  mark(lane: string, kind: TraceSpan['kind'], name: string, start: number, end: number): void {
    const site = SITES.mark;
    expectString('lane', lane, site);
    if (!SPAN_KINDS.includes(kind)) throw new InvalidArgumentError(`Expected \`kind\` to be one of ${SPAN_KINDS.map((k) => `'${k}'`).join(', ')}, got ${showValue(kind)}`, site);
    expectString('name', name, site);
    for (const [k, v] of [['start', start], ['end', end]] as const) {
      if (typeof v !== 'number' || !Number.isFinite(v)) throw new InvalidArgumentError(`Expected \`${k}\` to be a finite number (ms, performance.now()), got ${showValue(v)}`, site);
    }
    pushBounded(this.#marks, { lane, kind, name, start, end }, this.#limit);
  }

  /** Runs `fn` and records it as a host span. */
  async span<T>(lane: string, kind: TraceSpan['kind'], name: string, fn: () => T | Promise<T>): Promise<T> {
    expectFunction('fn', fn, SITES.span);
    const start = performance.now();
    try {
      return await fn();
    } finally {
      this.mark(lane, kind, name, start, performance.now());
    }
  }

  /** Drops everything recorded so far. */
  clear(): void {
    this.records.length = 0;
    this.submits.length = 0;
    this.#submitted = 0;
    this.#marks.length = 0;
    this.races.length = 0;
  }

  /** The GPU times of an op in host ms, or null when it has no timestamps (or no clock yet). */
  gpuTimes(r: OpRecord): { start: number; end: number } | null {
    if (typeof r !== 'object' || r === null) throw new InvalidArgumentError(`Expected an OpRecord (one of trace.records), got ${showValue(r)}`, SITES.gpuTimes);
    if (r.gpuBegin === null || r.gpuEnd === null || !this.#clock) return null;
    const start = this.#clock.gpuToHostMs(r.gpuBegin);
    const end = this.#clock.gpuToHostMs(r.gpuEnd);
    return start === null || end === null ? null : { start, end };
  }

  /** Timeline spans, optionally only those starting at or after `since` (ms). */
  spans(since = -Infinity): TraceSpan[] {
    if (typeof since !== 'number' || Number.isNaN(since)) throw new InvalidArgumentError(`Expected \`since\` to be a number (ms), got ${showValue(since)}`, SITES.spans);
    const out: TraceSpan[] = [];
    for (const r of this.records) {
      const gpuKind = GPU_KIND[r.kind as keyof typeof GPU_KIND];
      if (gpuKind) {
        const t = this.gpuTimes(r);
        if (t) out.push({ lane: r.stream, kind: gpuKind, name: r.name, start: t.start, end: Math.max(t.end, t.start), op: r.id, batch: r.batch });
        else if (r.tSubmit > 0) out.push({ lane: r.stream, kind: gpuKind, name: r.name, start: r.tSubmit, end: r.tDone, estimated: true, op: r.id, batch: r.batch }); // never submitted (skipped): no GPU span
        if (r.tHostEnd > r.tHostBegin) {
          out.push({ lane: 'host', kind: r.kind === 'upload' ? 'fill' : 'read', name: `${r.stream}: ${r.name}`, start: r.tHostBegin, end: r.tHostEnd, op: r.id });
        }
      } else if (r.kind === 'hostFn') {
        if (r.tHostEnd > 0) out.push({ lane: 'host', kind: 'host', name: `${r.stream}: ${r.name}`, start: r.tHostBegin, end: r.tHostEnd, op: r.id });
      } else {
        const t = this.gpuTimes(r);
        // Without timestamps: a wait where its stream began waiting (its enqueue), not its completion, after the work behind it began.
        const at = t ? t.end : r.kind === 'wait' ? r.tEnqueue : r.tDone;
        out.push({ lane: r.stream, kind: r.kind === 'record' ? 'event' : 'wait', name: r.name, start: at, end: at, op: r.id, ...(t ? {} : { estimated: true }) });
      }
    }
    for (const m of this.#marks) out.push(m); // not a spread: as many arguments as marks overflows the stack
    return out.filter((s) => s.start >= since).sort((a, b) => a.start - b.start);
  }

  /** Chrome Trace Event JSON of `spans` (default: all): open in Perfetto (ui.perfetto.dev) or chrome://tracing. */
  toChromeTrace(spans: TraceSpan[] = this.spans(), options: ChromeTraceOptions = {}): { traceEvents: ChromeTraceEvent[]; displayTimeUnit: 'ms' } {
    return { traceEvents: toChromeTraceEvents(spans, { links: [...this.raceLinks(), ...this.waitLinks()], ...options }), displayTimeUnit: 'ms' };
  }
}

/** The sites of Trace's calls, one each (a stack is taken only when an error reads it). */
const SITES = {
  limit: calledAt('trace.limit', Object.getOwnPropertyDescriptor(Trace.prototype, 'limit')!.set),
  gpuTimestamps: calledAt('trace.gpuTimestamps', Object.getOwnPropertyDescriptor(Trace.prototype, 'gpuTimestamps')!.set),
  mark: calledAt('trace.mark', Trace.prototype.mark),
  span: calledAt('trace.span', Trace.prototype.span),
  gpuTimes: calledAt('trace.gpuTimes', Trace.prototype.gpuTimes),
  spans: calledAt('trace.spans', Trace.prototype.spans),
};

/** A link between two ops' spans on a timeline: a race the sanitizer found (first access to second), or a wait (the op waited for to the wait). */
export interface TraceLink {
  from: number;
  to: number;
  name: string;
  /** @default 'race' */
  kind?: 'race' | 'wait';
}

/** One Chrome Trace Event ('X': a span, 'M': metadata naming a process or thread, 's' / 'f': a flow arrow's ends). */
export interface ChromeTraceEvent {
  name: string;
  cat?: string;
  ph: 'X' | 'M' | 's' | 'f';
  /** A flow's id (its 's' and 'f' share it). */
  id?: number;
  /** A flow end binds to the enclosing slice ('e'). */
  bp?: 'e';
  ts?: number;
  dur?: number;
  pid: number;
  tid: number;
  args?: Record<string, unknown>;
}

export interface ChromeTraceOptions {
  /** Process id of these spans (several traces in one file: one process each). @default 1 */
  pid?: number;
  /** The process's name. @default 'webgpu-streams' */
  process?: string;
  /** Time zero, ms on the spans' clock. @default 0 */
  origin?: number;
  /** Fields added to every span's args. */
  args?: Record<string, unknown>;
  /** Arrows from one op's span to another's (races: `Trace.raceLinks()`, which `toChromeTrace` adds). */
  links?: readonly TraceLink[];
}

/**
 * The Chrome Trace Events of `spans`: one process, one thread per lane ('host' first, then lanes in
 * order of first use) with their names and sort order, times in microseconds from `origin`.
 */
export function toChromeTraceEvents(spans: readonly TraceSpan[], options: ChromeTraceOptions = {}): ChromeTraceEvent[] {
  const site = calledAt('toChromeTrace', toChromeTraceEvents);
  if (!Array.isArray(spans)) throw new InvalidArgumentError(`Expected \`spans\` to be an array of TraceSpan (trace.spans()), got ${showValue(spans)}`, site);
  Array.from(spans).forEach((s, i) => void expectObject(`spans[${i}]`, s ?? null, site)); // holes and undefined too
  const o = expectObject('options', options, site);
  expectKnownKeys('options', o, ['pid', 'process', 'origin', 'args', 'links'], site);
  const { pid = 1, process = 'webgpu-streams', origin = 0, args = {}, links = [] } = options;
  expectInteger('pid', pid, 0, Number.MAX_SAFE_INTEGER, site);
  expectString('process', process, site);
  if (!Number.isFinite(origin)) throw new InvalidArgumentError(`Expected \`origin\` to be a finite number (ms), got ${showValue(origin)}`, site);
  expectObject('args', args, site);
  if (!Array.isArray(links)) throw new InvalidArgumentError(`Expected \`links\` to be an array of TraceLink, got ${showValue(links)}`, site);
  Array.from(links).forEach((l, i) => void expectString(`links[${i}].name`, expectObject(`links[${i}]`, l ?? null, site).name, site));
  const lanes = ['host', ...new Set(spans.map((s) => s.lane).filter((l) => l !== 'host'))].filter((l) => l !== 'host' || spans.some((s) => s.lane === 'host'));
  const tid = new Map(lanes.map((l, i) => [l, i + 1]));
  const events: ChromeTraceEvent[] = [
    { name: 'process_name', ph: 'M', pid, tid: 0, args: { name: process } },
    { name: 'process_sort_index', ph: 'M', pid, tid: 0, args: { sort_index: pid } },
  ];
  lanes.forEach((l, i) => {
    events.push({ name: 'thread_name', ph: 'M', pid, tid: i + 1, args: { name: l } });
    events.push({ name: 'thread_sort_index', ph: 'M', pid, tid: i + 1, args: { sort_index: i } });
  });
  const us = (ms: number): number => Math.round(ms * 1e6) / 1e3;
  for (const s of spans) {
    if (!Number.isFinite(s.start) || !Number.isFinite(s.end)) continue;
    events.push({
      name: s.name,
      cat: s.kind,
      ph: 'X',
      ts: us(s.start - origin),
      dur: us(Math.max(0, s.end - s.start)),
      pid,
      tid: tid.get(s.lane)!,
      args: { ...args, lane: s.lane, kind: s.kind, ...(s.op !== undefined ? { op: s.op } : {}), ...(s.batch !== undefined ? { submit: s.batch } : {}), ...(s.estimated ? { estimated: true } : {}) },
    });
  }
  // Flow arrows (Perfetto draws them) from the start of one op's span to the start of the other's.
  const byOp = new Map<number, TraceSpan>();
  for (const s of spans) if (s.op !== undefined && s.lane !== 'host' && Number.isFinite(s.start) && !byOp.has(s.op)) byOp.set(s.op, s);
  links.forEach((l, i) => {
    const a = byOp.get(l.from);
    const b = byOp.get(l.to);
    if (!a || !b) return;
    const cat = l.kind ?? 'race';
    events.push({ name: l.name, cat, ph: 's', id: i + 1, ts: us(a.start - origin), pid, tid: tid.get(a.lane)! });
    events.push({ name: l.name, cat, ph: 'f', bp: 'e', id: i + 1, ts: us(b.start - origin), pid, tid: tid.get(b.lane)! });
  });
  return events;
}
