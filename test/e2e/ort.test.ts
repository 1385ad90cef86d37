/**
 * Interop in headless Chromium: onnxruntime-web's WebGPU execution provider on the device of a
 * webgpu-streams context, on a tiny model made in the page, GPU-buffer tensors in and out through
 * streams, checked on the CPU (test/e2e/ort/main.ts). Its wasm comes from node_modules: offline.
 */
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { browserMissing, runFixturePage } from './util';

describe.skipIf(browserMissing() !== null)('a device shared with onnxruntime-web (WebGPU EP), in headless Chromium', () => {
  it('runs Relu(MatMul) on GPU-buffer tensors a stream uploaded; the output buffer comes back through a stream and matches the CPU', async () => {
    const seed = (Math.random() * 2 ** 31) >>> 0;
    const { result, logs } = await runFixturePage(fileURLToPath(new URL('./ort/', import.meta.url)), seed);
    console.log(`[ort] ${result.detail}\n  ${result.checks.join('\n  ')}`);
    expect(result.ok, `${result.detail}\npage console:\n  ${logs.join('\n  ')}`).toBe(true);
    expect(logs.filter((l) => l.startsWith('[pageerror]'))).toEqual([]);
  });
});
