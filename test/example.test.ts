/**
 * The examples: the README's is examples/two-streams.ts, verbatim; each Node example runs with
 * `npm run example -- <name>` and checks its own result, with the stream sanitizer on through the
 * environment (WEBGPU_STREAMS_SANITIZE=throw: a race throws, and nothing may be warned); the
 * browser example runs in headless Chromium; streamWeights matches the CPU reference on a
 * sanitized context.
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { build } from 'vite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchChrome } from '../bench/browser.js';
import { serveDir } from '../bench/serve.js';
import { browserMissing, root, runCommand } from './e2e/util.js';
import { streamWeights } from '../examples/stream-weights.js';
import { gpuContext, rng, randomSeed, firstMismatch, vectorAddRef } from './fixtures/gpu.js';
import type { Context } from '../src/index.js';

let ctx: Context & { errors: string[] };
beforeAll(async () => {
  ctx = await gpuContext({ sanitize: 'throw' });
});
afterAll(() => ctx.destroy());

it('README shows examples/two-streams.ts verbatim', () => {
  const example = readFileSync(new URL('../examples/two-streams.ts', import.meta.url), 'utf8').trim();
  const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
  expect(readme).toContain(example);
});

it.each([
  ['two-streams', /two-streams: ok, every result\[i\] === a\[i\] \+ b\[i\]/],
  ['stream-weights', /stream-weights: ok, 8 layers through 2 slots/],
  ['sanitizer', /race on buffer 'weights' bytes \[0, 4096\)/],
  ['weights-from-file', /weights-from-file: ok, 16 layers of 1024 KiB from the file through 2 slots \(device peak 4096 KiB\)/],
])('npm run example -- %s runs and checks its result', async (name, ok) => {
  // As a newcomer's shell has it: no XDG_RUNTIME_DIR (the test run sets one), no thread pool size.
  const { XDG_RUNTIME_DIR: _x, UV_THREADPOOL_SIZE: _u, ...env } = process.env;
  // weights-from-file writes its model under a fresh weights-* directory in the temp directory.
  const scratch = () => new Set(readdirSync(tmpdir()).filter((f) => f.startsWith('weights-')));
  const before = scratch();
  const r = await runCommand('npm', ['run', '--silent', 'example', '--', name], { cwd: root, timeoutMs: 120_000, env: { ...env, WEBGPU_STREAMS_SANITIZE: 'throw' } });
  expect(r.output, r.output).toMatch(ok);
  expect(r.output, 'the Vulkan loader complained').not.toMatch(/XDG_RUNTIME_DIR/);
  expect(r.output, 'the sanitizer warned').not.toMatch(/webgpu-streams sanitizer \(context/);
  expect([...scratch()].filter((f) => !before.has(f)), 'left in the temp directory').toEqual([]);
  if (name === 'sanitizer') {
    // The README prints this report: the same lines, word for word.
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    for (const line of r.stdout.trim().split('\n')) expect(readme).toContain(line);
  }
  expect(r.code).toBe(0);
}, 150_000);

it("in one bundled file (as the CLIs and examples are built), a race report's call sites are the user's lines, not the library's", async () => {
  mkdirSync(join(root, 'dist'), { recursive: true });
  const dir = mkdtempSync(join(root, 'dist', 'race-site-')); // beside node_modules: the bundle imports webgpu
  try {
    const script = join(dir, 'race-site.ts');
    writeFileSync(script, [
      "import { createNodeContext } from 'webgpu-streams/node';",
      "const ctx = await createNodeContext({ sanitize: (r) => console.log(`SECOND ${r.second.callSite}`) });",
      "const [load, compute] = [ctx.createStream({ label: 'load' }), ctx.createStream({ label: 'compute' })];",
      "const [w, x, y] = [ctx.alloc(4096), ctx.alloc(4096), ctx.alloc(4096)];",
      'load.upload(new Float32Array(1024).fill(1), w);',
      'compute.launch(ctx.kernels.vectorAdd, { bindings: [x, w, y], workgroups: 4 }); // line 6',
      'compute.copy(w, x); // line 7',
      'await ctx.synchronize();',
      'ctx.destroy();',
    ].join('\n'));
    const alias = { 'webgpu-streams/node': join(root, 'src/node.ts'), 'webgpu-streams': join(root, 'src/index.ts') };
    await build({ configFile: false, logLevel: 'warn', resolve: { alias }, ssr: { noExternal: true, external: ['webgpu'] }, build: { outDir: dir, emptyOutDir: false, ssr: true, target: 'node20', sourcemap: true, rollupOptions: { input: { race: script }, external: ['webgpu', /^node:/], output: { entryFileNames: '[name].mjs', format: 'es', codeSplitting: false } } } });
    const r = await runCommand(process.execPath, ['--enable-source-maps', join(dir, 'race.mjs')], { cwd: root, timeoutMs: 60_000 });
    const seconds = r.stdout.split('\n').filter((l) => l.startsWith('SECOND'));
    expect(seconds, r.output).toHaveLength(2);
    expect(seconds[0], 'the launch (its stack kept while its pipeline validates)').toMatch(/^SECOND at .*race-site\.ts:6:/);
    expect(seconds[1], 'the copy (its stack taken at the report)').toMatch(/^SECOND at .*race-site\.ts:7:/);
    // Errors thrown at calls whose sites the library builds itself: each names the line of the call.
    const calls = join(dir, 'calls.ts');
    const lines = [
      "import { createNodeContext } from 'webgpu-streams/node';",
      "import { SafetensorsFile, textureLayout } from 'webgpu-streams';",
      "const ctx = await createNodeContext({ sanitize: 'throw' });",
      "const show = async (f: () => unknown) => { try { await f(); } catch (e) { console.log(`SITE ${(e as { name: string }).name} ${(e as { callSite?: string }).callSite?.split('\\n')[0]}`); } };",
      "const [a, b] = [ctx.createStream({ label: 'a' }), ctx.createStream({ label: 'b' })], x = ctx.alloc(64), p = ctx.allocHost(64, 'upload');",
      'await show(() => ctx.createEvent().elapsedTime(ctx.createEvent())); // line 6',
      'await show(() => ctx.trace.spans(NaN as never)); // line 7',
      'await show(() => textureLayout(\'nope\' as never, [4, 4])); // line 8',
      'await show(() => SafetensorsFile.open(5 as never)); // line 9',
      'a.upload(new Uint8Array(64), x);',
      'await show(() => b.download(x, new Uint8Array(64))); // line 11',
      'await p.ready(); a.upload(p, x);',
      'await show(() => p.f32); // line 13: the GPU owns p',
      'const ac = new AbortController(); a.hostFn(() => new Promise((r) => setTimeout(r, 50))); const w = a.synchronize({ signal: ac.signal }); ac.abort();',
      'await show(() => w); // the abort names its synchronize: line 14',
      'await ctx.synchronize(); ctx.destroy();',
    ];
    writeFileSync(calls, lines.join('\n'));
    await build({ configFile: false, logLevel: 'warn', resolve: { alias }, ssr: { noExternal: true, external: ['webgpu'] }, build: { outDir: dir, emptyOutDir: false, ssr: true, target: 'node20', sourcemap: true, rollupOptions: { input: { calls }, external: ['webgpu', /^node:/], output: { entryFileNames: '[name].mjs', format: 'es', codeSplitting: false } } } });
    const c = await runCommand(process.execPath, ['--enable-source-maps', join(dir, 'calls.mjs')], { cwd: root, timeoutMs: 60_000 });
    const sites = c.stdout.split('\n').filter((l) => l.startsWith('SITE'));
    expect(sites, c.output).toEqual([
      expect.stringMatching(/^SITE EventTimingError at .*calls\.ts:6:/),
      expect.stringMatching(/^SITE InvalidArgumentError at .*calls\.ts:7:/),
      expect.stringMatching(/^SITE InvalidArgumentError at .*calls\.ts:8:/),
      expect.stringMatching(/^SITE InvalidArgumentError at .*calls\.ts:9:/),
      expect.stringMatching(/^SITE StreamRaceError at .*calls\.ts:11:/),
      expect.stringMatching(/^SITE StreamRaceError at .*calls\.ts:13:/), // the host's view races with the upload enqueued on p
      expect.stringMatching(/^SITE AbortError at .*calls\.ts:14:/),
    ]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, 120_000);

describe.skipIf(browserMissing() !== null)('the browser example', () => {
  it('runs the two-stream pipeline in headless Chromium and checks it', async () => {
    const out = mkdtempSync(join(tmpdir(), 'webgpu-streams-example-'));
    await build({ configFile: join(root, 'vite.config.ts'), mode: 'browser-example', logLevel: 'warn', build: { outDir: out, emptyOutDir: true } });
    const server = await serveDir(out);
    const chrome = await launchChrome();
    try {
      const page = await chrome.newPage();
      await page.goto(`${server.origin}/`, { waitUntil: 'load' });
      await page.waitForFunction('window.exampleResult !== undefined', { timeout: 60_000 });
      expect(await page.evaluate('window.exampleResult')).toMatch(/^ok: 1048576 sums match the CPU/);
    } finally {
      await chrome.close();
      await server.close();
      rmSync(out, { recursive: true, force: true });
    }
  }, 120_000);
});

it.each([1, 2, 5])('streams %i layers through two slots and matches the CPU reference', async (layers) => {
  const seed = randomSeed();
  const r = rng(seed);
  const n = 4099;
  const input = r.f32Array(n, -10, 10);
  const weights = Array.from({ length: layers }, () => r.f32Array(n, -10, 10));
  ctx.memory.resetPeak();
  const base = ctx.memory.current;
  const out = await streamWeights(ctx, input, weights);
  const want = weights.reduce((x, w) => vectorAddRef(x, w), input);
  expect(firstMismatch(out, want), `seed ${seed}`).toBeNull();
  // Two weight slots and two activations, whatever the number of layers.
  expect(ctx.memory.peak - base).toBe(4 * n * 4);
  expect(ctx.memory.current).toBe(base); // destroyed inside, deferred until the streams finished
  expect(ctx.errors).toEqual([]);
});
