/**
 * Node entry point: a context on Dawn's `webgpu` package (`npm i webgpu`).
 *
 * ```ts
 * import { createNodeContext } from 'webgpu-streams/node';
 * const ctx = await createNodeContext();
 * ```
 * No GPU? SwiftShader's Vulkan driver works: `VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json`
 * (Debian's chromium package ships it). The native instance stays referenced by the context for its
 * whole life: when it is garbage-collected while a device is in use, the process crashes.
 */
import { create, globals } from 'webgpu';
import { createContext, type Context, type ContextOptions } from './context.js';

export interface NodeContextOptions extends Omit<ContextOptions, 'gpu' | 'keepAlive'> {
  /**
   * Dawn toggles for `create()`. @default ['disable-dawn-features=timestamp_quantization'] so GPU
   * timestamps are not rounded to 0.1 ms.
   */
  dawnToggles?: string[];
  /** Define WebGPU's globals (GPUBufferUsage, GPUMapMode, ...) when missing. @default true */
  installGlobals?: boolean;
}

export async function createNodeContext(options: NodeContextOptions = {}): Promise<Context> {
  const { dawnToggles = ['disable-dawn-features=timestamp_quantization'], installGlobals = true, ...rest } = options;
  if (installGlobals) {
    const g = globalThis as Record<string, unknown>;
    for (const [k, v] of Object.entries(globals as Record<string, unknown>)) if (!(k in g)) g[k] = v;
  }
  if (rest.device) return createContext(rest);
  const gpu = create(dawnToggles);
  return createContext({ ...rest, gpu, keepAlive: gpu });
}

export * from './index.js';
