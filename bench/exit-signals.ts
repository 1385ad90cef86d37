/**
 * The signals the Node runners end on cleanly (removing scratch files, bench/weights-file.ts) and
 * pass on to a Node they started again (bench/cli.ts), and the status a shell reports for them.
 * Node builtins only.
 */
import { constants } from 'node:os';

export const EXIT_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

/** 128 + the signal's number: a shell's exit status for a process the signal ended. */
export function signalStatus(signal: NodeJS.Signals): number {
  return 128 + (constants.signals[signal] ?? 0);
}
