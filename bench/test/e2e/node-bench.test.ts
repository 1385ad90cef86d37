/**
 * End to end: the Node bench (`npm run bench:node`) as `npm run build:cli` builds it
 * (dist/cli/bench-node.mjs), in quick mode on Dawn + SwiftShader. It must be one ESM file whose only runtime
 * import besides node: builtins is `webgpu` (DESIGN.md, "Runners": it is copied to GPU machines
 * that have no npm), exit 0, and write a valid, verified result and a Chrome trace.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { validateSuiteResult } from '../../report';
import type { SuiteResult } from '../../schema';
import { npmRun, root, runNode, type NodeRun } from '../../../test/e2e/util';

const haveSuite = existsSync(join(root, 'bench/suite.ts'));
const haveVulkan =
  Boolean(process.env['VK_ICD_FILENAMES'] || process.env['VK_DRIVER_FILES']) ||
  existsSync('/usr/lib/chromium/vk_swiftshader_icd.json') ||
  Boolean(process.env['CI']);
const skipReason = !haveSuite ? 'bench/suite.ts does not exist yet' : !haveVulkan ? 'no Vulkan driver (install chromium for SwiftShader)' : null;
if (skipReason) console.warn(`[e2e] skipping the Node bench test: ${skipReason}`);

/** Module specifiers of static imports, re-exports and dynamic imports in an ESM bundle. */
function importedSpecifiers(code: string): string[] {
  const found = new Set<string>();
  const patterns = [
    /^\s*import\s+(?:[^'"]*?\s+from\s+)?["']([^"']+)["']/gm,
    /^\s*export\s+[^'"]*?\s+from\s+["']([^"']+)["']/gm,
    /\bimport\(\s*["']([^"']+)["']\s*\)/g,
  ];
  for (const re of patterns) for (const m of code.matchAll(re)) found.add(m[1]!);
  return [...found].sort();
}

describe.skipIf(skipReason !== null)('Node bench runner (quick, Dawn)', () => {
  const cliDir = join(root, 'dist/cli');
  let outDir = '';
  let run: NodeRun;

  beforeAll(async () => {
    outDir = mkdtempSync(join(tmpdir(), 'webgpu-streams-node-bench-'));
    npmRun('build:cli');
    run = await runNode([join(cliDir, 'bench-node.mjs'), '--quick', '--out', outDir, '--timeout', '5'], 360_000);
  }, 420_000);

  afterAll(() => {
    if (outDir) rmSync(outDir, { recursive: true, force: true });
  });

  const tail = () => `\nrunner output (last 4000 chars):\n${run.output.slice(-4000)}`;

  it('is one file whose only runtime import besides node: builtins is webgpu', () => {
    const bundle = readFileSync(join(cliDir, 'bench-node.mjs'), 'utf8');
    const others = importedSpecifiers(bundle).filter((s) => s !== 'webgpu' && !s.startsWith('node:'));
    expect(
      others,
      'dist/cli/bench-node.mjs imports more than webgpu: with two inputs in one build (vite.config.ts, ' +
        'mode cli), rollup moves the code shared with bench-headless into a chunk; build the Node bench ' +
        'on its own (one input per build) so it stays one file',
    ).toEqual([]);
  });

  it('exits 0 and writes a verified result and a trace', () => {
    expect(run.signal, tail()).toBeNull();
    expect(run.code, tail()).toBe(0);
    const files = readdirSync(outDir);
    const json = files.find((f) => f.endsWith('-node-quick.json'));
    expect(json, `no *-node-quick.json in ${outDir}: ${files.join(', ')}${tail()}`).toBeDefined();
    const result = JSON.parse(readFileSync(join(outDir, json!), 'utf8')) as SuiteResult;
    expect(validateSuiteResult(result)).toEqual([]);
    expect(result.device.runner).toBe('node');
    expect(result.scenarios.filter((s) => !s.verification.ok).map((s) => `${s.id}: ${s.verification.detail}`)).toEqual([]);
    expect(files.some((f) => f.endsWith('-node-quick-trace.json'))).toBe(true);
  });

  it("with --sanitize says so and counts the races; piped into a reader that stops early (| head), it runs to its end and exits 0 (EPIPE crashed it)", async () => {
    const out = mkdtempSync(join(tmpdir(), 'webgpu-streams-node-bench-'));
    try {
      const full = await runNode([join(cliDir, 'bench-node.mjs'), '--quick', '--sanitize', '--scenarios', 'priorities', '--out', out], 120_000);
      expect(full.code, full.output.slice(-2000)).toBe(0);
      expect(full.stdout).toMatch(/stream sanitizer on: 0 races; host costs include the sanitizer's/);
      const json = readdirSync(out).find((f) => f.endsWith('-node-quick.json'))!;
      expect((JSON.parse(readFileSync(join(out, json), 'utf8')) as SuiteResult).sanitize).toBe(true);
      // `node bench-node.mjs ... | head -1`: the reader closes the pipe after its first line.
      const child = spawn(process.execPath, [join(cliDir, 'bench-node.mjs'), '--quick', '--scenarios', 'priorities', '--out', out], { stdio: ['ignore', 'pipe', 'pipe'] });
      let stderr = '';
      child.stderr.on('data', (d: Buffer) => (stderr += String(d)));
      child.stdout.once('data', () => child.stdout.destroy());
      const code = await new Promise<number | null>((done) => child.on('exit', (c) => done(c)));
      expect(stderr).not.toMatch(/EPIPE|Unhandled 'error' event/);
      expect(code, stderr.slice(-2000)).toBe(0);
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  }, 300_000);
});
