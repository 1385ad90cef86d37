/**
 * Scenario 3: sleep kernels on 1 stream vs N streams (reference 001). Each task uploads 4 MiB,
 * runs a sleep kernel calibrated to a target duration over it, and downloads 4 MiB; the tasks run
 * back to back on one stream, then one per stream. CUDA's figures: bench/README.md.
 */
import type { ScenarioResult, Variant } from '../schema';
import type { Context, DeviceBuffer, PinnedBuffer, Stream } from 'webgpu-streams';
import { randomSeed, rng, sleepStep } from '../reference';
import { measureInterleaved, median } from '../stats';
import {
  type Check,
  type Scenario,
  StreamTimer,
  TraceRecorder,
  bytesText,
  checkElementwise,
  compare,
  grid,
  ms,
  round,
  times,
  verification,
  resolveParams,
} from './common';
import { benchKernels } from '../kernels/index';
import { calibrateSleep, warmUp, type SleepCalibration } from '../kernels/calibrate';

export interface SleepStreamsParams {
  /** u32 elements per task (4 bytes each): the upload, the kernel grid and the download. */
  elements: number;
  /** Tasks (and streams in the multi-stream variant). */
  tasks: number;
  /** Target duration of one sleep kernel, ms. */
  targetMs: number;
  /** Fixed `iterations` for the sleep kernel; 0 = calibrate to `targetMs`. */
  iterations: number;
  warmup: number;
  repeats: number;
  /** PRNG seed; 0 = fresh. */
  seed: number;
}

const FULL: SleepStreamsParams = { elements: 1 << 20, tasks: 4, targetMs: 1, iterations: 0, warmup: 2, repeats: 10, seed: 0 };
const QUICK: SleepStreamsParams = { elements: 1 << 14, tasks: 4, targetMs: 2, iterations: 0, warmup: 1, repeats: 3, seed: 0 };

/** The sleep kernel's calibration in words; where one iteration already runs past the target, it says so. */
export function calibrationText(cal: Pick<SleepCalibration, 'iterations' | 'ms' | 'targetMs' | 'method'>, elements: number): string {
  const by = cal.method === 'timestamps' ? 'GPU timestamps' : 'wall time';
  if (cal.iterations <= 1 && cal.ms > cal.targetMs * 1.1) {
    return `sleep kernel not calibrated to its ${ms(cal.targetMs)} target: 1 iteration over ${elements} elements, the least it can run, already takes ${ms(cal.ms)} on this device (${times(cal.ms / cal.targetMs)} the target), by ${by}`;
  }
  return `sleep kernel calibrated to ${ms(cal.ms)} (target ${ms(cal.targetMs)}): ${cal.iterations} iteration${cal.iterations === 1 ? '' : 's'} over ${elements} elements, by ${by}`;
}

export const sleepStreams: Scenario<SleepStreamsParams> = {
  id: 'sleep-streams',
  title: 'Sleep kernels: 1 stream vs N streams',
  description:
    'Each task = upload + calibrated sleep kernel + download (4 MiB each way at full size); the tasks run on one stream, then one per stream (reference 001: CUDA 5.00 ms -> 3.65 ms on an L20, 1.06x on an H200).',
  async run(ctx, opts) {
    const t0 = performance.now();
    const p: SleepStreamsParams = resolveParams(ctx, opts, FULL, QUICK);
    const seed = p.seed || randomSeed();
    const progress = opts.progress ?? (() => {});
    const bytes = p.elements * 4;
    const gen = rng(seed);
    await warmUp(ctx, opts.quick ? 10 : 100);

    progress('sleep-streams: calibrating the sleep kernel', 0);
    const cal = p.iterations
      ? null
      : await calibrateSleep(ctx, { elements: p.elements, targetMs: p.targetMs, label: 'sleep-streams.calibrate' });
    const iterations = p.iterations || cal!.iterations;
    const [wx, wy] = grid(p.elements, 'sleep');

    const up: PinnedBuffer[] = [];
    const down: PinnedBuffer[] = [];
    const dev: DeviceBuffer[] = [];
    const single = ctx.createStream({ label: '1 stream' });
    const multi: Stream[] = [];
    ctx.memory.resetPeak();
    const memBase = ctx.memory.current;
    for (let i = 0; i < p.tasks; i++) {
      up.push(ctx.allocHost(bytes, 'upload', { label: `task${i}.in` }));
      down.push(ctx.allocHost(bytes, 'download', { label: `task${i}.out` }));
      dev.push(ctx.alloc(bytes, { label: `task${i}.data` }));
      multi.push(ctx.createStream({ label: `stream ${i}` }));
    }
    const memoryBytes = ctx.memory.peak - memBase;
    const trace = new TraceRecorder(ctx);
    const checks: Check[] = [];

    /** Enqueues every task, stream i % streams.length, filling each task's pinned input first. */
    const runTasks = async (streams: Stream[], inputs: Uint32Array[]): Promise<void> => {
      for (let i = 0; i < p.tasks; i++) {
        const s = streams[i % streams.length]!;
        const pin = up[i]!;
        await pin.ready();
        trace.hostStep('fill', `fill task ${i}`, () => pin.u32.set(inputs[i]!));
        s.upload(pin, dev[i]!);
        s.launch(benchKernels(ctx).sleep, { bindings: [dev[i]!], workgroups: [wx, wy], constants: { iterations } });
        s.download(dev[i]!, down[i]!);
        ctx.flush();
      }
      await Promise.all(streams.map((s) => s.synchronize()));
    };

    const verify = async (name: string, inputs: Uint32Array[]): Promise<void> => {
      for (let i = 0; i < p.tasks; i++) {
        await down[i]!.ready();
        checks.push(
          checkElementwise(`${name} task ${i}: sleep(${iterations}) over ${p.elements} u32`, down[i]!.u32, p.elements, (j) => sleepStep(inputs[i]![j]!, iterations), {
            costPerElement: iterations,
          }),
        );
      }
    };

    const variants: Variant[] = [];
    try {
      // Parts, for the ideal: host fill, upload, kernel and download of one task, run alone.
      progress('sleep-streams: measuring the parts of one task', 0.2);
      const partsInput = gen.u32Array(p.elements);
      const timer = new StreamTimer(ctx, single);
      const fills: number[] = [];
      const ups: number[] = [];
      const ks: number[] = [];
      const downs: number[] = [];
      for (let r = 0; r < p.warmup + p.repeats; r++) {
        await up[0]!.ready();
        const f0 = performance.now();
        up[0]!.u32.set(partsInput);
        const fill = performance.now() - f0;
        const u = await timer.time(() => single.upload(up[0]!, dev[0]!));
        const k = await timer.time(() =>
          single.launch(benchKernels(ctx).sleep, { bindings: [dev[0]!], workgroups: [wx, wy], constants: { iterations } }),
        );
        const d = await timer.time(() => single.download(dev[0]!, down[0]!));
        if (r >= p.warmup) {
          fills.push(fill);
          ups.push(u);
          ks.push(k);
          downs.push(d);
        }
      }
      const stage = [median(fills) + median(ups), median(ks), median(downs)];
      const serial = p.tasks * stage.reduce((a, b) => a + b, 0);
      // Perfect overlap of a 3-stage pipeline (CUDA's model: copy engines beside the SMs).
      const ideal = stage.reduce((a, b) => a + b, 0) + (p.tasks - 1) * Math.max(...stage);
      // What one in-order queue allows at best: host fills hidden, GPU steps back to back.
      const idealOneQueue = Math.max(p.tasks * median(fills), p.tasks * (median(ups) + median(ks) + median(downs)));

      const extra = {
        iterations,
        fillMs: round(median(fills)),
        uploadMs: round(median(ups)),
        kernelMs: round(median(ks)),
        downloadMs: round(median(downs)),
        serialMs: round(serial),
        idealOneQueueMs: round(idealOneQueue),
        timing: timer.gpu ? 'GPU timestamps' : 'wall time',
      };

      // Both variants round-robin (same GPU clocks), fresh inputs per variant; each variant's
      // results are checked right after its last run, outside its timing.
      progress(`sleep-streams: 1 stream and ${p.tasks} streams, round-robin`, 0.4);
      const inputs1 = Array.from({ length: p.tasks }, () => gen.u32Array(p.elements));
      const inputsN = Array.from({ length: p.tasks }, () => gen.u32Array(p.elements));
      const variant =
        (name: string, streams: Stream[], inputs: Uint32Array[]) =>
        async ({ last }: { last: boolean }): Promise<number> => {
          const s0 = performance.now();
          await trace.record(() => runTasks(streams, inputs), last);
          const t = performance.now() - s0;
          if (last) await verify(name, inputs);
          return t;
        };
      const [t1, tN] = (await measureInterleaved([variant('1 stream', [single], inputs1), variant(`${p.tasks} streams`, multi, inputsN)], p)) as [
        Variant['time'],
        Variant['time'],
      ];
      variants.push({ name: '1 stream', time: t1, ideal: null, memoryBytes, extra });
      variants.push({ name: `${p.tasks} streams`, time: tN, ideal: round(ideal), baseline: '1 stream', memoryBytes, extra });
      compare(variants);

      const v = variants[1]!;
      const verdicts = [
        `${p.tasks} streams vs 1 stream: ${times(v.speedup!)} (${ms(t1.median)} -> ${ms(tN.median)}); CUDA: 5.00 -> 3.65 ms = 1.37x on an L20, 1.06x on an H200`,
        `perfect copy/compute overlap would give ${ms(ideal)}` +
          (v.efficiency !== undefined ? ` (overlap efficiency ${v.efficiency.toFixed(2)})` : '') +
          `; one in-order queue allows at best ${ms(idealOneQueue)}`,
        `per task: fill ${ms(median(fills))}, upload ${ms(median(ups))}, sleep kernel ${ms(median(ks))}, download ${ms(median(downs))} (${timer.gpu ? 'GPU timestamps' : 'wall time'})`,
        cal ? calibrationText(cal, p.elements) : `sleep kernel: ${iterations} iterations (fixed)`,
      ];
      return {
        id: 'sleep-streams',
        title: sleepStreams.title,
        params: { ...p, seed, bytesPerTask: bytes, bytesText: bytesText(bytes), iterations },
        variants,
        verification: verification(seed, checks),
        verdicts,
        trace: trace.result(),
        wallMs: performance.now() - t0,
      } satisfies ScenarioResult;
    } finally {
      await ctx.synchronize().catch(() => undefined);
      for (const b of [...up, ...down, ...dev]) b.destroy();
      for (const s of [single, ...multi]) s.destroy();
    }
  },
};
