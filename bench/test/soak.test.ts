/**
 * The soak runner (bench/soak.ts, `npm run soak`) in-process, short: 20,000 mixed ops over 8 streams,
 * without and with trace, a memory sample every 5,000 ops and a correctness check every 500. Each
 * mode must stay within the runner's bounds (SOAK_BOUNDS, SOAK_HELD_DOWNLOADS), pass every check,
 * and have run every kind of op in the mix.
 *
 * Reproduce a failure with the seed printed in its message: `SOAK_SEED=1234 npx vitest run bench/test/soak.test.ts`
 * (or `npm run soak -- --ops 20000 --every 5000 --seed 1234`).
 */
import { describe, expect, it } from 'vitest';
import { parseSoakArgs, runSoak, type SoakOpKind } from '../soak';
import { gpuContext, randomSeed } from '../../test/fixtures/gpu';

const envSeed = Number(process.env['SOAK_SEED'] ?? 0);
const seed = Number.isInteger(envSeed) && envSeed > 0 ? envSeed : randomSeed() || 1;

describe('soak CLI flags (no GPU)', () => {
  it('parses flags and rejects bad ones', () => {
    expect(parseSoakArgs(['--ops', '5000', '--streams', '3', '--seed', '7', '--trace', 'only', '--every', '1000'])).toMatchObject({ ops: 5000, streams: 3, seed: 7, modes: ['on'], sampleEvery: 1000 });
    expect(parseSoakArgs([])).toMatchObject({ ops: 1_000_000, streams: 8, modes: ['off', 'on'], sampleEvery: 100_000 });
    expect(parseSoakArgs(['--trace', 'off']).modes).toEqual(['off']);
    expect([parseSoakArgs([]).sanitize, parseSoakArgs(['--sanitize']).sanitize]).toEqual([false, true]);
    expect(() => parseSoakArgs(['--trace', 'sometimes'])).toThrow(/--trace/);
    expect(() => parseSoakArgs(['--ops', '0'])).toThrow(/--ops/);
    expect(() => parseSoakArgs(['--seed', '-1'])).toThrow(/--seed/);
    expect(() => parseSoakArgs(['--bogus'])).toThrow();
  });
});

describe('soak, 20,000 ops over 8 streams, trace off and on', () => {
  it('stays within its bounds and passes every correctness check', async () => {
    const ops = 20_000, checkEvery = 500;
    const lines: string[] = [];
    const result = await runSoak({ ops, streams: 8, seed, modes: ['off', 'on'], sampleEvery: 5_000, checkEvery, traceLimit: 2000, createContext: (o) => gpuContext(o), log: (l) => lines.push(l) });
    console.log(lines.join('\n'));
    expect(result.modes.map((m) => m.trace)).toEqual([false, true]);
    for (const m of result.modes) {
      const mode = `trace ${m.trace ? 'on' : 'off'}, seed ${seed}`;
      expect(m.failures, mode).toEqual([]);
      expect(m.violations, mode).toEqual([]);
      expect(m.ops, mode).toBeGreaterThanOrEqual(ops);
      expect(m.checks, mode).toBeGreaterThanOrEqual(Math.floor(ops / checkEvery) - 1);
      // The baseline after warm-up, one every 5,000 ops, and the end.
      expect(m.samples.length, mode).toBeGreaterThanOrEqual(4);
      const missing = (Object.keys(m.counts) as SoakOpKind[]).filter((k) => m.counts[k] === 0);
      expect(missing, mode).toEqual([]);
      expect(m.ok, mode).toBe(true);
      expect(m.notJudged, mode).toEqual([]);
    }
    expect(result.ok).toBe(true);
    expect(result.judged).toBe(true);
    expect(lines.at(-1)).toMatch(/^soak: PASS: /);
  }, 120_000);
});

describe('soak shorter than its warm-up (trace on: until the trace is full)', () => {
  it('says the growth bounds were not judged, and why, instead of passing; claims no warm-up it did not run', async () => {
    const ops = 3000;
    const lines: string[] = [];
    const result = await runSoak({ ops, streams: 4, seed, modes: ['on'], sampleEvery: 1000, checkEvery: 500, traceLimit: 100_000, createContext: (o) => gpuContext(o), log: (l) => lines.push(l) });
    console.log(lines.join('\n'));
    const m = result.modes[0]!;
    expect(m.failures, `seed ${seed}`).toEqual([]);
    expect(m.samples, 'only the end: no baseline after warm-up').toHaveLength(1);
    expect(m.notJudged).toEqual([expect.stringMatching(/^growth bounds: no baseline sample after the 126000-op warm-up \(until the trace is full\); the run ended at op \d+$/)]);
    expect([result.ok, result.judged]).toEqual([true, false]);
    expect(lines.find((l) => l.startsWith('soak [trace on]: trace limit'))).toMatch(/warm-up 126000 ops \(until the trace is full\), more than the run's 3000: no baseline, growth not judged/);
    expect(lines.find((l) => l.startsWith('soak: seed'))).toMatch(/warm-up 126000 ops with trace on \(until the trace is full; more than the run: growth not judged\)/);
    expect(lines.filter((l) => /: pass\b|PASS/.test(l)), 'nothing says pass').toEqual([]);
    expect(lines.at(-1)).toMatch(/^soak: NOT JUDGED IN FULL: .*; not judged: trace on: growth bounds: no baseline/);
  }, 120_000);
});

describe('soak with the stream sanitizer, 20,000 ops over 8 streams', () => {
  it('reports no race in the program, which orders every access, and stays within its bounds', async () => {
    const lines: string[] = [];
    const result = await runSoak({ ops: 20_000, streams: 8, seed, modes: ['off'], sanitize: true, sampleEvery: 5_000, checkEvery: 500, createContext: (o) => gpuContext(o), log: (l) => lines.push(l) });
    console.log(lines.join('\n'));
    const m = result.modes[0]!;
    expect(lines.some((l) => /sanitizer: 0 races/.test(l)), `seed ${seed}`).toBe(true);
    expect(m.failures, `seed ${seed}`).toEqual([]);
    expect(m.violations, `seed ${seed}`).toEqual([]);
    expect(result.ok).toBe(true);
  }, 120_000);
});
