/** The README's example is examples/stream-weights.ts, verbatim; it runs and matches the CPU reference. */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { streamWeights } from '../examples/stream-weights.js';
import { gpuContext, rng, randomSeed, firstMismatch, vectorAddRef } from './fixtures/gpu.js';
import type { Context } from '../src/index.js';

let ctx: Context & { errors: string[] };
beforeAll(async () => {
  ctx = await gpuContext();
});
afterAll(() => ctx.destroy());

it('README shows examples/stream-weights.ts verbatim', () => {
  const example = readFileSync(new URL('../examples/stream-weights.ts', import.meta.url), 'utf8').trim();
  const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
  expect(readme).toContain(example);
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
