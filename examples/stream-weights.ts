import { workgroupsFor, type Context } from 'webgpu-streams';

/** x <- x + w[i] per layer, weights streamed through two reused device slots (a load stream, a compute stream, events). */
export async function streamWeights(ctx: Context, input: Float32Array, weights: Float32Array[]): Promise<Float32Array> {
  const bytes = input.byteLength, groups = workgroupsFor(input.length, 256);
  const load = ctx.createStream({ label: 'load' }), compute = ctx.createStream({ label: 'compute' });
  const slots = [ctx.alloc(bytes, { label: 'weights[0]' }), ctx.alloc(bytes, { label: 'weights[1]' })];
  const act = [ctx.alloc(bytes, { label: 'act[0]' }), ctx.alloc(bytes, { label: 'act[1]' })];
  const loaded = weights.map(() => ctx.createEvent()), freed = [ctx.createEvent(), ctx.createEvent()];
  compute.upload(input, act[0]!);
  weights.forEach((w, i) => {
    const s = i % 2;
    if (i >= 2) load.waitEvent(freed[s]!); // layer i-2, the last to read this slot, is done
    load.upload(w, slots[s]!); // layer i+1's weights load while layer i computes
    loaded[i]!.record(load);
    compute.waitEvent(loaded[i]!);
    compute.launch(ctx.kernels.vectorAdd, { bindings: [act[i % 2]!, slots[s]!, act[(i + 1) % 2]!], workgroups: groups });
    freed[s]!.record(compute);
  });
  const out = new Float32Array(input.length);
  compute.download(act[weights.length % 2]!, out);
  [...slots, ...act].forEach((b) => b.destroy()); // freed once the streams are done with them
  await compute.synchronize();
  return out;
}

// `npm run example -- stream-weights`: 8 layers of random weights through two slots, checked on the CPU.
if (/stream-weights\.m?[jt]s$/.test(globalThis.process?.argv?.[1] ?? '')) {
  const { createNodeContext } = await import('webgpu-streams/node');
  const ctx = await createNodeContext();
  const n = 1 << 16, random = (): Float32Array => Float32Array.from({ length: n }, () => Math.random() * 2 - 1);
  const input = random(), weights = Array.from({ length: 8 }, random);
  const out = await streamWeights(ctx, input, weights);
  const want = weights.reduce((x, w) => x.map((v, i) => Math.fround(v + w[i]!)), input);
  console.log(out.every((v, i) => v === want[i]) ? `stream-weights: ok, 8 layers through 2 slots (peak ${ctx.memory.peak / 1024} KiB of device memory)` : 'stream-weights: MISMATCH');
  ctx.destroy();
}
