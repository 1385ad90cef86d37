// Which GPU did each context land on? Opens a device per tagged adapter ('[vk0]', '[vk1]', ...),
// makes it hold (k + 1) GiB, and prints nvidia-smi's memory per GPU: run from the project root
// with the layer on and DEVSEL_TAG=1 (docs/MULTI_GPU.md). NGPU: how many (default 2).
import { create, globals } from 'webgpu';
import { execSync } from 'node:child_process';
Object.assign(globalThis, globals);
const held = [];
for (let k = 0; k < Number(process.env.NGPU ?? 2); k++) {
  const adapter = await create([`adapter=[vk${k}]`]).requestAdapter();
  if (!adapter) {
    console.log(`[vk${k}]: no adapter`);
    continue;
  }
  const device = await adapter.requestDevice();
  for (let j = 0; j < 4 * (k + 1); j++) {
    const b = device.createBuffer({ size: 256 << 20, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST });
    device.queue.writeBuffer(b, 0, new Uint8Array(1 << 20));
  }
  await device.queue.onSubmittedWorkDone();
  console.log(`[vk${k}]: ${adapter.info.device} (${adapter.info.description}), holding ${k + 1} GiB`);
  held.push(device);
}
try {
  console.log(execSync('nvidia-smi --query-gpu=index,pci.bus_id,name,memory.used --format=csv').toString());
} catch (e) {
  console.log(`nvidia-smi: ${e.message}`);
}
for (const d of held) d.destroy();
