/**
 * `npm run bench`: the benchmark page (dist/page) in Chromium, driven by puppeteer-core.
 *
 * Serves dist/page on 127.0.0.1, opens `/?autorun&report=/result[&quick][&scenarios=a,b]`, streams
 * the page's `[bench]` console lines, waits for the page to POST its SuiteResult, prints the table
 * and verdicts, and writes `<out>/<date>-<adapter>-headless.json`, `...-trace.json` (Chrome Trace
 * Event JSON) and `...-timeline.png` (the `#timeline` element). Exits 1 when a scenario fails its
 * check, the page fails, or the result is malformed; 2 on bad usage or a missing build.
 *
 * Page contract (bench/page): URL params `autorun`, `quick`, `scenarios=a,b`, `report=/path`; the
 * page POSTs its SuiteResult JSON to `report` and keeps
 * `window.__bench = { state: 'idle' | 'running' | 'done' | 'error', result?, error? }`.
 *
 * Headless by default (SwiftShader where headless has no GPU, which on Linux is always);
 * `--gpu` runs windowed on $DISPLAY with $CHROME_GPU_FLAGS (see ../shared/gpu/README.md).
 */
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Page } from 'puppeteer-core';
import { describeAdapter, launchChrome, readAdapter, type LaunchedChrome } from './browser';
import { formatReport, runPassed, validateSuiteResult, SOFTWARE_WARNING } from './report';
import { gitCommit, parseCliArgs, usage, writeResultFiles, type CliOptions } from './cli';
import type { SuiteResult } from './schema';
import { serveDir, type StaticServer } from './serve';

const REPORT_PATH = '/result';
/** How long the page may go without `window.__bench` after loading. */
const CONTRACT_GRACE_MS = 30_000;
/** How long after `state: 'done'` we wait for the POST before reading `window.__bench.result`. */
const POST_GRACE_MS = 15_000;
const CONSOLE_KEEP = 300;

class BenchFailure extends Error {
  override name = 'BenchFailure';
}

/** The built page next to this CLI (dist/cli/../page), else dist/page under the working directory. */
function defaultPageDir(): string {
  try {
    const besideCli = fileURLToPath(new URL('../page/', import.meta.url));
    if (existsSync(join(besideCli, 'index.html'))) return besideCli;
  } catch {
    // import.meta.url is not a file: URL (bundled elsewhere): fall through
  }
  return resolve('dist/page');
}

/** The page URL for the options. */
export function benchUrl(origin: string, opts: Pick<CliOptions, 'quick' | 'scenarios' | 'mock'> & { sanitize?: boolean }): string {
  let url = `${origin}/?autorun&runner=headless&report=${REPORT_PATH}`;
  if (opts.quick) url += '&quick';
  if (opts.sanitize) url += '&sanitize';
  if (opts.mock) url += '&mock';
  if (opts.scenarios?.length) url += `&scenarios=${opts.scenarios.map(encodeURIComponent).join(',')}`;
  return url;
}

const elapsed = (t0: number) => `${((performance.now() - t0) / 1000).toFixed(1).padStart(6)}s`;

export async function main(argv: string[]): Promise<number> {
  let opts: CliOptions;
  try {
    opts = parseCliArgs(argv);
  } catch (e) {
    console.error(`bench: ${(e as Error).message}\n\n${usage('npm run bench --', 'headless')}`);
    return 2;
  }
  if (opts.help) {
    console.log(usage('npm run bench --', 'headless'));
    return 0;
  }
  const pageDir = opts.page ? resolve(opts.page) : defaultPageDir();
  if (!existsSync(join(pageDir, 'index.html'))) {
    console.error(`bench: no built page at ${pageDir} (index.html missing): run \`npm run build:page\` first ` +
      '(`npm run bench` builds it), or pass --page DIR');
    return 2;
  }
  const timeoutMs = (opts.timeoutMin ?? (opts.quick ? 10 : 20)) * 60_000;
  const t0 = performance.now();

  let server: StaticServer | undefined;
  let chrome: LaunchedChrome | undefined;
  const consoleTail: string[] = [];
  const keep = (line: string) => {
    consoleTail.push(line);
    if (consoleTail.length > CONSOLE_KEEP) consoleTail.shift();
  };
  try {
    server = await serveDir(pageDir, {
      reportPath: REPORT_PATH,
      onRequest: (method, path, status) => {
        if (status >= 400) keep(`[http ${status}] ${method} ${path}`);
      },
    });
    chrome = await launchChrome({ gpu: opts.gpu });
    for (const w of chrome.warnings) console.warn(`bench: warning: ${w}`);
    console.log(`bench: ${chrome.version} (${chrome.mode}, ${chrome.executablePath}), serving ${pageDir} at ${server.origin}`);

    const page = await chrome.newPage();
    let fail!: (e: BenchFailure) => void;
    const failed = new Promise<never>((_, rej) => (fail = rej));
    failed.catch(() => {});
    page.on('console', (msg) => {
      const text = msg.text();
      if (text.startsWith('[bench]')) {
        console.log(`${elapsed(t0)} ${text}`);
        return;
      }
      keep(`[console.${msg.type()}] ${text}`);
      if (msg.type() === 'error') console.error(`${elapsed(t0)} [page console.error] ${text}`);
    });
    page.on('pageerror', (err) => {
      const e = err as Error;
      keep(`[pageerror] ${e.stack ?? e.message ?? String(err)}`);
      fail(new BenchFailure(`uncaught exception in the page: ${e.stack ?? e.message ?? String(err)}`));
    });
    page.on('error', (err) => fail(new BenchFailure(`the page crashed: ${err.message}`)));
    page.on('requestfailed', (req) => keep(`[requestfailed] ${req.url()} ${req.failure()?.errorText ?? ''}`));

    const url = benchUrl(server.origin, opts);
    console.log(`bench: opening ${url}`);
    await page.goto(url, { waitUntil: 'load', timeout: 60_000 });

    const adapter = await readAdapter(page);
    console.log(`bench: the page's adapter: ${describeAdapter(adapter)}`);
    if (!adapter.hasGpu || !adapter.hasAdapter) {
      throw new BenchFailure(`no WebGPU adapter in the page: ${describeAdapter(adapter)}`);
    }
    if (adapter.software && !opts.mock) console.warn(`bench: ${SOFTWARE_WARNING}`);

    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<never>((_, rej) => {
      timer = setTimeout(
        () => rej(new BenchFailure(`no result after ${timeoutMs / 60_000} min (--timeout MIN to change)`)),
        timeoutMs,
      );
    });
    timedOut.catch(() => {});
    const watch = { stopped: false };
    const watched = watchPage(page, watch);
    watched.catch(() => {});
    let posted: SuiteResult;
    try {
      posted = (await Promise.race([server.report, failed, timedOut, watched])) as SuiteResult;
    } finally {
      clearTimeout(timer);
      watch.stopped = true;
    }

    if (isObject(posted) && 'error' in posted) {
      const stage = typeof posted['stage'] === 'string' ? ` (${posted['stage']})` : '';
      throw new BenchFailure(`the page reported an error${stage}: ${String(posted['error'])}`);
    }
    const result = annotate(posted, chrome);
    const problems = validateSuiteResult(result);
    const screenshot = await screenshotTimeline(page);
    const files = writeResultFiles(result, opts.out, screenshot);
    console.log(formatReport(result, files, problems));
    console.log(`bench: done in ${elapsed(t0).trim()}`);
    return runPassed(result, problems) ? 0 : 1;
  } catch (e) {
    const err = e as Error;
    console.error(`\nbench: FAILED: ${err instanceof BenchFailure ? err.message : (err.stack ?? err.message)}`);
    if (consoleTail.length) console.error(`\nlast page console lines:\n  ${consoleTail.slice(-60).join('\n  ')}`);
    return 1;
  } finally {
    await chrome?.close();
    await server?.close();
  }
}

/**
 * Watches `window.__bench`: rejects when the page reports an error or never implements the contract;
 * resolves with `window.__bench.result` when the page says done but its POST does not come.
 */
async function watchPage(page: Page, watch: { stopped: boolean }): Promise<SuiteResult> {
  const start = performance.now();
  let doneAt: number | undefined;
  for (;;) {
    await new Promise((r) => setTimeout(r, 1000));
    if (watch.stopped) return new Promise<never>(() => {});
    let s: { state?: string; error?: unknown; hasResult?: boolean } | null;
    try {
      s = (await page.evaluate(
        `(() => { const b = window.__bench; return b ? { state: b.state, error: b.error == null ? undefined : String(b.error && b.error.stack || b.error), hasResult: b.result != null } : null; })()`,
      )) as typeof s;
    } catch {
      if (watch.stopped) return new Promise<never>(() => {});
      if (page.isClosed()) throw new BenchFailure('the page closed');
      continue; // navigation or a busy page: try again
    }
    if (!s) {
      if (performance.now() - start > CONTRACT_GRACE_MS) {
        throw new BenchFailure(`the page has no window.__bench after ${CONTRACT_GRACE_MS / 1000} s: is ` +
          'this the benchmark page (bench/page), built with `npm run build:page`?');
      }
      continue;
    }
    if (s.state === 'error') throw new BenchFailure(`the page reported an error: ${s.error ?? '(no message)'}`);
    if (s.state === 'idle' && performance.now() - start > CONTRACT_GRACE_MS) {
      throw new BenchFailure(`the page is still idle after ${CONTRACT_GRACE_MS / 1000} s: did it see ?autorun?`);
    }
    if (s.state === 'done') {
      doneAt ??= performance.now();
      if (performance.now() - doneAt > POST_GRACE_MS) {
        if (!s.hasResult) throw new BenchFailure('the page is done but posted no result and has none in window.__bench');
        console.warn(`bench: warning: the page is done but did not POST to ${REPORT_PATH}; using window.__bench.result`);
        return (await page.evaluate('window.__bench.result')) as SuiteResult;
      }
    }
  }
}

const isObject = (x: unknown): x is Record<string, unknown> => typeof x === 'object' && x !== null;

/** Marks the result as the headless runner's and adds what only the runner knows. */
function annotate(result: SuiteResult, chrome: LaunchedChrome): SuiteResult {
  if (typeof result !== 'object' || result === null) return result;
  const device = (result.device ?? {}) as SuiteResult['device'];
  return {
    ...result,
    commit: result.commit ?? gitCommit(),
    device: {
      ...device,
      runner: 'headless',
      notes: {
        ...device.notes,
        browser: chrome.version,
        chromeMode: chrome.mode,
        chromeFlags: chrome.args.filter((a) => !a.startsWith('--user-data-dir')).join(' '),
      },
    },
  };
}

/** PNG of the `#timeline` element, or undefined (with a warning) when the page has none. */
async function screenshotTimeline(page: Page): Promise<Uint8Array | undefined> {
  try {
    const el = await page.waitForSelector('#timeline', { timeout: 15_000 });
    if (!el) throw new Error('#timeline not found');
    // Let the page paint the final timeline.
    await page.evaluate('new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(undefined))))');
    await el.scrollIntoView();
    const box = await el.boundingBox();
    if (!box || box.width < 1 || box.height < 1) throw new Error('#timeline has no size');
    return await el.screenshot({ type: 'png' });
  } catch (e) {
    console.warn(`bench: warning: no timeline screenshot: ${(e as Error).message}`);
    return undefined;
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e: unknown) => {
    console.error(e);
    process.exit(1);
  },
);
