/**
 * Host functions, as the event loop sees them: which one is running now (so its own code, and only
 * its own code, may fill the pinned buffers its stream uploads next, and a wait it makes on itself
 * is caught), and a budget that hands the event loop a macrotask every so often, so host functions
 * that re-enqueue themselves cannot starve timers and I/O.
 *
 * Which code is "the host function": its synchronous part on every platform; after an `await`,
 * V8 (Chrome, Node) names the async functions awaiting the current one in its stack, and the
 * runtime awaits every async host function through a function named after the op
 * (`webgpu_streams_hostFn_<id>`), so the continuation's stack names it. Elsewhere, code after an
 * `await` counts as outside the host function.
 */
import { DeadlockError } from '../errors.js';
import type { Op } from '../op.js';

const MARK = 'webgpu_streams_hostFn_';

/** Host functions running now (started, not finished), across contexts, by op id. */
const running = new Map<number, Op>();
/** The host function whose synchronous part runs now. */
let current: Op | null = null;

/** Runs `fn` as host function `op`'s synchronous part. */
export function callHostFn(op: Op, fn: () => unknown): unknown {
  running.set(op.id, op);
  const prev = current;
  current = op;
  try {
    return fn();
  } finally {
    current = prev;
  }
}

/** Awaits what host function `op` returned through a function named after it (see the file comment). */
export function awaitHostFn(op: Op, result: unknown): Promise<unknown> {
  const name = `${MARK}${op.id}`;
  return { async [name](r: unknown) { return await r; } }[name]!(result);
}

/** Host function `op` returned or settled. */
export function hostFnEnded(op: Op): void {
  running.delete(op.id);
}

type CallSites = { isAsync?(): boolean; getFunctionName(): string | null }[];

/** The running host function whose code is calling now, or null (top-level code, another callback). */
export function hostCaller(): Op | null {
  if (current) return current;
  if (running.size === 0) return null;
  const E = Error as ErrorConstructor & { captureStackTrace?(o: object): void; prepareStackTrace?: unknown };
  if (typeof E.captureStackTrace !== 'function') return null;
  const prepare = E.prepareStackTrace;
  const limit = E.stackTraceLimit;
  const holder: { stack?: unknown } = {};
  try {
    // Call sites rather than text: a user's prepareStackTrace (source maps) cannot change them.
    E.prepareStackTrace = (_e: unknown, sites: CallSites) => sites;
    E.stackTraceLimit = 100;
    E.captureStackTrace(holder);
    const stack = holder.stack;
    if (Array.isArray(stack)) {
      for (const site of stack as CallSites) {
        const name = site.isAsync?.() ? site.getFunctionName() : null;
        if (name?.startsWith(MARK)) return running.get(Number(name.slice(MARK.length))) ?? null;
      }
    } else if (typeof stack === 'string') {
      const m = new RegExp(`${MARK}(\\d+)`).exec(stack);
      if (m) return running.get(Number(m[1])) ?? null;
    }
  } finally {
    E.prepareStackTrace = prepare;
    E.stackTraceLimit = limit;
  }
  return null;
}

/** Host functions one macrotask may run, and for how long, before the event loop gets a turn. */
export const HOST_FNS_PER_TURN = 256;
export const HOST_TURN_MS = 4;

let turnStart = 0;
let turnCount = 0;
let turnOpen = false;
const resumers = new Set<() => void>();

const macrotask: (fn: () => void) => void =
  typeof setImmediate === 'function'
    ? (fn) => void setImmediate(fn)
    : typeof MessageChannel === 'function'
      ? (fn) => {
          const ch = new MessageChannel();
          ch.port1.onmessage = () => {
            ch.port1.close();
            fn();
          };
          ch.port2.postMessage(null);
        }
      : (fn) => void setTimeout(fn, 0);

function endTurn(): void {
  turnOpen = false;
  const rs = [...resumers];
  resumers.clear();
  for (const r of rs) r();
}

/**
 * May another host function start in this macrotask? The first of a turn always may; after
 * HOST_FNS_PER_TURN of them or HOST_TURN_MS, no: call `resumeNextTurn` and stop.
 */
export function hostBudget(): boolean {
  const now = performance.now();
  if (!turnOpen) {
    turnOpen = true;
    turnStart = now;
    turnCount = 0;
    macrotask(endTurn);
  }
  return ++turnCount <= HOST_FNS_PER_TURN && now - turnStart < HOST_TURN_MS;
}

/** Runs `fn` once the event loop had its turn. */
export function resumeNextTurn(fn: () => void): void {
  resumers.add(fn);
}

/**
 * May the code running now touch a pinned buffer whose claimants are all unencoded? Only the host
 * function running now, when each claimant is a later op of that function's own stream.
 */
export function hostWindow(claimants: Iterable<{ readonly id: number; readonly ordered: boolean }>): boolean {
  const h = hostCaller();
  if (!h) return false;
  for (const c of claimants) {
    const op = c as Op;
    if (op.ordered || op.stream !== h.stream || op.id < h.id) return false;
  }
  return true;
}

/**
 * A DeadlockError when the code calling now is a running host function and one of `targets`
 * cannot complete before that function returns (it is, or depends on, that function or a later
 * op of its stream); else null. `what` names the wait.
 */
export function deadlock(targets: Iterable<Op | null | undefined>, what: string): DeadlockError | null {
  const h = hostCaller();
  if (!h) return null;
  const seen = new Set<Op>();
  const stack: Op[] = [];
  for (const t of targets) if (t) stack.push(t);
  let o: Op | undefined;
  while ((o = stack.pop())) {
    if (o.done || seen.has(o)) continue;
    seen.add(o);
    if (o === h || (o.stream === h.stream && o.id > h.id)) {
      return new DeadlockError(
        `host function #${h.id} waits for ${what}, which waits for that host function to return: it can never resolve. Enqueue what must follow on the stream (a later hostFn) instead of waiting inside the host function.`,
        h.site(),
      );
    }
    for (const d of o.deps) stack.push(d);
  }
  return null;
}
