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
    load.waitEvent(freed[s]!); // the last layer that read this slot is done (no-op for the first two)
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
