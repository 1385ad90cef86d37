import { create, globals } from 'webgpu';
Object.assign(globalThis, globals);
const gpu = create([]);
const adapter = (await gpu.requestAdapter())!;
const device = await adapter.requestDevice();
const K = 3000;
const time = (name: string, f: () => void): void => {
  for (let r = 0; r < 2; r++) {
    const t = performance.now();
    for (let i = 0; i < K; i++) f();
    if (r) console.log(name, (((performance.now() - t) * 1000) / K).toFixed(2), 'us');
  }
};
time('createCommandEncoder()', () => device.createCommandEncoder().finish());
time('createCommandEncoder({label})', () => device.createCommandEncoder({ label: 'webgpu-streams batch' }).finish());
const enc = device.createCommandEncoder();
time('beginComputePass().end()', () => enc.beginComputePass().end());
const enc2 = device.createCommandEncoder();
time('beginComputePass({label}).end()', () => enc2.beginComputePass({ label: 'compute_intensive' }).end());
time('push+popErrorScope', () => { device.pushErrorScope('validation'); void device.popErrorScope(); });
time('onSubmittedWorkDone', () => void device.queue.onSubmittedWorkDone());
time('empty submit', () => device.queue.submit([device.createCommandEncoder().finish()]));
await device.queue.onSubmittedWorkDone();
device.destroy();
