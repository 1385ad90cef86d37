/**
 * Chromium with WebGPU, for the headless runner and the end-to-end tests (puppeteer-core and the
 * system browser; `puppeteer` itself would try to download one, which fails offline).
 *
 * - Headless (default): `--headless` with SwiftShader allowed, which gives every machine a WebGPU
 *   adapter, software where there is no GPU. Headless Chromium on Linux never hands a page a
 *   Vulkan adapter, so on a GPU machine this still measures SwiftShader.
 * - Windowed (`gpu: true` with `DISPLAY` set, e.g. Xvfb from `../shared/gpu/chrome/on-device.sh`):
 *   no `--headless`, flags from `CHROME_GPU_FLAGS` (Skia and ANGLE on Vulkan), which is how a page
 *   gets the real GPU.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import puppeteer, { type Browser, type Page } from 'puppeteer-core';

/** Where {@link findChrome} looks after `CHROME_PATH`, in order. */
export const CHROME_CANDIDATES: readonly string[] = [
  '/usr/bin/chromium',
  '/usr/bin/chromium-browser',
  '/usr/bin/google-chrome',
  '/usr/bin/google-chrome-stable',
  '/usr/bin/google-chrome-beta',
  '/usr/bin/google-chrome-unstable',
  '/opt/google/chrome/chrome',
  '/opt/chromium/chrome',
  '/snap/bin/chromium',
  '/Applications/Google Chrome.app/Contents/MacOS/Google Chrome',
  '/Applications/Chromium.app/Contents/MacOS/Chromium',
];

/** The install command quoted when no browser is found. */
export const CHROME_INSTALL_HINT = 'apt-get update && apt-get install -y chromium';

/** Thrown by {@link findChrome} when there is no browser to run. */
export class ChromeNotFoundError extends Error {
  override name = 'ChromeNotFoundError';
}

/**
 * The Chromium/Chrome executable to run: `CHROME_PATH` when set (it must exist), else the first
 * of {@link CHROME_CANDIDATES} that exists.
 * @throws ChromeNotFoundError with the install command when there is none.
 */
export function findChrome(env: NodeJS.ProcessEnv = process.env): string {
  const fromEnv = env['CHROME_PATH'];
  if (fromEnv) {
    if (existsSync(fromEnv)) return fromEnv;
    throw new ChromeNotFoundError(
      `CHROME_PATH is set to '${fromEnv}', which does not exist. Point it at a Chromium or Chrome ` +
        `executable, or unset it and install Chromium: ${CHROME_INSTALL_HINT}`,
    );
  }
  for (const candidate of CHROME_CANDIDATES) if (existsSync(candidate)) return candidate;
  throw new ChromeNotFoundError(
    `No Chromium or Chrome found (looked at CHROME_PATH, then ${CHROME_CANDIDATES.join(', ')}). ` +
      `Install it with: ${CHROME_INSTALL_HINT}  (or set CHROME_PATH to the browser executable)`,
  );
}

/** Flags of the headless mode: WebGPU on, SwiftShader allowed, no background traffic. */
export const HEADLESS_FLAGS: readonly string[] = [
  '--headless',
  '--no-sandbox',
  '--enable-unsafe-webgpu',
  '--enable-unsafe-swiftshader',
  '--enable-webgpu-developer-features',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
];

/**
 * Windowed flags used when `gpu` is asked for and `CHROME_GPU_FLAGS` is not set: the ones under
 * which Chromium handed a page the NVIDIA adapter (`../shared/gpu/chrome/on-device.sh`).
 */
export const DEFAULT_GPU_FLAGS: readonly string[] = [
  '--no-sandbox',
  '--ozone-platform=x11',
  '--use-angle=vulkan',
  '--enable-features=Vulkan,VulkanFromANGLE,DefaultANGLEVulkan',
  '--disable-vulkan-surface',
  '--enable-unsafe-webgpu',
  '--ignore-gpu-blocklist',
  '--enable-webgpu-developer-features',
  '--password-store=basic',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
  '--no-default-browser-check',
  '--disable-dev-shm-usage',
];

export interface LaunchOptions {
  /**
   * Ask for the real GPU: windowed Chromium on `DISPLAY` with the flags from `CHROME_GPU_FLAGS`.
   * Without `DISPLAY` this falls back to headless (and says so in {@link LaunchedChrome.warnings}).
   * @default false
   */
  gpu?: boolean;
  /** More command-line flags, appended. */
  extraArgs?: string[];
  /** Browser executable. @default findChrome() */
  executablePath?: string;
  /** Environment to read `CHROME_PATH`, `DISPLAY` and `CHROME_GPU_FLAGS` from. @default process.env */
  env?: NodeJS.ProcessEnv;
  /** Page viewport. @default { width: 1400, height: 900 } */
  viewport?: { width: number; height: number };
  /** Launch timeout, ms. @default 60000 */
  timeoutMs?: number;
}

export interface LaunchedChrome {
  browser: Browser;
  /** `headless` (SwiftShader or whatever headless offers) or `windowed` (real GPU on DISPLAY). */
  mode: 'headless' | 'windowed';
  executablePath: string;
  /** The flags we passed (puppeteer adds its own automation flags). */
  args: string[];
  /** The browser's version string, e.g. `Chrome/156.0.8078.108`. */
  version: string;
  /** Things the caller should tell the user (e.g. `--gpu` without DISPLAY). */
  warnings: string[];
  /** Opens a tab with the configured viewport. */
  newPage(): Promise<Page>;
  /** Closes the browser and removes its temporary profile. Idempotent. */
  close(): Promise<void>;
}

/**
 * Launch Chromium with WebGPU enabled, in a fresh temporary profile.
 *
 * @example
 * const chrome = await launchChrome();
 * const page = await chrome.newPage();
 * await page.goto(`${server.origin}/`);
 * console.log(await readAdapter(page));
 * await chrome.close();
 */
export async function launchChrome(options: LaunchOptions = {}): Promise<LaunchedChrome> {
  const env = options.env ?? process.env;
  const executablePath = options.executablePath ?? findChrome(env);
  const warnings: string[] = [];
  const display = env['DISPLAY'];
  const windowed = Boolean(options.gpu && display);
  if (options.gpu && !display) {
    warnings.push(
      '--gpu asks for windowed Chromium, but DISPLAY is not set: running headless, which on Linux ' +
        'never gets a hardware adapter (start Xvfb and set DISPLAY, see bench/README.md, "Running it")',
    );
  }

  let args: string[];
  if (windowed) {
    const fromEnv = env['CHROME_GPU_FLAGS']?.trim();
    args = fromEnv ? splitFlags(fromEnv) : [...DEFAULT_GPU_FLAGS];
    if (!fromEnv) warnings.push('CHROME_GPU_FLAGS is not set: using the default windowed GPU flags');
    for (const required of ['--enable-unsafe-webgpu', '--no-first-run']) {
      if (!args.includes(required)) args.push(required);
    }
    const headless = args.filter((a) => a === '--headless' || a.startsWith('--headless='));
    if (headless.length > 0) {
      warnings.push(`dropped ${headless.join(' ')} from CHROME_GPU_FLAGS: headless loses the GPU`);
      args = args.filter((a) => !headless.includes(a));
    }
  } else {
    args = [...HEADLESS_FLAGS];
  }
  args.push(...(options.extraArgs ?? []));
  // Our own fresh profile, even if the flags named one.
  args = args.filter((a) => !a.startsWith('--user-data-dir'));
  const userDataDir = mkdtempSync(join(tmpdir(), 'webgpu-streams-chrome-'));
  args.push(`--user-data-dir=${userDataDir}`);
  const viewport = options.viewport ?? { width: 1400, height: 900 };
  if (windowed) args.push(`--window-size=${viewport.width},${viewport.height + 100}`);

  let browser: Browser;
  try {
    browser = await puppeteer.launch({
      executablePath,
      // We pass --headless ourselves (puppeteer would add --headless=new and more).
      headless: false,
      args,
      defaultViewport: viewport,
      timeout: options.timeoutMs ?? 60_000,
      env: { ...env } as Record<string, string>,
    });
  } catch (e) {
    rmSync(userDataDir, { recursive: true, force: true });
    throw new Error(
      `Could not launch ${executablePath} (${windowed ? `windowed on DISPLAY=${display}` : 'headless'}): ` +
        `${(e as Error).message}`,
      { cause: e },
    );
  }
  const version = await browser.version().catch(() => 'unknown');

  let closed: Promise<void> | undefined;
  return {
    browser,
    mode: windowed ? 'windowed' : 'headless',
    executablePath,
    args,
    version,
    warnings,
    async newPage() {
      const page = await browser.newPage();
      await page.setViewport(viewport);
      return page;
    },
    close() {
      closed ??= (async () => {
        try {
          await browser.close();
        } catch {
          browser.process()?.kill('SIGKILL');
        }
        rmSync(userDataDir, { recursive: true, force: true, maxRetries: 3 });
      })();
      return closed;
    },
  };
}

/** Split a flags string on whitespace, keeping `"quoted parts"` together. */
export function splitFlags(flags: string): string[] {
  const out: string[] = [];
  for (const m of flags.matchAll(/(?:[^\s"']+|"[^"]*"|'[^']*')+/g)) out.push(m[0].replace(/["']/g, ''));
  return out;
}

/** What a page's `navigator.gpu.requestAdapter()` got. */
export interface PageAdapter {
  /** False when the page has no `navigator.gpu` (not a secure context, WebGPU off). */
  hasGpu: boolean;
  /** False when `requestAdapter()` returned null. */
  hasAdapter: boolean;
  vendor: string;
  architecture: string;
  device: string;
  description: string;
  isFallbackAdapter: boolean;
  /** True for software rasterizers (SwiftShader, llvmpipe/lavapipe) or a fallback adapter. */
  software: boolean;
  features: string[];
  /** An error message from `requestAdapter()`, when it threw. */
  error?: string;
}

// A string, not a function: page.evaluate serialises functions with toString(), and transpilers
// (vite, vitest) may inject helpers that do not exist in the page.
const READ_ADAPTER_SCRIPT = `(async () => {
  const out = { hasGpu: false, hasAdapter: false, vendor: '', architecture: '', device: '', description: '',
    isFallbackAdapter: false, software: false, features: [] };
  if (!('gpu' in navigator) || !navigator.gpu) return out;
  out.hasGpu = true;
  try {
    const adapter = await navigator.gpu.requestAdapter();
    if (!adapter) return out;
    out.hasAdapter = true;
    const info = adapter.info || (adapter.requestAdapterInfo ? await adapter.requestAdapterInfo() : {});
    out.vendor = info.vendor || '';
    out.architecture = info.architecture || '';
    out.device = info.device || '';
    out.description = info.description || '';
    out.isFallbackAdapter = Boolean(info.isFallbackAdapter ?? adapter.isFallbackAdapter);
    out.features = [...adapter.features].sort();
  } catch (e) {
    out.error = String(e && e.message || e);
  }
  return out;
})()`;

/**
 * Ask the page which WebGPU adapter it gets (its own `requestAdapter()`, default options). The page
 * must be served from http://127.0.0.1 or localhost: about:blank has no `navigator.gpu`.
 */
export async function readAdapter(page: Page): Promise<PageAdapter> {
  const adapter = (await page.evaluate(READ_ADAPTER_SCRIPT)) as PageAdapter;
  adapter.software = adapter.isFallbackAdapter || isSoftwareAdapterInfo(adapter);
  return adapter;
}

/** True for SwiftShader, llvmpipe/lavapipe and other software adapters, from their info strings. */
export function isSoftwareAdapterInfo(info: {
  vendor?: string;
  architecture?: string;
  device?: string;
  description?: string;
}): boolean {
  const text = [info.vendor, info.architecture, info.device, info.description].join(' ').toLowerCase();
  return /swiftshader|llvmpipe|lavapipe|software|microsoft basic render/.test(text);
}

/** One line for logs: `google swiftshader (SwiftShader Device (Subzero)) [software]`. */
export function describeAdapter(a: PageAdapter): string {
  if (!a.hasGpu) return 'no navigator.gpu (WebGPU disabled or not a secure context)';
  if (!a.hasAdapter) return `navigator.gpu.requestAdapter() returned null${a.error ? `: ${a.error}` : ''}`;
  const name = [a.vendor, a.architecture].filter(Boolean).join(' ') || 'unknown adapter';
  const desc = a.description || a.device;
  return `${name}${desc ? ` (${desc})` : ''}${a.software ? ' [software]' : ''}`;
}
