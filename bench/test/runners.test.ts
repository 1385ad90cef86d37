/**
 * The runners as a newcomer starts them, through their npm scripts: a bad `--scenarios` is bad
 * usage (exit 2, one line naming the flag and the ids, no stack) and the scripts' builds print
 * nothing; the soak starts Node again with a runtime directory, so the Vulkan loader does not
 * complain in a shell without XDG_RUNTIME_DIR; bench:perf's scratch file goes on SIGTERM and
 * SIGINT, and the process ends with the shell's status for the signal.
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { scenarioIds } from '../suite';
import { root, runCommand } from '../../test/e2e/util';

/** The environment of a newcomer's shell: no XDG_RUNTIME_DIR (the test run sets one). */
function shellEnv(): NodeJS.ProcessEnv {
  const { XDG_RUNTIME_DIR: _x, ...env } = process.env;
  return env;
}

const npm = (script: string, args: string[]) =>
  runCommand('npm', ['run', '--silent', script, '--', ...args], { cwd: root, env: shellEnv(), timeoutMs: 180_000 });

describe('npm scripts', () => {
  it('build the runners with --logLevel warn (no Vite build log)', () => {
    const scripts = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
    for (const name of ['bench', 'bench:node', 'bench:perf', 'soak']) {
      const builds = scripts[name]!.split('&&').filter((c) => /\bvite build\b/.test(c));
      expect(builds.length, name).toBeGreaterThan(0);
      for (const b of builds) expect(b, name).toMatch(/--logLevel warn/);
    }
  });

  it.each([
    ['bench:node', 'bench:node'],
    ['bench', 'bench'],
  ])('npm run %s -- --scenarios nope: exit 2, one line naming --scenarios and the ids, no stack', async (script, tag) => {
    const r = await npm(script, ['--scenarios', 'overlap-probe,nope']);
    const lines = r.output.split('\n');
    expect(r.code, r.output).toBe(2);
    expect(lines[0], r.output).toBe(`${tag}: Expected \`--scenarios\` to name scenarios among ${scenarioIds.join(', ')}, got \`nope\``);
    expect(r.output, 'a stack or an error name').not.toMatch(/^\s+at |TypeError|FAILED/m);
    expect(r.output.match(/Expected `--scenarios`/g), 'said once').toHaveLength(1);
    expect(r.output, 'the build printed its log').not.toMatch(/vite v\d|built in|transforming/);
    // The usage that follows lists every scenario of the registry.
    for (const id of scenarioIds) expect(lines.slice(1).join('\n')).toContain(id);
  }, 200_000);
});

describe('npm run soak in a shell without XDG_RUNTIME_DIR', () => {
  it('runs without the Vulkan loader\'s "XDG_RUNTIME_DIR is invalid or not set"', async () => {
    const r = await npm('soak', ['--ops', '2000', '--trace', 'off', '--every', '500']);
    expect(r.output, r.output).toMatch(/soak: PASS/);
    expect(r.output, 'the Vulkan loader complained').not.toMatch(/XDG_RUNTIME_DIR/);
    expect(r.code, r.output).toBe(0);
  }, 200_000);
});

describe("bench:perf's scratch file (P7) on a signal", () => {
  const bundle = join(root, 'dist/cli/bench-perf.mjs');
  beforeAll(async () => {
    const built = await runCommand('npx', ['vite', 'build', '--mode', 'cli-bench-perf', '--logLevel', 'warn'], { timeoutMs: 180_000 });
    if (built.code !== 0) throw new Error(`vite build --mode cli-bench-perf failed:\n${built.output}`);
  }, 200_000);

  it.each([
    ['SIGTERM', 143],
    ['SIGINT', 130],
  ] as const)('is removed on %s, and the process exits %i', async (signal, status) => {
    // The runner's own file probe, from the built runner: it writes the file, then waits as P7 would.
    const script = `import { nodeFileProbe } from ${JSON.stringify(bundle)};
      const path = await nodeFileProbe().write('test-weights.safetensors', [new Uint8Array(4096)]);
      console.log(path);
      setInterval(() => {}, 1000);`;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const path = await new Promise<string>((res, rej) => {
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        if (out.includes('\n')) res(out.split('\n')[0]!.trim());
      });
      child.on('exit', () => rej(new Error(`the probe ended early:\n${out}`)));
    });
    const ended = new Promise<[number | null, NodeJS.Signals | null]>((res) => child.on('exit', (code, sig) => res([code, sig])));
    expect(existsSync(path), path).toBe(true);
    child.kill(signal);
    const [code, sig] = await ended;
    expect(existsSync(path), `${path} is still there`).toBe(false);
    expect({ code, sig }, out).toEqual({ code: status, sig: null });
  }, 60_000);
});
