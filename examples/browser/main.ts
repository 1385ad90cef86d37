// `npm run example:browser`: the two-stream pipeline in a page (Chrome 113+; serve it from localhost
// or https). The result lands in <pre id="out"> and in `window.exampleResult`.
import { createContext, workgroupsFor } from 'webgpu-streams';

async function main(): Promise<string> {
  const ctx = await createContext({ trace: true, sanitize: 'throw' }); // the sanitizer: a missing wait throws at its line
  const n = 1 << 20;
  const a = Float32Array.from({ length: n }, () => Math.random());
  const b = Float32Array.from({ length: n }, () => Math.random());
  const load = ctx.createStream({ label: 'load' });
  const compute = ctx.createStream({ label: 'compute', priority: -1 });
  const da = ctx.alloc(n * 4), db = ctx.alloc(n * 4), out = ctx.alloc(n * 4);
  const loaded = ctx.createEvent();
  load.upload(a, da);
  load.upload(b, db);
  load.record(loaded);
  compute.waitEvent(loaded);
  compute.launch(ctx.kernels.vectorAdd, { bindings: [da, db, out], workgroups: workgroupsFor(n, 256) });
  const result = new Float32Array(n);
  compute.download(out, result);
  await compute.synchronize();
  const bad = result.findIndex((x, i) => x !== Math.fround(a[i]! + b[i]!));
  const spans = ctx.trace.spans().length;
  ctx.destroy();
  return bad < 0 ? `ok: ${n} sums match the CPU (${spans} trace spans on ${ctx.adapterInfo.vendor || 'this adapter'})` : `MISMATCH at ${bad}`;
}

const show = (text: string): void => {
  (window as { exampleResult?: string }).exampleResult = text;
  document.getElementById('out')!.textContent = text;
};
main().then(show, (e: unknown) => show(`error: ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}`));
