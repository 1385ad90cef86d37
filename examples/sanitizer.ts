import { createNodeContext } from 'webgpu-streams/node';
import { StreamRaceError } from 'webgpu-streams';

const ctx = await createNodeContext({ sanitize: 'throw', captureStacks: 'all' });
const load = ctx.createStream({ label: 'load' }), compute = ctx.createStream({ label: 'compute' });
const [w, x, y] = ['weights', 'x', 'y'].map((label) => ctx.alloc(4096, { label }));
load.upload(new Float32Array(1024).fill(1), w!);
try {
  compute.launch(ctx.kernels.vectorAdd, { bindings: [x!, w!, y!], workgroups: 4 }); // no waitEvent: a race
} catch (e) {
  if (!(e instanceof StreamRaceError)) throw e;
  console.log(e.report.message);
}
ctx.destroy();
