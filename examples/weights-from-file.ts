import { createNodeContext, openFile } from 'webgpu-streams/node';
import { encodeSafetensors, SafetensorsFile, SlotRing, workgroupsFor, type Context } from 'webgpu-streams';

/** x <- x + layer i's weights, for every layer of a safetensors file, through two device slots: layer i+1 loads while layer i computes. */
export async function runLayers(ctx: Context, path: string, input: Float32Array): Promise<Float32Array> {
  const file = await openFile(path);
  const st = await SafetensorsFile.open(file);
  const bytes = input.byteLength, groups = workgroupsFor(input.length, 256);
  const load = ctx.createStream({ label: 'load' }), compute = ctx.createStream({ label: 'compute' });
  const slots = new SlotRing(ctx, { bytes, count: 2, producer: load, consumer: compute }); // slot i % 2: refilled once layer i - 2 read it
  const act = [ctx.alloc(bytes, { label: 'act0' }), ctx.alloc(bytes, { label: 'act1' })];
  compute.upload(input, act[0]!);
  let i = 0;
  for (; st.layer(i).length > 0; i++) {
    slots.fill((slot) => load.uploadFrom(file, slot, st.span(st.layer(i)))); // from the file, through the staging ring
    slots.use((slot) => compute.launch(ctx.kernels.vectorAdd, { bindings: [act[i % 2]!, slot, act[(i + 1) % 2]!], workgroups: groups }));
  }
  const out = new Float32Array(input.length);
  compute.download(act[i % 2]!, out);
  await compute.synchronize();
  slots.destroy();
  act.forEach((b) => b.destroy());
  await file.close();
  return out;
}

// `npm run example -- weights-from-file`: writes a 16-layer safetensors file, runs it, checks it on the CPU, removes the file.
if (/weights-from-file\.m?[jt]s$/.test(globalThis.process?.argv?.[1] ?? '')) {
  const { writeFileSync, mkdtempSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const n = 1 << 18, layers = Array.from({ length: 16 }, () => Float32Array.from({ length: n }, () => Math.random() * 2 - 1));
  const dir = mkdtempSync(`${tmpdir()}/weights-`), path = `${dir}/model.safetensors`;
  try {
    writeFileSync(path, encodeSafetensors(layers.map((w, i) => ({ name: `layers.${i}.weight`, dtype: 'F32', shape: [n], data: new Uint8Array(w.buffer) }))));
    const ctx = await createNodeContext();
    const input = Float32Array.from({ length: n }, () => Math.random());
    const out = await runLayers(ctx, path, input);
    const want = layers.reduce((x, w) => x.map((v, k) => Math.fround(v + w[k]!)), input);
    console.log(out.every((v, k) => v === want[k]) ? `weights-from-file: ok, 16 layers of ${n * 4 / 1024} KiB from the file through 2 slots (device peak ${ctx.memory.peak / 1024} KiB)` : 'weights-from-file: MISMATCH');
    ctx.destroy();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
