/**
 * End to end: the library, bundled by Vite into a page, in headless Chromium (SwiftShader where
 * there is no GPU). The fixture (test/e2e/fixture/main.ts) runs a multi-stream workload, checks it
 * against a CPU reference in the page and exposes `window.__e2e = { done, ok, detail, adapter }`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Page } from 'puppeteer-core';
import { build } from 'vite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { describeAdapter, launchChrome, readAdapter, type LaunchedChrome, type PageAdapter } from '../../bench/browser';
import { serveDir, type StaticServer } from '../../bench/serve';
import { browserMissing } from './util';

const fixtureRoot = fileURLToPath(new URL('./fixture/', import.meta.url));

const missing = browserMissing();
if (missing) console.warn(`[e2e] skipping the browser tests: ${missing}`);

interface E2EResult {
  done: boolean;
  ok: boolean;
  detail: string;
  adapter: unknown;
  seed: number;
  checks: string[];
}

describe.skipIf(missing !== null)('library in headless Chromium', () => {
  const seed = (Math.random() * 2 ** 31) >>> 0;
  const logs: string[] = [];
  let outDir = '';
  let server: StaticServer | undefined;
  let chrome: LaunchedChrome | undefined;
  let page: Page;

  const pageLog = () => (logs.length ? `\npage console:\n  ${logs.join('\n  ')}` : '\n(page console empty)');

  beforeAll(async () => {
    outDir = mkdtempSync(join(tmpdir(), 'webgpu-streams-e2e-'));
    await build({
      root: fixtureRoot,
      configFile: false,
      logLevel: 'warn',
      base: './',
      build: { outDir, emptyOutDir: true, target: 'es2022', minify: false, sourcemap: true },
    });
    server = await serveDir(outDir);
    chrome = await launchChrome();
    page = await chrome.newPage();
    page.on('console', (m) => logs.push(`[${m.type()}] ${m.text()}`));
    page.on('pageerror', (e) => logs.push(`[pageerror] ${(e as Error).stack ?? String(e)}`));
    page.on('requestfailed', (r) => logs.push(`[requestfailed] ${r.url()} ${r.failure()?.errorText ?? ''}`));
    await page.goto(`${server.origin}/?seed=${seed}`, { waitUntil: 'load' });
  });

  afterAll(async () => {
    await chrome?.close();
    await server?.close();
    if (outDir) rmSync(outDir, { recursive: true, force: true });
  });

  let adapter: PageAdapter;
  it('has navigator.gpu and an adapter', async () => {
    adapter = await readAdapter(page);
    console.log(`[e2e] ${chrome!.version}, ${chrome!.mode}, adapter: ${describeAdapter(adapter)}`);
    expect(adapter.hasGpu, `navigator.gpu missing${pageLog()}`).toBe(true);
    expect(adapter.hasAdapter, `requestAdapter() returned null${pageLog()}`).toBe(true);
  });

  it('runs the multi-stream workload and matches the CPU reference', async () => {
    try {
      await page.waitForFunction('window.__e2e && window.__e2e.done === true', { timeout: 90_000, polling: 100 });
    } catch (e) {
      throw new Error(`the fixture did not finish (seed ${seed}): ${(e as Error).message}${pageLog()}`);
    }
    const result = (await page.evaluate('window.__e2e')) as E2EResult;
    console.log(`[e2e] ${result.detail}\n  ${result.checks.join('\n  ')}`);
    expect(result.ok, `fixture failed (seed ${seed}; rerun the page with ?seed=${seed}): ${result.detail}${pageLog()}`).toBe(true);
    expect(result.adapter).toBeTruthy();
    expect(logs.filter((l) => l.startsWith('[pageerror]')), pageLog()).toEqual([]);
  });
});
