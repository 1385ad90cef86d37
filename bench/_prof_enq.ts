import { createNodeContext } from '../src/node';
import { grid } from './scenarios/common';
const ctx = await createNodeContext({ label: 'prof' });
const n = Number(process.env.N ?? 1024);
const ring = 4;
const slots = Array.from({ length: ring }, (_, r) => ({
  s: ctx.createStream({ label: `s${r}`, nonBlocking: true }),
  up: ctx.allocHost(n * 4, 'upload'),
  down: ctx.allocHost(n * 4, 'download'),
  din: ctx.alloc(n * 4),
  dout: ctx.alloc(n * 4),
}));
const ci = ctx.kernels.computeIntensive;
const g = grid(n, 'computeIntensive');
const t = { up: 0, launch: 0, down: 0, flush: 0, ready: 0 };
const C = Number(process.env.C ?? 400);
for (let round = 0; round < 3; round++) {
  for (const k of Object.keys(t)) (t as Record<string, number>)[k] = 0;
  for (let k = 0; k < C; k++) {
    const sl = slots[k % ring]!;
    let a = performance.now();
    await sl.up.ready();
    await sl.down.ready();
    let b = performance.now();
    t.ready += b - a;
    sl.s.upload(sl.up, sl.din, { size: n * 4 });
    a = performance.now(); t.up += a - b;
    sl.s.launch(ci, { bindings: [sl.din, sl.dout], workgroups: g, constants: { iterations: 1 } });
    b = performance.now(); t.launch += b - a;
    sl.s.download(sl.dout, sl.down, { size: n * 4 });
    a = performance.now(); t.down += a - b;
    ctx.flush();
    b = performance.now(); t.flush += b - a;
  }
  await ctx.synchronize();
  console.log(Object.entries(t).map(([k, v]) => `${k} ${((v * 1000) / C).toFixed(1)} us`).join(', '));
}
ctx.destroy();
