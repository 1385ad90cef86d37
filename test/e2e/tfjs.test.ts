/**
 * Interop in headless Chromium (SwiftShader where there is no GPU): TensorFlow.js's WebGPU backend
 * on the device of a webgpu-streams context, tensors made from buffers a stream filled and results
 * read back through a stream, checked against tfjs's CPU backend (test/e2e/tfjs/main.ts).
 */
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { browserMissing, runFixturePage } from './util';

describe.skipIf(browserMissing() !== null)('a device shared with TensorFlow.js (WebGPU backend), in headless Chromium', () => {
  it('tfjs runs relu(matMul) on tensors a stream uploaded; the result comes back through a stream and matches its CPU backend', async () => {
    const seed = (Math.random() * 2 ** 31) >>> 0;
    const { result, logs } = await runFixturePage(fileURLToPath(new URL('./tfjs/', import.meta.url)), seed);
    console.log(`[tfjs] ${result.detail}\n  ${result.checks.join('\n  ')}`);
    expect(result.ok, `${result.detail}\npage console:\n  ${logs.join('\n  ')}`).toBe(true);
    expect(logs.filter((l) => l.startsWith('[pageerror]'))).toEqual([]);
  });
});
