/**
 * Host copies against GPU traffic (a diagnostic, not a metric), raw WebGPU on Dawn, no library.
 *
 * P1's host work (fill a mapped upload buffer, read a mapped read-back buffer out) is measured
 * alone, but in the pipeline it runs while the GPU works. This asks whether the two slow each
 * other down, and which GPU traffic does it:
 * - per host copy of one chunk: fill (JS into a mapped MAP_WRITE buffer), read-out (a mapped
 *   MAP_READ buffer into JS) and a plain JS-to-JS memcpy as a control, timed one by one, so a
 *   stall shows as a slow copy rather than a slower mean;
 * - under each GPU load, kept busy by a pump that keeps `--depth` submits in flight:
 *   `idle` (none), `kernel` (compute_intensive, no copies), `upload` (copies out of a MAP_WRITE
 *   staging buffer into a device buffer, as P1's uploads do: over PCIe where the staging is host
 *   memory, within the GPU where it is device memory behind the BAR), `download` (device buffer to
 *   a MAP_READ buffer in host memory, over PCIe, as P1's downloads do), `mix` (one of each per
 *   submit: P1's GPU work); results at bd87a21 call `upload` and `download` `vram` and `d2h`;
 * - the GPU's side: each load's rate while the host copies against its rate while the host sleeps;
 * - whether the MAP_WRITE mapping is uncached device memory behind the PCIe BAR: reading it back
 *   is then far slower than writing it.
 * Loads run in a shuffled order within each block, so a slow phase of the host spreads over them.
 *
 *   node dist/cli/diag-contention.mjs [--chunk-mib 8] [--chunks 32] [--blocks 6]
 *     [--loads idle,kernel,upload,download,mix] [--gpu-ms 4] [--depth 2] [--seed N] [--out DIR]
 *
 * Every copy is checked: the read-outs against the bytes the GPU put in the read-back buffer, the
 * fills by reading the mapping back, the loads' copies by a read-back after the last block, and the
 * kernel against the CPU reference on sampled elements. Exits 1 on a mismatch.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { create, globals } from 'webgpu';
import { chooseVulkanDriver } from './vulkan';
import { builtinShaders } from '../src/index';
import { computeIntensiveStep, COMPUTE_INTENSIVE_TOL, randomSeed, rng } from './reference';
import { checkBytes, grid } from './scenarios/common';
import { median, randomBytes, randomF32 } from './perf/common';

const MiB = 1024 * 1024;
const BU = { MAP_READ: 1, MAP_WRITE: 2, COPY_SRC: 4, COPY_DST: 8, STORAGE: 128 };
const LOADS = ['idle', 'kernel', 'upload', 'download', 'mix'] as const;
type Load = (typeof LOADS)[number];
const COPIES = ['fill', 'read', 'js'] as const;
type CopyKind = (typeof COPIES)[number];

const now = (): number => performance.now();
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const yieldToLoop = (): Promise<void> => new Promise((r) => setImmediate(r));

function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
}

function fail(msg: string): never {
  console.error(`MISMATCH: ${msg}`);
  process.exit(1);
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      'chunk-mib': { type: 'string', default: '8' },
      chunks: { type: 'string', default: '32' },
      blocks: { type: 'string', default: '6' },
      loads: { type: 'string', default: LOADS.join(',') },
      'gpu-ms': { type: 'string', default: '4' },
      depth: { type: 'string', default: '2' },
      'bg-mib': { type: 'string', default: '64' },
      seed: { type: 'string' },
      out: { type: 'string' },
    },
  });
  const chunkBytes = Number(values['chunk-mib']) * MiB;
  const chunks = Number(values.chunks);
  const blocks = Number(values.blocks);
  const bgBytes = Number(values['bg-mib']) * MiB;
  const gpuMs = Number(values['gpu-ms']);
  const depth = Number(values.depth);
  const seed = values.seed ? Number(values.seed) : randomSeed();
  const loads = values.loads!.split(',').map((s) => s.trim()) as Load[];
  for (const l of loads) if (!LOADS.includes(l)) throw new Error(`--loads: unknown load '${l}'; known: ${LOADS.join(', ')}`);
  if (!loads.includes('idle')) loads.unshift('idle'); // the reference for the stall counts

  const g = globalThis as Record<string, unknown>;
  for (const [k, v] of Object.entries(globals as Record<string, unknown>)) if (!(k in g)) g[k] = v;
  console.log(`vulkan: ${chooseVulkanDriver()}`);
  const gpu = create(['disable-dawn-features=timestamp_quantization']);
  g['__diagGpu'] = gpu; // keep the native instance alive while the device is in use
  const adapter = await gpu.requestAdapter();
  if (!adapter) throw new Error('no WebGPU adapter');
  const device = await adapter.requestDevice({ requiredLimits: { maxBufferSize: Math.max(bgBytes, chunkBytes), maxStorageBufferBindingSize: bgBytes } });
  device.addEventListener('uncapturederror', (e) => fail(`WebGPU error: ${(e as GPUUncapturedErrorEvent).error.message}`));
  const info = adapter.info;
  console.log(`device: ${info.vendor} ${info.architecture} ${info.device} ${info.description}`);
  console.log(`seed ${seed}; chunk ${chunkBytes / MiB} MiB x ${chunks} per load and block, ${blocks} blocks, loads ${loads.join(',')}, ~${gpuMs} ms of GPU work per load submit, ${depth} in flight`);

  // ---- the host's buffers: a mapped upload buffer, a mapped read-back buffer with known bytes
  const src = randomBytes(seed, chunkBytes);
  const rbBytes = randomBytes(seed ^ 0x5bd1e995, chunkBytes);
  const dst = new Uint8Array(chunkBytes);
  const jsDst = new Uint8Array(chunkBytes);
  const up = device.createBuffer({ size: chunkBytes, usage: BU.MAP_WRITE | BU.COPY_SRC, mappedAtCreation: true, label: 'host.up' });
  const upView = new Uint8Array(up.getMappedRange());
  const rb = device.createBuffer({ size: chunkBytes, usage: BU.MAP_READ | BU.COPY_DST, label: 'host.rb' });
  {
    const s = device.createBuffer({ size: chunkBytes, usage: BU.MAP_WRITE | BU.COPY_SRC, mappedAtCreation: true, label: 'host.rb seed' });
    new Uint8Array(s.getMappedRange()).set(rbBytes);
    s.unmap();
    const e = device.createCommandEncoder();
    e.copyBufferToBuffer(s, 0, rb, 0, chunkBytes);
    device.queue.submit([e.finish()]);
    await rb.mapAsync(GPUMapMode.READ);
    s.destroy();
  }
  const rbView = new Uint8Array(rb.getMappedRange());

  // ---- the loads' buffers
  const bgF32 = randomF32(seed + 1, bgBytes / 4);
  const staging = device.createBuffer({ size: bgBytes, usage: BU.MAP_WRITE | BU.COPY_SRC, mappedAtCreation: true, label: 'load.staging' });
  new Float32Array(staging.getMappedRange()).set(bgF32);
  staging.unmap();
  const devIn = device.createBuffer({ size: bgBytes, usage: BU.STORAGE | BU.COPY_SRC | BU.COPY_DST, label: 'load.in' });
  const devOut = device.createBuffer({ size: bgBytes, usage: BU.STORAGE | BU.COPY_SRC, label: 'load.out' });
  const bgRb = device.createBuffer({ size: bgBytes, usage: BU.MAP_READ | BU.COPY_DST, label: 'load.readback' });
  {
    const e = device.createCommandEncoder();
    e.copyBufferToBuffer(staging, 0, devIn, 0, bgBytes);
    device.queue.submit([e.finish()]);
  }
  const module = device.createShaderModule({ code: builtinShaders.computeIntensive, label: 'compute_intensive' });
  // One explicit layout: the bind group serves every iterations value.
  const bgl = device.createBindGroupLayout({
    entries: [
      { binding: 0, visibility: GPUShaderStage.COMPUTE, buffer: { type: 'read-only-storage' } },
      { binding: 1, visibility: GPUShaderStage.COMPUTE, buffer: { type: 'storage' } },
    ],
  });
  const layout = device.createPipelineLayout({ bindGroupLayouts: [bgl] });
  const pipelines = new Map<number, GPUComputePipeline>();
  const pipelineAt = (iterations: number): GPUComputePipeline => {
    let p = pipelines.get(iterations);
    if (!p) pipelines.set(iterations, (p = device.createComputePipeline({ layout, compute: { module, entryPoint: 'main', constants: { iterations } }, label: `compute_intensive(${iterations})` })));
    return p;
  };
  const [gx, gy] = grid(bgBytes / 4, 'computeIntensive');
  let iterations = 64;
  const bind = device.createBindGroup({
    layout: bgl,
    entries: [
      { binding: 0, resource: { buffer: devIn } },
      { binding: 1, resource: { buffer: devOut } },
    ],
  });
  const encodeKernel = (e: GPUCommandEncoder): void => {
    const pass = e.beginComputePass();
    pass.setPipeline(pipelineAt(iterations));
    pass.setBindGroup(0, bind);
    pass.dispatchWorkgroups(gx, gy);
    pass.end();
  };
  const encoders: Record<Exclude<Load, 'idle'>, (e: GPUCommandEncoder, n: number) => void> = {
    kernel: (e) => encodeKernel(e),
    upload: (e, n) => {
      for (let i = 0; i < n; i++) e.copyBufferToBuffer(staging, 0, devIn, 0, bgBytes);
    },
    download: (e, n) => {
      for (let i = 0; i < n; i++) e.copyBufferToBuffer(devIn, 0, bgRb, 0, bgBytes);
    },
    mix: (e) => {
      e.copyBufferToBuffer(staging, 0, devIn, 0, bgBytes);
      encodeKernel(e);
      e.copyBufferToBuffer(devIn, 0, bgRb, 0, bgBytes);
    },
  };
  /** Submits per load so each carries ~gpuMs (copies repeated, kernel iterations scaled). */
  const perSubmit: Record<string, number> = {};
  const submitOnce = (load: Exclude<Load, 'idle'>, n: number): void => {
    const e = device.createCommandEncoder();
    encoders[load](e, n);
    device.queue.submit([e.finish()]);
  };
  /** Wall ms of one submit of `load` with `n` (least of 3, after a warm-up), host idle. */
  const timeSubmit = async (load: Exclude<Load, 'idle'>, n: number): Promise<number> => {
    submitOnce(load, n);
    await device.queue.onSubmittedWorkDone();
    let best = Infinity;
    for (let r = 0; r < 3; r++) {
      const t = now();
      submitOnce(load, n);
      await device.queue.onSubmittedWorkDone();
      best = Math.min(best, now() - t);
    }
    return best;
  };
  // Calibrate: kernel iterations and copy counts for ~gpuMs per submit.
  {
    const a = await timeSubmit('kernel', 1);
    iterations = 1024;
    const b = await timeSubmit('kernel', 1);
    const slope = Math.max(1e-6, (b - a) / (1024 - 64));
    iterations = Math.max(16, Math.round(64 + (gpuMs - a) / slope));
    const c = await timeSubmit('kernel', 1);
    const copy1 = await timeSubmit('upload', 1);
    const d2h1 = await timeSubmit('download', 1);
    const copiesPerSubmit = Math.max(1, Math.round(gpuMs / copy1));
    const d2hPerSubmit = Math.max(1, Math.round(gpuMs / d2h1));
    perSubmit['kernel'] = 1;
    perSubmit['upload'] = copiesPerSubmit;
    perSubmit['download'] = d2hPerSubmit;
    perSubmit['mix'] = 1;
    console.log(
      `calibration (host idle, wall per submit): kernel ${iterations} iterations ${c.toFixed(2)} ms; ` +
        `${bgBytes / MiB} MiB staging -> device ${copy1.toFixed(3)} ms (${(bgBytes / 1e6 / copy1).toFixed(0)} GB/s), x${copiesPerSubmit} per submit; ` +
        `${bgBytes / MiB} MiB device -> read-back ${d2h1.toFixed(3)} ms (${(bgBytes / 1e6 / d2h1).toFixed(1)} GB/s), x${d2hPerSubmit} per submit; ` +
        `mix (one of each) ${(await timeSubmit('mix', 1)).toFixed(2)} ms`,
    );
  }

  /** Keeps `depth` submits of `load` in flight until stopped; counts the completed ones. */
  const pump = (load: Exclude<Load, 'idle'>): { stop: () => Promise<{ submits: number; ms: number }> } => {
    let running = true;
    let submits = 0;
    const t0 = now();
    const one = async (): Promise<void> => {
      while (running) {
        submitOnce(load, perSubmit[load]!);
        await device.queue.onSubmittedWorkDone();
        submits++;
      }
    };
    const all = Array.from({ length: depth }, one);
    return {
      stop: async () => {
        running = false;
        await Promise.all(all);
        return { submits, ms: now() - t0 };
      },
    };
  };

  // ---- is the MAP_WRITE mapping behind the BAR? Reading it back is then very slow.
  const probe = Math.min(chunkBytes, MiB);
  jsDst.fill(1); // first touch here, not in the timed copies
  dst.fill(1);
  upView.set(src);
  const tw = now();
  for (let r = 0; r < 4; r++) upView.subarray(0, probe).set(src.subarray(0, probe));
  const writeGBs = (4 * probe) / 1e6 / (now() - tw);
  const tr = now();
  for (let r = 0; r < 4; r++) jsDst.subarray(0, probe).set(upView.subarray(0, probe));
  const readGBs = (4 * probe) / 1e6 / (now() - tr);
  console.log(`MAP_WRITE mapping, ${probe / MiB} MiB: write ${writeGBs.toFixed(2)} GB/s, read back ${readGBs.toFixed(3)} GB/s (${(writeGBs / readGBs).toFixed(1)}x slower to read${writeGBs / readGBs > 20 ? ': uncached, write-combined memory, as device memory behind the PCIe BAR is' : ''})`);

  // ---- the blocks
  const times: Record<string, Record<CopyKind, number[]>> = {};
  const rates: Record<string, { busy: number[]; alone: number[] }> = {};
  for (const l of loads) times[l] = { fill: [], read: [], js: [] };
  const r = rng(seed);
  for (let b = 0; b < blocks; b++) {
    const order = [...loads];
    for (let i = order.length - 1; i > 0; i--) {
      const j = Math.floor(r.next() * (i + 1));
      [order[i], order[j]] = [order[j]!, order[i]!];
    }
    for (const load of order) {
      const p = load === 'idle' ? null : pump(load);
      await sleep(2); // the load is running
      const t0 = now();
      for (let c = 0; c < chunks; c++) {
        const a = now();
        upView.set(src);
        const f = now();
        dst.set(rbView);
        const rd = now();
        jsDst.set(src);
        const j = now();
        times[load]!.fill.push(f - a);
        times[load]!.read.push(rd - f);
        times[load]!.js.push(j - rd);
        await yieldToLoop(); // the pump resubmits
      }
      const hostMs = now() - t0;
      if (p) {
        const busy = await p.stop();
        // The same load for as long, host asleep: its rate alone.
        const q = pump(load as Exclude<Load, 'idle'>);
        await sleep(hostMs);
        const alone = await q.stop();
        (rates[load] ??= { busy: [], alone: [] }).busy.push(busy.submits / busy.ms);
        rates[load]!.alone.push(alone.submits / alone.ms);
      }
    }
    console.log(`block ${b + 1}/${blocks}: ${order.join(', ')}`);
  }

  // ---- checks
  const checks = [checkBytes('read-out of the mapped read-back buffer', dst, rbBytes), checkBytes('fill of the mapped upload buffer', upView, src), checkBytes('JS memcpy', jsDst, src)];
  {
    const e = device.createCommandEncoder();
    e.copyBufferToBuffer(devIn, 0, bgRb, 0, bgBytes);
    device.queue.submit([e.finish()]);
    await bgRb.mapAsync(GPUMapMode.READ);
    checks.push(checkBytes("the loads' copies (staging -> device -> read-back)", new Uint8Array(bgRb.getMappedRange().slice(0)), new Uint8Array(bgF32.buffer)));
    bgRb.unmap();
  }
  if (loads.includes('kernel') || loads.includes('mix')) {
    const e = device.createCommandEncoder();
    e.copyBufferToBuffer(devOut, 0, bgRb, 0, bgBytes);
    device.queue.submit([e.finish()]);
    await bgRb.mapAsync(GPUMapMode.READ);
    const out = new Float32Array(bgRb.getMappedRange());
    const n = bgBytes / 4;
    for (const i of [0, 1, n >> 1, n - 1, Math.floor(n / 3)]) {
      const want = computeIntensiveStep(bgF32[i]!, iterations);
      const got = out[i]!;
      if (!(Math.abs(got - want) <= COMPUTE_INTENSIVE_TOL.abs + COMPUTE_INTENSIVE_TOL.rel * Math.abs(want))) fail(`kernel output [${i}]: got ${got}, want ${want} (seed ${seed})`);
    }
    bgRb.unmap();
  }
  for (const c of checks) if (!c.ok) fail(`${c.mismatch} (seed ${seed})`);
  console.log(`verified: ${checks.map((c) => c.detail).join('; ')}${loads.includes('kernel') || loads.includes('mix') ? '; kernel output at 5 elements vs the CPU reference' : ''}`);

  // ---- report
  const idleMed: Record<CopyKind, number> = { fill: median(times['idle']!.fill), read: median(times['idle']!.read), js: median(times['idle']!.js) };
  const gbs = (ms: number): string => (chunkBytes / 1e6 / ms).toFixed(2);
  console.log(`\nhost copies of ${chunkBytes / MiB} MiB under each GPU load: GB/s at the median / 10th percentile / slowest; 'slow' = copies taking over 2x the idle median`);
  const rows: Record<string, unknown>[] = [];
  for (const load of loads) {
    const row: Record<string, unknown> = { load };
    const t = times[load]!;
    for (const k of COPIES) {
      const xs = t[k];
      row[k] = `${gbs(median(xs))} / ${gbs(quantile(xs, 0.9))} / ${gbs(Math.max(...xs))}`;
      row[`${k} slow`] = `${xs.filter((x) => x > 2 * idleMed[k]).length}/${xs.length}`;
    }
    const rt = rates[load];
    if (rt) row['GPU rate, host copying / host asleep'] = (median(rt.busy) / median(rt.alone)).toFixed(3);
    rows.push(row);
  }
  console.table(rows);
  const result = { seed, chunkBytes, chunks, blocks, loads, gpuMs, depth, iterations, perSubmit, mapWrite: { writeGBs, readGBs }, times, rates, rows };
  if (values.out) writeFileSync(join(values.out, 'diag-contention.json'), JSON.stringify(result, null, 1));
  up.unmap();
  rb.unmap();
  for (const buf of [up, rb, staging, devIn, devOut, bgRb]) buf.destroy();
  device.destroy();
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
