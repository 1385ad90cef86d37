/**
 * Host-side profile of the chunked pipeline (a diagnostic, not a metric): where the host's time
 * goes per chunk in the library pipeline and in the hand-written raw WebGPU one: inside each Dawn
 * call (submit, mapAsync, unmap, encoder calls, error scopes), in our JS, filling, reading out, and
 * waiting. Also host copy bandwidth by copy size (JS to JS, JS into a mapped upload buffer, a mapped
 * read-back buffer into JS), since large copies can take another path in the C library's memcpy.
 *
 *   node dist/cli/diag-host.mjs [--mib 64] [--chunks 8,16,32] [--ring 4] [--batch 1,2] [--ramp 0]
 *     [--repeats 5] [--order lib,raw,sync,host] [--out DIR]
 *
 * `--ramp L` cuts the first and last chunk into pieces down to 1/2^L, as P1's ramped plans do.
 * `--raw-first` makes the raw pipeline's buffers before the library's (default: the library's first).
 * `raw2` in `--order` adds a second raw WebGPU pipeline (own buffers) as an A/A control: the spread
 * of raw2 / raw, paired by repeat, is the noise floor for library / raw.
 * `--memcpy-ab R` (default 0: off) times R rounds of the same memcpy into and out of the library's
 * pinned buffers and into and out of raw mapped buffers, in a shuffled order per round: whether the
 * buffers, rather than the code around them, make the library's fill and read-out slower.
 *
 * Writes diag-host.json to --out when given.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { chooseVulkanDriver } from './vulkan';
import { createNodeContext, type Context } from '../src/node';
import { BufferUsage, MapMode } from '../src/index';
import { LibPipeline, RawPipeline, SyncPass, makePlan, withBatch, planText, checkPipelineOutput } from './perf/pipeline';
import { median, num, randomF32 } from './perf/common';
import { GcLog } from './gc';
import { rng } from './reference';
import { checkBytes } from './scenarios/common';
import { balanceIterations } from './perf/balance';

const MiB = 1024 * 1024;

/** Wraps every method of `proto` named in `names`, adding its time to `acc[label]`. */
function instrument(proto: object, cls: string, names: string[], acc: Map<string, { ms: number; calls: number }>): void {
  for (const name of names) {
    const orig = (proto as Record<string, unknown>)[name];
    if (typeof orig !== 'function') continue;
    const key = `${cls}.${name}`;
    (proto as Record<string, unknown>)[name] = function (this: unknown, ...args: unknown[]): unknown {
      const t = performance.now();
      try {
        return (orig as (...a: unknown[]) => unknown).apply(this, args);
      } finally {
        const e = acc.get(key) ?? { ms: 0, calls: 0 };
        e.ms += performance.now() - t;
        e.calls++;
        acc.set(key, e);
      }
    };
  }
}

function installProfiler(ctx: Context): Map<string, { ms: number; calls: number }> {
  const acc = new Map<string, { ms: number; calls: number }>();
  const d = ctx.device;
  const buf = d.createBuffer({ size: 16, usage: BufferUsage.MAP_READ | BufferUsage.COPY_DST });
  const enc = d.createCommandEncoder();
  const pass = enc.beginComputePass();
  pass.end();
  const cb = enc.finish();
  instrument(Object.getPrototypeOf(d.queue), 'queue', ['submit', 'onSubmittedWorkDone', 'writeBuffer'], acc);
  instrument(Object.getPrototypeOf(d), 'device', ['createCommandEncoder', 'pushErrorScope', 'popErrorScope', 'createBindGroup', 'createBuffer'], acc);
  instrument(Object.getPrototypeOf(enc), 'encoder', ['copyBufferToBuffer', 'beginComputePass', 'finish', 'resolveQuerySet'], acc);
  instrument(Object.getPrototypeOf(pass), 'pass', ['setPipeline', 'setBindGroup', 'dispatchWorkgroups', 'end'], acc);
  instrument(Object.getPrototypeOf(buf), 'buffer', ['mapAsync', 'unmap', 'getMappedRange', 'destroy'], acc);
  void cb;
  buf.destroy();
  return acc;
}

function snapshot(acc: Map<string, { ms: number; calls: number }>): Map<string, { ms: number; calls: number }> {
  return new Map([...acc].map(([k, v]) => [k, { ...v }]));
}

function diff(a: Map<string, { ms: number; calls: number }>, b: Map<string, { ms: number; calls: number }>): Record<string, { ms: number; calls: number }> {
  const out: Record<string, { ms: number; calls: number }> = {};
  for (const [k, v] of b) {
    const o = a.get(k) ?? { ms: 0, calls: 0 };
    if (v.calls - o.calls > 0) out[k] = { ms: v.ms - o.ms, calls: v.calls - o.calls };
  }
  return out;
}

/** Host copy bandwidth (GB/s) of `total` bytes copied in pieces of `piece` bytes. */
async function copyBandwidth(ctx: Context, total: number, pieces: number[], repeats: number): Promise<Record<string, number | string>[]> {
  const d = ctx.device;
  const src = randomF32(7, total / 4);
  const dst = new Float32Array(total / 4);
  const rows: Record<string, number | string>[] = [];
  for (const piece of pieces) {
    const up = d.createBuffer({ size: piece, usage: BufferUsage.MAP_WRITE | BufferUsage.COPY_SRC, mappedAtCreation: true, label: 'diag.up' });
    const down = d.createBuffer({ size: piece, usage: BufferUsage.MAP_READ | BufferUsage.COPY_DST, label: 'diag.down' });
    // Put the same bytes in the read-back buffer through the GPU once, so reads touch real data.
    new Float32Array(up.getMappedRange()).set(src.subarray(0, piece / 4));
    up.unmap();
    const e = d.createCommandEncoder();
    e.copyBufferToBuffer(up, 0, down, 0, piece);
    d.queue.submit([e.finish()]);
    await Promise.all([up.mapAsync(MapMode.WRITE), down.mapAsync(MapMode.READ)]);
    const upView = new Float32Array(up.getMappedRange());
    const downView = new Float32Array(down.getMappedRange());
    const jsPiece = new Float32Array(piece / 4);
    const n = piece / 4;
    const k = total / piece;
    const time = (f: () => void): number => {
      const ts: number[] = [];
      for (let r = 0; r < repeats; r++) {
        const t = performance.now();
        f();
        ts.push(performance.now() - t);
      }
      return total / 1e6 / Math.min(...ts);
    };
    rows.push({
      piece: piece >= MiB ? `${piece / MiB} MiB` : `${piece / 1024} KiB`,
      'js->js piece GB/s': +time(() => {
        for (let i = 0; i < k; i++) jsPiece.set(src.subarray(i * n, (i + 1) * n));
      }).toFixed(2),
      'js->js strided GB/s': +time(() => {
        for (let i = 0; i < k; i++) dst.set(src.subarray(i * n, (i + 1) * n), i * n);
      }).toFixed(2),
      'js->mapped upload GB/s': +time(() => {
        for (let i = 0; i < k; i++) upView.set(src.subarray(i * n, (i + 1) * n));
      }).toFixed(2),
      'mapped readback->js GB/s': +time(() => {
        for (let i = 0; i < k; i++) dst.set(downView, i * n);
      }).toFixed(2),
    });
    up.unmap();
    down.unmap();
    up.destroy();
    down.destroy();
  }
  return rows;
}

/**
 * Fill (JS -> mapped upload buffer) and read-out (mapped read-back buffer -> JS) of `bytes`, on the
 * library's pinned buffers and on raw WebGPU buffers. Views are made before the timer, so only the
 * memcpy is timed. The four blocks run in a seeded shuffled order each round, so that no variant
 * always follows the same one (with a fixed order, SwiftShader showed 5-8% that followed the
 * position, not the buffer). Each variant's last read-out is checked against the source.
 */
async function memcpyAB(ctx: Context, bytes: number, rounds: number): Promise<{ rows: Record<string, string>[]; ok: boolean; detail: string }> {
  const d = ctx.device;
  const n = bytes / 4;
  const src = randomF32(13, n);
  const out = new Float32Array(n);
  // The read-outs copy from one device buffer holding the source: through a stream into the pinned
  // buffer, and by hand into the raw one.
  const dev = ctx.alloc(bytes, { label: 'memcpy-ab.src' });
  d.queue.writeBuffer(dev.buffer, 0, src.buffer as ArrayBuffer, src.byteOffset, src.byteLength);
  const stream = ctx.createStream({ label: 'memcpy-ab', nonBlocking: true });
  const up = ctx.allocHost(bytes, 'upload', { label: 'memcpy-ab.pinned-up' });
  const down = ctx.allocHost(bytes, 'download', { label: 'memcpy-ab.pinned-down' });
  const rawUp = d.createBuffer({ size: bytes, usage: BufferUsage.MAP_WRITE | BufferUsage.COPY_SRC, mappedAtCreation: true, label: 'memcpy-ab.raw-up' });
  rawUp.unmap();
  const rawDown = d.createBuffer({ size: bytes, usage: BufferUsage.MAP_READ | BufferUsage.COPY_DST, label: 'memcpy-ab.raw-down' });
  const t: Record<string, number[]> = { 'library fill': [], 'raw fill': [], 'library read-out': [], 'raw read-out': [] };
  const bad: string[] = [];
  const bytesOf = (x: Float32Array): Uint8Array => new Uint8Array(x.buffer, x.byteOffset, x.byteLength);
  /** Times the memcpy src -> view. */
  const fill = (what: string, view: Float32Array): void => {
    const a = performance.now();
    view.set(src);
    t[what]!.push(performance.now() - a);
  };
  /** Times the memcpy view -> out (cleared first); the last round's is checked against src. */
  const readOut = (what: string, view: Float32Array, last: boolean): void => {
    out.fill(0);
    const a = performance.now();
    out.set(view);
    t[what]!.push(performance.now() - a);
    if (!last) return;
    const c = checkBytes(what, bytesOf(out), bytesOf(src));
    if (!c.ok) bad.push(c.mismatch ?? what);
  };
  const blocks: [string, (last: boolean) => Promise<void>][] = [
    ['library fill', async () => {
      await up.ready();
      fill('library fill', up.f32);
      up.unmap();
    }],
    ['raw fill', async () => {
      await rawUp.mapAsync(MapMode.WRITE);
      fill('raw fill', new Float32Array(rawUp.getMappedRange()));
      rawUp.unmap();
    }],
    ['library read-out', async (last) => {
      stream.download(dev, down);
      await stream.synchronize();
      await down.ready();
      readOut('library read-out', down.f32, last);
      down.unmap();
    }],
    ['raw read-out', async (last) => {
      const e = d.createCommandEncoder();
      e.copyBufferToBuffer(dev.buffer, 0, rawDown, 0, bytes);
      d.queue.submit([e.finish()]);
      await rawDown.mapAsync(MapMode.READ);
      readOut('raw read-out', new Float32Array(rawDown.getMappedRange()), last);
      rawDown.unmap();
    }],
  ];
  const order = rng(0x9e3779b9);
  for (let r = 0; r < rounds; r++) {
    const shuffled = blocks.map((b) => [order.next(), b] as const).sort((x, y) => x[0] - y[0]).map((x) => x[1]);
    for (const [, f] of shuffled) await f(r === rounds - 1);
  }
  stream.destroy();
  up.destroy();
  down.destroy();
  rawUp.destroy();
  rawDown.destroy();
  dev.destroy();
  const skip = Math.min(5, Math.floor(rounds / 4));
  const rows = Object.entries(t).map(([what, v]) => {
    const w = v.slice(skip);
    const m = median(w);
    return { what, 'median ms': num(m), 'min ms': num(Math.min(...w)), 'GB/s (median)': num(bytes / 1e6 / m) };
  });
  return { rows, ok: bad.length === 0, detail: bad.length ? bad.join('; ') : `both read-outs equal the source (${n} floats)` };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      mib: { type: 'string', default: '64' },
      chunks: { type: 'string', default: '8,16,32' },
      ring: { type: 'string', default: '4' },
      batch: { type: 'string', default: '1' },
      ramp: { type: 'string', default: '0' },
      'raw-first': { type: 'boolean', default: false },
      'memcpy-ab': { type: 'string', default: '0' },
      repeats: { type: 'string', default: '5' },
      iterations: { type: 'string', default: '0' },
      copyTotal: { type: 'string', default: '256' },
      copy: { type: 'string', default: 'yes' },
      order: { type: 'string', default: 'lib,raw,sync,host' },
      pipeline: { type: 'string', default: 'yes' },
      out: { type: 'string' },
    },
  });
  const bytes = Number(values.mib) * MiB;
  const n = bytes / 4;
  const ring = Number(values.ring);
  const repeats = Number(values.repeats);
  console.log(`vulkan: ${chooseVulkanDriver()}`);
  const ctx = await createNodeContext({ label: 'diag-host' });
  const info = ctx.adapterInfo;
  console.log(`device: ${info.vendor} ${info.architecture} ${info.description}`);
  const result: Record<string, unknown> = { device: `${info.vendor} ${info.architecture} ${info.description}`, date: new Date().toISOString() };

  if (values.copy === 'yes') {
    console.log(`\nhost copy bandwidth by piece size (GLIBC_TUNABLES=${process.env['GLIBC_TUNABLES'] ?? ''}):`);
    const total = Number(values.copyTotal) * MiB;
    const copyRows = await copyBandwidth(ctx, total, [...new Set([256 * 1024, MiB, 4 * MiB, 16 * MiB, 64 * MiB, 96 * MiB, 128 * MiB, 256 * MiB, total])].filter((p) => p <= total && total % p === 0), 3);
    console.table(copyRows);
    result['copy'] = copyRows;
  }
  const abRounds = Number(values['memcpy-ab']);
  if (abRounds > 0) {
    const ab = await memcpyAB(ctx, Math.min(bytes, 16 * MiB), abRounds);
    console.log(`\nmemcpy on the library's pinned buffers vs raw mapped buffers, ${abRounds} rounds in shuffled order (${num(Math.min(bytes, 16 * MiB) / MiB)} MiB):`);
    console.table(ab.rows);
    console.log(`verified: ${ab.ok ? '' : 'MISMATCH: '}${ab.detail}`);
    result['memcpyAB'] = ab;
    if (!ab.ok) process.exitCode = 1;
  }
  if (values.pipeline !== 'yes') {
    if (values.out) writeFileSync(join(values.out, 'diag-host.json'), JSON.stringify(result, null, 1));
    ctx.destroy();
    return;
  }

  const acc = installProfiler(ctx);
  const gc = new GcLog();
  const src = randomF32(11, n);
  const out = new Float32Array(n);
  // Iterations: as given, else balanced against the host work (the balancer P1 and P5 use).
  let iterations = Number(values.iterations);
  const sync = new SyncPass(ctx, n, 1);
  if (!iterations) {
    const probe = new LibPipeline(ctx, makePlan(n, 8, ring, 1), 'fit');
    const host = await probe.hostMs(src, out, 2);
    const g = (it: number): Promise<number> => probe.gpuMsAt(it, sync.up, sync.down, 1);
    // A 2-point fit on 1 and 257 iterations once gave GPU 160 ms against 86 ms of host work at
    // 256 MiB on the H100: the increment was inside the noise (see bench/perf/balance.ts).
    const bal = await balanceIterations(g, host, { probeIterations: 256, maxIterations: 1 << 16 });
    iterations = bal.iterations;
    console.log(`\nfit: host ${num(host)} ms, GPU ${num(bal.gpuMs)} ms at ${iterations} iterations (probes: ${bal.probes.map(([it, ms]) => `${it} -> ${num(ms)} ms`).join(', ')})`);
    await probe.destroy();
  }
  sync.iterations = iterations;
  const cache = new Map<number, number>();
  const rows: Record<string, unknown>[] = [];
  for (const c of values.chunks!.split(',').map(Number)) {
    for (const batch of values.batch!.split(',').map(Number)) {
      const plan = withBatch(makePlan(n, c, ring, iterations, Number(values.ramp)), batch, batch > 1 ? Math.max(ring, 2 * batch) : ring);
      // --raw-first: the raw pipeline's buffers are made first, to see whether a difference in
      // copy speed follows the buffers (where the driver placed them) rather than the code.
      const rawFirst = values['raw-first'] === true;
      const raw0 = rawFirst ? new RawPipeline(ctx, plan) : null;
      const lib = new LibPipeline(ctx, plan, 'lib');
      const raw = raw0 ?? new RawPipeline(ctx, plan);
      // 'raw2' in --order: a second raw WebGPU pipeline with its own buffers, an A/A control. The
      // spread of raw2 / raw paired by repeat is the noise floor for lib / raw.
      const raw2 = values.order!.split(',').includes('raw2') ? new RawPipeline(ctx, plan) : null;
      const host = new LibPipeline(ctx, plan, 'host');
      console.log(`\norder per repeat: ${values.order}`);
      const libT: number[] = [];
      const rawT: number[] = [];
      const raw2T: number[] = [];
      const raw2Calls: Record<string, { ms: number; calls: number }>[] = [];
      const syncT: number[] = [];
      const hostT: number[] = [];
      const libCalls: Record<string, { ms: number; calls: number }>[] = [];
      const rawCalls: Record<string, { ms: number; calls: number }>[] = [];
      const libStats: (typeof lib.stats)[] = [];
      const spans: Record<'lib' | 'raw' | 'raw2', [number, number][]> = { lib: [], raw: [], raw2: [] };
      // One repeat runs the variants in --order (default lib,raw,sync,host): what ran before a
      // pipeline changes how its first chunks go (BENCHMARKS.md, "after a switch").
      const order = values.order!.split(',');
      const runs: { name: string; start: number; rows: number[][] }[] = [];
      let prev = order[order.length - 1]!;
      /** One run of the library or raw pipeline: timed and profiled after the warm-up repeat; the last one checked, its timeline kept. */
      const runPipe = async (name: 'lib' | 'raw' | 'raw2', pipe: LibPipeline | RawPipeline, times: number[], calls: Record<string, { ms: number; calls: number }>[], r: number): Promise<void> => {
        const last = r === repeats;
        pipe.timeline = last ? [] : null;
        const start = performance.now();
        const a = snapshot(acc);
        const t = await pipe.run(src, out);
        if (r > 0) {
          spans[name].push([start, performance.now()]);
          times.push(t);
          calls.push(diff(a, acc));
          if (pipe instanceof LibPipeline) libStats.push(pipe.stats);
        }
        if (last) {
          const chk = checkPipelineOutput(name, out, src, n, iterations, cache);
          if (!chk.ok) throw new Error(chk.mismatch);
          runs.push({ name: `${name} after ${prev}`, start, rows: (pipe.timeline ?? []).map((x) => [...x]) });
        }
      };
      for (let r = 0; r <= repeats; r++) {
        for (const v of order) {
          if (v === 'lib') await runPipe('lib', lib, libT, libCalls, r);
          else if (v === 'raw') await runPipe('raw', raw, rawT, rawCalls, r);
          else if (v === 'raw2' && raw2) await runPipe('raw2', raw2, raw2T, raw2Calls, r);
          else if (v === 'sync') {
            const s = await sync.run(src, out);
            if (r > 0) syncT.push(s.total);
          } else if (v === 'host') {
            const h = await host.hostOnly(src, out);
            if (r > 0) hostT.push(h);
          } else if (v.startsWith('idle')) {
            // idleN: the host sleeps N ms (the GPU idles).
            await new Promise((res) => setTimeout(res, Number(v.slice(4)) || 10));
          }
          prev = v;
        }
      }
      const gpu = (await lib.gpuOnly(sync.up, sync.down)).ms;
      const medCalls = (list: Record<string, { ms: number; calls: number }>[]): Record<string, string> => {
        const keys = new Set(list.flatMap((x) => Object.keys(x)));
        const o: Record<string, string> = {};
        for (const k of [...keys].sort()) {
          const ms = list.length ? median(list.map((x) => x[k]?.ms ?? 0)) : 0;
          const calls = list.length ? median(list.map((x) => x[k]?.calls ?? 0)) : 0;
          o[k] = `${num(ms)} ms / ${calls} = ${num((ms * 1000) / Math.max(1, calls))} us`;
        }
        return o;
      };
      const med = (xs: number[]): number => (xs.length ? median(xs) : Number.NaN);
      await GcLog.settle();
      const gcOf = (name: 'lib' | 'raw'): string => `${gc.describe(spans[name]) ?? 'not reported here'} per timed run`;
      const st = (k: keyof (typeof lib.stats)): number => med(libStats.map((x) => x[k]));
      const row = {
        plan: planText(plan),
        iterations,
        syncMs: med(syncT),
        hostMs: med(hostT),
        gpuMs: gpu,
        libMs: med(libT),
        rawMs: med(rawT),
        libSamples: libT.map(num).join('/'),
        rawSamples: rawT.map(num).join('/'),
        libStats: { waitDown: st('waitDown'), waitUp: st('waitUp'), fill: st('fill'), read: st('read'), enqueue: st('enqueue'), flush: st('flush'), waits: st('waits'), submits: st('submits') },
        libGc: gcOf('lib'),
        rawGc: gcOf('raw'),
        libDawn: medCalls(libCalls),
        rawDawn: medCalls(rawCalls),
        timelines: {} as Record<string, number[][]>,
      };
      rows.push(row);
      console.log(`\n== ${planText(plan)}: sync ${num(row.syncMs)} ms, host ${num(row.hostMs)}, gpu ${num(gpu)}, lib ${num(row.libMs)} (${row.libSamples}), raw ${num(row.rawMs)} (${row.rawSamples})`);
      // Paired by repeat: each variant ran once per repeat, so ratios within a repeat cancel drift.
      const paired = (a: number[], b: number[]): string => (a.length && a.length === b.length ? num(median(a.map((x, i) => x / b[i]!))) : 'n/a');
      console.log(`paired by repeat (median of per-repeat ratios): lib / raw ${paired(libT, rawT)}${raw2 ? `, raw2 / raw ${paired(raw2T, rawT)} (A/A control), raw2 ${num(med(raw2T))} ms (${raw2T.map(num).join('/')})` : ''}`);
      console.log('lib host stats (ms):', JSON.stringify(row.libStats, (_, v: unknown) => (typeof v === 'number' ? +v.toFixed(3) : v)));
      console.log(`GCs: lib ${row.libGc}; raw ${row.rawGc}`);
      console.log('lib Dawn calls per run:', row.libDawn);
      console.log('raw Dawn calls per run:', row.rawDawn);
      const f = (x: number): string => x.toFixed(2).padStart(7);
      console.log('timelines of the last repeat, ms from each run start: chunk: slot ready (its maps done), filled + previous read out, flushed/submitted');
      for (const run of runs) {
        console.log(`- ${run.name} (started ${num(run.start)} ms after process start, as --trace-gc counts)`);
        for (const t of run.rows) console.log(`  ${String(t[0]).padStart(3)} ${f(t[1]!)} ${f(t[2]!)} ${f(t[3]!)}`);
      }
      row.timelines = Object.fromEntries(runs.map((x) => [x.name, x.rows]));
      await lib.destroy();
      await host.destroy();
      await raw.destroy();
      await raw2?.destroy();
    }
  }
  result['pipeline'] = rows;
  gc.stop();
  await sync.destroy();
  if (values.out) writeFileSync(join(values.out, 'diag-host.json'), JSON.stringify(result, null, 1));
  ctx.destroy();
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
