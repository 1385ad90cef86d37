/**
 * Finds the kernel iterations that make a pipeline's GPU work (measured alone) about equal to its
 * host work (measured alone): the one search P1 and P5 share.
 *
 * GPU time is modelled as `fixed + perIteration * iterations`. The fit probes until the
 * iterations clearly dominate the fixed cost, then refines with the secant through the last two
 * points, in both directions, until within the tolerance. Measurements are noisy, so the fit never
 * trusts a probe whose increment could be noise: on a fast GPU, 256 iterations of 16 MiB add less
 * than the submits and waits around them, and a fit on that once chose 65536 iterations (GPU work
 * 25x the host's), which an upward-only refinement could not undo.
 */
import type { Context } from 'webgpu-streams';
import { benchKernels } from '../kernels/index';
import { grid } from '../scenarios/common';

export interface CostModel {
  /** GPU ms at zero iterations (copies, launches, waits). */
  fixedMs: number;
  /** GPU ms each kernel iteration adds. */
  perIterationMs: number;
}

export interface BalanceOptions {
  /** First probe above 1 iteration; grown 4x at a time while its increment is within noise. */
  probeIterations: number;
  maxIterations: number;
  /** Stop once |gpu - host| <= tolerance * host (default 0.08). */
  tolerance?: number;
  /** Refinement steps after the first solution (default 6). */
  steps?: number;
  /** Start here instead of fitting (P1 keeps one iteration count across sizes). */
  start?: number;
  /** With `start`: the model that solves a fresh guess when `start` is off by more than `restartOver`. */
  model?: CostModel;
  /** With `start` and `model`: re-solve from the model when |gpu - host| > restartOver * host (default 0.25). */
  restartOver?: number;
}

export interface Balance {
  iterations: number;
  gpuMs: number;
  hostMs: number;
  /** The model fitted (or passed in); scale it by elements to reuse it at another size. */
  model: CostModel;
  /** False when even 1 iteration outlasts the host work, or maxIterations falls short of it. */
  reachable: boolean;
  /** Every (iterations, GPU ms) measured, in order: for the report. */
  probes: [number, number][];
}

/**
 * Searches iterations so that `gpuAt(iterations)` ~ `hostMs`. `gpuAt` measures (and may be noisy);
 * it is called a handful of times (at most ~4 probes + 1 + `steps`).
 */
export async function balanceIterations(gpuAt: (iterations: number) => Promise<number>, hostMs: number, o: BalanceOptions): Promise<Balance> {
  const tol = o.tolerance ?? 0.08;
  const steps = o.steps ?? 6;
  const max = Math.max(1, o.maxIterations);
  const probes: [number, number][] = [];
  const measure = async (it: number): Promise<number> => {
    const ms = await gpuAt(it);
    probes.push([it, ms]);
    return ms;
  };
  const clampIt = (x: number): number => Math.max(1, Math.min(max, Math.round(x)));
  const solve = (m: CostModel): number => clampIt((hostMs - m.fixedMs) / m.perIterationMs);

  let model: CostModel;
  let iterations: number;
  let gpu: number;
  if (o.start !== undefined) {
    iterations = clampIt(o.start);
    gpu = await measure(iterations);
    model = o.model ?? { fixedMs: 0, perIterationMs: Math.max(1e-12, gpu / iterations) };
    if (o.model && Math.abs(gpu - hostMs) > (o.restartOver ?? 0.25) * hostMs) {
      const next = solve(o.model);
      if (next !== iterations) {
        iterations = next;
        gpu = await measure(iterations);
      }
    }
  } else {
    let g1 = await measure(1);
    // A GPU still clocked down from idle can run the first passes several times slower: look twice.
    if (g1 >= hostMs) g1 = Math.min(g1, await measure(1));
    if (g1 >= hostMs) {
      return { iterations: 1, gpuMs: g1, hostMs, model: { fixedMs: g1, perIterationMs: 0 }, reachable: false, probes };
    }
    let probeIt = clampIt(o.probeIterations);
    let g2 = await measure(probeIt);
    // An increment below the 1-iteration time could be noise: probe further out.
    while (g2 < 2 * g1 && g2 < hostMs && probeIt < max) {
      probeIt = clampIt(probeIt * 4);
      g2 = await measure(probeIt);
    }
    const perIterationMs = Math.max(1e-12, (g2 - g1) / Math.max(1, probeIt - 1));
    model = { fixedMs: Math.max(0, g1 - perIterationMs), perIterationMs };
    iterations = solve(model);
    const known = probes.find(([it]) => it === iterations);
    gpu = known ? known[1] : await measure(iterations);
  }

  // Refine: the secant through the last two points (the kernel's fixed memory pass is not quite
  // linear, and a busy host moves the host time). Both ways: an overshoot comes back down.
  let prev: [number, number] | null = null;
  for (let s = 0; s < steps && Math.abs(gpu - hostMs) > tol * hostMs; s++) {
    if (gpu > hostMs ? iterations <= 1 : iterations >= max) break;
    // The secant only across points far apart (2x); nearer ones, whose difference noise can
    // swamp, use the line through the fitted fixed cost instead.
    const far = prev !== null && Math.max(prev[0], iterations) >= 2 * Math.min(prev[0], iterations);
    const slope = prev && far ? (gpu - prev[1]) / (iterations - prev[0]) : (gpu - model.fixedMs) / iterations;
    const guess = slope > 0 ? iterations + (hostMs - gpu) / slope : (iterations * hostMs) / Math.max(gpu, 1e-9);
    // At most 4x per step either way, so one bad point cannot throw the search far.
    const next = clampIt(Math.min(4 * iterations, Math.max(iterations / 4, guess)));
    if (next === iterations) break;
    prev = [iterations, gpu];
    iterations = next;
    gpu = await measure(iterations);
  }
  const reachable = Math.abs(gpu - hostMs) <= tol * hostMs || (gpu < hostMs ? iterations < max : iterations > 1);
  return { iterations, gpuMs: gpu, hostMs, model, reachable, probes };
}

/**
 * Keeps the GPU busy for about `ms` of wall time (a compute kernel over 4 MiB, relaunched), so the
 * first balance does not measure a GPU still clocked down from idle.
 */
export async function warmGpu(ctx: Context, ms: number): Promise<void> {
  const n = 1 << 20;
  const a = ctx.alloc(n * 4, { label: 'warm.in' });
  const b = ctx.alloc(n * 4, { label: 'warm.out' });
  const s = ctx.createStream({ label: 'warm-up', nonBlocking: true });
  const ci = benchKernels(ctx).computeIntensive;
  const workgroups = grid(n, 'computeIntensive');
  try {
    const t0 = performance.now();
    for (let iterations = 64; performance.now() - t0 < ms; ) {
      const t = performance.now();
      s.launch(ci, { bindings: [a, b], workgroups, constants: { iterations } });
      await s.synchronize();
      if (performance.now() - t < 20) iterations = Math.min(1 << 16, iterations * 2);
    }
  } finally {
    s.destroy();
    a.destroy();
    b.destroy();
  }
}
