import { createNodeContext } from 'webgpu-streams/node';   // browser: import { createContext } from 'webgpu-streams'
import { workgroupsFor } from 'webgpu-streams';

const ctx = await createNodeContext();
const n = 1 << 20, a = new Float32Array(n).fill(1), b = new Float32Array(n).fill(2);
const load = ctx.createStream({ label: 'load' });
const compute = ctx.createStream({ label: 'compute', priority: -1 });
const da = ctx.alloc(n * 4), db = ctx.alloc(n * 4), out = ctx.alloc(n * 4);
const loaded = ctx.createEvent();
load.upload(a, da);                        // pageable: copied into staging now, sent on the GPU later
load.upload(b, db);
load.record(loaded);
compute.waitEvent(loaded);                 // costs nothing on the GPU: queue order does it
compute.launch(ctx.kernels.vectorAdd, { bindings: [da, db, out], workgroups: workgroupsFor(n, 256) });
const result = new Float32Array(n);
compute.download(out, result);
await compute.synchronize();
console.log(result.every((x) => x === 3) ? 'two-streams: ok, every result[i] === a[i] + b[i]' : 'two-streams: MISMATCH');
ctx.destroy();
