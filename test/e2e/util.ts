/** Helpers shared by the end-to-end tests. */
import { spawn, spawnSync } from 'node:child_process';
import { resolve } from 'node:path';
import { findChrome } from '../../bench/browser';

/** The project root. */
export const root = resolve(import.meta.dirname, '../..');

/** `npm run <script>` in the project root; throws with its output when it fails. */
export function npmRun(script: string): void {
  const r = spawnSync('npm', ['run', '--silent', script], { cwd: root, encoding: 'utf8' });
  if (r.status !== 0) {
    throw new Error(`npm run ${script} failed (${r.status ?? r.signal ?? r.error?.message}):\n${r.stdout}\n${r.stderr}`);
  }
}

/**
 * Why the browser tests cannot run here (no Chromium), or null when they can. On CI (CI set) it is
 * always null, so that a missing browser fails loudly instead of skipping.
 */
export function browserMissing(): string | null {
  try {
    findChrome();
    return null;
  } catch (e) {
    return process.env['CI'] ? null : (e as Error).message;
  }
}

export interface NodeRun {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** stdout and stderr, interleaved as they came. */
  output: string;
  /** stdout alone. */
  stdout: string;
}

/** Runs `node ...args` in the project root, collecting stdout and stderr; SIGKILL after `timeoutMs`. */
export function runNode(args: string[], timeoutMs: number): Promise<NodeRun> {
  return runCommand(process.execPath, args, { timeoutMs });
}

export interface RunOptions {
  /** @default the project root */
  cwd?: string;
  /** @default process.env */
  env?: NodeJS.ProcessEnv;
  /** SIGKILL after this long. */
  timeoutMs: number;
}

/** Runs `command ...args` (no shell), collecting stdout and stderr; SIGKILL after `timeoutMs`. */
export function runCommand(command: string, args: string[], options: RunOptions): Promise<NodeRun> {
  return new Promise((res, rej) => {
    const child = spawn(command, args, { cwd: options.cwd ?? root, env: options.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '', stdout = '';
    child.stdout.on('data', (d: Buffer) => {
      output += d.toString();
      stdout += d.toString();
    });
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    const timer = setTimeout(() => {
      output += `\n[test] killed after ${options.timeoutMs / 1000} s`;
      child.kill('SIGKILL');
    }, options.timeoutMs);
    child.on('error', rej);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      res({ code, signal, output, stdout });
    });
  });
}

/** What a self-checking fixture page exposes as `window.__e2e`. */
export interface FixtureResult {
  ok: boolean;
  detail: string;
  checks: string[];
}

/**
 * Builds the fixture page in `dir` with Vite, serves it, opens it in headless Chromium with `?seed=`,
 * and returns its `window.__e2e` once done, with the page's console.
 */
export async function runFixturePage(dir: string, seed: number): Promise<{ result: FixtureResult; logs: string[] }> {
  const { mkdtempSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const { build } = await import('vite');
  const { launchChrome } = await import('../../bench/browser');
  const { serveDir } = await import('../../bench/serve');
  const outDir = mkdtempSync(join(tmpdir(), 'webgpu-streams-fixture-'));
  await build({ root: dir, configFile: false, logLevel: 'warn', base: './', build: { outDir, emptyOutDir: true, target: 'es2022', minify: false } });
  const server = await serveDir(outDir);
  const chrome = await launchChrome();
  const logs: string[] = [];
  try {
    const page = await chrome.newPage();
    page.on('console', (m) => logs.push(`[${m.type()}] ${m.text()}`));
    page.on('pageerror', (e) => logs.push(`[pageerror] ${(e as Error).stack ?? String(e)}`));
    await page.goto(`${server.origin}/?seed=${seed}`, { waitUntil: 'load' });
    await page.waitForFunction('window.__e2e && window.__e2e.done === true', { timeout: 90_000, polling: 100 });
    return { result: (await page.evaluate('window.__e2e')) as FixtureResult, logs };
  } finally {
    await chrome.close();
    await server.close();
    rmSync(outDir, { recursive: true, force: true });
  }
}
