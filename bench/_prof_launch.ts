import { createNodeContext } from '../src/node';
for (const captureStacks of [true, false] as const) {
  const ctx = await createNodeContext({ label: 'prof', captureStacks });
  const s = ctx.createStream({ nonBlocking: true });
  const a = ctx.alloc(4096), b = ctx.alloc(4096);
  const up = ctx.allocHost(4096, 'upload'), down = ctx.allocHost(4096, 'download');
  const ci = ctx.kernels.computeIntensive;
  const K = 2000;
  for (let round = 0; round < 3; round++) {
    let t = performance.now();
    for (let i = 0; i < K; i++) s.launch(ci, { bindings: [a, b], workgroups: [4, 1], constants: { iterations: 1 } });
    const tl = (performance.now() - t) * 1000 / K;
    t = performance.now(); ctx.flush(); const tf = (performance.now() - t) * 1000 / K;
    await s.synchronize();
    t = performance.now();
    for (let i = 0; i < K; i++) s.copy(a, b);
    const tc = (performance.now() - t) * 1000 / K;
    await s.synchronize();
    t = performance.now();
    for (let i = 0; i < 200; i++) { await up.ready(); s.upload(up, a); }
    const tu = (performance.now() - t) * 1000 / 200;
    await s.synchronize();
    console.log(`captureStacks ${captureStacks}: launch ${tl.toFixed(2)} us, flush ${tf.toFixed(2)} us/op, copy ${tc.toFixed(2)} us, upload-pinned incl ready+roundtrip ${tu.toFixed(1)} us`);
  }
  ctx.destroy();
}
