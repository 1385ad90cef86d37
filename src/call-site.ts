/**
 * Where a stream call came from: the op, stream and context its errors name, and the stack of the
 * call, captured only when an error needs it (or eagerly, kept with the op, for errors found later).
 */
import { captureSite, type ErrorSite } from './errors.js';

/** `src`, or `bindings[1] (out)` for a kernel binding. */
export function argName(what: string | number, binding: string | undefined): string {
  return typeof what === 'number' ? `bindings[${what}] (${binding})` : what;
}

/** Where a call came from: `callSite` for errors thrown at the call, `enqueueSite` kept with the op. */
export interface Site extends ErrorSite {
  op: string;
  stream: string;
  context: string;
  readonly callSite: Error | undefined;
  enqueueSite: Error | undefined;
  /** The public method called: a stack taken later is cut above it. */
  readonly entry?: (...args: never[]) => unknown;
}

/** The public method of the latest call (the sanitizer's report of a race found inside it cuts its stack there, in a bundle too). */
export let callEntry: ((...args: never[]) => unknown) | undefined;

/** A call's site; its stack is captured only when an error needs it (or eagerly, as enqueueSite). */
export class CallSite implements Site {
  #lazy: Error | undefined;
  constructor(
    readonly op: string,
    readonly stream: string,
    readonly context: string,
    public enqueueSite: Error | undefined,
    readonly capture: boolean,
    /** The public method called: the stack is cut above it, so the caller's frame comes first whatever the files are named (a bundler's). */
    readonly entry?: (...args: never[]) => unknown,
  ) {
    callEntry = entry;
  }
  get callSite(): Error | undefined {
    return this.enqueueSite ?? (this.capture ? (this.#lazy ??= captureSite(true, this.entry)) : undefined);
  }
}
