/**
 * The stream sanitizer (`createContext({ sanitize })`): finds cross-stream races when the second
 * access is enqueued, as PyTorch's CUDA sanitizer does, with byte ranges instead of whole buffers.
 *
 * Happens-before follows the runtime's own ordering rules, never what happened to complete: one
 * vector clock per stream plus one for the host (entry 0). An op ticks its stream's entry and
 * joins the clocks it is ordered after (its stream, a waited event's record, a waited stream, the
 * legacy default stream's edges, the host's clock, the host function enqueuing it). The host's
 * clock joins what the host has seen complete: a resolved `synchronize()` of a stream, event or
 * context, `query()` returning true, a pinned buffer handed back (`ready()`, `isHostOwned`).
 * Stream clocks are copy-on-write, so an event or a wait keeps a reference, not a copy.
 *
 * An access is (buffer, byte range, read or write, stream entry, epoch); two conflict when their
 * ranges overlap, one writes and the earlier one's epoch is not in the later one's clock. Accesses
 * the host has seen complete, or that a later access of the same buffer covers and follows, are
 * dropped, so the shadow stays small between host synchronizations.
 *
 * The state is per process (contexts may share a device, its buffers and each other's events);
 * each context reports its own ops' races in its own mode.
 */
import { formatSite, stackFrom, StreamRaceError, type RaceAccess, type RaceReport } from './errors.js';
import { accessFloor, addPendingHostFn, checking, host, hostFnFloor, join, newStreamClock, type StreamClock, type VectorClock } from './clock.js';
import type { Op, StreamQueue } from './op.js';
import { hostCaller } from './scheduler/host.js';
import { callEntry } from './call-site.js';
import { TextureRegion, WHOLE } from './texture.js';

/** What to do with a race: throw a `StreamRaceError` at the call, `console.warn` it, or call a function with the report. */
export type SanitizeMode = 'throw' | 'warn' | ((report: RaceReport) => void);

/** An access held in a buffer's shadow. */
interface Access {
  /** Clock entry of its stream (0: the host). */
  readonly entry: number;
  readonly epoch: number;
  readonly write: boolean;
  readonly start: number;
  readonly end: number;
  /** The clock it was made at (a stream's copy-on-write clock, or a copy of the host's). */
  readonly vc: VectorClock;
  /** The op (null: the host outside host functions) and where it was enqueued. */
  readonly op: Op | null;
  readonly site: Error | undefined;
}

/** A race found while checking, before anything is committed. */
interface Found {
  buffer: string;
  texture: boolean;
  first: Access;
  write: boolean;
  start: number;
  end: number;
}

const shadows = new WeakMap<GPUBuffer | GPUTexture, Shadow>();
const NONE: VectorClock = [];
/** Host functions' clocks, for what they touch and enqueue while running. */
const hostFnClocks = new WeakMap<Op, VectorClock>();
/** Accesses kept per buffer at most; past it those of the lowest offsets go (fewer finds, never false ones). */
const MAX_ACCESSES = 1 << 16;

/** @internal tests: how many accesses of `b` the sanitizer holds. */
export const heldAccesses = (b: GPUBuffer | GPUTexture): number => shadows.get(b)?.list.length ?? 0;

function clockOf(q: StreamQueue): StreamClock {
  return (q.clock ??= newStreamClock());
}

/** What the host touches: a pinned buffer. */
export interface HostTouched {
  readonly buffer: GPUBuffer;
  readonly label: string;
  readonly size: number;
  readonly kind: 'upload' | 'download';
}

export class Sanitizer {
  constructor(
    readonly mode: SanitizeMode,
    /** The context's label, for messages. */
    readonly label: string,
    /** The context's trace while tracing: races go on its timeline as links. */
    readonly trace: { addRace(r: RaceReport): void } | null = null,
    /** Keep the stack of every host access of a pinned view (captureStacks 'all'), for a race it is the first access of. */
    readonly hostSites = false,
  ) {}

  /**
   * Gives `op` (made, not yet queued) its clock and checks its accesses; reports a race before
   * anything is committed, so in 'throw' mode the call throws and the op never exists.
   */
  enqueue(op: Op, streams: readonly StreamQueue[], defaultQueue: StreamQueue): void {
    const q = op.stream;
    if (q.internal) return;
    // The op's stack when its context keeps one (captureStacks); the second access of a race takes
    // the stack of the call being made now, when it is reported.
    const site = op.callSite;
    const sc = clockOf(q);
    const vc = sc.vc.slice();
    while (vc.length <= sc.entry) vc.push(0);
    vc[sc.entry] = vc[sc.entry]! + 1;
    if (sc.hostSeen !== host.version) join(vc, host.clock);
    const seen = host.version; // what vc holds of the host's clock (a report's callback may move it)
    const caller = hostCaller();
    if (caller) {
      const hc = hostFnClocks.get(caller);
      if (hc) join(vc, hc);
    }
    // CUDA's legacy default stream: it follows every blocking stream, and they follow it.
    if (q.isDefault) {
      for (const s of streams) if (!s.isDefault && !s.nonBlocking && s.clock) join(vc, s.clock.vc);
    } else if (!q.nonBlocking && defaultQueue.clock) join(vc, defaultQueue.clock.vc);
    const p = op.payload;
    // A report's callback may synchronize: `sc` stays this stream's until committed.
    const outer = checking.clock;
    checking.clock = sc;
    try {
      if (p.kind === 'wait') {
        if (p.unrecorded) this.#report(unrecordedWait(op, site ?? stackFrom(callEntry)));
        else if (p.clock) join(vc, p.clock);
      }
      const found = checkOp(op, vc, sc.entry);
      if (found) this.#report(raceReport(found, describeOp(op, found.write, site ?? stackFrom(callEntry))));
      // Commit.
      sc.vc = vc;
      sc.hostSeen = seen;
    } finally {
      checking.clock = outer;
    }
    recordOp(op, vc, sc.entry, site);
    if (p.kind === 'hostFn') {
      hostFnClocks.set(op, vc);
      addPendingHostFn(op, vc);
    }
    const pinned = op.pinned;
    if (pinned) join((pinned.usersClock ??= []), vc);
  }

  /** The host (or the host function running now) takes a view of pinned buffer `p`. */
  hostAccess(p: HostTouched, view?: (...args: never[]) => unknown): void {
    const caller = hostCaller();
    const hc = caller ? hostFnClocks.get(caller) : undefined;
    const write = p.kind === 'upload';
    let vc: VectorClock;
    let entry: number;
    let op: Op | null = null;
    if (caller && hc) {
      vc = hc;
      entry = caller.stream.clock!.entry;
      op = caller;
    } else {
      host.clock[0]!++;
      host.version++;
      vc = host.clock.slice(); // a snapshot: the host's clock moves on
      entry = 0;
    }
    const epoch = vc[entry]!;
    const found = check(p.buffer, p.label, 0, p.size, write, vc, entry, op !== null);
    const site = found || this.hostSites ? stackFrom(view) : undefined; // taken once, for the report and the record
    if (found) this.#report(raceReport(found, op ? describeOp(op, write, site) : hostAccessOf(write, site)));
    record(p.buffer, { entry, epoch, write, start: 0, end: p.size, vc, op, site: this.hostSites ? site : undefined });
  }

  /** Unrecorded waits warned about, by stream and event, each once. */
  readonly #warned = new Set<string>();

  #report(r: RaceReport): void {
    const m = this.mode;
    if (r.kind === 'race') this.trace?.addRace(r);
    // A wait on an event not recorded yet is often meant (the first turns of a ring): warned, not thrown.
    if (r.kind === 'unrecorded-wait' && typeof m !== 'function') {
      const key = `${r.second.stream}|${r.second.name}`;
      if (this.#warned.has(key)) return;
      this.#warned.add(key);
      console.warn(`webgpu-streams sanitizer (context '${this.label}'): ${r.message}`);
      return;
    }
    if (m === 'throw') {
      const s = r.second;
      throw new StreamRaceError(r, { op: s.kind, stream: s.stream ?? undefined, context: s.context ?? this.label });
    }
    if (m === 'warn') console.warn(`webgpu-streams sanitizer (context '${this.label}'): ${r.message}`);
    else m(r);
  }
}

/**
 * One access of an op: bytes [start, end) of `buffer`, read or written; `label` where a JS object
 * holds it (a GPUBuffer's own `label` and `size` are native getters, read only for a report).
 * Returning a value stops the walk.
 */
type Visit<T> = (buffer: GPUBuffer | GPUTexture, label: string | null, start: number, end: number, write: boolean, texture?: boolean) => T | null;

/** Walks `op`'s accesses in a fixed order (sources before destinations) until `visit` returns a value. */
function eachAccess<T>(op: Op, visit: Visit<T>): T | null {
  const p = op.payload;
  switch (p.kind) {
    case 'launch':
      for (let i = 0; i < p.bindings.length; i++) {
        const info = p.kernel.bindings[i]!, write = info.kind === 'storage' || (info.kind === 'storage-texture' && info.access !== 'read');
        let r: T | null;
        // A buffer binding is the whole buffer (its size read only for a report).
        if (info.kind === 'uniform' || info.kind === 'storage' || info.kind === 'read-only-storage') r = visit(p.bindings[i] as GPUBuffer, null, 0, WHOLE, write);
        else {
          // A sampler touches no memory; a texture bound as a raw GPUTextureView has no texture the call can see.
          const t = p.textures?.[i];
          if (!t) continue;
          r = visit(t, null, 0, WHOLE, write, true);
        }
        if (r !== null && r !== undefined) return r;
      }
      return null;
    case 'copy':
      return side(p.src, p.srcOffset, p.size, false, visit) ?? side(p.dst, p.dstOffset, p.size, true, visit);
    case 'upload':
      return (p.pinned && visit(p.pinned.buffer, p.pinned.label, p.srcOffset, p.srcOffset + p.size, false)) ?? side(p.dst, p.dstOffset, p.size, true, visit);
    case 'download':
      return side(p.src, p.srcOffset, p.size, false, visit) ?? (p.pinned && visit(p.pinned.buffer, p.pinned.label, p.dstOffset, p.dstOffset + p.size, true));
    case 'hostFn':
      return (p.reads ? visit(p.reads.buffer, p.reads.label, p.reads.start, p.reads.end, false) : null) ?? (p.writes ? visit(p.writes.buffer, p.writes.label, p.writes.start, p.writes.end, true) : null);
    case 'encode':
      for (const [list, write] of [[p.reads, false], [p.writes, true]] as const) {
        for (const a of list) {
          const r = visit(a.buffer, a.label, a.start, a.end, write, a.texture);
          if (r !== null && r !== undefined) return r;
        }
      }
      return null;
    default:
      return null;
  }
}

/** One side of a transfer: `size` bytes from `offset` of a buffer, or a texture region's rows. */
function side<T>(b: GPUBuffer | TextureRegion, offset: number, size: number, write: boolean, visit: Visit<T>): T | null {
  if (!(b instanceof TextureRegion)) return visit(b, null, offset, offset + size, write);
  for (const [start, end] of b.rowRanges()) {
    const r = visit(b.texture, b.label, start, end, write, true); // a region of several images skips the rows between them
    if (r !== null && r !== undefined) return r;
  }
  return null;
}

/** The op being checked or recorded: set before a walk, so the visits are two functions, not closures per op. */
let curVc: VectorClock = NONE;
let curEntry = 0;
let curOp: Op | null = null;
let curSite: Error | undefined;

const checkVisit: Visit<Found> = (b, label, start, end, write, texture) => check(b, label, start, end, write, curVc, curEntry, false, texture);

/** The first race of `op`'s accesses (made at clock `vc`, its stream's `entry`), or null. */
function checkOp(op: Op, vc: VectorClock, entry: number): Found | null {
  curVc = vc;
  curEntry = entry;
  return eachAccess(op, checkVisit);
}

/**
 * A buffer's accesses, sorted by start offset: a check looks only at those that can overlap its
 * range (start within `maxLen` below it), so disjoint chunks of one buffer cost O(log n) each.
 */
class Shadow {
  list: Access[] = [];
  /** The longest range in `list` (it only shrinks at a sweep). */
  maxLen = 0;
  /** Sweep out what the host saw complete when the list grows this long. */
  sweepAt = 64;

  /** Index of the first access whose start is >= `at`. */
  upper(at: number): number {
    const list = this.list;
    let lo = 0;
    let hi = list.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (list[mid]!.start < at) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}

/** Ordered before every access to come (`accessFloor()`). */
const before = (a: Access, f: VectorClock): boolean => a.epoch <= (f[a.entry] ?? 0);

/** The access of `buffer` nearest the end that conflicts with this one and is ordered neither way; nothing is changed. */
function check(buffer: GPUBuffer | GPUTexture, label: string | null, start: number, end: number, write: boolean, vc: VectorClock, entry: number, hostFnAccess = false, texture = false): Found | null {
  const sh = shadows.get(buffer);
  if (!sh || end <= start) return null;
  const list = sh.list;
  // What the host has seen complete is ordered before ops enqueued now, not before a host
  // function enqueued earlier that runs now.
  const hc = hostFnAccess ? NONE : host.clock;
  const epoch = vc[entry]!;
  const from = start - sh.maxLen;
  for (let i = sh.upper(end) - 1; i >= 0; i--) {
    const a = list[i]!;
    if (a.start <= from) break;
    if (start >= a.end || !(a.write || write)) continue;
    // Ordered either way: `a` before this access, or (a host function's access, checked when it
    // runs, against ops enqueued after it) this access before `a`.
    if (before(a, hc) || a.epoch <= (vc[a.entry] ?? 0) || epoch <= (a.vc[entry] ?? 0)) continue;
    const name = label ?? (buffer.label || (texture ? 'GPUTexture' : 'GPUBuffer'));
    const to = texture ? Math.min(end, a.end) : Math.min(end, a.end, (buffer as GPUBuffer).size); // a whole binding ends at the buffer's end
    return { buffer: name, texture, first: a, write, start: Math.max(start, a.start), end: to };
  }
  return null;
}

/** Adds `acc` to its buffer's shadow, dropping what it supersedes and, now and then, what the host saw complete. */
function record(buffer: GPUBuffer | GPUTexture, acc: Access): void {
  if (acc.end <= acc.start) return; // no bytes, no race
  let sh = shadows.get(buffer);
  if (!sh) shadows.set(buffer, (sh = new Shadow()));
  const vc = acc.vc;
  let list = sh.list;
  // Covered by `acc` and ordered before it: a later access that races with one of them races
  // with `acc` too (a read cannot stand in for a write). Not so for a pending host function's view
  // of a mappable buffer, checked when it runs but as old as its enqueue: keep what it does not
  // follow, unless `acc` is the host's own (whose clock no pending host function is in).
  const f = accessFloor();
  const fns = acc.op || acc.entry !== 0 ? hostFnFloor() : null;
  const mappable = fns !== null && !('format' in buffer) && (buffer.usage & 3) !== 0; // MAP_READ | MAP_WRITE
  const hi = sh.upper(acc.end);
  let lo = hi;
  const from = acc.start - sh.maxLen;
  while (lo > 0 && list[lo - 1]!.start > from) lo--;
  // The window [lo, hi) becomes its survivors with `acc` in start order: in place when that keeps
  // its length (an access replacing one it covers), else one splice.
  if (lo === hi) {
    if (lo === list.length) list.push(acc);
    else list.splice(lo, 0, acc);
  } else {
    let placed = false;
    const win: Access[] = [];
    for (let i = lo; i < hi; i++) {
      const a = list[i]!;
      const covered = acc.start <= a.start && a.end <= acc.end && (acc.write || !a.write) && a.epoch <= (vc[a.entry] ?? 0) && (!mappable || a.epoch <= (fns[a.entry] ?? 0));
      if (covered || before(a, f)) continue;
      if (!placed && a.start >= acc.start) {
        win.push(acc);
        placed = true;
      }
      win.push(a);
    }
    if (!placed) win.push(acc);
    if (win.length === hi - lo) for (let i = 0; i < win.length; i++) list[lo + i] = win[i]!;
    else list.splice(lo, hi - lo, ...win);
  }
  if (acc.end - acc.start > sh.maxLen) sh.maxLen = acc.end - acc.start;
  if (list.length >= sh.sweepAt) {
    list = sh.list = list.filter((a) => !before(a, f));
    if (list.length > MAX_ACCESSES) list = sh.list = list.slice(list.length - MAX_ACCESSES);
    let max = 0;
    for (const a of list) if (a.end - a.start > max) max = a.end - a.start;
    sh.maxLen = max;
    sh.sweepAt = Math.max(64, 2 * list.length);
  }
}

const recordVisit: Visit<null> = (b, _label, start, end, write) => {
  record(b, { entry: curEntry, epoch: curVc[curEntry]!, write, start, end, vc: curVc, op: curOp, site: curSite });
  return null; // every access
};

/** Adds `op`'s accesses (made at clock `vc`, its stream's `entry`) to the shadows. */
function recordOp(op: Op, vc: VectorClock, entry: number, site: Error | undefined): void {
  curVc = vc;
  curEntry = entry;
  curOp = op;
  curSite = site;
  eachAccess(op, recordVisit);
  curOp = null; // not kept alive here
  curSite = undefined;
}

function describeOp(op: Op, write: boolean, site: Error | undefined): RaceAccess {
  return { op: op.id, kind: op.site().op, name: op.name, stream: op.stream.label, context: op.stream.owner.label, write, callSite: formatSite(site) };
}

function hostAccessOf(write: boolean, site: Error | undefined): RaceAccess {
  return { op: 0, kind: 'host', name: 'host', stream: null, context: null, write, callSite: formatSite(site) };
}

function describe(a: RaceAccess): string {
  return a.op === 0 ? 'the host' : `op #${a.op} '${a.name}' on stream '${a.stream}'`;
}

function raceReport(f: Found, second: RaceAccess): RaceReport {
  const a = f.first;
  const first: RaceAccess = a.op
    ? { op: a.op.id, kind: a.op.site().op, name: a.op.name, stream: a.op.stream.label, context: a.op.stream.owner.label, write: a.write, callSite: formatSite(a.site) }
    : hostAccessOf(a.write, a.site);
  const verb = (x: RaceAccess): string => (x.write ? 'writes' : 'reads');
  const fix = fixFor(first, second, f.buffer);
  const range: [number, number] = [f.start, f.end];
  const at = (x: RaceAccess): string =>
    x.callSite ? `, ${x.op === 0 ? 'touched' : 'enqueued'} at ${place(x.callSite)}` : x === first && x.op !== 0 ? ` (its call site is kept with createContext({ captureStacks: 'all' }))` : '';
  const [what, them] = f.texture ? [`texture '${f.buffer}'`, 'it'] : [`buffer '${f.buffer}' bytes [${range[0]}, ${range[1]})`, 'them'];
  const message =
    `race on ${what}: ${describe(second)} ${verb(second)} ${them} while ${describe(first)} ${verb(first)} ${them}, and nothing orders the two` +
    `\n  fix: ${fix}` +
    `\n  first: ${describe(first)} (${first.write ? 'write' : 'read'})${at(first)}` +
    `\n  second: ${describe(second)} (${second.write ? 'write' : 'read'})${at(second)}`;
  return { kind: 'race', buffer: f.buffer, ...(f.texture ? { texture: true } : {}), range, first, second, fix, message };
}

/** A stack's first frame as `file:line:col` (relative to the working directory in Node), with its function if named. */
function place(stack: string): string {
  const frame = stack.split('\n')[0]!.trim().replace(/^at /, '');
  const m = /^(.*?) \((.*)\)$/.exec(frame);
  let loc = m ? m[2]! : frame;
  const fn = m && m[1] !== '<anonymous>' ? ` (${m[1]})` : '';
  const cwd = (globalThis as { process?: { cwd?(): string } }).process?.cwd?.();
  if (cwd) loc = loc.replace(`file://${cwd}/`, '').replace(`${cwd}/`, '');
  return loc + fn;
}

/** The smallest ordering that removes the race between `first` and the later `second`. */
function fixFor(first: RaceAccess, second: RaceAccess, buffer: string): string {
  if (first.op === 0) return `touch '${buffer}' on the host before enqueuing op #${second.op}, or from a host function on stream '${second.stream}' ahead of it`;
  const on = (x: RaceAccess): string => `'${x.stream}'${x.context && x.context !== second.context ? ` (context '${x.context}')` : ''}`;
  if (second.op === 0) {
    return `await ${on(first)}.synchronize(), an event recorded after op #${first.op}${first.kind === 'upload' || first.kind === 'download' ? `, or ready() of '${buffer}'` : ''} before the host touches '${buffer}'`;
  }
  return `record an event on ${on(first)} after op #${first.op} and waitEvent it on '${second.stream}' before op #${second.op}`;
}

function unrecordedWait(op: Op, site: Error | undefined): RaceReport {
  const second: RaceAccess = { ...describeOp(op, false, site), kind: 'waitEvent' };
  const fix = `record the event before waiting on it; a wait on a never-recorded event orders nothing (CUDA proceeds silently)`;
  return { kind: 'unrecorded-wait', buffer: '', range: null, first: null, second, fix, message: `op #${op.id} '${op.name}' on stream '${op.stream.label}' waits on an event that was never recorded, so it orders nothing\n  fix: ${fix}` };
}
