/**
 * The CPU references and helpers of bench/reference.ts, without a GPU: the seeded rng,
 * firstMismatch, dispatchSize, and the references of the benchmark's kernels (sleepStep,
 * computeIntensiveRef) that bench/test/kernels.test.ts checks the GPU against.
 *
 * Reproduce a failure with the seed from its message: `SHADER_TEST_SEED=1234 npx vitest run
 * bench/test/reference.test.ts`.
 */
import { describe, expect, it } from 'vitest';
import { COMPUTE_INTENSIVE_TOL, computeIntensiveRef, dispatchSize, firstMismatch, rng, sleepStep } from '../reference';
import { seedFor } from '../../test/fixtures/raw-webgpu';

describe('reference helpers', () => {
  it('rng is deterministic per seed and spans its range', () => {
    const seed = seedFor();
    expect(rng(seed).u32Array(64)).toEqual(rng(seed).u32Array(64));
    const f = rng(seed).f32Array(4096, -2, 3);
    expect(Math.min(...f), `seed ${seed}`).toBeGreaterThanOrEqual(-2);
    expect(Math.max(...f), `seed ${seed}`).toBeLessThanOrEqual(3);
    expect(new Set(f).size, `seed ${seed}`).toBeGreaterThan(4000);
    // mulberry32 reference values for seed 1 (from the C original: t = s += 0x6D2B79F5; ...).
    expect(Array.from(rng(1).u32Array(3))).toEqual([2693262067, 11749833, 2265367787]);
  });

  it('firstMismatch reports index, got and want', () => {
    expect(firstMismatch([1, 2, 3], [1, 2, 3])).toBeNull();
    expect(firstMismatch([1, 5, 7], [1, 2, 3])).toBe('index 1: got 5, want 2 [length 3, 2 mismatches]');
    expect(firstMismatch([1], [1, 2])).toBe('length: got 1, want 2');
    expect(firstMismatch([1.00001], [1], { abs: 0, rel: 1e-4 })).toBeNull();
    expect(firstMismatch([1.1], [1], { abs: 0, rel: 1e-4 })).toMatch(/^index 0: got 1.1, want 1/);
    expect(firstMismatch([NaN], [NaN])).toBeNull();
    expect(firstMismatch([NaN], [1], { abs: 1, rel: 1 })).not.toBeNull();
  });

  it('dispatchSize spills into y past 65535 workgroups', () => {
    expect(dispatchSize(0, 256)).toEqual([0, 0]);
    expect(dispatchSize(1, 256)).toEqual([1, 1]);
    expect(dispatchSize(257, 256)).toEqual([2, 1]);
    expect(dispatchSize(65535 * 256, 256)).toEqual([65535, 1]);
    expect(dispatchSize(65535 * 256 + 1, 256)).toEqual([65535, 2]);
    expect(dispatchSize(65535 * 64 * 3, 64)).toEqual([65535, 3]);
  });

  it('sleepStep mixes in the xorshift (not a plain LCG)', () => {
    const lcg = (x: number) => (Math.imul(x, 1664525) + 1013904223) >>> 0;
    expect(sleepStep(12345, 1)).toBe((lcg(12345) ^ (lcg(12345) >>> 13)) >>> 0);
    expect(sleepStep(7, 0)).toBe(7);
    expect(sleepStep(0xffffffff, 3)).toBe(sleepStep(sleepStep(0xffffffff, 1), 2));
  });

  it('computeIntensiveRef depends on the iteration count beyond the tolerance', () => {
    const seed = seedFor();
    const x = rng(seed).f32Array(1000, -1, 1);
    const at = (iterations: number) => computeIntensiveRef(x, iterations);
    for (const [p, q] of [[64, 65], [64, 63], [1000, 1001], [10000, 9999]] as const) {
      expect(firstMismatch(at(p), at(q), COMPUTE_INTENSIVE_TOL), `seed ${seed}, ${p} vs ${q}`)
        .not.toBeNull();
    }
    // Stays in [-1, 1] and finite at the ends of the input range.
    const ends = computeIntensiveRef(new Float32Array([-1, 1, 0]), 5000);
    for (const v of ends) expect(Math.abs(v)).toBeLessThanOrEqual(1);
  });
});
