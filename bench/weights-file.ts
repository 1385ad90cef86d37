/**
 * The synthetic weights file the "weights from storage" scenario streams: a safetensors file of
 * `layers` f32 tensors `layers.<i>.weight` of `elements` each. Every server that runs the page
 * makes the same bytes (bench/serve.ts, `npm run dev`, bench/serve.py) at {@link weightsUrl}, and
 * the Node runner reads the same file: layer i is SHAKE-256 of `webgpu-streams weights <seed>
 * <i>`, each float's top byte set so that its magnitude lies in [0.5, 2) (finite, never NaN).
 * The scenario's CPU reference reads its values back out of the source, so nothing else needs the
 * generator. Each process writes its own copy in the OS temp directory and removes it: the Node
 * runners' storage when it closes the file, the servers when the process ends. {@link removeAtExit}
 * is how the Node runners' scratch files go, on SIGINT, SIGTERM and SIGHUP too. Node only
 * (node:crypto, node:fs).
 */
import { createHash } from 'node:crypto';
import { closeSync, existsSync, openSync, renameSync, rmSync, writeSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { safetensorsHeader } from 'webgpu-streams';
import { openFile } from 'webgpu-streams/node';
import { EXIT_SIGNALS, signalStatus } from './exit-signals';
import type { WeightsStorage } from './scenarios/common';
import type { WeightsSpec } from './weights-spec';

export { WEIGHTS_PATH, weightsUrl, parseWeightsSpec, type WeightsSpec } from './weights-spec';

/** Layer `i`'s bytes. */
export function weightsLayer(spec: WeightsSpec, i: number): Uint8Array {
  const bytes = new Uint8Array(createHash('shake256', { outputLength: spec.elements * 4 }).update(`webgpu-streams weights ${spec.seed} ${i}`).digest());
  for (let j = 3; j < bytes.length; j += 4) bytes[j] = (bytes[j]! & 0x80) | 0x3f;
  return bytes;
}

/** The file's header (the safetensors JSON, padded). */
export function weightsHeader(spec: WeightsSpec): Uint8Array {
  return safetensorsHeader(Array.from({ length: spec.layers }, (_, i) => ({ name: `layers.${i}.weight`, dtype: 'F32' as const, shape: [spec.elements] })));
}

/** This process's scratch files, removed when it ends; one set per process, however often this module loads. */
function scratchFiles(): Set<string> {
  const key = Symbol.for('webgpu-streams.bench.scratch-files');
  const g = process as unknown as Record<symbol, Set<string> | undefined>;
  const known = g[key];
  if (known) return known;
  const paths = new Set<string>();
  g[key] = paths;
  const removeAll = (): void => {
    for (const path of paths) {
      try {
        rmSync(path, { force: true });
      } catch {
        // gone already, or not ours to remove: nothing more to do at exit
      }
    }
    paths.clear();
  };
  process.on('exit', removeAll);
  for (const signal of EXIT_SIGNALS) {
    process.on(signal, () => {
      removeAll();
      // The only listener: end as the signal would have, with the shell's status.
      if (process.listenerCount(signal) === 1) process.exit(signalStatus(signal));
    });
  }
  return paths;
}

/** Removes `path` when this process exits, by SIGINT, SIGTERM or SIGHUP too (listening for them from the first call). */
export function removeAtExit(path: string): void {
  scratchFiles().add(path);
}

/** Leaves `path` alone at exit (it was removed, or is the caller's now). */
function forgetAtExit(path: string): void {
  scratchFiles().delete(path);
}

/** Removes scratch file `path` now (and no longer at exit). */
export async function removeScratch(path: string): Promise<void> {
  await rm(path, { force: true });
  forgetAtExit(path);
}

/** The file for `spec` in the OS temp directory, written once per process (same spec, same bytes) and removed when the process ends; its path. */
export function weightsFile(spec: WeightsSpec): string {
  const path = join(tmpdir(), `webgpu-streams-${process.pid}-weights-${spec.seed}-${spec.layers}x${spec.elements}.safetensors`);
  if (existsSync(path)) return path;
  removeAtExit(path);
  const part = `${path}.part`;
  removeAtExit(part);
  const fd = openSync(part, 'w');
  try {
    writeSync(fd, weightsHeader(spec));
    for (let i = 0; i < spec.layers; i++) writeSync(fd, weightsLayer(spec, i));
  } finally {
    closeSync(fd);
  }
  renameSync(part, path);
  forgetAtExit(part);
  return path;
}

/** The Node runners' storage for the scenario: the file, read with openFile, and removed when closed. */
export const nodeWeightsStorage: WeightsStorage = {
  where: 'a file (openFile)',
  async open(spec, parallel) {
    const path = weightsFile(spec);
    const file = await openFile(path, { parallel });
    const close = async (): Promise<void> => {
      await file.close();
      await removeScratch(path);
    };
    return { ...file, close, [Symbol.asyncDispose]: close };
  },
};
