/**
 * Completion latency after the GPU sat idle (a diagnostic, not a metric), raw WebGPU on Dawn: after
 * an idle period of T ms, submit `count` chunks (one compute_intensive dispatch each, ~1 ms of GPU
 * work, one submit each, back to back), map a small read-back buffer per chunk, and record when
 * each map resolves (host clock, from the first submit) next to each chunk's GPU duration and the
 * GPU's start-to-end span (timestamp queries). Says whether a pipeline that starts on an idle GPU
 * sees its first completions late, and whether the GPU or the notification is late.
 *
 *   node dist/cli/diag-latency.mjs [--elements 4194304] [--iterations 3000] [--count 4] [--idle 0,1,5,20,100]
 */
import { parseArgs } from 'node:util';
import { chooseVulkanDriver } from './vulkan';
import { create, globals } from 'webgpu';
import { builtinShaders } from '../src/index';
import { grid } from './scenarios/common';

const BU = { MAP_READ: 1, MAP_WRITE: 2, COPY_SRC: 4, COPY_DST: 8, STORAGE: 128, QUERY_RESOLVE: 512 };

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      elements: { type: 'string', default: String(1 << 22) },
      iterations: { type: 'string', default: '3000' },
      count: { type: 'string', default: '4' },
      idle: { type: 'string', default: '0,1,5,20,100' },
      repeats: { type: 'string', default: '4' },
      busy: { type: 'string', default: 'no' },
    },
  });
  const g = globalThis as Record<string, unknown>;
  for (const [k, v] of Object.entries(globals as Record<string, unknown>)) if (!(k in g)) g[k] = v;
  console.log(`vulkan: ${chooseVulkanDriver()}`);
  const gpu = create(['disable-dawn-features=timestamp_quantization']);
  // Keep the native instance alive while the device is in use (collecting it crashes the process).
  (globalThis as Record<string, unknown>)['__diagGpu'] = gpu;
  const adapter = await gpu.requestAdapter();
  if (!adapter) throw new Error('no adapter');
  const device = await adapter.requestDevice({ requiredFeatures: adapter.features.has('timestamp-query') ? ['timestamp-query'] : [] });
  const ts = device.features.has('timestamp-query');
  const n = Number(values.elements);
  const count = Number(values.count);
  const module = device.createShaderModule({ code: builtinShaders.computeIntensive });
  const pipeline = device.createComputePipeline({ layout: 'auto', compute: { module, entryPoint: 'main', constants: { iterations: Number(values.iterations) } } });
  const din = device.createBuffer({ size: n * 4, usage: BU.STORAGE | BU.COPY_DST });
  const douts = Array.from({ length: count }, () => device.createBuffer({ size: n * 4, usage: BU.STORAGE | BU.COPY_SRC }));
  const rbs = Array.from({ length: count }, () => device.createBuffer({ size: 256, usage: BU.MAP_READ | BU.COPY_DST }));
  const binds = douts.map((dout) => device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: [{ binding: 0, resource: { buffer: din } }, { binding: 1, resource: { buffer: dout } }] }));
  const qs = ts ? device.createQuerySet({ type: 'timestamp', count: 2 * count }) : null;
  const resolve = device.createBuffer({ size: 16 * count, usage: BU.QUERY_RESOLVE | BU.COPY_SRC });
  const tsRb = device.createBuffer({ size: 16 * count, usage: BU.MAP_READ | BU.COPY_DST });
  const [gx, gy] = grid(n, 'computeIntensive');

  const once = async (idleMs: number): Promise<string> => {
    if (idleMs > 0) {
      if (values.busy === 'yes') {
        const t = performance.now();
        while (performance.now() - t < idleMs);
      } else await new Promise((r) => setTimeout(r, idleMs));
    }
    const t0 = performance.now();
    const seen: number[] = [];
    const maps: Promise<void>[] = [];
    for (let k = 0; k < count; k++) {
      const enc = device.createCommandEncoder();
      const pass = enc.beginComputePass(qs ? { timestampWrites: { querySet: qs, beginningOfPassWriteIndex: 2 * k, endOfPassWriteIndex: 2 * k + 1 } } : {});
      pass.setPipeline(pipeline);
      pass.setBindGroup(0, binds[k]!);
      pass.dispatchWorkgroups(gx, gy);
      pass.end();
      enc.copyBufferToBuffer(douts[k]!, 0, rbs[k]!, 0, 256);
      device.queue.submit([enc.finish()]);
      maps.push(rbs[k]!.mapAsync(1).then(() => void (seen[k] = performance.now() - t0)));
    }
    const tSubmitted = performance.now() - t0;
    await Promise.all(maps);
    for (const rb of rbs) rb.unmap();
    let gpuText = '';
    if (qs) {
      const enc = device.createCommandEncoder();
      enc.resolveQuerySet(qs, 0, 2 * count, resolve, 0);
      enc.copyBufferToBuffer(resolve, 0, tsRb, 0, 16 * count);
      device.queue.submit([enc.finish()]);
      await tsRb.mapAsync(1);
      const t = new BigUint64Array(tsRb.getMappedRange().slice(0));
      tsRb.unmap();
      const b0 = t[0]!;
      const rel = (x: bigint): string => (Number(x - b0) / 1e6).toFixed(3);
      gpuText = `GPU (ms from chunk 0 begin) ${Array.from({ length: count }, (_, k) => `[${rel(t[2 * k]!)}, ${rel(t[2 * k + 1]!)}]`).join(' ')}`;
    }
    return `idle ${String(idleMs).padStart(3)} ms: submitted ${tSubmitted.toFixed(3)}, maps resolved at ${seen.map((x) => x.toFixed(3)).join(', ')} ms; ${gpuText}`;
  };
  console.log(`elements ${n}, iterations ${values.iterations}, ${count} submits, idle by ${values.busy === 'yes' ? 'busy-wait' : 'setTimeout'}`);
  await once(0);
  await once(0);
  for (let r = 0; r < Number(values.repeats); r++) {
    for (const idle of values.idle!.split(',').map(Number)) console.log(await once(idle));
  }
  device.destroy();
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
