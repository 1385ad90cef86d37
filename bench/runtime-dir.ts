/**
 * $XDG_RUNTIME_DIR, or a private directory made for this user when it is unset: the Vulkan loader
 * and SwiftShader print "XDG_RUNTIME_DIR is invalid or not set" without one. Shared by the test run
 * (vite.config.ts) and the Node runners (cli.ts). Node builtins only.
 */
import { mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export function runtimeDir(): string {
  const given = process.env['XDG_RUNTIME_DIR'];
  if (given) return given;
  const dir = join(tmpdir(), `webgpu-streams-runtime-${process.getuid?.() ?? 0}`);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  return dir;
}
