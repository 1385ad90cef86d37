/**
 * Calibrates the sleep kernel (WGSL has no clock): the `iterations` that make one launch take a
 * target GPU time, measured with GPU timestamps where the device has them, and a warm-up that
 * brings the GPU's clocks up first.
 */
import type { Context } from 'webgpu-streams';
import { StreamTimer, grid } from '../scenarios/common';
import { benchKernels } from './index';

/**
 * Keeps the GPU busy with back-to-back sleep kernels for about `ms` of wall time, so its clocks
 * are up before a calibration or a measurement (an idle GPU starts slow and speeds up under load,
 * which skews a kernel calibrated cold). The number of launches per wait doubles while a batch is short.
 */
export async function warmUp(ctx: Context, ms = 50): Promise<void> {
  const stream = ctx.createStream({ label: 'warm-up' });
  const elements = 1024;
  const buf = ctx.alloc(elements * 4, { label: 'warm-up.data' });
  const [x, y] = grid(elements, 'sleep');
  try {
    let count = 1;
    const t0 = performance.now();
    while (performance.now() - t0 < ms) {
      const l0 = performance.now();
      for (let i = 0; i < count; i++) stream.launch(benchKernels(ctx).sleep, { bindings: [buf], workgroups: [x, y], constants: { iterations: 1024 } });
      await stream.synchronize();
      if (performance.now() - l0 < ms / 8 && count < 4096) count *= 2;
    }
  } finally {
    buf.destroy();
    stream.destroy();
  }
}

/** Result of {@link calibrateSleep}. */
export interface SleepCalibration {
  /** `iterations` override for `sleep.wgsl` that takes about `targetMs` on `elements` elements. */
  iterations: number;
  /** Measured time at `iterations`, ms. */
  ms: number;
  elements: number;
  targetMs: number;
  method: 'timestamps' | 'wall';
  /** Iterations per ms at this grid size (the kernel is linear in iterations). */
  perMs: number;
}

/**
 * Finds the `iterations` of the sleep kernel that make one launch over `elements` u32 take about
 * `targetMs`, against GPU timestamps when the device has them (else wall time minus a measured
 * round trip). The kernel's cost is linear in `iterations`, so a few scaling steps converge.
 */
export async function calibrateSleep(
  ctx: Context,
  opts: { elements: number; targetMs: number; maxIterations?: number; label?: string; warmUpMs?: number },
): Promise<SleepCalibration> {
  const { elements, targetMs } = opts;
  await warmUp(ctx, opts.warmUpMs ?? 30);
  const maxIterations = opts.maxIterations ?? 1 << 24;
  const stream = ctx.createStream({ label: opts.label ?? 'calibrate' });
  const buf = ctx.alloc(elements * 4, { label: 'calibrate.data' });
  const timer = new StreamTimer(ctx, stream);
  const [x, y] = grid(elements, 'sleep');
  const run = (iterations: number): Promise<number> =>
    timer.time(() => stream.launch(benchKernels(ctx).sleep, { bindings: [buf], workgroups: [x, y], constants: { iterations } }));
  try {
    // Round trip of a near-empty launch: subtracted from wall times.
    let overhead = 0;
    if (!timer.gpu) {
      await run(1);
      overhead = Math.min(await run(1), await run(1), await run(1));
    }
    // Minimum of a few launches: noise (preemption, completion polling) only ever adds time.
    const sample = async (it: number): Promise<number> => {
      await run(it); // first use of these constants compiles a pipeline
      const t = Math.min(await run(it), await run(it), await run(it));
      return Math.max(t - overhead, 1e-3);
    };
    let iterations = 64;
    let t = await sample(iterations);
    for (let step = 0; step < 8; step++) {
      if (t >= targetMs * 0.9 && t <= targetMs * 1.1) break;
      // Grow fast while the kernel is too short to time well, then scale linearly (at most 16x a step).
      const factor = t < targetMs / 20 ? 16 : Math.min(16, targetMs / t);
      const next = Math.max(1, Math.min(maxIterations, Math.round(iterations * factor)));
      if (next === iterations) break;
      iterations = next;
      t = await sample(iterations);
    }
    return {
      iterations,
      ms: t,
      elements,
      targetMs,
      method: timer.gpu ? 'timestamps' : 'wall',
      perMs: iterations / t,
    };
  } finally {
    buf.destroy();
    stream.destroy();
  }
}

