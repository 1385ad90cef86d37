/**
 * End to end: the headless runner as `npm run bench -- --quick` runs it, on SwiftShader. Builds the
 * page and the CLI with the npm scripts (`build:page`, `build:cli`, into dist/), runs
 * dist/cli/bench-headless.mjs, and checks its exit code, the JSON against bench/schema.ts, every
 * scenario verified, the Chrome trace, and that the timeline screenshot is a non-blank PNG.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { validateSuiteResult } from '../../report';
import type { SuiteResult } from '../../schema';
import { decodePng, distinctColors } from './png';
import { browserMissing, npmRun, root, runNode, type NodeRun } from '../../../test/e2e/util';

const havePage = existsSync(join(root, 'bench/page/main.ts'));
const haveSuite = existsSync(join(root, 'bench/suite.ts'));

const missing = browserMissing();
const skipReason = !havePage
  ? 'bench/page/main.ts does not exist yet'
  : !haveSuite
    ? 'bench/suite.ts does not exist yet'
    : missing;
if (skipReason) console.warn(`[e2e] skipping the headless bench test: ${skipReason}`);

describe.skipIf(skipReason !== null)('headless bench runner (quick, SwiftShader)', () => {
  let outDir = '';
  let run: NodeRun;
  let files: string[] = [];
  const find = (suffix: string) => files.find((f) => f.endsWith(suffix));
  const tail = () => `\nrunner output (last 4000 chars):\n${run.output.slice(-4000)}`;

  beforeAll(async () => {
    outDir = mkdtempSync(join(tmpdir(), 'webgpu-streams-bench-'));
    npmRun('build:page');
    npmRun('build:cli');
    run = await runNode([join(root, 'dist/cli/bench-headless.mjs'), '--quick', '--out', outDir, '--timeout', '9'], 600_000);
    files = readdirSync(outDir).map((f) => join(outDir, f));
  }, 660_000);

  afterAll(() => {
    if (outDir) rmSync(outDir, { recursive: true, force: true });
  });

  it('exits 0', () => {
    console.log(run.output.split('\n').filter((l) => /^(bench:|OK|FAILED|adapter:|WARNING)/.test(l)).join('\n'));
    expect(run.signal, tail()).toBeNull();
    expect(run.code, tail()).toBe(0);
  });

  it('writes a result that matches the schema, every scenario verified', () => {
    const json = files.find((f) => f.endsWith('-headless-quick.json'));
    expect(json, `no *-headless-quick.json in ${outDir}: ${files.join(', ')}${tail()}`).toBeDefined();
    const result = JSON.parse(readFileSync(json!, 'utf8')) as SuiteResult;
    expect(validateSuiteResult(result)).toEqual([]);
    expect(result.quick).toBe(true);
    expect(result.device.runner).toBe('headless');
    expect(result.scenarios.length).toBeGreaterThan(0);
    const failed = result.scenarios
      .filter((s) => !s.verification.ok)
      .map((s) => `${s.id}: ${s.verification.detail}${s.verification.mismatch ? `: ${s.verification.mismatch}` : ''}`);
    expect(failed).toEqual([]);
    expect(result.ok).toBe(true);
  });

  it('writes a Chrome trace with named lanes', () => {
    const trace = find('-headless-quick-trace.json');
    expect(trace, tail()).toBeDefined();
    const { traceEvents } = JSON.parse(readFileSync(trace!, 'utf8')) as { traceEvents: Array<Record<string, unknown>> };
    const spans = traceEvents.filter((e) => e['ph'] === 'X');
    const threads = traceEvents.filter((e) => e['ph'] === 'M' && e['name'] === 'thread_name');
    expect(spans.length).toBeGreaterThan(0);
    expect(threads.length).toBeGreaterThan(0);
    for (const e of spans) {
      expect(typeof e['ts'] === 'number' && typeof e['dur'] === 'number' && (e['dur'] as number) >= 0, JSON.stringify(e)).toBe(true);
    }
  });

  it('screenshots a non-blank timeline', () => {
    const png = find('-headless-quick-timeline.png');
    expect(png, `no timeline PNG${tail()}`).toBeDefined();
    const image = decodePng(readFileSync(png!));
    expect(image.width).toBeGreaterThan(50);
    expect(image.height).toBeGreaterThan(50);
    const colors = distinctColors(image);
    console.log(`[e2e] timeline PNG ${image.width}x${image.height}, ${colors} distinct colors`);
    expect(colors, 'every pixel of the timeline screenshot has the same color').toBeGreaterThan(1);
  });
});
