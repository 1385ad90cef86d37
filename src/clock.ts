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
}

/** The host's clock; `version` changes whenever it does. */
export const host = { clock: [0] as number[], version: 0 };

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
