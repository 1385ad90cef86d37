import { writeHeapSnapshot } from 'node:v8';
import { createNodeContext } from '../../src/node';

const ctx = await createNodeContext({ label: 'heap' });
const src = ctx.alloc(1 << 20);
const dst = ctx.alloc(1 << 24);
const streams = [0, 1, 2, 3].map((i) => ctx.createStream({ label: `s${i}`, nonBlocking: true }));
for (let i = 0; i < 1000; i++) streams[i % 4]!.copy(src, dst, { srcOffset: (i % 4096) * 256, dstOffset: (i % 65536) * 256, size: 256 });
await ctx.synchronize();
const N = 20_000;
for (let i = 0; i < N; i++) streams[i % 4]!.copy(src, dst, { srcOffset: (i % 4096) * 256, dstOffset: (i % 65536) * 256, size: 256 });
writeHeapSnapshot('/tmp/ops.heapsnapshot');
await ctx.synchronize();
ctx.destroy();
