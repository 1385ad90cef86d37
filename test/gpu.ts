/**
 * Test fixture: a real WebGPU context on Dawn (SwiftShader's Vulkan driver when there is no GPU),
 * every GPU error captured, and cleanup of what a test made.
 */
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, expect } from 'vitest';
import { globals } from 'webgpu';
import { createNodeContext, type Context, type ContextOptions } from '../src/node.js';

const SWIFTSHADER = '/usr/lib/chromium/vk_swiftshader_icd.json';
if (!process.env.VK_ICD_FILENAMES && existsSync(SWIFTSHADER)) process.env.VK_ICD_FILENAMES = SWIFTSHADER;
// WebGPU's globals (GPUBufferUsage, GPUMapMode, ...), as in a browser, from the start of a test file.
for (const [k, v] of Object.entries(globals as Record<string, unknown>)) if (!(k in globalThis)) (globalThis as Record<string, unknown>)[k] = v;

/** A fresh context with an uncaptured-error trap; `errors` collects anything WebGPU reported. */
export async function gpuContext(options: Omit<ContextOptions, 'gpu' | 'device' | 'keepAlive'> = {}): Promise<Context & { errors: string[] }> {
  const ctx = (await createNodeContext(options)) as Context & { errors: string[] };
  ctx.errors = [];
  ctx.device.addEventListener('uncapturederror', (e) => ctx.errors.push((e as GPUUncapturedErrorEvent).error.message));
  return ctx;
}

/** A context made for each test file that uses it: `set` receives it before the tests; after them, no uncaptured error may have happened, and it is destroyed. */
export function useGpuContext(set: (ctx: Context & { errors: string[] }) => void, options: Parameters<typeof gpuContext>[0] = {}): void {
  let ctx: (Context & { errors: string[] }) | undefined;
  beforeAll(async () => set((ctx = await gpuContext(options))));
  afterAll(() => {
    expect(ctx?.errors).toEqual([]);
    ctx?.destroy();
  });
}

export { rng, randomSeed, firstMismatch, vectorAddRef, sleepRef } from '../bench/reference.js';
