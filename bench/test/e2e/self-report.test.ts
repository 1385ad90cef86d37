/**
 * The self-reporting page with no puppeteer and no Node server: bench/serve.py (the server used on
 * GPU machines without Node.js) serves dist/page, plain headless Chromium opens
 * `?autorun&quick&report=/result`, and the page POSTs its SuiteResult, which serve.py writes out.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findChrome, HEADLESS_FLAGS } from '../../browser';
import { validateSuiteResult } from '../../report';
import type { SuiteResult } from '../../schema';
import { browserMissing, npmRun, root } from '../../../test/e2e/util';

const missing = browserMissing() ?? (spawnSync('python3', ['--version']).status === 0 ? null : 'python3 is missing');
if (missing) console.warn(`[e2e] skipping the self-report test: ${missing}`);

function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => res(port));
    });
    s.on('error', rej);
  });
}

describe.skipIf(missing !== null)('self-reporting page (serve.py + Chromium, no puppeteer)', () => {
  let dir = '';
  let result: SuiteResult & { error?: string };
  let log = '';

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'webgpu-streams-self-report-'));
    npmRun('build:page');
    const port = await freePort();
    const out = join(dir, 'result.json');
    const server = spawn('python3', [join(root, 'bench/serve.py'), join(root, 'dist/page'), String(port), out, '400'], { stdio: 'ignore' });
    const serverDone = new Promise<number | null>((res) => server.on('close', res));
    await new Promise((r) => setTimeout(r, 500)); // let the server bind
    const url = `http://127.0.0.1:${port}/?autorun&quick&scenarios=sleep-streams,weight-loading,weights-storage&report=/result`;
    const chrome = spawn(findChrome(), [...HEADLESS_FLAGS, `--user-data-dir=${join(dir, 'profile')}`, url], { stdio: ['ignore', 'pipe', 'pipe'] });
    chrome.stderr.on('data', (d: Buffer) => (log = (log + d.toString()).slice(-4000)));
    const chromeDone = new Promise((res) => chrome.on('close', res));
    const code = await serverDone;
    chrome.kill('SIGKILL');
    await chromeDone;
    expect(code, `serve.py got no POST within 400 s; chromium said:\n${log}`).toBe(0);
    result = JSON.parse(readFileSync(out, 'utf8')) as SuiteResult & { error?: string };
  }, 460_000);

  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 200 });
  });

  it('posts a valid, verified SuiteResult for the scenarios named in the URL', () => {
    expect(result.error, 'the page reported an error').toBeUndefined();
    expect(validateSuiteResult(result)).toEqual([]);
    expect(result.quick).toBe(true);
    expect(result.scenarios.map((s) => s.id).sort()).toEqual(['sleep-streams', 'weight-loading', 'weights-storage']);
    expect(result.ok).toBe(true);
    for (const s of result.scenarios) expect(s.verification.ok, `${s.id}: ${s.verification.detail}`).toBe(true);
    expect(result.device.runner).toBe('page');
    expect(result.device.software).toBe(true); // SwiftShader on CI
  });
});
