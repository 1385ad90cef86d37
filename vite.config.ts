/// <reference types="vitest/config" />
import { defineConfig, type Plugin } from 'vite';
import { fileURLToPath } from 'node:url';
import { runtimeDir } from './bench/runtime-dir.ts';

/** Node CLIs, each bundled into one file dist/cli/<name>.mjs (only `webgpu`, puppeteer-core and node: stay imports). */
const CLI_ENTRIES: Record<string, string> = {
  'bench-node': 'bench/node.ts',
  'bench-headless': 'bench/headless.ts',
  'bench-perf': 'bench/perf-node.ts',
  'soak': 'bench/soak.ts',
};

const ISOLATION = { 'Cross-Origin-Opener-Policy': 'same-origin', 'Cross-Origin-Embedder-Policy': 'require-corp' };

/** Examples and the page import the library by its package name; resolve it to the sources. */
const alias = {
  'webgpu-streams/node': fileURLToPath(new URL('./src/node.ts', import.meta.url)),
  'webgpu-streams': fileURLToPath(new URL('./src/index.ts', import.meta.url)),
};

/**
 * `npm run dev` serves the synthetic weights file of the "weights from storage" scenario at
 * /weights/synthetic.safetensors in byte ranges, as bench/serve.ts and bench/serve.py do.
 */
const syntheticWeights: Plugin = {
  name: 'synthetic-weights',
  configureServer(server) {
    server.middlewares.use((req, res, next) => {
      if (!req.url?.startsWith('/weights/')) return next();
      server
        .ssrLoadModule(fileURLToPath(new URL('./bench/serve.ts', import.meta.url)))
        .then((m) => {
          if (!(m as typeof import('./bench/serve')).serveWeights(req, res, new URL(req.url!, 'http://localhost'))) next();
        })
        .catch(next);
    });
  },
};

/**
 * One config, four builds:
 * - default (`vite`, `vite build`): the benchmark page, root bench/page -> dist/page
 * - `--mode lib`: the library, src/index.ts + src/node.ts -> dist/lib (shaders inlined via ?raw)
 * - `--mode cli-<name>`: one Node CLI (CLI_ENTRIES) -> dist/cli/<name>.mjs, a single file; the Node
 *   bench bundles everything but `webgpu`, so it runs where there is no npm (../shared/gpu/pack.sh);
 *   `--mode example-<name>`: examples/<name>.ts the same way -> dist/examples/<name>.mjs
 * - vitest: `test` below
 */
export default defineConfig(({ mode }) => {
  if (mode === 'lib') {
    return {
      build: {
        outDir: 'dist/lib',
        emptyOutDir: true,
        target: 'es2022',
        minify: false,
        sourcemap: true,
        lib: { entry: { index: 'src/index.ts', node: 'src/node.ts' }, formats: ['es'] },
        // The shared chunk carries the package's name: errors.ts tells its own frames by it, wherever the files sit.
        rollupOptions: { external: ['webgpu', /^node:/], output: { chunkFileNames: 'webgpu-streams-[hash].js' } },
      },
    };
  }
  // One build per CLI, so each is a single file (shared code would otherwise split into chunks).
  // `--mode cli-<name>` builds dist/cli/<name>.mjs from CLI_ENTRIES[name]; `--mode example-<name>`
  // builds dist/examples/<name>.mjs from examples/<name>.ts (npm run example -- <name>).
  if (mode.startsWith('cli-') || mode.startsWith('example-')) {
    const example = mode.startsWith('example-');
    const name = mode.slice(example ? 8 : 4);
    const entry = example ? `examples/${name}.ts` : CLI_ENTRIES[name];
    if (!entry) throw new Error(`vite.config.ts: unknown CLI '${name}'; known: ${Object.keys(CLI_ENTRIES).join(', ')}`);
    return {
      resolve: { alias },
      build: {
        outDir: example ? 'dist/examples' : 'dist/cli',
        emptyOutDir: false,
        target: 'node20',
        minify: false,
        ssr: true,
        // Examples run with --enable-source-maps: stacks in their messages name examples/<name>.ts.
        sourcemap: example,
        rollupOptions: {
          input: { [name]: entry },
          external: ['webgpu', 'puppeteer-core', /^node:/],
          // One file: the library's dynamic import (its sanitizer) goes inline.
          output: { entryFileNames: '[name].mjs', format: 'es', codeSplitting: false },
        },
      },
      ssr: { noExternal: true, external: ['webgpu', 'puppeteer-core'] },
    };
  }
  // `--mode browser-example` (examples/browser) and `--mode browser-example-textures`
  // (examples/textures): a browser example instead of the benchmark page.
  const browserExamples: Record<string, string> = { 'browser-example': 'browser', 'browser-example-textures': 'textures' };
  const browserExample = browserExamples[mode];
  return {
    root: browserExample ? `examples/${browserExample}` : 'bench/page',
    resolve: { alias },
    plugins: [syntheticWeights],
    base: './',
    build: { outDir: browserExample ? `../../dist/examples/${browserExample}` : '../../dist/page', emptyOutDir: true, target: 'es2022' },
    // Cross-origin isolation: the page gets a fine performance.now() (Chrome coarsens it otherwise).
    server: { fs: { allow: ['../..'] }, headers: ISOLATION },
    preview: { headers: ISOLATION },
    test: {
      root: '.',
      // The library's tests (test/) and the benchmark's own (bench/test/).
      include: ['test/**/*.test.ts', 'bench/test/**/*.test.ts'],
      testTimeout: 120_000,
      hookTimeout: 180_000,
      // One GPU device per file; SwiftShader work is CPU-bound, so files run one at a time.
      fileParallelism: false,
      pool: 'forks',
      // Vulkan drivers and Chromium look for a runtime directory and print an error without one.
      env: { XDG_RUNTIME_DIR: runtimeDir() },
    },
  };
});
