/**
 * The performance suite (bench/perf.ts, issue 4) in quick mode on Dawn (SwiftShader where there is
 * no GPU): every metric and growth table is produced, well formed, and verified against its CPU
 * reference. No timing is asserted: targets live in the benchmark (`npm run bench:perf`), and
 * SwiftShader's numbers say nothing about a GPU.
 *
 * Also the Node CLI as `npm run bench:perf` builds it: one file importing only `webgpu` and node:
 * builtins, exit 0, a valid result JSON.
 *
 * Reproduce a failure with the seed printed in its message: `PERF_SEED=1234 npx vitest run bench/test/perf.test.ts`.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { formatPerf, perfGroups, runPerf, selectGroups, validatePerfResult, type PerfResult } from '../perf';
import { nodeHeapProbe, parsePerfArgs } from '../perf-node';
import { gpuContext } from '../../test/fixtures/gpu';
import type { Context } from 'webgpu-streams';

const root = resolve(import.meta.dirname, '../..');
const envSeed = Number(process.env['PERF_SEED'] ?? 0);
const seed = Number.isInteger(envSeed) && envSeed > 0 ? envSeed : ((Math.random() * 2 ** 32) >>> 0) || 1;

let ctx: (Context & { errors: string[] }) | null = null;
let noAdapter = '';
try {
  ctx = await gpuContext({ label: 'perf.test' });
} catch (e) {
  noAdapter = e instanceof Error ? e.message : String(e);
  console.warn(`perf.test: no WebGPU adapter at all, skipping: ${noAdapter}`);
}
afterAll(() => ctx?.destroy());

describe('perf CLI flags and selection (no GPU)', () => {
  it('parses flags and rejects unknown metrics', () => {
    expect(parsePerfArgs(['--quick', '--only', 'P1,P5.opCost', '--seed', '7'])).toMatchObject({ quick: true, only: ['P1', 'P5.opCost'], seed: 7, out: 'bench-results' });
    expect(() => parsePerfArgs(['--only', 'P9'])).toThrow(/P9/);
    expect(() => parsePerfArgs(['--seed', '0'])).toThrow(/seed/);
    expect(() => parsePerfArgs(['--bogus'])).toThrow();
  });

  it('selects groups by metric id, group id and "growth"', () => {
    expect(selectGroups(['P2.writeBuffer']).map((g) => g.id)).toEqual(['upload']);
    expect(selectGroups(['P5']).map((g) => g.id)).toEqual(['library-cost']);
    expect(selectGroups(['growth']).map((g) => g.id)).toEqual(['overlap', 'scheduler-growth']);
    expect(selectGroups().length).toBe(perfGroups.length);
  });
});

describe.skipIf(!ctx)('perf suite, quick, on Dawn', () => {
  let result: PerfResult;

  it('runs every group and every figure verifies', async () => {
    const c = ctx!;
    c.device.pushErrorScope('validation');
    const heap = nodeHeapProbe();
    expect(heap, 'Node lets the runner force a GC').toBeDefined();
    result = await runPerf(c, { quick: true, seed, createContext: (o) => gpuContext(o), heap: heap! });
    const validation = await c.device.popErrorScope();
    console.log(formatPerf(result));
    expect(validation?.message ?? null, 'validation error').toBeNull();
    expect(c.errors, 'uncaptured WebGPU errors').toEqual([]);
    expect(result.errors, `groups threw (seed ${seed})`).toEqual([]);
    const unverified = result.metrics.filter((m) => !m.verified && !m.skipped).map((m) => `${m.id}: ${m.verification}`);
    expect(unverified, `seed ${seed}`).toEqual([]);
    expect(result.tables.filter((t) => !t.verified).map((t) => `${t.id}: ${t.verdict}`)).toEqual([]);
    expect(result.ok).toBe(true);
  }, 240_000);

  it('has every metric of issue 4 with a target, and a valid JSON shape', () => {
    expect(result.metrics.map((m) => m.id)).toEqual(['P1', 'P2', 'P2.writeBuffer', 'P3', 'P4', 'P5', 'P5.opCost', 'P6']);
    for (const m of result.metrics) {
      expect(m.target, m.id).toMatch(/^(>=|<=) /);
      expect(m.device, m.id).toBe(result.card);
      if (m.pass) expect(m.verified, m.id).toBe(true);
      if (m.skipped) expect(m.pass, m.id).toBe(false);
      else if (m.id !== 'P1') expect(Number.isFinite(m.value), `${m.id} value ${m.value}`).toBe(true);
    }
    // P6 needs timestamps; SwiftShader on Dawn has them.
    if (ctx!.features.timestampQuery) expect(result.metrics.find((m) => m.id === 'P6')!.skipped).toBeUndefined();
    expect(validatePerfResult(JSON.parse(JSON.stringify(result)))).toEqual([]);
  });

  it('P1 reports the host-thread bounds: the WebGPU calls on the host thread, the host thread inside the timed runs, and the efficiency each leaves', () => {
    const f = result.metrics.find((m) => m.id === 'P1')!.figures;
    const sizes = Object.keys(f).filter((k) => k.endsWith('.apiMs')).map((k) => k.slice(0, -'.apiMs'.length));
    expect(sizes.length).toBeGreaterThan(0);
    for (const k of sizes) {
      // The overlapped run enqueues and flushes every chunk: its calls take time.
      expect(f[`${k}.apiMs`] as number, k).toBeGreaterThan(0);
      const b = f[`${k}.hostThreadBoundEfficiency`] as number;
      // NaN (null in JSON) where sync - ideal is too small to rate; else at most 1.
      if (b !== null && !Number.isNaN(b)) expect(b, k).toBeLessThanOrEqual(1);
      // The host thread's own time inside the timed runs (fill + read-out + calls), both pipelines,
      // and the efficiency it bounds: the calls alone make it positive.
      expect(f[`${k}.inRunHostMs`] as number, k).toBeGreaterThan(f[`${k}.apiMs`] as number);
      expect(f[`${k}.rawInRunHostMs`] as number, k).toBeGreaterThan(0);
      for (const e of [f[`${k}.inRunBoundEfficiency`], f[`${k}.rawInRunBoundEfficiency`]] as number[]) if (e !== null && !Number.isNaN(e)) expect(e, k).toBeLessThanOrEqual(1);
    }
  });

  it('P4 keeps the weights in exactly two slots', () => {
    const f = result.metrics.find((m) => m.id === 'P4')!.figures;
    expect(f['weightsMemoryBytes']).toBe(2 * (f['layerBytes'] as number));
    expect(f['deviceMemoryGrowthWhileStreaming']).toBe(0);
  });

  it('P5 measured captureStacks on and off, and the raw floor', () => {
    const f = result.metrics.find((m) => m.id === 'P5.opCost')!.figures;
    for (const k of ['stacksOnHostUs', 'stacksOffHostUs', 'rawHostUs']) expect(Number.isFinite(f[k]), k).toBe(true);
  });

  it('has the growth tables: data size, streams 1..64, queued ops', () => {
    const ids = result.tables.map((t) => t.id);
    expect(ids).toEqual(['growth-size', 'growth-streams', 'growth-ops']);
    const streams = result.tables.find((t) => t.id === 'growth-streams')!;
    expect(streams.rows.map((r) => r[0])).toEqual([1, 4, 16, 64]);
    for (const t of result.tables) {
      expect(t.rows.length, t.id).toBeGreaterThan(1);
      expect(t.verdict, t.id).not.toBe('');
    }
    // With a heap probe (Node), the queued-ops table says what each queued op keeps alive.
    const ops = result.tables.find((t) => t.id === 'growth-ops')!;
    const m = /JS heap retained per queued op \(4000 queued, after a full GC\): (-?\d+) B/.exec(ops.verdict);
    expect(m, ops.verdict).not.toBeNull();
    expect(Number(m![1]), ops.verdict).toBeGreaterThan(0);
  });
});

describe.skipIf(!ctx)('bench:perf bundle (dist/cli/bench-perf.mjs)', () => {
  const out = mkdtempSync(join(tmpdir(), 'webgpu-streams-perf-'));
  afterAll(() => rmSync(out, { recursive: true, force: true }));

  it('is one file importing only webgpu and node: builtins, and runs', () => {
    const build = spawnSync('npx', ['vite', 'build', '--mode', 'cli-bench-perf', '--logLevel', 'warn'], { cwd: root, encoding: 'utf8' });
    expect(build.status, `${build.stdout}\n${build.stderr}`).toBe(0);
    const code = readFileSync(join(root, 'dist/cli/bench-perf.mjs'), 'utf8');
    const specifiers = [...code.matchAll(/^\s*(?:import|export)\s+[^'"]*?\s*from\s+["']([^"']+)["']|\bimport\(\s*["']([^"']+)["']\s*\)|^\s*import\s+["']([^"']+)["']/gm)].map((m) => m[1] ?? m[2] ?? m[3]);
    expect(specifiers.filter((s) => s !== 'webgpu' && !s!.startsWith('node:'))).toEqual([]);
    const run = spawnSync(process.execPath, [join(root, 'dist/cli/bench-perf.mjs'), '--quick', '--only', 'P2,P6', '--out', out, '--seed', String(seed)], { cwd: root, encoding: 'utf8', timeout: 120_000 });
    expect(run.status, `${run.stdout}\n${run.stderr}`).toBe(0);
    expect(run.stdout).toMatch(/^P2 .*(PASS|FALL SHORT)$/m);
    const file = readdirSync(out).find((f) => f.endsWith('-perf.json'));
    expect(file).toBeDefined();
    const json = JSON.parse(readFileSync(join(out, file!), 'utf8')) as PerfResult;
    expect(validatePerfResult(json)).toEqual([]);
    expect(json.metrics.map((m) => m.id)).toEqual(['P2', 'P2.writeBuffer', 'P6']);
  }, 180_000);
});
