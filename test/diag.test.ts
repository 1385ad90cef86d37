/**
 * The diagnostics (`npm run diag:host`, `npm run diag:latency`, `npm run diag:contention`, `npm run diag:staging`) as the GPU machine runs them: one
 * bundled file each, importing only `webgpu` and node: builtins. diag-host checks the library and
 * raw pipelines' outputs against the CPU reference and exits 1 on a mismatch, so a run that exits
 * 0 has verified both; its JSON keeps the per-chunk timelines.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import './gpu'; // points the Vulkan loader at SwiftShader when there is no GPU

const root = resolve(import.meta.dirname, '..');

function build(mode: string): string {
  const b = spawnSync('npx', ['vite', 'build', '--mode', mode, '--logLevel', 'warn'], { cwd: root, encoding: 'utf8' });
  expect(b.status, `${b.stdout}\n${b.stderr}`).toBe(0);
  const file = join(root, 'dist/cli', `${mode.slice(4)}.mjs`);
  const code = readFileSync(file, 'utf8');
  const specifiers = [...code.matchAll(/^\s*(?:import|export)\s+[^'"]*?\s*from\s+["']([^"']+)["']|\bimport\(\s*["']([^"']+)["']\s*\)|^\s*import\s+["']([^"']+)["']/gm)].map((m) => m[1] ?? m[2] ?? m[3]);
  expect(specifiers.filter((s) => s !== 'webgpu' && !s!.startsWith('node:'))).toEqual([]);
  return file;
}

describe('diagnostics', () => {
  const out = mkdtempSync(join(tmpdir(), 'webgpu-streams-diag-'));
  afterAll(() => rmSync(out, { recursive: true, force: true }));

  it('diag-host profiles the library and raw pipelines (outputs verified) with per-chunk timelines', () => {
    const file = build('cli-diag-host');
    const run = spawnSync(process.execPath, [file, '--mib', '1', '--chunks', '4', '--batch', '1,2', '--iterations', '2', '--repeats', '1', '--copyTotal', '4', '--order', 'sync,lib,raw,raw2,host', '--raw-first', '--out', out], {
      cwd: root,
      encoding: 'utf8',
      timeout: 120_000,
    });
    expect(run.status, `${run.stdout}\n${run.stderr}`).toBe(0);
    expect(run.stdout).toMatch(/host copy bandwidth by piece size/);
    expect(run.stdout).toMatch(/== 4 x 256 KiB, ring 4: sync [\d.]+ ms/);
    expect(run.stdout).toMatch(/- lib after sync/);
    expect(run.stdout).toMatch(/- raw after lib/);
    // raw2: a second raw pipeline, the A/A control for the paired ratio (checked like the others).
    expect(run.stdout).toMatch(/- raw2 after raw/);
    expect(run.stdout).toMatch(/paired by repeat \(median of per-repeat ratios\): lib \/ raw [\d.]+, raw2 \/ raw [\d.]+ \(A\/A control\)/);
    // Node reports its GCs: one count per timed run for each pipeline.
    expect(run.stdout).toMatch(/GCs: lib \d+ major \+ \d+ minor \([\d.]+ ms\) per timed run; raw \d+ major/);
    const json = JSON.parse(readFileSync(join(out, 'diag-host.json'), 'utf8')) as { pipeline: { plan: string; timelines: Record<string, number[][]>; libDawn: Record<string, string> }[] };
    expect(json.pipeline.map((r) => r.plan)).toEqual(['4 x 256 KiB, ring 4', '4 x 256 KiB, 2 per submit, ring 4']);
    const tl = json.pipeline[0]!.timelines['lib after sync']!;
    expect(tl).toHaveLength(4);
    // Per chunk: slot free <= filled <= flushed, and chunks in order.
    for (const [k, free, filled, flushed] of tl) {
      expect(free).toBeLessThanOrEqual(filled!);
      expect(filled).toBeLessThanOrEqual(flushed!);
      if (k! > 0) expect(free).toBeGreaterThanOrEqual(tl[k! - 1]![3]!);
    }
    expect(Object.keys(json.pipeline[0]!.libDawn)).toContain('queue.submit');
  }, 180_000);

  it('diag-host --memcpy-ab times the same memcpy on pinned and raw buffers, shuffled, and checks the read-outs', () => {
    const file = build('cli-diag-host');
    const run = spawnSync(process.execPath, [file, '--mib', '1', '--copy', 'no', '--pipeline', 'no', '--memcpy-ab', '6'], { cwd: root, encoding: 'utf8', timeout: 120_000 });
    expect(run.status, `${run.stdout}\n${run.stderr}`).toBe(0);
    expect(run.stdout).toMatch(/memcpy on the library's pinned buffers vs raw mapped buffers, 6 rounds in shuffled order \(1\.0+ MiB\)/);
    for (const what of ['library fill', 'raw fill', 'library read-out', 'raw read-out']) expect(run.stdout).toContain(`'${what}'`);
    expect(run.stdout).toMatch(/verified: both read-outs equal the source \(262144 floats\)/);
  }, 120_000);

  it('diag-contention times host copies one by one under each GPU load, and checks every copy', () => {
    const file = build('cli-diag-contention');
    const run = spawnSync(process.execPath, [file, '--chunk-mib', '1', '--chunks', '3', '--blocks', '1', '--bg-mib', '1', '--gpu-ms', '1', '--seed', '7', '--out', out], {
      cwd: root,
      encoding: 'utf8',
      timeout: 120_000,
    });
    expect(run.status, `${run.stdout}\n${run.stderr}`).toBe(0);
    expect(run.stdout).toMatch(/MAP_WRITE mapping, 1 MiB: write [\d.]+ GB\/s, read back [\d.]+ GB\/s/);
    expect(run.stdout).toMatch(/verified: read-out of the mapped read-back buffer; fill of the mapped upload buffer; JS memcpy; the loads' copies .*; kernel output at 5 elements vs the CPU reference/);
    const json = JSON.parse(readFileSync(join(out, 'diag-contention.json'), 'utf8')) as { seed: number; times: Record<string, Record<string, number[]>>; rates: Record<string, { busy: number[]; alone: number[] }> };
    expect(json.seed).toBe(7);
    // Every load, every copy kind: one time per chunk and block; every load but idle has its GPU rates.
    expect(Object.keys(json.times)).toEqual(['idle', 'kernel', 'upload', 'download', 'mix']);
    for (const t of Object.values(json.times)) for (const k of ['fill', 'read', 'js']) expect(t[k]).toHaveLength(3);
    expect(Object.keys(json.rates).sort()).toEqual(['download', 'kernel', 'mix', 'upload']);
    for (const r of Object.values(json.rates)) expect(Math.min(...r.busy, ...r.alone)).toBeGreaterThan(0);
  }, 120_000);

  it('diag-staging times fills by how the staging is cut and the library upload whole and in pieces, all checked', () => {
    const file = build('cli-diag-staging');
    const run = spawnSync(process.execPath, [file, '--mib', '1', '--repeats', '1', '--out', out], { cwd: root, encoding: 'utf8', timeout: 120_000 });
    expect(run.status, `${run.stdout}\n${run.stderr}`).toBe(0);
    expect(run.stdout).toMatch(/host copy of 1 MiB into N mapped MAP_WRITE buffers/);
    expect(run.stdout).toMatch(/verified: every upload read back equal to the source \(1 MiB\)/);
    const json = JSON.parse(readFileSync(join(out, 'diag-staging.json'), 'utf8')) as { fill: { buffers: number; fillGBps: number }[]; uploads: { name: string; ms: number[] }[] };
    expect(json.fill.map((r) => r.buffers)).toEqual([1, 2, 4, 8, 32]);
    for (const r of json.fill) expect(r.fillGBps).toBeGreaterThan(0);
    expect(json.uploads.map((u) => u.name)).toEqual(['whole', '2 pieces', '4 pieces', '8 pieces']);
    for (const u of json.uploads) expect(u.ms).toHaveLength(1);
  }, 120_000);

  it('diag-latency times back-to-back submits after idle periods', () => {
    const file = build('cli-diag-latency');
    const run = spawnSync(process.execPath, [file, '--elements', '4096', '--iterations', '2', '--repeats', '1', '--idle', '0,2'], { cwd: root, encoding: 'utf8', timeout: 120_000 });
    expect(run.status, `${run.stdout}\n${run.stderr}`).toBe(0);
    const lines = run.stdout.split('\n').filter((l) => /^idle +\d+ ms: submitted/.test(l));
    expect(lines).toHaveLength(2);
    for (const l of lines) expect(l).toMatch(/maps resolved at [\d.]+, [\d.]+, [\d.]+, [\d.]+ ms/);
  }, 120_000);
});
