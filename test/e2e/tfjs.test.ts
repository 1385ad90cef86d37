/**
 * Interop in headless Chromium (SwiftShader where there is no GPU): TensorFlow.js's WebGPU backend
 * on the device of a webgpu-streams context, tensors made from buffers a stream filled and results
 * read back through a stream, checked against tfjs's CPU backend (test/e2e/tfjs/main.ts).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'vite';
import { afterAll, describe, expect, it } from 'vitest';
import { launchChrome, type LaunchedChrome } from '../../bench/browser';
import { serveDir, type StaticServer } from '../../bench/serve';
import { browserMissing } from './util';

const missing = browserMissing();

describe.skipIf(missing !== null)('a device shared with TensorFlow.js (WebGPU backend), in headless Chromium', () => {
  let outDir = '';
  let server: StaticServer | undefined;
  let chrome: LaunchedChrome | undefined;
  afterAll(async () => {
    await chrome?.close();
    await server?.close();
    if (outDir) rmSync(outDir, { recursive: true, force: true });
  });

  it('tfjs runs relu(matMul) on tensors a stream uploaded; the result comes back through a stream and matches its CPU backend', async () => {
    outDir = mkdtempSync(join(tmpdir(), 'webgpu-streams-tfjs-'));
    await build({ root: fileURLToPath(new URL('./tfjs/', import.meta.url)), configFile: false, logLevel: 'warn', base: './', build: { outDir, emptyOutDir: true, target: 'es2022', minify: false } });
    server = await serveDir(outDir);
    chrome = await launchChrome();
    const page = await chrome.newPage();
    const logs: string[] = [];
    page.on('console', (m) => logs.push(`[${m.type()}] ${m.text()}`));
    page.on('pageerror', (e) => logs.push(`[pageerror] ${(e as Error).stack ?? String(e)}`));
    const seed = (Math.random() * 2 ** 31) >>> 0;
    await page.goto(`${server.origin}/?seed=${seed}`, { waitUntil: 'load' });
    await page.waitForFunction('window.__e2e && window.__e2e.done === true', { timeout: 90_000, polling: 100 });
    const result = (await page.evaluate('window.__e2e')) as { ok: boolean; detail: string; checks: string[] };
    console.log(`[tfjs] ${result.detail}\n  ${result.checks.join('\n  ')}`);
    expect(result.ok, `${result.detail}\npage console:\n  ${logs.join('\n  ')}`).toBe(true);
    expect(logs.filter((l) => l.startsWith('[pageerror]'))).toEqual([]);
  });
});
