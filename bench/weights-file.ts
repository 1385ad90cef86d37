/**
 * The synthetic weights file the "weights from storage" scenario streams: a safetensors file of
 * `layers` f32 tensors `layers.<i>.weight` of `elements` each. Every server that runs the page
 * makes the same bytes (bench/serve.ts, `npm run dev`, bench/serve.py) at {@link weightsUrl}, and
 * the Node runner reads the same file: layer i is SHAKE-256 of `webgpu-streams weights <seed>
 * <i>`, each float's top byte set so that its magnitude lies in [0.5, 2) (finite, never NaN).
 * The scenario's CPU reference reads its values back out of the source, so nothing else needs the
 * generator. Node only (node:crypto, node:fs).
 */
import { createHash } from 'node:crypto';
import { closeSync, existsSync, openSync, renameSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { safetensorsHeader } from 'webgpu-streams';
import { openFile } from 'webgpu-streams/node';
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

/** The file for `spec` in the OS temp directory, written once (same spec, same bytes); its path. */
export function weightsFile(spec: WeightsSpec): string {
  const path = join(tmpdir(), `webgpu-streams-weights-${spec.seed}-${spec.layers}x${spec.elements}.safetensors`);
  if (existsSync(path)) return path;
  const part = `${path}.${process.pid}.part`;
  const fd = openSync(part, 'w');
  try {
    writeSync(fd, weightsHeader(spec));
    for (let i = 0; i < spec.layers; i++) writeSync(fd, weightsLayer(spec, i));
  } finally {
    closeSync(fd);
  }
  renameSync(part, path);
  return path;
}

/** The Node runners' storage for the scenario: the file, read with openFile. */
export const nodeWeightsStorage: WeightsStorage = {
  where: 'a file (openFile)',
  open: (spec, parallel) => openFile(weightsFile(spec), { parallel }),
};
