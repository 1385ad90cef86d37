/**
 * `npm run bench:node`: the benchmark suite on Dawn (the `webgpu` npm package), no browser.
 *
 * Built into one ESM file (dist/cli/bench-node.mjs) whose only runtime import besides node:
 * builtins is `webgpu`, so it runs on a GPU machine without npm: `source .gpu/env.sh && node
 * dist/cli/bench-node.mjs` (see ../shared/gpu/README.md).
 *
 * Without a Vulkan driver choice in the environment and with no NVIDIA driver installed, it uses
 * SwiftShader's Vulkan driver from Debian's chromium package. Prints a progress line per scenario,
 * the table and verdicts, writes `<out>/<date>-<adapter>-node.json` and `...-trace.json`, and exits
 * 1 when a scenario fails its check (2 on bad usage).
 */
import { createNodeContext } from 'webgpu-streams/node';
import { chooseVulkanDriver } from './vulkan';
import { deviceReport } from './device';
import { describeDevice, formatReport, isSoftwareDevice, runPassed, validateSuiteResult, SOFTWARE_WARNING } from './report';
import { gitCommit, hostCopyNote, parseCliArgs, runRunner, usage, writeResultFiles, type CliOptions } from './cli';
import type { SuiteResult } from './schema';
import { runSuite } from './suite';
import { nodeWeightsStorage } from './weights-file';
import { firstGpu, nodeSecondGpu } from './second-gpu';

export { chooseVulkanDriver, hasNvidiaIcd, SWIFTSHADER_ICD } from './vulkan';

const elapsed = (t0: number) => `${((performance.now() - t0) / 1000).toFixed(1).padStart(6)}s`;

export async function main(argv: string[]): Promise<number> {
  let opts: CliOptions;
  try {
    opts = parseCliArgs(argv);
    if (opts.gpu) throw new TypeError('`--gpu` is for the Chromium runner (npm run bench); Dawn uses the GPU it finds');
    if (opts.page) throw new TypeError('`--page` is for the Chromium runner (npm run bench)');
    if (opts.mock) throw new TypeError('`--mock` is for the Chromium runner (npm run bench)');
  } catch (e) {
    console.error(`bench:node: ${(e as Error).message}\n\n${usage('npm run bench:node --', 'node')}`);
    return 2;
  }
  if (opts.help) {
    console.log(usage('npm run bench:node --', 'node'));
    return 0;
  }
  const t0 = performance.now();
  const driver = chooseVulkanDriver();
  const copies = hostCopyNote();
  console.log(`bench:node: Node ${process.version}, Vulkan: ${driver}${copies ? `; host copies: ${copies}` : ''}`);

  let timer: NodeJS.Timeout | undefined;
  if (opts.timeoutMin !== undefined) {
    const ms = opts.timeoutMin * 60_000;
    timer = setTimeout(() => {
      console.error(`\nbench:node: FAILED: no result after ${opts.timeoutMin} min`);
      process.exit(1);
    }, ms);
    timer.unref();
  }

  const ctx = await createNodeContext({ trace: true, ...firstGpu(), ...(opts.sanitize ? { sanitize: 'warn' as const } : {}) });
  try {
    const device = await deviceReport(ctx, 'node');
    console.log(`bench:node: adapter: ${describeDevice(device)}`);
    if (isSoftwareDevice(device)) console.warn(`bench:node: ${SOFTWARE_WARNING}`);

    let last = '';
    const suite = await runSuite(ctx, {
      quick: opts.quick,
      sanitize: opts.sanitize,
      storage: nodeWeightsStorage,
      secondGpu: nodeSecondGpu('second', true),
      ...(opts.scenarios ? { only: opts.scenarios } : {}),
      progress: (message, fraction) => {
        const line = `${fraction === undefined ? '' : `${Math.round(fraction * 100)}% `.padStart(5)}${message}`;
        if (line === last) return;
        last = line;
        console.log(`${elapsed(t0)} [bench] ${line}`);
      },
    });
    const result: SuiteResult = {
      ...suite,
      commit: suite.commit ?? gitCommit(),
      device: {
        ...device,
        ...suite.device,
        runner: 'node',
        notes: { ...device.notes, ...suite.device?.notes, node: process.version, vulkan: driver, ...(copies ? { hostCopies: copies } : {}) },
      },
    };
    const problems = validateSuiteResult(result);
    const files = writeResultFiles(result, opts.out);
    console.log(formatReport(result, files, problems));
    console.log(`bench:node: done in ${elapsed(t0).trim()}`);
    return runPassed(result, problems) ? 0 : 1;
  } finally {
    clearTimeout(timer);
    ctx.destroy();
  }
}

// weights-storage reads its file 16 at a time, host copies are of a few MiB: run again with the environment for them.
runRunner('bench:node', main);
