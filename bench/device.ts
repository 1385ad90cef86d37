/**
 * What ran the benchmark: adapter identity, whether it is a software rasterizer, and the runtime.
 */
import type { DeviceReport } from './schema';
import type { Context } from 'webgpu-streams';

/** True when the adapter is SwiftShader (Chromium's CPU implementation of Vulkan/WebGPU). */
export function isSoftwareAdapter(info: {
  vendor?: string;
  architecture?: string;
  device?: string;
  description?: string;
}): boolean {
  const vendor = (info.vendor ?? '').toLowerCase();
  const architecture = (info.architecture ?? '').toLowerCase();
  const description = (info.description ?? '').toLowerCase();
  return vendor === 'google' || architecture === 'swiftshader' || description.includes('swiftshader');
}

/**
 * The {@link DeviceReport} for a context: adapter vendor, architecture and description, whether it
 * is SwiftShader, the user agent (browser, or `Node.js/<version>`), timestamp-query support.
 */
export function deviceReport(ctx: Context, runner: DeviceReport['runner']): DeviceReport {
  const info = ctx.adapterInfo;
  const notes: Record<string, string> = {};
  // Dawn's SwiftShader name ends in a hyphen ('swiftshader-device-subzero-').
  const device = String(info.device ?? '').replace(/[-_\s]+$/, '');
  if (device) notes.device = device;
  const g = globalThis as {
    navigator?: { userAgent?: string; hardwareConcurrency?: number };
    process?: { versions?: Record<string, string | undefined>; platform?: string; arch?: string };
  };
  const hw = g.navigator?.hardwareConcurrency;
  if (typeof hw === 'number') notes.cpuThreads = String(hw);
  let userAgent = g.navigator?.userAgent ?? '';
  const node = g.process?.versions?.node;
  if (node) {
    if (!userAgent) userAgent = `Node.js/${node}`;
    notes.node = node;
    if (g.process?.platform) notes.platform = `${g.process.platform}-${g.process.arch ?? ''}`;
  }
  return {
    runner,
    vendor: String(info.vendor ?? ''),
    architecture: String(info.architecture ?? ''),
    description: String(info.description ?? ''),
    software: isSoftwareAdapter(info),
    userAgent,
    timestampQuery: ctx.features.timestampQuery,
    ...(Object.keys(notes).length ? { notes } : {}),
  };
}
