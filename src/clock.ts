/**
 * Vector clocks of the stream sanitizer (sanitizer.ts), and the host's: what the host has seen
 * complete. Entry 0 is the host's own; each stream of a sanitized context takes the next entry.
 */

/** Entry i: the last epoch of clock entry i known to come before. */
export type VectorClock = readonly number[];

/** A stream's place in the clocks. `vc` is replaced, never changed, so it may be shared as a snapshot. */
export interface StreamClock {
  readonly entry: number;
  vc: VectorClock;
  /** The host clock's version that `vc` includes. */
  hostSeen: number;
  /** Its stream is gone (destroyed, or its context): the entry is on the retired list. */
  retired?: boolean;
}

/** The host's clock; `version` changes whenever it does. */
export const host = { clock: [0] as number[], version: 0 };

let nextEntry = 1;
/** Entries of destroyed streams with their last epoch: a new stream takes one once the host has seen that epoch. */
const retired: { entry: number; last: number }[] = [];

/**
 * A new stream's clock. Entries are reused, so clocks stay as long as the streams alive at once, not
 * every stream ever made: a destroyed stream's entry, once the host has seen its last op complete,
 * continues from that epoch (its accesses stay ordered before the new stream's, and seen by the host).
 */
export function newStreamClock(): StreamClock {
  for (let n = Math.min(retired.length, 8); n > 0; n--) {
    const r = retired.shift()!;
    if ((host.clock[r.entry] ?? 0) < r.last) {
      retired.push(r); // not seen yet: look again later
      continue;
    }
    const vc = new Array<number>(r.entry + 1).fill(0);
    vc[r.entry] = r.last;
    return { entry: r.entry, vc, hostSeen: -1 };
  }
  return { entry: nextEntry++, vc: [], hostSeen: -1 };
}

/** A stream is gone (destroyed, or its context): its entry may serve a new stream (newStreamClock). Idempotent. */
export function retireStreamClock(sc: StreamClock): void {
  if (sc.retired) return;
  sc.retired = true;
  retired.push({ entry: sc.entry, last: sc.vc[sc.entry] ?? 0 });
}

/** The clock of the stream whose op the sanitizer is checking: kept meanwhile (a report's callback may synchronize). */
export const checking: { clock: StreamClock | null } = { clock: null };

/**
 * The host saw `seen` (`q`'s clock) complete. When nothing of `q` is left unseen, it gives its entry
 * back and takes one again at its next op: streams synchronized and dropped without destroy() would
 * otherwise each keep an entry (and lengthen every clock) until collected.
 */
export function hostSaw(q: { clock: StreamClock | null; tail: { done: boolean } | null }, seen?: VectorClock | null): void {
  joinHost(seen);
  const sc = q.clock;
  if (!sc || sc === checking.clock || sc.retired || (q.tail && !q.tail.done) || (sc.vc[sc.entry] ?? 0) > (host.clock[sc.entry] ?? 0)) return;
  retireStreamClock(sc);
  q.clock = null;
}

/**
 * Host functions enqueued and not done, with their clocks: their accesses, checked when they run,
 * are as old as their enqueue, so an access the host has seen complete since may race with them.
 */
const pendingFns: { fn: { readonly done: boolean }; vc: VectorClock }[] = [];
/** The entry-wise least of pendingFns' clocks (null: none), and of it and the host's clock, as of host clock `floorVersion`. */
let fnFloor: number[] | null = null;
let floor: VectorClock = host.clock;
let floorVersion = -1;
let pruneAt = 64;

const minInto = (into: number[], from: VectorClock): void => {
  for (let i = 0; i < into.length; i++) into[i] = Math.min(into[i]!, from[i] ?? 0);
};

/** A host function `fn` enqueued at clock `vc`: until done, what it may touch keeps its accesses (accessFloor). */
export function addPendingHostFn(fn: { readonly done: boolean }, vc: VectorClock): void {
  pendingFns.push({ fn, vc });
  if (fnFloor) minInto(fnFloor, vc);
  else fnFloor = vc.slice();
  if (floorVersion === host.version) minInto((floor = floor === host.clock ? host.clock.slice() : floor) as number[], vc);
}

/**
 * Done host functions dropped and the floors worked out again: when the host's clock moved, or the
 * list doubled. In between they may be stale, which is lower: more accesses kept, never fewer.
 */
function refresh(): void {
  if (floorVersion === host.version && pendingFns.length < pruneAt) return;
  floorVersion = host.version;
  let kept = 0;
  for (let i = 0; i < pendingFns.length; i++) if (!pendingFns[i]!.fn.done) pendingFns[kept++] = pendingFns[i]!;
  pendingFns.length = kept;
  pruneAt = Math.max(64, 2 * kept);
  fnFloor = kept ? pendingFns[0]!.vc.slice() : null;
  for (let i = 1; i < kept; i++) minInto(fnFloor!, pendingFns[i]!.vc);
  const f = fnFloor;
  floor = f ? host.clock.map((x, i) => Math.min(x, f[i] ?? 0)) : host.clock;
}

/** What every access from now on follows: the host's clock, or its entry-wise least with the pending host functions' clocks. */
export function accessFloor(): VectorClock {
  refresh();
  return floor;
}

/** The entry-wise least of the pending host functions' clocks, or null when none is pending. */
export function hostFnFloor(): VectorClock | null {
  refresh();
  return fnFloor;
}

/** `into` = max(`into`, `from`), entry by entry; true when it changed. */
export function join(into: number[], from: VectorClock): boolean {
  let changed = false;
  while (into.length < from.length) into.push(0);
  for (let i = 0; i < from.length; i++) {
    const f = from[i]!;
    if (f > into[i]!) {
      into[i] = f;
      changed = true;
    }
  }
  return changed;
}

/** The host saw the work behind `vc` complete: everything enqueued from now on follows it. */
export function joinHost(vc: VectorClock | null | undefined): void {
  if (vc && join(host.clock, vc)) host.version++;
}
