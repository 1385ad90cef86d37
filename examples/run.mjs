// `npm run example -- <name>`: bundles examples/<name>.ts (it imports the library by its package
// name, resolved to the sources) and runs it in Node on Dawn. Without a name, lists the examples.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const names = readdirSync(new URL('.', import.meta.url)).filter((f) => f.endsWith('.ts')).map((f) => f.slice(0, -3));
const name = process.argv[2];
const browser = { browser: 'npm run example:browser', textures: 'npm run example:textures' };
if (!name || !names.includes(name)) {
  if (name in browser) console.error(`examples/${name} runs in a browser: ${browser[name]} (a page served by Vite)`);
  console.error(`usage: npm run example -- <name>\nexamples: ${names.join(', ')}; in a browser: ${Object.values(browser).join(', ')}`);
  process.exit(name ? 2 : 0);
}
const swiftshader = '/usr/lib/chromium/vk_swiftshader_icd.json';
const env = { ...process.env };
// No GPU driver chosen and none installed: SwiftShader's Vulkan driver, as the tests use.
if (!env.VK_ICD_FILENAMES && !env.VK_DRIVER_FILES && !existsSync('/usr/share/vulkan/icd.d/nvidia_icd.json') && existsSync(swiftshader)) env.VK_ICD_FILENAMES = swiftshader;
// Without a runtime directory the Vulkan loader and SwiftShader print "XDG_RUNTIME_DIR is invalid" (as bench/runtime-dir.ts).
if (!env.XDG_RUNTIME_DIR && process.platform === 'linux') {
  env.XDG_RUNTIME_DIR = join(tmpdir(), `webgpu-streams-runtime-${process.getuid?.() ?? 0}`);
  mkdirSync(env.XDG_RUNTIME_DIR, { recursive: true, mode: 0o700 });
}
// openFile reads as many at once as libuv's pool has threads (4 unless set before Node starts), up to 16.
if (!env.UV_THREADPOOL_SIZE) env.UV_THREADPOOL_SIZE = '16';
const run = (cmd, args) => spawnSync(cmd, args, { stdio: 'inherit', env }).status ?? 1;
const built = run('npx', ['vite', 'build', '--mode', `example-${name}`, '--logLevel', 'warn']);
if (built !== 0) process.exit(built);
// An example prints MISMATCH when its results are wrong: that fails the run too.
const ran = spawnSync(process.execPath, ['--enable-source-maps', `dist/examples/${name}.mjs`], { stdio: ['inherit', 'pipe', 'inherit'], env });
process.stdout.write(ran.stdout ?? '');
const status = ran.status ?? 1;
process.exitCode = status !== 0 ? status : /MISMATCH/.test(String(ran.stdout)) ? 1 : 0; // not exit(): stdout may still be flushing into a pipe
