/**
 * The Node side of the runners (bench/headless.ts, bench/node.ts, bench/perf-node.ts,
 * bench/soak.ts): command-line flags, writing the result files, and the environment the runners
 * start Node with. Node builtins and bench code only (the scenario ids come from the suite), so
 * the Node bench still bundles to one file whose only runtime import is `webgpu`. The parts the
 * page shares (table, trace export, file stems, validation) are in bench/report.ts.
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { resultStem, toChromeTrace } from './report';
import { EXIT_SIGNALS, signalStatus } from './exit-signals';
import { runtimeDir } from './runtime-dir';
import type { SuiteResult } from './schema';
import { scenarioIds } from './suite';

// ---------------------------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------------------------

export interface CliOptions {
  /** Small sizes, few repeats (CI). */
  quick: boolean;
  /** Scenario ids to run; undefined = all. */
  scenarios?: string[];
  /** Windowed Chromium on DISPLAY with CHROME_GPU_FLAGS (headless runner only). */
  gpu: boolean;
  /** Directory for the result files. @default 'bench-results' */
  out: string;
  /** Overall time limit in minutes; undefined = the runner's default. */
  timeoutMin?: number;
  /** Built page directory (headless runner only). */
  page?: string;
  /** The page's mock data instead of the GPU: tests the runner and the page (headless runner only). */
  mock: boolean;
  /** Run with the stream sanitizer warning of races (the timeline draws each as an arrow). */
  sanitize: boolean;
  help: boolean;
}

/** `words` joined by ', ' into lines of at most `width` characters, each after `indent`. */
function wrapList(words: readonly string[], indent: string, width: number): string[] {
  const lines: string[] = [];
  let line = '';
  for (const [i, w] of words.entries()) {
    const word = i < words.length - 1 ? `${w},` : w;
    if (line && indent.length + line.length + 1 + word.length > width) {
      lines.push(indent + line);
      line = word;
    } else line = line ? `${line} ${word}` : word;
  }
  return line ? [...lines, indent + line] : lines;
}

/** Usage text for a runner (`name` is the npm script, e.g. `npm run bench --`). */
export function usage(name: string, runner: 'headless' | 'node'): string {
  return [
    `usage: ${name} [--quick] [--scenarios a,b] ${runner === 'headless' ? '[--gpu] [--page DIR] [--mock] ' : ''}[--sanitize] [--out DIR] [--timeout MIN]`,
    '',
    '  --quick           small sizes and few repeats (what CI runs)',
    '  --scenarios a,b   run only these scenario ids (the suite runs them in this order):',
    ...wrapList(scenarioIds, ' '.repeat(20), 100),
    ...(runner === 'headless'
      ? [
          '  --gpu             windowed Chromium on $DISPLAY with $CHROME_GPU_FLAGS (real GPU; see',
          '                    bench/README.md); without it, headless Chromium (SwiftShader)',
          '  --page DIR        the built page to serve (default: dist/page)',
          '  --mock            the page\'s fake data, no GPU work: checks the runner and the page only',
        ]
      : []),
    `  --sanitize        the stream sanitizer warns of races${runner === 'headless' ? '; the timeline draws each as an arrow' : ' (warnings in its output)'}`,
    '  --out DIR         where to write the result files (default: bench-results)',
    `  --timeout MIN     give up after MIN minutes (default: ${runner === 'headless' ? '20 full, 10 quick' : 'none'})`,
    ...(runner === 'node'
      ? ['', 'On x86-64 glibc it starts Node with memcpy non-temporal from 1 MiB (GLIBC_TUNABLES; docs/PERFORMANCE.md);', 'set GLIBC_TUNABLES yourself, even empty, to run as given.']
      : []),
  ].join('\n');
}

/** node:util's parseArgs with its errors in the runners' words: an unknown flag, a flag without its value. */
export function parseFlags<T extends ParseArgsConfig>(config: T): ReturnType<typeof parseArgs<T>> {
  try {
    return parseArgs(config);
  } catch (e) {
    const code = (e as { code?: string }).code, message = (e as Error).message, flag = /'(--?[a-z][\w-]*)/i.exec(message)?.[1];
    if (!flag) throw e;
    if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') throw new TypeError(`Unknown flag \`${flag}\` (--help lists the flags)`);
    if (code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE') {
      throw new TypeError(/does not take an argument/.test(message) ? `\`${flag}\` takes no value (--help lists the flags)` : `\`${flag}\` needs a value (one starting with '-' goes as ${flag}=-1; --help lists the flags)`);
    }
    throw e;
  }
}

/** Parse runner flags; throws a TypeError naming the bad flag (an unknown scenario id among them). */
export function parseCliArgs(argv: string[]): CliOptions {
  const { values, positionals } = parseFlags({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: {
      quick: { type: 'boolean', default: false },
      scenarios: { type: 'string' },
      gpu: { type: 'boolean', default: false },
      out: { type: 'string', default: 'bench-results' },
      timeout: { type: 'string' },
      page: { type: 'string' },
      mock: { type: 'boolean', default: false },
      sanitize: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (positionals.length > 0) throw new TypeError(`Unexpected argument \`${positionals[0]}\``);
  const scenarios = values.scenarios
    ?.split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  if (values.scenarios !== undefined && scenarios?.length === 0) {
    throw new TypeError(`Expected \`--scenarios\` to list scenario ids (a,b), got \`${values.scenarios}\``);
  }
  const unknown = scenarios?.filter((id) => !scenarioIds.includes(id)) ?? [];
  if (unknown.length) {
    throw new TypeError(`Expected \`--scenarios\` to name scenarios among ${scenarioIds.join(', ')}, got \`${unknown.join(', ')}\``);
  }
  let timeoutMin: number | undefined;
  if (values.timeout !== undefined) {
    timeoutMin = Number(values.timeout);
    if (!Number.isFinite(timeoutMin) || timeoutMin <= 0) {
      throw new TypeError(`Expected \`--timeout\` to be a positive number of minutes, got \`${values.timeout}\``);
    }
  }
  return {
    quick: values.quick ?? false,
    scenarios,
    gpu: values.gpu ?? false,
    out: values.out ?? 'bench-results',
    timeoutMin,
    page: values.page,
    mock: values.mock ?? false,
    sanitize: values.sanitize ?? false,
    help: values.help ?? false,
  };
}

// ---------------------------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------------------------

export interface ResultPaths {
  json: string;
  trace: string;
  png: string;
}

/**
 * File names for a result: `<dir>/<YYYY-MM-DD>-<adapter-slug>-<runner>.json`, `...-trace.json`,
 * `...-timeline.png` (see {@link resultStem}).
 */
export function resultPaths(result: SuiteResult, dir: string): ResultPaths {
  const base = join(resolve(dir), resultStem(result));
  return { json: `${base}.json`, trace: `${base}-trace.json`, png: `${base}-timeline.png` };
}

/** Write the result JSON, its Chrome trace and (when given) the timeline PNG; returns what it wrote. */
export function writeResultFiles(result: SuiteResult, dir: string, screenshot?: Uint8Array): string[] {
  mkdirSync(resolve(dir), { recursive: true });
  const paths = resultPaths(result, dir);
  writeFileSync(paths.json, `${JSON.stringify(result, null, 2)}\n`);
  writeFileSync(paths.trace, JSON.stringify(toChromeTrace(result)));
  const written = [paths.json, paths.trace];
  if (screenshot) {
    writeFileSync(paths.png, screenshot);
    written.push(paths.png);
  }
  return written;
}

/** `git rev-parse HEAD` of the working directory, or undefined outside a git checkout. */
export function gitCommit(cwd = process.cwd()): string | undefined {
  // Where there is no git (the GPU machine), BENCH_COMMIT says which commit was built.
  const given = process.env['BENCH_COMMIT'];
  if (given && /^[0-9a-f]{7,40}$/.test(given)) return given;
  try {
    const out = execFileSync('git', ['rev-parse', 'HEAD'], { cwd, stdio: ['ignore', 'pipe', 'ignore'], timeout: 5000 });
    const sha = out.toString().trim();
    return /^[0-9a-f]{40}$/.test(sha) ? sha : undefined;
  } catch {
    return undefined;
  }
}

/** glibc's tunable for the copy size from which x86-64 memcpy writes with non-temporal stores. */
const NT_TUNABLE = 'glibc.cpu.x86_non_temporal_threshold';
/** The runners' value: copies of 1 MiB and more (chunks, staging pieces) bypass the caches. */
export const NT_THRESHOLD = '0x100000';

/** The glibc this process runs on (e.g. '2.39'), undefined elsewhere (musl, macOS, Windows). */
function glibcVersion(): string | undefined {
  const report = process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined;
  return report?.header?.glibcVersionRuntime;
}

/**
 * Runs this process again with the environment the Node runners want, where it is not set, and
 * resolves to the child's exit status (null: it is set, go on):
 * - UV_THREADPOOL_SIZE=16: file reads (weights from storage) run on libuv's thread pool, 4 threads
 *   unless the variable says more, which an ES module entry has started while loading;
 * - on x86-64 glibc, GLIBC_TUNABLES with memcpy's non-temporal threshold at 1 MiB: glibc keeps
 *   ordinary stores up to about its share of the L3 cache, and JS copies of a few MiB (fills,
 *   read-outs, staging) can run at half the speed of non-temporal ones (docs/PERFORMANCE.md).
 *   A GLIBC_TUNABLES already set, even empty, is kept: `GLIBC_TUNABLES= npm run bench:perf`
 *   measures glibc's own choice;
 * - on Linux without XDG_RUNTIME_DIR, a private one (as the test run has): the Vulkan loader and
 *   SwiftShader otherwise print "XDG_RUNTIME_DIR is invalid or not set" a few times.
 * SIGINT, SIGTERM and SIGHUP sent to this process go on to the child, so that it removes its
 * scratch files; a child ended by a signal gives 128 + its number, as a shell reports it.
 */
export function withRunnerEnv(threads = 16): Promise<number | null> {
  const env = { ...process.env };
  let again = false;
  if (!env['XDG_RUNTIME_DIR'] && process.platform === 'linux') {
    env['XDG_RUNTIME_DIR'] = runtimeDir();
    again = true;
  }
  if (!env['UV_THREADPOOL_SIZE']) {
    env['UV_THREADPOOL_SIZE'] = String(threads);
    again = true;
  }
  if (env['GLIBC_TUNABLES'] === undefined && process.platform === 'linux' && process.arch === 'x64' && glibcVersion()) {
    env['GLIBC_TUNABLES'] = `${NT_TUNABLE}=${NT_THRESHOLD}`;
    again = true;
  }
  if (!again) return Promise.resolve(null);
  return new Promise((done) => {
    const child = spawn(process.execPath, [...process.execArgv, ...process.argv.slice(1)], { stdio: 'inherit', env });
    const forward = (signal: NodeJS.Signals): void => void child.kill(signal);
    for (const s of EXIT_SIGNALS) process.on(s, forward);
    const end = (status: number): void => {
      for (const s of EXIT_SIGNALS) process.off(s, forward);
      done(status);
    };
    child.on('error', (e) => {
      console.error(`${process.argv[1] ?? 'node'}: could not start Node again: ${e.message}`);
      end(1);
    });
    child.on('exit', (code, signal) => end(code ?? (signal ? signalStatus(signal) : 1)));
  });
}

/**
 * A Node runner's entry: runs again with the runners' environment where it must (withRunnerEnv),
 * else `main`, then exits with its code (Dawn's instance may keep the event loop alive); a throw
 * prints `<name>: FAILED` and exits 1.
 */
export function runRunner(name: string, main: (argv: string[]) => Promise<number>): void {
  // Output piped into a reader that stops early (`| head`): the run goes on to its end, unprinted, and cleans up.
  for (const out of [process.stdout, process.stderr]) {
    out.on('error', (e: NodeJS.ErrnoException) => {
      if (e.code !== 'EPIPE') throw e;
    });
  }
  void withRunnerEnv().then((again) => {
    if (again !== null) process.exit(again);
    return main(process.argv.slice(2)).then(
      (code) => process.exit(code),
      (e: unknown) => {
        console.error(`\n${name}: FAILED:`, e);
        process.exit(1);
      },
    );
  });
}

/**
 * What large host copies use here, for the report: the glibc version and the size from which its
 * memcpy writes non-temporally, as `ld.so --list-tunables` (glibc 2.33 and later) reads this
 * environment. Undefined off glibc.
 */
export function hostCopyNote(): string | undefined {
  const version = glibcVersion();
  if (!version) return undefined;
  let from = 'unknown';
  try {
    const out = execFileSync('/lib64/ld-linux-x86-64.so.2', ['--list-tunables'], { encoding: 'utf8', timeout: 5000, stdio: ['ignore', 'pipe', 'ignore'] });
    const hex = /x86_non_temporal_threshold:\s*(0x[0-9a-f]+)/i.exec(out)?.[1];
    if (hex) from = `${(parseInt(hex, 16) / 2 ** 20).toFixed(2).replace(/\.?0+$/, '')} MiB`;
  } catch {
    // no x86-64 loader at that path, or a glibc without --list-tunables
  }
  const by = process.env['GLIBC_TUNABLES']?.includes(NT_TUNABLE) ? 'GLIBC_TUNABLES' : "glibc's default";
  return `glibc ${version}; memcpy non-temporal from ${from} (${by})`;
}
