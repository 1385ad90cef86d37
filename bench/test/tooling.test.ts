/**
 * The runners' plumbing without a browser or a GPU: the result validator, the table, the Chrome
 * trace export, file names, flag parsing, the static server and the PNG decoder used by the e2e tests.
 */
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { deflateSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChromeNotFoundError, CHROME_INSTALL_HINT, findChrome, isSoftwareAdapterInfo, splitFlags } from '../browser';
import { parseCliArgs, resultPaths, usage } from '../cli';
import { mockRunSuite } from '../page/mock';
import { GcLog } from '../gc';
import { balanceIterations } from '../perf/balance';
import { createNoopDevice, type NoopBuffer, type NoopCommand } from '../perf/noop-device';
import { checkNoopChunk, noopChunkCost } from '../perf/p5-library-cost';
import { randomSeed, rng } from '../reference';
import { adapterSlug, formatReport, formatTable, resultStem, runPassed, toChromeTrace, validateSuiteResult } from '../report';
import type { SuiteResult } from '../schema';
import { serveDir, type StaticServer } from '../serve';
import { nodeWeightsStorage, weightsFile, weightsHeader, weightsLayer } from '../weights-file';
import { scenarioIds } from '../suite';
import { weightsUrl } from '../weights-spec';
import { compare } from '../scenarios/common';
import { timingVerdict } from '../scenarios/priorities';
import { calibrationText } from '../scenarios/sleep-streams';
import { costText } from '../scenarios/weight-loading';
import type { Timing, Variant } from '../schema';
import { spawn } from 'node:child_process';
import { createServer as createViteServer } from 'vite';
import { decodePng, distinctColors } from './e2e/png';

function sample(): SuiteResult {
  return {
    schema: 'webgpu-streams/bench@1',
    date: '2026-01-02T03:04:05.000Z',
    quick: true,
    device: {
      runner: 'node',
      vendor: 'nvidia',
      architecture: 'hopper',
      description: 'NVIDIA H200',
      software: false,
      userAgent: 'Node.js/20',
      timestampQuery: true,
    },
    scenarios: [
      {
        id: 'chunked-pipeline',
        title: 'Chunked pipeline',
        params: { n: 1024, quick: true, kind: 'f32' },
        variants: [
          { name: 'sync', time: { median: 10, min: 9, max: 12, samples: [9, 10, 12] }, ideal: null, memoryBytes: 3 * 2 ** 20 },
          {
            name: 'streams=4',
            time: { median: 6, min: 5.5, max: 7, samples: [5.5, 6, 7] },
            ideal: 5,
            baseline: 'sync',
            speedup: 10 / 6,
            efficiency: 0.8,
            gbps: 12.5,
          },
        ],
        verification: { ok: true, detail: 'out == a + b for 1024 floats (seed 1)' },
        verdicts: ['streams=4 at 1.67x sync'],
        trace: [
          { lane: 's0', kind: 'upload', name: 'up 0', start: 100, end: 101.5 },
          { lane: 'host', kind: 'fill', name: 'fill 0', start: 99, end: 100 },
          { lane: 's1', kind: 'kernel', name: 'add 1', start: 101, end: 103, estimated: true },
        ],
        wallMs: 250,
      },
    ],
    ok: true,
  };
}

describe('validateSuiteResult', () => {
  it('accepts a well-formed result', () => {
    expect(validateSuiteResult(sample())).toEqual([]);
  });

  it("accepts the page's mock data, which passes (`npm run bench -- --mock` checks the runner and the page)", async () => {
    const mock = await mockRunSuite({ quick: true });
    const problems = validateSuiteResult(mock);
    expect(problems).toEqual([]);
    expect(runPassed(mock, problems)).toBe(true);
  });

  it.each([
    ['not an object', () => 42, '$: expected an object'],
    ['wrong schema tag', (r: SuiteResult) => ({ ...r, schema: 'other' }), '$.schema'],
    ['bad runner', (r: SuiteResult) => ({ ...r, device: { ...r.device, runner: 'bus' } }), '$.device.runner'],
    ['missing median', (r: SuiteResult) => { delete (r.scenarios[0]!.variants[0]!.time as Partial<SuiteResult['scenarios'][0]['variants'][0]['time']>).median; return r; }, '$.scenarios[0].variants[0].time.median'],
    ['NaN turned null', (r: SuiteResult) => { (r.scenarios[0]!.variants[1] as { speedup: unknown }).speedup = null; return r; }, '$.scenarios[0].variants[1].speedup'],
    ['unknown span kind', (r: SuiteResult) => { (r.scenarios[0]!.trace[0] as { kind: string }).kind = 'dma'; return r; }, '$.scenarios[0].trace[0].kind'],
    ['span ends before it starts', (r: SuiteResult) => { r.scenarios[0]!.trace[0]!.end = 0; return r; }, '$.scenarios[0].trace[0]: end'],
    ['ok disagrees with verification', (r: SuiteResult) => { r.scenarios[0]!.verification.ok = false; return r; }, '$.ok'],
    ['baseline names no variant', (r: SuiteResult) => { r.scenarios[0]!.variants[1]!.baseline = 'serial'; return r; }, '.baseline'],
    ['duplicate scenario id', (r: SuiteResult) => ({ ...r, scenarios: [r.scenarios[0]!, r.scenarios[0]!] }), 'duplicate id'],
  ] as const)('reports %s', (_, mutate, where) => {
    const problems = validateSuiteResult((mutate as (r: SuiteResult) => unknown)(sample()));
    expect(problems.length, JSON.stringify(problems)).toBeGreaterThan(0);
    expect(problems.some((p) => p.includes(where)), JSON.stringify(problems)).toBe(true);
  });
});

describe('report text and files', () => {
  it('formats the table with one row per variant', () => {
    const lines = formatTable(sample()).split('\n');
    expect(lines[0]).toMatch(/^scenario\s+variant\s+median ms\s+ideal\s+speedup\s+eff\.\s+mem MiB\s+GB\/s\s+verified$/);
    expect(lines).toHaveLength(5);
    expect(lines[4]).toMatch(/^ideal: .*eff\.: \(baseline - this\) \/ \(baseline - ideal\).*n\/a: the possible gain is within the run's noise/);
    expect(lines[2]).toMatch(/^chunked-pipeline\s+sync\s+10\.00\s+-\s+-\s+-\s+3\.0\s+-\s+yes$/);
    expect(lines[3]).toMatch(/streams=4\s+6\.000\s+5\.000\s+1\.67x\s+80%\s+-\s+12\.50$/);
    // Below 1 MiB the column keeps KiB apart: 256 KiB and 320 KiB are not both 0.3.
    const small = sample();
    small.scenarios[0]!.variants[0]!.memoryBytes = 256 << 10;
    small.scenarios[0]!.variants[1]!.memoryBytes = 320 << 10;
    const rows = formatTable(small).split('\n');
    expect(rows[2]).toMatch(/\s0\.250\s/);
    expect(rows[3]).toMatch(/\s0\.313\s/);
  });

  it('says OK or FAILED, and runPassed agrees', () => {
    const good = sample();
    expect(formatReport(good, [])).toMatch(/\nOK: 1 scenario verified$/);
    expect(runPassed(good, [])).toBe(true);
    const bad = sample();
    bad.scenarios[0]!.verification = { ok: false, detail: 'out == a + b', mismatch: 'index 3: got 1, want 2' };
    bad.ok = false;
    expect(formatReport(bad, [])).toMatch(/FAILED: not verified: chunked-pipeline$/);
    expect(runPassed(bad, [])).toBe(false);
    expect(runPassed({ ...good, scenarios: [] }, [])).toBe(false);
    expect(runPassed(good, ['$.x: broken'])).toBe(false);
  });

  it('exports Chrome trace events: one thread per lane, host first, times in microseconds', () => {
    const { traceEvents } = toChromeTrace(sample());
    const threads = traceEvents.filter((e) => e.name === 'thread_name').map((e) => [e.tid, (e.args as { name: string }).name]);
    expect(threads).toEqual([[1, 'host'], [2, 's0'], [3, 's1']]);
    const spans = traceEvents.filter((e) => e.ph === 'X');
    expect(spans.map((e) => [e.name, e.cat, e.ts, e.dur, e.tid])).toEqual([
      ['up 0', 'upload', 1000, 1500, 2],
      ['fill 0', 'fill', 0, 1000, 1],
      ['add 1', 'kernel', 2000, 2000, 3],
    ]);
    expect(traceEvents.find((e) => e.name === 'process_name')?.args).toEqual({ name: 'chunked-pipeline: Chunked pipeline' });
  });

  it('names files by time, adapter and runner, and marks quick runs', () => {
    expect(adapterSlug({ vendor: 'google', architecture: 'swiftshader', description: 'SwiftShader Device (Subzero)' })).toBe(
      'google-swiftshader-device-subzero',
    );
    expect(adapterSlug({ vendor: '', architecture: '', description: '' })).toBe('unknown-adapter');
    // Dawn on NVIDIA: the model is in notes.device, the description is the driver version.
    expect(adapterSlug({ vendor: 'nvidia', architecture: '', description: 'NVIDIA: 580.159.04 580.159.4.0', notes: { device: 'nvidia-h200' } })).toBe('nvidia-h200');
    expect(adapterSlug({ vendor: 'google', architecture: 'swiftshader', description: 'SwiftShader driver 5.0.0' })).toBe('google-swiftshader-driver');
    expect(adapterSlug({ vendor: 'nvidia', architecture: 'hopper', description: 'NVIDIA H200', notes: { device: '0x2335' } })).toBe('nvidia-hopper-h200');
    expect(resultStem(sample())).toBe('2026-01-02T030405-nvidia-hopper-h200-node-quick');
    expect(resultStem({ ...sample(), quick: false })).toBe('2026-01-02T030405-nvidia-hopper-h200-node');
    expect(resultPaths(sample(), '/tmp/x')).toEqual({
      json: '/tmp/x/2026-01-02T030405-nvidia-hopper-h200-node-quick.json',
      trace: '/tmp/x/2026-01-02T030405-nvidia-hopper-h200-node-quick-trace.json',
      png: '/tmp/x/2026-01-02T030405-nvidia-hopper-h200-node-quick-timeline.png',
    });
  });

  it("says what is wrong with a flag in the runners' words: an unknown one, one without its value", () => {
    expect(() => parseCliArgs(['--bogus'])).toThrow('Unknown flag `--bogus` (--help lists the flags)');
    expect(() => parseCliArgs(['--out', '--quick'])).toThrow(/`--out` needs a value/);
    expect(() => parseCliArgs(['--mock=1'])).toThrow('`--mock` takes no value (--help lists the flags)');
  });

  it('parses runner flags', () => {
    expect(parseCliArgs(['--quick', '--scenarios', 'overlap-probe, two-gpus', '--out', 'o', '--gpu'])).toMatchObject({
      quick: true,
      scenarios: ['overlap-probe', 'two-gpus'],
      out: 'o',
      gpu: true,
      mock: false,
      help: false,
    });
    expect(parseCliArgs([])).toMatchObject({ quick: false, scenarios: undefined, out: 'bench-results', gpu: false, sanitize: false });
    expect(parseCliArgs(['--sanitize'])).toMatchObject({ sanitize: true });
    expect(() => parseCliArgs(['--scenarios', ','])).toThrow(/--scenarios/);
    expect(() => parseCliArgs(['--timeout', '0'])).toThrow(/--timeout/);
    expect(() => parseCliArgs(['--frobnicate'])).toThrow();
  });

  it('rejects scenario ids the suite does not have, naming the flag and every id; the usage lists them all', () => {
    expect(() => parseCliArgs(['--scenarios', 'overlap-probe,nope'])).toThrow(`Expected \`--scenarios\` to name scenarios among ${scenarioIds.join(', ')}, got \`nope\``);
    expect(parseCliArgs(['--scenarios', scenarioIds.join(',')]).scenarios).toEqual(scenarioIds);
    expect(scenarioIds).toContain('two-gpus');
    for (const runner of ['node', 'headless'] as const) {
      const text = usage('npm run x --', runner);
      for (const id of scenarioIds) expect(text, `${runner}: ${id}`).toContain(id);
    }
  });
});

describe('compare (speedup and efficiency against a baseline)', () => {
  const timing = (samples: number[]): Timing => {
    const s = [...samples].sort((a, b) => a - b);
    return { median: (s[(s.length - 1) >> 1]! + s[s.length >> 1]!) / 2, min: s[0]!, max: s[s.length - 1]!, samples };
  };
  it('rates efficiency through one outlying sample, and leaves it n/a where the possible gain is within the spread', () => {
    // Samples as a GPU host gave them: sync 4.66 ms median with one sample at 14.6, 4 streams 3.44, ideal 2.50.
    const sync = timing([4.47, 4.52, 4.54, 4.55, 4.55, 4.77, 6.16, 7.02, 7.36, 14.57]);
    const four = timing([3.22, 3.23, 3.23, 3.24, 3.24, 3.64, 4.57, 4.72, 4.83, 22.15]);
    const [, v] = compare([
      { name: 'sync', time: sync, ideal: null },
      { name: 'streams=4', time: four, ideal: 2.5, baseline: 'sync' },
    ] as Variant[]);
    expect(v!.speedup).toBeCloseTo(4.66 / 3.44, 2);
    expect(v!.efficiency).toBeCloseTo((4.66 - 3.44) / (4.66 - 2.5), 2);
    // Samples that spread over more than the possible gain: no figure.
    const wide = timing([3, 3.5, 4, 6, 8, 9, 10, 11]);
    const [, w] = compare([
      { name: 'sync', time: wide, ideal: null },
      { name: 'streams=4', time: timing([4, 4.2, 4.4, 4.6]), ideal: 5, baseline: 'sync' },
    ] as Variant[]);
    expect(w!.efficiency).toBeUndefined();
  });

  it('leaves efficiency n/a where the variant took longer than its baseline: the speedup says by how much, the table says n/a', () => {
    // Two devices of one software adapter: 2 GPUs 356 ms against 1 GPU 260 ms, ideal 130 ms (a ratio of -74%).
    const vs = compare([
      { name: '1 GPU', time: timing([259, 260, 261]), ideal: 230 },
      { name: '2 GPUs', time: timing([355, 356, 357]), ideal: 130, baseline: '1 GPU' },
    ] as Variant[]);
    expect(vs[1]!.speedup).toBeCloseTo(260 / 356, 3);
    expect(vs[1]!.efficiency).toBeUndefined();
    const result = sample();
    result.scenarios[0]!.variants = vs;
    const row = formatTable(result).split('\n').find((l) => l.includes('2 GPUs'))!;
    expect(row).toMatch(/2 GPUs\s+356\.0\s+130\.0\s+0\.73x\s+n\/a\s/);
    expect(formatTable(result)).not.toMatch(/-\d+%/);
  });
});

describe('scenario verdicts in words (no GPU)', () => {
  it('event timing: judged against the P6 target only where the raw timestamps resolve it; else n/a with their spread', () => {
    // Raw timestamps that spread 20-60% run to run (a software adapter): no failing-looking percentage.
    const coarse = timingVerdict([{ targetMs: 0.25, ratio: 1.888, rawSpread: 0.6 }, { targetMs: 1, ratio: 1.2, rawSpread: 0.2 }], true);
    expect(coarse).toBe(
      'elapsedTime vs raw timestamp queries on the same sleep kernels: n/a (the raw timestamps are too coarse here to judge 5%: the same kernel\'s raw duration spread 20.0% to 60.0% run to run (a software adapter)); ratios 1.888, 1.200 for 0.25 ms, 1.00 ms',
    );
    expect(coarse).not.toMatch(/within/);
    // Steady timestamps: judged, a miss reads as one.
    expect(timingVerdict([{ targetMs: 1, ratio: 1.08, rawSpread: 0.004 }, { targetMs: 4, ratio: 0.99, rawSpread: 0.002 }], false)).toBe(
      'elapsedTime vs raw timestamp queries on the same sleep kernels: off by at most 8.0% (P6 target: within 5%: missed); ratios 1.080, 0.990 for 1.00 ms, 4.00 ms',
    );
    expect(timingVerdict([{ targetMs: 0.25, ratio: 1.3, rawSpread: 0.1 }, { targetMs: 4, ratio: 1.01, rawSpread: 0.01 }], false)).toMatch(
      /: off by at most 1\.0% \(P6 target: within 5%: met\) at 4\.00 ms; n\/a at 0\.25 ms \(the raw timestamps are too coarse here to judge 5%: the same kernel's raw duration spread 10\.0% run to run\); ratios/,
    );
  });

  it('sleep calibration: where one iteration already runs past the target, it says so', () => {
    expect(calibrationText({ iterations: 1, ms: 22.2, targetMs: 1, method: 'timestamps' }, 1 << 20)).toBe(
      'sleep kernel not calibrated to its 1.00 ms target: 1 iteration over 1048576 elements, the least it can run, already takes 22.2 ms on this device (22.2x the target), by GPU timestamps',
    );
    expect(calibrationText({ iterations: 43, ms: 1.02, targetMs: 1, method: 'wall' }, 4096)).toBe('sleep kernel calibrated to 1.02 ms (target 1.00 ms): 43 iterations over 4096 elements, by wall time');
  });

  it("weight loading: the extra layer cost asked, in words (never '0x load')", () => {
    expect(costText(0)).toBe('no extra layer cost (vector_add alone)');
    expect(costText(0.5, 36)).toBe("extra layer cost 0.5x one weight's load (sleep kernel, 36 iterations)");
  });
});

describe('finding and configuring Chromium', () => {
  it('takes CHROME_PATH when it exists and says how to install when nothing is found', () => {
    expect(findChrome({ CHROME_PATH: process.execPath })).toBe(process.execPath);
    expect(() => findChrome({ CHROME_PATH: '/nonexistent/chrome' })).toThrow(ChromeNotFoundError);
    expect(() => findChrome({ CHROME_PATH: '/nonexistent/chrome' })).toThrow(CHROME_INSTALL_HINT);
    expect(CHROME_INSTALL_HINT).toBe('apt-get update && apt-get install -y chromium');
  });

  it('splits CHROME_GPU_FLAGS like a shell would for simple quoting', () => {
    expect(splitFlags(' --a  --enable-features=X,Y\t--b="c d" ')).toEqual(['--a', '--enable-features=X,Y', '--b=c d']);
  });

  it('recognises software adapters', () => {
    expect(isSoftwareAdapterInfo({ vendor: 'google', architecture: 'swiftshader', description: 'SwiftShader Device (Subzero)' })).toBe(true);
    expect(isSoftwareAdapterInfo({ vendor: 'mesa', description: 'llvmpipe (LLVM 15.0.6, 256 bits)' })).toBe(true);
    expect(isSoftwareAdapterInfo({ vendor: 'nvidia', architecture: 'hopper', description: 'NVIDIA H200' })).toBe(false);
  });
});

describe('serveDir', () => {
  let dir = '';
  let server: StaticServer;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'webgpu-streams-serve-'));
    mkdirSync(join(dir, 'assets'));
    writeFileSync(join(dir, 'index.html'), '<!doctype html><p>hi</p>');
    writeFileSync(join(dir, 'assets/a.js'), 'export {};');
    writeFileSync(join(dir, 'assets/k.wgsl'), '@compute @workgroup_size(1) fn main() {}');
    writeFileSync(join(dir, 'assets/m.wasm'), new Uint8Array([0, 97, 115, 109]));
    server = await serveDir(dir);
  });
  afterAll(async () => {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it.each([
    ['/', 'text/html; charset=utf-8'],
    ['/index.html', 'text/html; charset=utf-8'],
    ['/assets/a.js', 'text/javascript; charset=utf-8'],
    ['/assets/k.wgsl', 'text/wgsl; charset=utf-8'],
    ['/assets/m.wasm', 'application/wasm'],
  ])('serves %s as %s, cross-origin isolated', async (path, type) => {
    const res = await fetch(`${server.origin}${path}`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe(type);
    expect(res.headers.get('cross-origin-embedder-policy')).toBe('require-corp');
    await res.arrayBuffer();
  });

  it('refuses missing files and paths outside the directory', async () => {
    expect((await fetch(`${server.origin}/nope.js`)).status).toBe(404);
    expect((await fetch(`${server.origin}/..%2f..%2fetc%2fpasswd`)).status).toBe(403);
    expect((await fetch(`${server.origin}/%2e%2e/%2e%2e/etc/passwd`)).status).toBe(404); // normalised to /etc/passwd under the root
  });

  it('resolves report with the first posted JSON', async () => {
    const res = await fetch(`${server.origin}/result`, { method: 'POST', body: JSON.stringify({ ok: true, n: 3 }) });
    expect(res.status).toBe(204);
    await expect(server.report).resolves.toEqual({ ok: true, n: 3 });
  });

  it('rejects report when the body is not JSON', async () => {
    const other = await serveDir(dir, { reportPath: '/r' });
    try {
      const res = await fetch(`${other.origin}/r`, { method: 'POST', body: '{oops' });
      expect(res.status).toBe(400);
      await expect(other.report).rejects.toThrow(/not JSON/);
    } finally {
      await other.close();
    }
  });
});

describe('the synthetic weights file (weights-storage scenario)', () => {
  const spec = { layers: 3, elements: 1000 + (randomSeed() % 1000), seed: randomSeed() };
  const want = (() => {
    const parts = [weightsHeader(spec), ...Array.from({ length: spec.layers }, (_, i) => weightsLayer(spec, i))];
    const out = new Uint8Array(parts.reduce((n, x) => n + x.length, 0));
    let at = 0;
    for (const x of parts) (out.set(x, at), (at += x.length));
    return out;
  })();
  /** The whole file from `origin`, then one byte range of it, checked against `want`. */
  async function check(origin: string): Promise<void> {
    const url = origin + weightsUrl(spec);
    const whole = await fetch(url);
    expect(whole.status, url).toBe(200);
    expect(whole.headers.get('accept-ranges')).toBe('bytes');
    expect(new Uint8Array(await whole.arrayBuffer())).toEqual(want);
    const part = await fetch(url, { headers: { Range: 'bytes=100-1099' } });
    expect(part.status).toBe(206);
    expect(part.headers.get('content-range')).toBe(`bytes 100-1099/${want.length}`);
    expect(new Uint8Array(await part.arrayBuffer())).toEqual(want.subarray(100, 1100));
    expect((await fetch(`${origin}/weights/synthetic.safetensors?layers=0&elements=1&seed=1`)).status).toBe(400);
  }

  it('the Node runners read it from a file of this process, removed when they close it', async () => {
    const ours = () => readdirSync(tmpdir()).filter((f) => f.includes(`-weights-${spec.seed}-`));
    expect(ours()).toEqual([]);
    const src = await nodeWeightsStorage.open(spec, 2);
    const got = new Uint8Array(want.length);
    expect(await src.read(got, 0)).toBe(want.length);
    expect(got).toEqual(want);
    expect(ours()).toEqual([`webgpu-streams-${process.pid}-weights-${spec.seed}-${spec.layers}x${spec.elements}.safetensors`]);
    await src.close?.();
    expect(ours(), 'left in the temp directory').toEqual([]);
    // The servers' copy (weightsFile) is written again on demand and goes when the process ends.
    const path = weightsFile(spec);
    expect(existsSync(path)).toBe(true);
  });

  it(`is finite f32 of magnitude [0.5, 2) after a safetensors header (seed ${spec.seed})`, () => {
    const f = new Float32Array(weightsLayer(spec, 1).buffer);
    expect(f.every((x) => Math.abs(x) >= 0.5 && Math.abs(x) < 2)).toBe(true);
    expect(new Set(f).size, 'not a constant').toBeGreaterThan(f.length / 2);
  });

  it('serveDir serves it in byte ranges', async () => {
    const server = await serveDir(tmpdir());
    try {
      await check(server.origin);
    } finally {
      await server.close();
    }
  });

  it('serve.py (the GPU machines, no Node) serves the same bytes, and removes its copy when it ends', async () => {
    const port = 20000 + (randomSeed() % 20000);
    const dir = mkdtempSync(join(tmpdir(), 'webgpu-streams-py-'));
    const copy = join(tmpdir(), `webgpu-streams-weights-${spec.seed}-${spec.layers}x${spec.elements}.safetensors`);
    const py = spawn('python3', [join(import.meta.dirname, '../serve.py'), dir, String(port), join(dir, 'result.json'), '60'], { stdio: 'ignore' });
    const ended = new Promise<number | null>((r) => py.on('exit', (code) => r(code)));
    try {
      const origin = `http://127.0.0.1:${port}`;
      for (let i = 0; i < 100; i++) {
        if (await fetch(origin).then(() => true, () => false)) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      await check(origin);
      expect(existsSync(copy), 'serve.py keeps its copy in the temp directory while it runs').toBe(true);
    } finally {
      py.kill();
      rmSync(dir, { recursive: true, force: true });
    }
    expect(await ended).toBe(143);
    expect(existsSync(copy), `${copy} left behind`).toBe(false);
  });

  it('npm run dev (vite) serves the same bytes', async () => {
    const vite = await createViteServer({ configFile: join(import.meta.dirname, '../../vite.config.ts'), logLevel: 'silent', server: { port: 0, host: '127.0.0.1' } });
    await vite.listen();
    try {
      await check(vite.resolvedUrls!.local[0]!.replace(/\/$/, ''));
    } finally {
      await vite.close();
    }
  });
});

describe('decodePng', () => {
  function png(width: number, height: number, rgba: (x: number, y: number) => number[]): Buffer {
    const crcTable = Array.from({ length: 256 }, (_, n) => {
      let c = n;
      for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
      return c >>> 0;
    });
    const crc = (b: Buffer) => {
      let c = 0xffffffff;
      for (const x of b) c = crcTable[(c ^ x) & 0xff]! ^ (c >>> 8);
      return (c ^ 0xffffffff) >>> 0;
    };
    const chunk = (type: string, body: Buffer) => {
      const head = Buffer.alloc(8);
      head.writeUInt32BE(body.length, 0);
      head.write(type, 4, 'latin1');
      const tail = Buffer.alloc(4);
      tail.writeUInt32BE(crc(Buffer.concat([head.subarray(4), body])), 0);
      return Buffer.concat([head, body, tail]);
    };
    const ihdr = Buffer.alloc(13);
    ihdr.writeUInt32BE(width, 0);
    ihdr.writeUInt32BE(height, 4);
    ihdr[8] = 8;
    ihdr[9] = 6;
    const rows: number[] = [];
    for (let y = 0; y < height; y++) {
      // Alternate filters 0 (none) and 1 (sub) to exercise the unfiltering.
      const filter = y % 2;
      rows.push(filter);
      for (let x = 0; x < width; x++) {
        const px = rgba(x, y);
        const left = x > 0 ? rgba(x - 1, y) : [0, 0, 0, 0];
        for (let c = 0; c < 4; c++) rows.push(filter === 1 ? (px[c]! - left[c]! + 256) & 0xff : px[c]!);
      }
    }
    return Buffer.concat([
      Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]),
      chunk('IHDR', ihdr),
      chunk('IDAT', deflateSync(Buffer.from(rows))),
      chunk('IEND', Buffer.alloc(0)),
    ]);
  }

  it('decodes pixels and tells blank from drawn', () => {
    const blank = decodePng(png(4, 3, () => [255, 255, 255, 255]));
    expect([blank.width, blank.height, blank.channels]).toEqual([4, 3, 4]);
    expect(distinctColors(blank)).toBe(1);
    const drawn = decodePng(png(4, 3, (x, y) => [x * 10, y * 20, 7, 255]));
    expect(Array.from(drawn.pixels.subarray(4 * 4 + 4, 4 * 4 + 8))).toEqual([10, 20, 7, 255]);
    expect(distinctColors(drawn)).toBe(12);
  });

  it('rejects what is not a PNG', () => {
    expect(() => decodePng(new Uint8Array([1, 2, 3]))).toThrow(/signature/);
  });
});

describe('GcLog', () => {
  it('counts the collections of a span in Node, and none outside it', async () => {
    const log = new GcLog();
    expect(log.available).toBe(true);
    const t0 = performance.now();
    // Enough short-lived garbage for several scavenges.
    let junk: { i: number }[] = [];
    let kept = 0;
    for (let i = 0; i < 2_000_000; i++) {
      junk.push({ i });
      if (junk.length === 10_000) {
        kept += junk.length;
        junk = [];
      }
    }
    const t1 = performance.now();
    await GcLog.settle();
    const c = log.between(t0, t1)!;
    expect(kept).toBe(2_000_000);
    expect(c.minor + c.major).toBeGreaterThan(0);
    expect(log.between(t1 + 60_000, t1 + 120_000)).toEqual({ major: 0, minor: 0, ms: 0 });
    expect(log.describe([[t0, t1], [t1 + 60_000, t1 + 120_000]])).toMatch(/^\d+\/0 major \+ \d+\/0 minor \([\d.]+\/0\.0 ms\)$/);
    log.stop();
  });
});

describe('balanceIterations (P1 and P5 host/GPU balance, pure logic on a fake cost)', () => {
  /** A GPU whose time is fixed + per * it, times (1 + noise) with noise in [-amp, amp]. */
  function fakeGpu(fixed: number, per: number, amp: number, seed: number): { gpuAt: (it: number) => Promise<number>; calls: number[] } {
    const r = rng(seed);
    const calls: number[] = [];
    return {
      calls,
      gpuAt: async (it: number) => {
        calls.push(it);
        return (fixed + per * it) * (1 + amp * (2 * r.next() - 1));
      },
    };
  }

  it('balances when the first probe is inside the noise (a fit that once chose 65536 iterations)', async () => {
    // A fast GPU: ~0.5 ms fixed, 1.19 us per iteration, host 3.14 ms. 256 iterations add 0.3 ms:
    // with 10% noise a 2-point fit on (1, 256) can put the slope anywhere.
    const seed = randomSeed();
    const g = fakeGpu(0.5, 0.00119, 0.1, seed);
    const bal = await balanceIterations(g.gpuAt, 3.14, { probeIterations: 256, maxIterations: 1 << 16 });
    const truth = 0.5 + 0.00119 * bal.iterations;
    expect(Math.abs(truth - 3.14) / 3.14, `seed ${seed}: ${JSON.stringify(bal.probes)}`).toBeLessThan(0.25);
    expect(bal.reachable, `seed ${seed}`).toBe(true);
    expect(g.calls.length, `seed ${seed}`).toBeLessThanOrEqual(12);
  });

  it('comes back down from an overshoot, which the old upward-only refinement could not', async () => {
    const g = fakeGpu(0.5, 0.00119, 0, 1);
    const bal = await balanceIterations(g.gpuAt, 3.14, { probeIterations: 256, maxIterations: 1 << 16, start: 1 << 16 });
    expect(Math.abs(bal.gpuMs - 3.14) / 3.14).toBeLessThanOrEqual(0.08);
    expect(bal.iterations).toBeGreaterThan(2000);
    expect(bal.iterations).toBeLessThan(2400);
  });

  it('converges exactly on a noiseless linear cost', async () => {
    const g = fakeGpu(2, 0.01, 0, 1);
    const bal = await balanceIterations(g.gpuAt, 50, { probeIterations: 8, maxIterations: 1 << 16 });
    expect(bal.iterations).toBe(4800);
    expect(bal.model.perIterationMs).toBeCloseTo(0.01, 9);
    expect(bal.model.fixedMs).toBeCloseTo(2, 6);
  });

  it('says when balance is out of reach, either way', async () => {
    const slow = await balanceIterations(fakeGpu(10, 1, 0, 1).gpuAt, 5, { probeIterations: 8, maxIterations: 256 });
    expect(slow).toMatchObject({ iterations: 1, reachable: false });
    const fast = await balanceIterations(fakeGpu(0.1, 0.001, 0, 1).gpuAt, 50, { probeIterations: 8, maxIterations: 256 });
    expect(fast).toMatchObject({ iterations: 256, reachable: false });
  });

  it('looks at 1 iteration twice before calling balance out of reach (a GPU clocked down from idle)', async () => {
    // The first pass 5x slow, as a GPU coming out of idle ran one: one slow look must not end the search.
    const g = fakeGpu(0.5, 0.00119, 0, 1);
    let first = true;
    const gpuAt = async (it: number): Promise<number> => {
      const ms = await g.gpuAt(it);
      if (!first) return ms;
      first = false;
      return 8 * ms;
    };
    const bal = await balanceIterations(gpuAt, 3.14, { probeIterations: 256, maxIterations: 1 << 16 });
    expect(bal.reachable).toBe(true);
    expect(Math.abs(bal.gpuMs - 3.14) / 3.14).toBeLessThanOrEqual(0.08);
    expect(g.calls.slice(0, 2)).toEqual([1, 1]);
  });

  it('keeps a start that is within the tolerance without re-solving', async () => {
    const g = fakeGpu(0, 0.01, 0, 1);
    const bal = await balanceIterations(g.gpuAt, 10.4, { probeIterations: 8, maxIterations: 1 << 16, start: 1000, model: { fixedMs: 0, perIterationMs: 0.02 } });
    expect(bal.iterations).toBe(1000);
    expect(g.calls).toEqual([1000]);
  });
});

describe('the no-op device (the library\'s own host cost per chunk, P5)', () => {
  it('runs the chunk loop, checks what the library encoded, and reports microseconds', async () => {
    const r = await noopChunkCost(20);
    expect(r.check.ok, r.check.mismatch).toBe(true);
    expect(r.check.detail).toMatch(/200 chunks encoded copy\(up -> in\), dispatch\(64\), copy\(out -> down\), submit/);
    expect(r.us).toBeGreaterThan(0);
    expect(r.roundUs).toBeGreaterThanOrEqual(r.us);
  });

  it('rejects an encoding that is out of order, on the wrong buffers, or the wrong size', () => {
    const { device } = createNoopDevice();
    const [up, din, dout, down] = [0, 1, 2, 3].map(() => device.createBuffer({ size: 64, usage: 0 })) as unknown as NoopBuffer[];
    const good: NoopCommand[] = [
      { kind: 'copy', src: up!, dst: din!, size: 64 },
      { kind: 'dispatch', bindGroup: null, x: 4 },
      { kind: 'copy', src: dout!, dst: down!, size: 64 },
      { kind: 'submit' },
    ];
    const g = (b: NoopBuffer | undefined): GPUBuffer => b as unknown as GPUBuffer;
    expect(checkNoopChunk(good, g(up), g(din), g(dout), g(down), 64, 4)).toBe('');
    expect(checkNoopChunk([good[1]!, good[0]!, good[2]!, good[3]!], g(up), g(din), g(dout), g(down), 64, 4)).toMatch(/expected copy, dispatch, copy, submit/);
    expect(checkNoopChunk(good, g(up), g(dout), g(din), g(down), 64, 4)).toMatch(/upload copied the wrong/);
    expect(checkNoopChunk(good, g(up), g(din), g(dout), g(down), 32, 4)).toMatch(/wrong buffers or size/);
    expect(checkNoopChunk(good, g(up), g(din), g(dout), g(down), 64, 8)).toMatch(/dispatched 4 workgroups, expected 8/);
  });
});
