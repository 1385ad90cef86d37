/**
 * The benchmark's kernels (the library ships only `vectorAdd`): a calibratable GPU "sleep" (WGSL has
 * no clock: a dependent integer loop, `iterations` per element) and a compute-heavy f32 loop. CPU
 * references: bench/reference.ts.
 */
import type { Context, Kernel } from 'webgpu-streams';
import sleepWgsl from './sleep.wgsl?raw';
import computeIntensiveWgsl from './compute_intensive.wgsl?raw';

export const wgsl = { sleep: sleepWgsl, computeIntensive: computeIntensiveWgsl } as const;

export interface BenchKernels {
  /** data: array<u32> (read_write); override `iterations`; workgroup 64. */
  readonly sleep: Kernel;
  /** input: array<f32> (read), out: array<f32> (read_write); override `iterations`; workgroup 256. */
  readonly computeIntensive: Kernel;
}

const cache = new WeakMap<Context, BenchKernels>();

/** The benchmark's kernels on `ctx`, each compiled on first use. */
export function benchKernels(ctx: Context): BenchKernels {
  let k = cache.get(ctx);
  if (!k) {
    let sleep: Kernel | undefined;
    let computeIntensive: Kernel | undefined;
    k = {
      get sleep() {
        return (sleep ??= ctx.kernel(wgsl.sleep, { label: 'sleep' }));
      },
      get computeIntensive() {
        return (computeIntensive ??= ctx.kernel(wgsl.computeIntensive, { label: 'computeIntensive' }));
      },
    };
    cache.set(ctx, k);
  }
  return k;
}
