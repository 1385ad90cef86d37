/**
 * `npm run bench:perf`: the performance metrics of issue 4 (P1..P8, growth tables) on Dawn (the
 * `webgpu` npm package). Prints every metric with its target and PASS / FALL SHORT, the growth
 * tables, and writes `<out>/<YYYY-MM-DD>-<adapter>-perf.json` with card, driver, date and commit.
 *
 * Built into dist/cli/bench-perf.mjs, whose only runtime imports are `webgpu` and node: builtins,
 * so it runs on a GPU machine without npm: `source .gpu/env.sh && node dist/cli/bench-perf.mjs`.
 * There is no git there: pass `--commit <sha>` (or PERF_COMMIT) to record the commit.
 *
 * Exit status: 0 when every figure was verified (targets missed are results, not failures),
 * 1 when an output did not match its reference or a group threw, 2 on bad usage.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { getHeapStatistics, setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { open } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { createNodeContext, openFile } from 'webgpu-streams/node';
import { firstGpu, nodeSecondGpu } from './second-gpu';
import { chooseVulkanDriver } from './vulkan';
import { hostCopyNote, parseFlags, runRunner } from './cli';
import { isSoftwareDevice, SOFTWARE_WARNING } from './report';
import { removeAtExit, removeScratch } from './weights-file';
import { formatPerf, perfSelectors, perfStem, runPerf, selectGroups, validatePerfResult, type PerfResult } from './perf';
import type { FileProbe, HeapProbe } from './perf/common';

/** P7's scratch files, in the OS temp directory (removed at exit, by a signal too, where P7 has not), and the process's memory. */
export function nodeFileProbe(): FileProbe {
  return {
    async write(name, pieces) {
      const path = join(tmpdir(), `webgpu-streams-${process.pid}-${name}`);
      removeAtExit(path);
      const fh = await open(path, 'w');
      try {
        for (const piece of pieces) await fh.write(piece);
      } finally {
        await fh.close();
      }
      return path;
    },
    open: (path, parallel) => openFile(path, { parallel }),
    readThreads: Number(process.env.UV_THREADPOOL_SIZE) || 4,
    remove: removeScratch,
    memory: () => {
      const m = process.memoryUsage();
      return { heap: m.heapUsed, external: m.external };
    },
  };
}

/** A full GC and the heap in use, for the retained-bytes column; undefined where V8 refuses. */
export function nodeHeapProbe(): HeapProbe | undefined {
  try {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as unknown;
    if (typeof gc !== 'function') return undefined;
    return { collect: () => (gc as () => void)(), used: () => getHeapStatistics().used_heap_size };
  } catch {
    return undefined;
  }
}


export interface PerfCliOptions {
  quick: boolean;
  only?: string[];
  out: string;
  timeoutMin?: number;
  seed?: number;
  commit?: string;
  help: boolean;
}

export const PERF_USAGE = [
  'usage: npm run bench:perf -- [--quick] [--only P1,P5,growth] [--out DIR] [--timeout MIN] [--seed N] [--commit SHA]',
  '',
  '  --quick          tiny sizes and few repeats (tests, CI; the numbers say little)',
  `  --only a,b       metrics or groups to run: ${perfSelectors().join(', ')}`,
  '  --out DIR        where to write the result JSON (default: bench-results)',
  '  --timeout MIN    give up after MIN minutes (default: none)',
  '  --seed N         seed of the random inputs (default: fresh, recorded in the result)',
  '  --commit SHA     commit to record (default: $PERF_COMMIT, else git rev-parse HEAD)',
  '',
  'P8 (two GPUs) opens its second context on the host\'s second GPU with the layer of docs/MULTI_GPU.md',
  'and DEVSEL_TAG=1; without them, on a second device of the same adapter (the result says which).',
  'On x86-64 glibc it starts Node with memcpy non-temporal from 1 MiB (GLIBC_TUNABLES; docs/PERFORMANCE.md);',
  'set GLIBC_TUNABLES yourself, even empty, to run as given.',
].join('\n');

/** Parses the flags; throws a TypeError naming the bad one. */
export function parsePerfArgs(argv: string[]): PerfCliOptions {
  const { values, positionals } = parseFlags({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: {
      quick: { type: 'boolean', default: false },
      only: { type: 'string' },
      out: { type: 'string', default: 'bench-results' },
      timeout: { type: 'string' },
      seed: { type: 'string' },
      commit: { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (positionals.length) throw new TypeError(`Unexpected argument \`${positionals[0]}\``);
  const only = values.only?.split(',').map((s) => s.trim()).filter(Boolean);
  if (values.only !== undefined && !only?.length) throw new TypeError(`Expected \`--only\` to list metrics (P1,P2), got \`${values.only}\``);
  if (only) selectGroups(only); // throws on unknown names
  let timeoutMin: number | undefined;
  if (values.timeout !== undefined) {
    timeoutMin = Number(values.timeout);
    if (!(timeoutMin > 0)) throw new TypeError(`Expected \`--timeout\` to be a positive number of minutes, got \`${values.timeout}\``);
  }
  let seed: number | undefined;
  if (values.seed !== undefined) {
    seed = Number(values.seed);
    if (!Number.isInteger(seed) || seed <= 0 || seed >= 2 ** 32) throw new TypeError(`Expected \`--seed\` to be an integer from 1 to 2^32-1, got \`${values.seed}\``);
  }
  return { quick: values.quick ?? false, out: values.out ?? 'bench-results', help: values.help ?? false, ...(only ? { only } : {}), ...(timeoutMin ? { timeoutMin } : {}), ...(seed ? { seed } : {}), ...(values.commit ? { commit: values.commit } : {}) };
}

/** NVIDIA driver version from /proc or nvidia-smi; undefined elsewhere. */
export function driverVersion(): string | undefined {
  try {
    const v = readFileSync('/proc/driver/nvidia/version', 'utf8');
    const m = /Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]+)/.exec(v) ?? /\b(\d{3,}\.\d+(?:\.\d+)?)\b/.exec(v);
    if (m) return `NVIDIA ${m[1]}`;
  } catch {
    // not NVIDIA, or no /proc
  }
  try {
    const out = execFileSync('nvidia-smi', ['--query-gpu=driver_version', '--format=csv,noheader'], { stdio: ['ignore', 'pipe', 'ignore'], timeout: 5000 }).toString().trim();
    if (out) return `NVIDIA ${out.split('\n')[0]}`;
  } catch {
    // no nvidia-smi
  }
  return undefined;
}

function gitHead(): string | undefined {
  try {
    const sha = execFileSync('git', ['rev-parse', 'HEAD'], { stdio: ['ignore', 'pipe', 'ignore'], timeout: 5000 }).toString().trim();
    return /^[0-9a-f]{40}$/.test(sha) ? sha : undefined;
  } catch {
    return undefined;
  }
}

/** Writes the result JSON (NaN becomes null) and returns its path. */
export function writePerfResult(result: PerfResult, dir: string): string {
  mkdirSync(resolve(dir), { recursive: true });
  const path = join(resolve(dir), `${perfStem(result)}.json`);
  writeFileSync(path, `${JSON.stringify(result, null, 2)}\n`);
  return path;
}

export async function main(argv: string[]): Promise<number> {
  let opts: PerfCliOptions;
  try {
    opts = parsePerfArgs(argv);
  } catch (e) {
    console.error(`bench:perf: ${(e as Error).message}\n\n${PERF_USAGE}`);
    return 2;
  }
  if (opts.help) {
    console.log(PERF_USAGE);
    return 0;
  }
  const t0 = performance.now();
  const vulkan = chooseVulkanDriver();
  const driver = driverVersion();
  const copies = hostCopyNote();
  console.log(`bench:perf: Node ${process.version}, Vulkan: ${vulkan}${driver ? `, driver ${driver}` : ''}${copies ? `; host copies: ${copies}` : ''}`);
  let timer: NodeJS.Timeout | undefined;
  if (opts.timeoutMin) {
    timer = setTimeout(() => {
      console.error(`\nbench:perf: FAILED: no result after ${opts.timeoutMin} min`);
      process.exit(1);
    }, opts.timeoutMin * 60_000);
    timer.unref();
  }
  const ctx = await createNodeContext({ label: 'perf', ...firstGpu() });
  const secondGpu = nodeSecondGpu('perf.second');
  try {
    const a = ctx.adapterInfo;
    console.log(`bench:perf: adapter: ${[a.vendor, a.architecture, a.device, a.description].filter(Boolean).join(' / ')}; timestamp-query ${ctx.features.timestampQuery}; maxBufferSize ${ctx.limits.maxBufferSize}`);
    if (isSoftwareDevice({ software: false, vendor: a.vendor, architecture: a.architecture, description: a.description })) console.warn(`bench:perf: ${SOFTWARE_WARNING}`);
    let last = '';
    const heap = nodeHeapProbe();
    const result = await runPerf(ctx, {
      quick: opts.quick,
      ...(opts.only ? { only: opts.only } : {}),
      ...(opts.seed ? { seed: opts.seed } : {}),
      runner: 'node',
      createContext: (o) => createNodeContext(o),
      ...(heap ? { heap } : {}),
      files: nodeFileProbe(),
      secondGpu,
      progress: (message, fraction) => {
        const line = `${fraction === undefined ? '' : `${Math.round(fraction * 100)}%`.padStart(4)} ${message}`;
        if (line === last) return;
        last = line;
        console.log(`${((performance.now() - t0) / 1000).toFixed(1).padStart(6)}s [perf] ${line}`);
      },
    });
    const commit = opts.commit ?? process.env['PERF_COMMIT'] ?? gitHead();
    const full: PerfResult = {
      ...result,
      ...(commit ? { commit } : {}),
      ...(driver ? { driver } : {}),
      device: { ...result.device, notes: { ...result.device.notes, node: process.version, vulkan, ...(driver ? { driver } : {}), ...(copies ? { hostCopies: copies } : {}) } },
    };
    const problems = validatePerfResult(JSON.parse(JSON.stringify(full)));
    const path = writePerfResult(full, opts.out);
    console.log(`\n${formatPerf(full)}`);
    if (problems.length) console.error(`bench:perf: malformed result:\n  ${problems.join('\n  ')}`);
    console.log(`bench:perf: wrote ${path}`);
    return full.ok && problems.length === 0 ? 0 : 1;
  } finally {
    clearTimeout(timer);
    ctx.destroy();
  }
}

const isEntry = (() => {
  const argv1 = process.argv[1] ?? '';
  return /bench-perf\.mjs$|perf-node\.ts$/.test(argv1);
})();
// P7 reads its file 16 at a time, host copies are of a few MiB: run again with the environment for them.
if (isEntry) {
  runRunner('bench:perf', main);
}
