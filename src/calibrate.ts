/**
 * Calibrates the built-in `sleep` kernel: WGSL has no clock, so a "sleep" is a dependent loop whose
 * iteration count is tuned until one launch takes the target GPU time, measured with timing events
 * (GPU timestamps) where the device has them and with host wall time where not.
 */
import { Context } from './context.js';
import { InvalidArgumentError } from './errors.js';
import { expectInteger, expectKnownKeys, expectObject, showValue } from './validate.js';

export interface SleepCalibration {
  /** `iterations` override that makes one launch take about `targetMs`. */
  iterations: number;
  /** Measured duration of one launch with `iterations`, ms. */
  measuredMs: number;
  targetMs: number;
  /** Elements of the data buffer the calibration used (launch the same size to get the same time). */
  elements: number;
  method: 'timestamps' | 'wall';
}

/**
 * Finds `iterations` for the `sleep` kernel so that one launch over `elements` u32 values takes
 * `targetMs` of GPU time. A few launches; the result is linear in iterations by construction.
 */
export async function calibrateSleep(ctx: Context, targetMs: number, options: { elements?: number; maxRounds?: number } = {}): Promise<SleepCalibration> {
  const site = { op: 'calibrateSleep' };
  if (!(ctx instanceof Context)) throw new InvalidArgumentError(`Expected \`ctx\` to be a Context, got ${showValue(ctx)}`, site);
  if (!(typeof targetMs === 'number' && targetMs > 0 && Number.isFinite(targetMs))) {
    throw new InvalidArgumentError(`Expected \`targetMs\` to be a positive number, got ${showValue(targetMs)}`, site);
  }
  const o = expectObject('options', options, site);
  expectKnownKeys('options', o, ['elements', 'maxRounds'], site);
  const elements = o.elements === undefined ? 64 : expectInteger('elements', o.elements, 1, 1 << 26, site);
  const maxRounds = o.maxRounds === undefined ? 6 : expectInteger('maxRounds', o.maxRounds, 0, 64, site);
  const stream = ctx.createStream({ label: 'calibrate', nonBlocking: true });
  const data = ctx.alloc(elements * 4, { label: 'calibrate sleep data' });
  const kernel = ctx.kernels.sleep;
  const groups = Math.ceil(elements / 64);
  const useTs = ctx.features.timestampQuery;
  const start = ctx.createEvent({ timing: true, label: 'calibrate start' });
  const end = ctx.createEvent({ timing: true, label: 'calibrate end' });
  const measure = async (iterations: number): Promise<number> => {
    // Compile first: the first launch of a new override value waits for pipeline validation.
    stream.launch(kernel, { bindings: [data], workgroups: groups, constants: { iterations: 1 } });
    await stream.synchronize();
    let best = Infinity;
    for (let rep = 0; rep < 3; rep++) {
      const t0 = performance.now();
      stream.record(start);
      stream.launch(kernel, { bindings: [data], workgroups: groups, constants: { iterations } });
      stream.record(end);
      await stream.synchronize();
      const ms = useTs ? start.elapsedTime(end) : performance.now() - t0;
      best = Math.min(best, ms);
    }
    return best;
  };
  try {
    let iterations = 1024;
    let ms = await measure(iterations);
    for (let round = 0; round < maxRounds; round++) {
      if (Math.abs(ms - targetMs) / targetMs < 0.03) break;
      const scale = ms > 0.002 ? targetMs / ms : 64;
      iterations = Math.max(1, Math.min(2 ** 31 - 1, Math.round(iterations * Math.min(64, Math.max(1 / 64, scale)))));
      ms = await measure(iterations);
    }
    return { iterations, measuredMs: ms, targetMs, elements, method: useTs ? 'timestamps' : 'wall' };
  } finally {
    stream.destroy();
    data.destroy();
  }
}
