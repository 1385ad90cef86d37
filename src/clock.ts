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
