/**
 * P6: `elapsedTime` between two timing events around a calibrated sleep kernel vs the raw
 * timestamp-query duration of the same kernel measured by hand (a compute pass with
 * `timestampWrites`, resolved and mapped), interleaved (each after an untimed run of itself, each
 * first equally often), timestamp quantization off.
 */
import type { Context } from 'webgpu-streams';
import { sleepStep } from '../reference';
import type { Check } from '../scenarios/common';
import { grid } from '../scenarios/common';
import {
  interleaved,
  median,
  metric,
  num,
  round,
  seedOf,
  skippedMetric,
  type PerfGroup,
  type PerfGroupResult,
  type PerfOptions,
} from './common';
import { benchKernels, wgsl } from '../kernels/index';
import { calibrateSleep } from '../kernels/calibrate';

interface Params {
  targetMs: number[];
  elements: number;
  repeats: number;
}
const FULL: Params = { targetMs: [1, 5], elements: 64, repeats: 15 };
const QUICK: Params = { targetMs: [2], elements: 64, repeats: 4 };

export const TARGET_P6 = 0.05;

/** Checks `got` = sleep^(totalIterations)(initial) on a few elements (the steps compose). */
function checkSleep(what: string, got: Uint32Array, initial: Uint32Array, totalIterations: number): Check {
  const idx = [0, 1, Math.floor(got.length / 2), got.length - 1];
  for (const i of idx) {
    const want = sleepStep(initial[i]!, totalIterations);
    if (got[i] !== want) return { ok: false, detail: what, mismatch: `${what}: element ${i}: got ${got[i]}, want ${want} after ${totalIterations} steps` };
  }
  return { ok: true, detail: `${what}: ${idx.length} elements = sleep^${totalIterations}(input), bit-exact` };
}

export const eventTimingGroup: PerfGroup = {
  id: 'event-timing',
  title: 'P6: elapsedTime vs raw timestamp queries',
  metrics: ['P6'],
  async run(ctx: Context, opts: PerfOptions): Promise<PerfGroupResult> {
    const name = 'elapsedTime vs raw timestamp-query duration (worst |ratio - 1|)';
    const target = `<= ${TARGET_P6.toFixed(2)}`;
    if (!ctx.features.timestampQuery) {
      return { metrics: [skippedMetric(ctx, 'P6', name, '|ratio - 1|', target, "the device has no 'timestamp-query' (ctx.features.timestampQuery is false)")], tables: [] };
    }
    const p = opts.quick ? QUICK : FULL;
    const seed = seedOf(opts);
    const progress = opts.progress ?? (() => {});
    const device = ctx.device;
    const n = p.elements;
    const initial = new Uint32Array(n);
    for (let i = 0; i < n; i++) initial[i] = (Math.imul(i + 1, 2654435761) ^ seed) >>> 0;
    const libData = ctx.alloc(n * 4, { label: 'p6.lib.data' });
    const rawData = device.createBuffer({ size: n * 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC, label: 'p6.raw.data' });
    const querySet = device.createQuerySet({ type: 'timestamp', count: 2, label: 'p6.raw.queries' });
    const resolve = device.createBuffer({ size: 16, usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC, label: 'p6.raw.resolve' });
    const readback = device.createBuffer({ size: 16, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST, label: 'p6.raw.readback' });
    const module = device.createShaderModule({ code: wgsl.sleep, label: 'p6.raw.sleep' });
    const stream = ctx.createStream({ label: 'p6', nonBlocking: true });
    const e0 = ctx.createEvent({ timing: true, label: 'p6.t0' });
    const e1 = ctx.createEvent({ timing: true, label: 'p6.t1' });
    const [gx, gy] = grid(n, 'sleep');
    const checks: Check[] = [];
    const rows: { target: number; iterations: number; lib: number; raw: number; ratio: number }[] = [];
    try {
      for (const [ti, targetMs] of p.targetMs.entries()) {
        progress(`P6: calibrating a ${targetMs} ms sleep`, ti / p.targetMs.length);
        const cal = await calibrateSleep(ctx, { elements: n, targetMs, label: 'p6.calibrate' });
        const iterations = cal.iterations;
        const pipeline = await device.createComputePipelineAsync({ layout: 'auto', compute: { module, entryPoint: 'main', constants: { iterations } }, label: 'p6.raw.sleep' });
        const bind = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: [{ binding: 0, resource: { buffer: rawData } }] });
        device.queue.writeBuffer(rawData, 0, initial);
        ctx.queue.writeBuffer(libData.buffer, 0, initial);
        await ctx.queue.onSubmittedWorkDone();
        let libLaunches = 0;
        let rawLaunches = 0;
        const samples = await interleaved(
          {
            lib: async () => {
              stream.record(e0);
              stream.launch(benchKernels(ctx).sleep, { bindings: [libData], workgroups: [gx, gy], constants: { iterations } });
              stream.record(e1);
              libLaunches++;
              await e1.synchronize();
              return e0.elapsedTime(e1);
            },
            raw: async () => {
              const enc = device.createCommandEncoder();
              const pass = enc.beginComputePass({ timestampWrites: { querySet, beginningOfPassWriteIndex: 0, endOfPassWriteIndex: 1 } });
              pass.setPipeline(pipeline);
              pass.setBindGroup(0, bind);
              pass.dispatchWorkgroups(gx, gy);
              pass.end();
              enc.resolveQuerySet(querySet, 0, 2, resolve, 0);
              enc.copyBufferToBuffer(resolve, 0, readback, 0, 16);
              device.queue.submit([enc.finish()]);
              rawLaunches++;
              await readback.mapAsync(GPUMapMode.READ);
              const t = new BigUint64Array(readback.getMappedRange().slice(0));
              readback.unmap();
              return Number(t[1]! - t[0]!) / 1e6;
            },
          },
          p.repeats,
          1,
          1, // settle: each timed run right after an untimed one of its own, so the GPU's clock is up for both
          true, // rotate: each goes first equally often, so a clock that follows the order favors neither
        );
        // Both data buffers went through every launch: check them bit-exactly.
        const read = async (buf: GPUBuffer): Promise<Uint32Array> => {
          const rb = device.createBuffer({ size: n * 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
          const enc = device.createCommandEncoder();
          enc.copyBufferToBuffer(buf, 0, rb, 0, n * 4);
          device.queue.submit([enc.finish()]);
          await rb.mapAsync(GPUMapMode.READ);
          const out = new Uint32Array(rb.getMappedRange().slice(0));
          rb.destroy();
          return out;
        };
        await stream.synchronize();
        checks.push(checkSleep(`${targetMs} ms library kernel`, await read(libData.buffer), initial, libLaunches * iterations));
        checks.push(checkSleep(`${targetMs} ms raw kernel`, await read(rawData), initial, rawLaunches * iterations));
        const lib = median(samples.lib);
        const raw = median(samples.raw);
        rows.push({ target: targetMs, iterations, lib, raw, ratio: lib / raw });
      }
      const worst = Math.max(...rows.map((r) => Math.abs(r.ratio - 1)));
      const figures: Record<string, number | string> = { seed, elements: n };
      for (const r of rows) {
        figures[`${r.target}ms.libMs`] = round(r.lib, 5);
        figures[`${r.target}ms.rawMs`] = round(r.raw, 5);
        figures[`${r.target}ms.ratio`] = round(r.ratio, 5);
        figures[`${r.target}ms.iterations`] = r.iterations;
      }
      return {
        metrics: [
          metric(ctx, {
            id: 'P6',
            name,
            value: worst,
            unit: '|ratio - 1|',
            target,
            meets: worst <= TARGET_P6,
            detail: rows.map((r) => `${r.target} ms sleep (${r.iterations} iterations): elapsedTime ${num(r.lib)} ms vs raw ${num(r.raw)} ms = ${num(r.ratio)} (medians of ${p.repeats})`).join('; '),
            figures,
            checks,
            seed,
          }),
        ],
        tables: [],
      };
    } finally {
      await stream.synchronize().catch(() => undefined);
      stream.destroy();
      libData.destroy();
      rawData.destroy();
      querySet.destroy();
      resolve.destroy();
      readback.destroy();
    }
  },
};
