/**
 * Run with Dawn's `webgpu` package missing: importing 'webgpu-streams/node' still works, and
 * createNodeContext rejects with WebGpuUnavailableError saying what to install.
 */
import { createNodeContext, WebGpuUnavailableError } from 'webgpu-streams/node';

try {
  (await createNodeContext()).destroy();
  console.log(JSON.stringify({ ok: false, message: 'createNodeContext() resolved without the webgpu package' }));
} catch (e) {
  const ok = e instanceof WebGpuUnavailableError && e.message.includes('npm i webgpu');
  console.log(JSON.stringify({ ok, message: e instanceof Error ? `${e.name}: ${e.message}` : String(e) }));
}
