import { createNodeContext } from '../../src/node';

const ctx = await createNodeContext({ label: 'heap' });
const src = ctx.alloc(1 << 20);
const dst = ctx.alloc(1 << 24);
const streams = [0, 1, 2, 3].map((i) => ctx.createStream({ label: `s${i}`, nonBlocking: true }));
const gc = (globalThis as { gc?: () => void }).gc!;
for (let round = 0; round < 3; round++) {
  const N = 50_000;
  await ctx.synchronize();
  gc();
  const h0 = process.memoryUsage().heapUsed;
  const t0 = performance.now();
  for (let i = 0; i < N; i++) streams[i % 4]!.copy(src, dst, { srcOffset: (i % 4096) * 256, dstOffset: (i % 65536) * 256, size: 256 });
  const t1 = performance.now();
  const h1 = process.memoryUsage().heapUsed;
  ctx.flush();
  const t2 = performance.now();
  await ctx.synchronize();
  const t3 = performance.now();
  console.log(`round ${round}: heap per queued op ${((h1 - h0) / N).toFixed(0)} B; enqueue ${(((t1 - t0) * 1000) / N).toFixed(2)} us/op, flush ${(((t2 - t1) * 1000) / N).toFixed(2)}, completion ${(((t3 - t2) * 1000) / N).toFixed(2)}`);
}
ctx.destroy();
