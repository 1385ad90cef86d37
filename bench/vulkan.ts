/**
 * Which Vulkan driver Dawn gets in the Node runners (bench:node, bench:perf, the diagnostics):
 * what the environment chose, else an installed NVIDIA driver, else SwiftShader (Debian's chromium
 * package ships it), so the runners work on a machine without a GPU too.
 */
import { existsSync, readdirSync } from 'node:fs';

/** SwiftShader's Vulkan driver, shipped in Debian's chromium package. */
export const SWIFTSHADER_ICD = '/usr/lib/chromium/vk_swiftshader_icd.json';
const ICD_DIRS = ['/usr/share/vulkan/icd.d', '/etc/vulkan/icd.d', '/usr/local/share/vulkan/icd.d', '/usr/local/nvidia/share/vulkan/icd.d'];

/** True when an NVIDIA Vulkan driver manifest is installed in one of the loader's usual places. */
export function hasNvidiaIcd(): boolean {
  for (const dir of ICD_DIRS) {
    try {
      if (readdirSync(dir).some((f) => /nvidia/i.test(f) && f.endsWith('.json'))) return true;
    } catch {
      // no such directory
    }
  }
  return false;
}

/**
 * Points the Vulkan loader at SwiftShader when nothing chose a driver (VK_ICD_FILENAMES and
 * VK_DRIVER_FILES unset), SwiftShader is installed, and there is no NVIDIA driver to prefer.
 * Must run before the first `create()` of the webgpu package. Returns a note for the report.
 */
export function chooseVulkanDriver(env: NodeJS.ProcessEnv = process.env): string {
  const chosen = env['VK_ICD_FILENAMES'] ?? env['VK_DRIVER_FILES'];
  if (chosen) return `VK_ICD_FILENAMES/VK_DRIVER_FILES from the environment: ${chosen}`;
  if (hasNvidiaIcd()) return 'system Vulkan drivers (an NVIDIA driver is installed)';
  if (existsSync(SWIFTSHADER_ICD)) {
    env['VK_ICD_FILENAMES'] = SWIFTSHADER_ICD;
    return `SwiftShader (no GPU driver found; VK_ICD_FILENAMES set to ${SWIFTSHADER_ICD} for this run)`;
  }
  return 'system Vulkan drivers (no SwiftShader found at ' + SWIFTSHADER_ICD + ')';
}
