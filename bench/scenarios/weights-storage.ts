/**
 * Scenario 6: weights from storage. A model of L layers whose weights live in a safetensors file
 * (bench/weights-file.ts: 4x the device budget the scenario sets itself, 2 weight slots + 2
 * activations) and never all in device memory nor in the JS heap: `uploadFrom` streams layer i+1
 * from the file (Node) or from the page's server over HTTP byte ranges (page) into one slot while
 * the compute stream runs layer i from the other, ordered by events. Layer i: act = ci(act + w_i).
 * Three ways to run it, at layer costs swept against the load time:
 * - loads alone: every layer from storage into the slots, no compute;
 * - 1 stream: load a layer, then run it, on one stream (the stream's reader still reads the file
 *   ahead of the GPU; copies and kernels take turns);
 * - 2 slots: the two-stream pipeline; ideal max(loads alone, compute alone), and where the device
 *   has timestamps the one-queue bound: the first load, then every kernel and copy in turn.
 * Outputs are checked against a CPU reference computed from weights read back out of the source.
 */
import type { ScenarioResult, Span, Variant } from '../schema';
import type { DeviceBuffer, Stream } from 'webgpu-streams';
import { SafetensorsFile, SlotRing, httpSource } from 'webgpu-streams';
import { COMPUTE_INTENSIVE_TOL, computeIntensiveStep, randomSeed, rng } from '../reference';
import { measure, measureInterleaved } from '../stats';
import { type Check, type Scenario, type WeightsStorage, TraceRecorder, readAt, stagingCopyMs, oneQueueBoundMs, bytesText, checkBytes, checkElementwise, compare, gbs, grid, ms, resolveParams, round, verification } from './common';
import { benchKernels } from '../kernels/index';
import { balanceIterations } from '../perf/balance';
import { isSoftwareAdapter } from '../device';
import { weightsUrl, type WeightsSpec } from '../weights-spec';

export interface WeightsStorageParams {
  /** f32 elements per layer (4M = 16 MiB). */
  elements: number;
  layers: number;
  /** Compute per layer as multiples of one layer's load, comma-separated. */
  costs: string;
  /** Reads in flight: file reads in Node; HTTP range requests in the page, at most 8. */
  parallel: number;
  /** Compute-intensive iterations per layer at most (the fit to a cost can overshoot on a noisy probe). */
  maxIterations: number;
  warmup: number;
  repeats: number;
  seed: number;
}

const FULL: WeightsStorageParams = { elements: 1 << 22, layers: 16, costs: '0.5,1,2', parallel: 16, maxIterations: 1 << 16, warmup: 1, repeats: 7, seed: 0 };
const QUICK: WeightsStorageParams = { elements: 1 << 14, layers: 16, costs: '1', parallel: 4, maxIterations: 64, warmup: 1, repeats: 2, seed: 0 };

/** Full runs on a software adapter (SwiftShader runs the kernels on the CPU): 1 MiB layers, one cost. */
const SOFTWARE: Partial<WeightsStorageParams> = { elements: 1 << 18, costs: '1' };

/** The page's own server (HTTP byte ranges), where the runner gives no storage. */
function pageStorage(): WeightsStorage {
  const loc = (globalThis as { location?: { href: string } }).location;
  if (!loc) throw new Error("weights-storage: no storage to read the weights file from (Node runners pass one: a file, see bench/weights-file.ts)");
  return { where: "HTTP byte ranges from the page's server", open: (spec, parallel) => httpSource(new URL(weightsUrl(spec), loc.href).href, { parallel: Math.min(8, parallel) }) };
}

export const weightsStorage: Scenario<WeightsStorageParams> = {
  id: 'weights-storage',
  title: 'Weights from storage: two slots fed by uploadFrom',
  description:
    'A model of L layers streamed from a safetensors file (Node) or the page server (HTTP byte ranges) through two device slots, the next layer loading while the current one computes; the model is 4x the device budget.',
  async run(ctx, opts) {
    const t0 = performance.now();
    const soft = !opts.quick && isSoftwareAdapter(ctx.adapterInfo);
    const p = resolveParams(ctx, { ...opts, params: { ...(soft ? SOFTWARE : {}), ...opts.params } }, FULL, QUICK);
    const seed = p.seed || randomSeed();
    const n = Math.min(p.elements, Math.floor(ctx.limits.maxStorageBufferBindingSize / 4));
    const bytes = n * 4;
    const L = p.layers;
    const spec: WeightsSpec = { layers: L, elements: n, seed };
    const storage = opts.storage ?? pageStorage();
    const src = await storage.open(spec, p.parallel);
    const progress = opts.progress ?? (() => {});
    const checks: Check[] = [];
    const variants: Variant[] = [];
    const verdicts: string[] = [];
    const trace = new TraceRecorder(ctx);
    const bufs: DeviceBuffer[] = [];
    const streams: Stream[] = [];
    try {
      const st = await SafetensorsFile.open(src);
      const ring = Math.max(1, Math.ceil(bytes / (8 << 20))); // a whole layer: reads never wait for a copy behind a kernel
      const spans = Array.from({ length: L }, (_, i) => ({ ...st.span(st.layer(i)), ring }));
      const slots = [ctx.alloc(bytes, { label: 'ws.slot0' }), ctx.alloc(bytes, { label: 'ws.slot1' })];
      const act = [ctx.alloc(bytes, { label: 'ws.act0' }), ctx.alloc(bytes, { label: 'ws.act1' })];
      bufs.push(...slots, ...act);
      const load = ctx.createStream({ label: 'ws load', nonBlocking: true });
      const compute = ctx.createStream({ label: 'ws compute', nonBlocking: true });
      streams.push(load, compute);
      const k = benchKernels(ctx);
      const gAdd = grid(n, 'vectorAdd');
      const gCi = grid(n, 'computeIntensive');
      const r = rng(seed);
      const input = r.f32Array(n);
      const slotRing = new SlotRing(ctx, { buffers: slots, producer: load, consumer: compute }); // slot i % 2 refilled once layer i - 2 read it

      const layerOps = (s: Stream, slot: DeviceBuffer, iterations: number): void => {
        s.launch(ctx.kernels.vectorAdd, { bindings: [act[0]!, slot, act[1]!], workgroups: gAdd });
        s.launch(k.computeIntensive, { bindings: [act[1]!, act[0]!], workgroups: gCi, constants: { iterations } });
      };
      const loadsOnce = async (): Promise<void> => {
        for (let i = 0; i < L; i++) load.uploadFrom(src, slots[i % 2]!, spans[i]!);
        await load.synchronize();
      };
      const computeOnce = async (iterations: number): Promise<void> => {
        for (let i = 0; i < L; i++) layerOps(compute, slots[i % 2]!, iterations);
        await compute.synchronize();
      };
      const reset = async (): Promise<void> => {
        compute.upload(input, act[0]!);
        await compute.synchronize();
      };
      /** Load a layer, then run it: one stream (its reader reads the file ahead; each copy waits for the kernel before it in the queue). */
      const serialOnce = async (iterations: number): Promise<void> => {
        for (let i = 0; i < L; i++) {
          compute.uploadFrom(src, slots[i % 2]!, spans[i]!);
          layerOps(compute, slots[i % 2]!, iterations);
        }
        await compute.synchronize();
      };
      /** The two-slot pipeline: the load of layer i + 2 waits for layer i, which read its slot. */
      const slotsOnce = async (iterations: number): Promise<void> => {
        for (let i = 0; i < L; i++) {
          slotRing.fill((slot) => load.uploadFrom(src, slot, spans[i]!));
          slotRing.use((slot) => layerOps(compute, slot, iterations));
        }
        await compute.synchronize();
        await load.synchronize();
      };

      // --- loads alone, and the slots checked against the file's last two layers
      progress(`weights-storage: loading ${L} layers of ${bytesText(bytes)} from ${storage.where}`, 0.05);
      const loads = await measure(() => loadsOnce(), p);
      const expected = new Uint8Array(bytes);
      const got = new Uint8Array(bytes);
      for (const i of [L - 2, L - 1]) {
        await readAt(src, expected, spans[i]!.offset);
        load.download(slots[i % 2]!, got);
        await load.synchronize();
        checks.push(checkBytes(`loads alone: slot ${i % 2} == layer ${i} of the file`, got, expected));
      }
      variants.push({ name: 'loads alone', time: loads, ideal: null, gbps: round((L * bytes) / loads.median / 1e6), extra: { layers: L, layerBytes: bytes } });

      // --- the GPU's copies of every layer out of pinned staging (timing events, where the device has timestamps)
      const copyMs = (await stagingCopyMs(ctx, load, slots[0]!, bytes, Math.min(bytes, 8 << 20))) * L;

      // --- the weights the CPU reference needs, read back out of the source a layer at a time
      const idx = Array.from(new Set([0, 1, n - 1, ...Array.from({ length: 61 }, () => r.u32() % n)])).sort((a, b) => a - b);
      const w = spans.map(() => new Float32Array(idx.length));
      const layer = new Float32Array(expected.buffer);
      for (let i = 0; i < L; i++) {
        await readAt(src, expected, spans[i]!.offset);
        idx.forEach((j, m) => (w[i]![m] = layer[j]!));
      }

      // --- per layer cost: iterations searched so that compute alone is cost x the loads, then the three ways in turn
      const computeMs = async (it: number): Promise<number> => (await measure(() => computeOnce(it), { warmup: 1, repeats: 2 })).median;
      const costs = p.costs.split(',').map(Number).filter((x) => Number.isFinite(x) && x > 0);
      for (const [ci, cost] of costs.entries()) {
        progress(`weights-storage: layer cost ${cost}x the load`, 0.2 + (0.8 * ci) / costs.length);
        const { iterations } = await balanceIterations(computeMs, cost * loads.median, { probeIterations: opts.quick ? 16 : 256, maxIterations: p.maxIterations, tolerance: 0.1 });
        const tag = `cost ${cost}x`;
        const keepTrace = ci === costs.length - 1;
        const [tc, ts, t2] = await measureInterleaved(
          [
            () => computeOnce(iterations),
            async () => {
              await reset();
              const t = performance.now();
              await serialOnce(iterations);
              return performance.now() - t;
            },
            async ({ last }) => {
              await reset();
              const t = performance.now();
              await trace.record(() => slotsOnce(iterations), last && keepTrace);
              return performance.now() - t;
            },
          ],
          p,
        );
        // act0 now holds the 2-slot run's output: ci(x + w_i) over the layers, from the file's values.
        const out = new Float32Array(n);
        compute.download(act[0]!, out);
        await compute.synchronize();
        const ref = new Map<number, number>();
        idx.forEach((j, m) => {
          let x = input[j]!;
          for (let i = 0; i < L; i++) x = computeIntensiveStep(Math.fround(x + w[i]![m]!), iterations);
          ref.set(j, x);
        });
        const sampled = Float32Array.from(idx, (j) => out[j]!);
        checks.push(checkElementwise(`${tag}: 2 slots == CPU chain of ${L} layers ci(x + w_i) at ${iterations} iterations (${idx.length} elements, weights read from the source)`, sampled, idx.length, (m) => ref.get(idx[m]!)!, { tol: COMPUTE_INTENSIVE_TOL }));
        const ideal = Math.max(loads.median, tc!.median);
        const oneQueue = oneQueueBoundMs(loads.median, tc!.median, copyMs, L);
        const vs: Variant[] = [
          { name: `${tag}: compute alone`, time: tc!, ideal: null, extra: { iterations } },
          { name: `${tag}: 1 stream`, time: ts!, ideal: null, memoryBytes: 4 * bytes, extra: { iterations } },
          { name: `${tag}: 2 slots`, time: t2!, ideal: round(ideal), baseline: `${tag}: 1 stream`, memoryBytes: 4 * bytes, extra: { iterations, overIdeal: round(t2!.median / ideal), ...(Number.isFinite(oneQueue) ? { oneQueueMs: round(oneQueue), overOneQueue: round(t2!.median / oneQueue) } : {}) } },
        ];
        variants.push(...compare(vs));
        verdicts.push(
          `${tag} (compute alone ${ms(tc!.median)}, ${(tc!.median / loads.median).toFixed(2)}x the loads${Math.abs(tc!.median / loads.median / cost - 1) > 0.5 ? `: ${cost}x was out of reach at ${iterations} iteration${iterations === 1 ? '' : 's'}` : ''}): 2 slots ${ms(t2!.median)} vs 1 stream ${ms(ts!.median)}; ` +
            `${(t2!.median / ideal).toFixed(2)}x max(loads ${ms(loads.median)}, compute ${ms(tc!.median)}); ` +
            (Number.isFinite(oneQueue)
              ? `${(t2!.median / oneQueue).toFixed(2)}x the one-queue bound ${ms(oneQueue)} (first load + every kernel and copy in turn: copies run between kernels, never beside them; the GPU's copies of all layers ${ms(copyMs)})`
              : 'no timestamps: the copies were not timed (one queue: copies run between kernels, never beside them)'),
        );
      }
      verdicts.unshift(
        `${L} layers x ${bytesText(bytes)} = ${bytesText(L * bytes)} from ${storage.where}, 4x the device budget of 2 slots + 2 activations (${bytesText(4 * bytes)}): loads alone ${gbs((L * bytes) / loads.median / 1e6)} (${src.parallel ?? 1} reads in flight), through a staging ring of ${ring} pinned buffer${ring > 1 ? 's' : ''} of up to 8 MiB per transfer (at most 3 rings per stream)`,
      );
      const spansOut: Span[] = trace.result();
      return {
        id: 'weights-storage',
        title: weightsStorage.title,
        params: { ...p, bytes, bytesText: bytesText(bytes), seed, source: storage.where },
        variants,
        verification: verification(seed, checks),
        verdicts,
        trace: spansOut,
        wallMs: performance.now() - t0,
      } satisfies ScenarioResult;
    } finally {
      await ctx.synchronize().catch(() => undefined);
      for (const b of bufs) b.destroy();
      for (const s of streams) s.destroy();
      await src.close?.();
    }
  },
};
