/**
 * The package as an app gets it: `npm pack` (its `prepare` builds dist/lib) into a temp dir, and a
 * scratch project made from test/e2e/consumer/ that installs the tarball and imports it by name
 * only. Its sources are type-checked strictly (TypeScript 5.9 and 7; bundler, nodenext, Node10,
 * the page without Node's types), and its two-stream pipeline runs in Node on Dawn, in Node
 * without Dawn (the error must say what to install), and in a Vite page in headless Chromium.
 */
import { cpSync, existsSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { describeAdapter, launchChrome, readAdapter, type LaunchedChrome } from '../../bench/browser';
import { serveDir, type StaticServer } from '../../bench/serve';
import { browserMissing, root, runCommand, type NodeRun } from './util';

const fixture = fileURLToPath(new URL('./consumer/', import.meta.url));
/** Tools this repo also uses install at its own versions, whose tarballs `npm ci` left in npm's cache. */
const SHARED_TOOLS = ['@types/node', 'typescript', 'vite', 'webgpu'];
const seed = (Math.random() * 2 ** 31) >>> 0;

/** Child npm runs get no `npm_*` variables from the `npm test` that started vitest. */
const env: NodeJS.ProcessEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k)));
env['VK_ICD_FILENAMES'] ??= '/usr/lib/chromium/vk_swiftshader_icd.json';

let tmp = '';
/** The scratch project. */
let app = '';
/** The package as installed there. */
let installed = '';
let packedFiles: string[] = [];

/** Runs a command and fails with its output unless it exits 0. */
async function run(command: string, args: string[], cwd: string, timeoutMs: number): Promise<NodeRun> {
  const r = await runCommand(command, args, { cwd, env, timeoutMs });
  if (r.code !== 0) throw new Error(`${command} ${args.join(' ')} (in ${cwd}) failed (${r.code ?? r.signal}):\n${r.output}`);
  return r;
}

/** The JSON object on the last line of a run's stdout (Dawn and Vulkan write to stderr). */
function lastJson(r: NodeRun): Record<string, unknown> {
  const line = r.stdout.trim().split('\n').pop() ?? '';
  try {
    return JSON.parse(line) as Record<string, unknown>;
  } catch {
    throw new Error(`expected a JSON line last, got:\n${r.output}`);
  }
}

beforeAll(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'webgpu-streams-package-'));
  // `prepare`'s build output comes first on stdout, then the JSON array.
  const { stdout } = await run('npm', ['pack', '--json', '--pack-destination', tmp], root, 180_000);
  const [packed] = JSON.parse(stdout.slice(stdout.search(/^\[$/m))) as [{ filename: string; files: { path: string }[] }];
  packedFiles = packed.files.map((f) => f.path).sort();

  app = join(tmp, 'app');
  cpSync(fixture, app, { recursive: true, filter: (path) => !/[\\/](node_modules|build|dist)$/.test(path) });
  const pkgPath = join(app, 'package.json');
  const pkg = JSON.parse(readFileSync(pkgPath, 'utf8')) as { dependencies?: Record<string, string>; devDependencies: Record<string, string> };
  for (const name of SHARED_TOOLS) {
    pkg.devDependencies[name] = (JSON.parse(readFileSync(join(root, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version;
  }
  pkg.dependencies = { 'webgpu-streams': `file:../${packed.filename}` };
  writeFileSync(pkgPath, `${JSON.stringify(pkg, null, 2)}\n`);
  await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'], app, 240_000);
  installed = join(app, 'node_modules', 'webgpu-streams');
}, 420_000);

afterAll(() => {
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

describe('the packed tarball', () => {
  it('ships dist/lib, README, LICENSE, the docs README links to, and package.json only', () => {
    expect(packedFiles.filter((f) => !f.startsWith('dist/lib/') && !f.startsWith('docs/') && !['LICENSE', 'README.md', 'package.json'].includes(f))).toEqual([]);
    for (const f of ['LICENSE', 'README.md', 'docs/API.md', 'docs/PERFORMANCE.md', 'docs/MULTI_GPU.md', 'dist/lib/index.js', 'dist/lib/index.d.ts', 'dist/lib/node.js', 'dist/lib/node.d.ts']) expect(packedFiles).toContain(f);
    expect(readFileSync(join(installed, 'LICENSE'), 'utf8')).toMatch(/MIT License[\s\S]*2026 webgpu-streams contributors/);
  });

  it('every path in the exports map exists after the build', () => {
    type Target = string | { [condition: string]: Target };
    const pkg = JSON.parse(readFileSync(join(installed, 'package.json'), 'utf8')) as { exports: Record<string, Target> };
    const files = (t: Target): string[] => (typeof t === 'string' ? [t] : Object.values(t).flatMap(files));
    for (const [entry, target] of Object.entries(pkg.exports)) {
      for (const file of files(target)) {
        expect(packedFiles, `${entry} -> ${file}`).toContain(file.replace(/^\.\//, ''));
        expect(existsSync(join(installed, file)), `${entry} -> ${file}`).toBe(true);
      }
    }
  });

  it('the declarations import nothing a consumer cannot resolve (no ?raw shader imports)', () => {
    const dts = readdirSync(join(installed, 'dist/lib'), { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.d.ts'));
    for (const f of dts) expect(readFileSync(join(installed, 'dist/lib', f), 'utf8'), f).not.toMatch(/["'][^"'\n]*(?:\.wgsl|\?raw)["']/);
  });

  it('the declarations leave out what is internal: Kernel is made by ctx.kernel(), its pipelines and bind groups are the library\'s', () => {
    const kernels = readFileSync(join(installed, 'dist/lib/kernels.d.ts'), 'utf8');
    for (const name of ['constructor(', 'bindGroups(', 'pipeline(', 'checkConstants(']) expect(kernels, name).not.toContain(name);
    expect(kernels).toContain('get bindingCount()');
    for (const f of ['memory.d.ts', 'texture.d.ts']) expect(readFileSync(join(installed, 'dist/lib', f), 'utf8'), f).not.toMatch(/get noun\(\)/);
  });

  it("'webgpu-streams' never loads webgpu or node: modules; the Node entry loads them only when called", () => {
    /** Bare specifiers reached from an entry through its relative imports, static and dynamic apart. */
    const reach = (entry: string) => {
      const seen = new Set<string>(), bare = { static: new Set<string>(), dynamic: new Set<string>() };
      const visit = (file: string) => {
        if (seen.has(file)) return;
        seen.add(file);
        const code = readFileSync(file, 'utf8');
        for (const m of code.matchAll(/^\s*(?:import|export)\b[^'"]*?\bfrom\s*["']([^"']+)["']|^\s*import\s*["']([^"']+)["']|\bimport\(\s*["']([^"']+)["']\s*\)/gm)) {
          const spec = (m[1] ?? m[2] ?? m[3])!;
          if (spec.startsWith('.')) visit(join(dirname(file), spec));
          else (m[3] ? bare.dynamic : bare.static).add(spec);
        }
      };
      visit(join(installed, entry));
      return { static: [...bare.static], dynamic: [...bare.dynamic] };
    };
    expect(reach('dist/lib/index.js')).toEqual({ static: [], dynamic: [] });
    // createNodeContext loads webgpu, openFile node:fs/promises, each when called.
    expect(reach('dist/lib/node.js')).toEqual({ static: [], dynamic: ['webgpu', 'node:fs/promises'] });
  });
});

describe('a consumer project', () => {
  // TypeScript 5.9 also emits build/ (tsconfig.json) for the Node runs below. The page without
  // @types/node is checked once, on the fast one; Node10 only exists before TypeScript 7.
  it.each([
    ['TypeScript 5.9', 'typescript', ['tsconfig.json', 'tsconfig.nodenext.json', 'tsconfig.node10.json']],
    ['TypeScript 7', 'typescript7', ['tsconfig.json --noEmit', 'tsconfig.nodenext.json', 'tsconfig.browser.json']],
  ])('type-checks strictly with %s', async (_name, pkg, configs) => {
    const tsc = join(app, 'node_modules', pkg, 'bin', 'tsc');
    const { stdout: version } = await run(process.execPath, [tsc, '--version'], app, 30_000);
    expect(version).toMatch(pkg === 'typescript' ? /Version 5\.9\./ : /Version 7\./);
    await Promise.all(configs.map((c) => run(process.execPath, [tsc, '-p', ...c.split(' ')], app, 120_000)));
  });

  it('runs the two-stream pipeline in Node on Dawn (webgpu-streams/node)', async () => {
    const r = await run(process.execPath, ['build/node-main.js', String(seed)], app, 120_000);
    const result = lastJson(r);
    console.log(`[package] Node on ${String(result['adapter'])}: ${(result['checks'] as string[]).join('; ')}`);
    expect(result['ok'], `seed ${seed}:\n${r.output}`).toBe(true);
  });

  it("an error's call site is the user's line even where the package's files sit in a folder of another name (vendored)", async () => {
    const vendored = join(app, 'vendored');
    cpSync(join(installed, 'dist', 'lib'), join(vendored, 'lib'), { recursive: true });
    writeFileSync(join(vendored, 'site.mjs'), [
      "import { createNodeContext } from './lib/node.js';",
      'const ctx = await createNodeContext();',
      "const s = ctx.createStream({ label: 's' });",
      's.hostFn(() => new Promise((r) => setTimeout(r, 50)));',
      'const ac = new AbortController();',
      'const aborted = s.synchronize({ signal: ac.signal }).then(() => null, (e) => e);',
      'ac.abort();',
      'let early; try { ctx.createEvent().elapsedTime(ctx.createEvent()); } catch (e) { early = e; }',
      'console.log(JSON.stringify({ aborted: (await aborted)?.callSite ?? null, early: early?.callSite ?? null }));',
      'ctx.destroy();',
    ].join('\n'));
    const result = lastJson(await run(process.execPath, [join(vendored, 'site.mjs')], app, 60_000));
    expect(result['aborted']).toMatch(/^at file:\/\/.*vendored[\\/]site\.mjs:6:/);
    expect(result['early']).toMatch(/^at file:\/\/.*vendored[\\/]site\.mjs:8:/);
  });

  it('a CommonJS require() gets the same entries where Node loads ES modules from require (20.19+, 22.12+)', async () => {
    const process_ = process as unknown as { features: { require_module?: boolean } };
    if (!process_.features.require_module) return;
    const code = "const a = require('webgpu-streams'), b = require('webgpu-streams/node'); console.log(JSON.stringify([typeof a.createContext, typeof b.createNodeContext, typeof a.InvalidArgumentError]))";
    const r = await run(process.execPath, ['-e', code], app, 60_000);
    expect(JSON.parse(r.stdout.trim().split('\n').pop()!)).toEqual(['function', 'function', 'function']);
  });

  it('without the webgpu package, createNodeContext says what to install', async () => {
    const dawn = join(app, 'node_modules', 'webgpu'), hidden = `${dawn}.hidden`;
    renameSync(dawn, hidden);
    try {
      const result = lastJson(await run(process.execPath, ['build/no-dawn.js'], app, 60_000));
      expect(result['ok'], String(result['message'])).toBe(true);
      expect(result['message']).toMatch(/^WebGpuUnavailableError: .*webgpu-streams\/node needs Dawn's `webgpu` package: npm i webgpu(\n {2}called at .*no-dawn\.js.*)?$/s);
    } finally {
      renameSync(hidden, dawn);
    }
  });

  const missing = browserMissing();
  if (missing) console.warn(`[package] skipping the browser run: ${missing}`);

  describe.skipIf(missing !== null)('in headless Chromium', () => {
    let server: StaticServer | undefined;
    let chrome: LaunchedChrome | undefined;
    afterAll(async () => {
      await chrome?.close();
      await server?.close();
    });

    it('builds with Vite and runs the two-stream pipeline in the page', async () => {
      await run(process.execPath, [join(app, 'node_modules/vite/bin/vite.js'), 'build', '--logLevel', 'warn'], app, 120_000);
      const dist = join(app, 'dist');
      const js = readdirSync(join(dist, 'assets')).filter((f) => f.endsWith('.js'));
      for (const f of js) expect(readFileSync(join(dist, 'assets', f), 'utf8'), f).not.toMatch(/["'](?:webgpu|node:[\w/]+)["']/);
      // The sanitizer (off here) is a chunk of its own, loaded only by a context that turns it on.
      const html = readFileSync(join(dist, 'index.html'), 'utf8');
      const withSanitizer = js.filter((f) => readFileSync(join(dist, 'assets', f), 'utf8').includes('record an event on '));
      expect(withSanitizer).toHaveLength(1);
      expect(html, 'the page loads the sanitizer chunk only on demand').not.toContain(withSanitizer[0]);

      server = await serveDir(dist);
      chrome = await launchChrome();
      const page = await chrome.newPage();
      const logs: string[] = [];
      page.on('console', (m) => logs.push(`[${m.type()}] ${m.text()}`));
      page.on('pageerror', (e) => logs.push(`[pageerror] ${(e as Error).stack ?? String(e)}`));
      await page.goto(`${server.origin}/?seed=${seed}`, { waitUntil: 'load' });
      const log = () => (logs.length ? `\npage console:\n  ${logs.join('\n  ')}` : '');
      try {
        await page.waitForFunction('window.__consumer !== undefined', { timeout: 90_000, polling: 100 });
      } catch (e) {
        throw new Error(`the page did not finish (seed ${seed}; adapter: ${describeAdapter(await readAdapter(page))}): ${(e as Error).message}${log()}`);
      }
      const result = (await page.evaluate('window.__consumer')) as { ok: boolean; checks: string[]; adapter: string; error?: string };
      console.log(`[package] ${chrome.version} on ${result.adapter}: ${result.checks.join('; ')}`);
      expect(result.ok, `seed ${seed} (rerun the page with ?seed=${seed}): ${result.error ?? result.checks.join('\n')}${log()}`).toBe(true);
    });
  });
});
