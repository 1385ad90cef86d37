/**
 * `npm run soak`: a soak test of the runtime. A seeded random mix of ops (1,000,000 by default) over
 * 8 streams: pageable uploads (16 B - 4 KiB and 64 KiB - 1 MiB), pinned uploads (filled from the host
 * after `await ready()`, or from a hostFn on the uploading stream) and downloads, downloads into fresh
 * typed arrays that the program drops at once, device copies, vectorAdd and short sleep-kernel
 * launches, sync and async host functions, event record / waitEvent across streams, waitStream, and a
 * stream or context `synchronize()` every few thousand ops. Each stream reuses a handful of device
 * buffers. The whole run goes once without trace and once with `trace: true` (same seed, same ops).
 *
 * Correctness on the way: every `checkEvery` ops one stream uploads seeded random vectors, runs
 * vectorAdd and downloads the sum, through pageable or pinned transfers, a device copy, or another
 * stream ordered by an event and waitStream; a hostFn compares it with the CPU reference. A mismatch
 * or a failed op fails the run and names the seed.
 *
 * Memory: after a warm-up (with trace on: until the trace's ring of records is full), then every `sampleEvery` ops and at the end, after `ctx.synchronize()` and
 * a forced GC, one line of RSS, V8 heap used, external memory, array buffers (process.memoryUsage()),
 * device bytes (`ctx.memory.current`), staging bytes (`ctx.memory.staging`), and the fresh download
 * arrays still alive (the runtime must not keep them). Each figure is compared with the first sample
 * after warm-up; the run fails when one grows past its bound (SOAK_BOUNDS):
 *   RSS +128 MiB, heap used +32 MiB, external +64 MiB, device bytes +0 (the program's buffers are
 *   fixed), staging +64 MiB. Array buffers are printed, not bounded.
 * And the fresh download arrays still alive after synchronize() and a GC (of the latest
 * WATCHED_DOWNLOADS; the program keeps none) must be at most SOAK_HELD_DOWNLOADS: 0, where a GC can
 * be forced, at every sample. A check that cannot run is reported as not judged, with the reason:
 * the growth bounds of a run that ends inside its warm-up (no baseline), held downloads without a
 * forced GC.
 *
 *   npm run soak -- [--ops N] [--streams N] [--seed N] [--trace off|only|both] [--every N] [--sanitize]
 *
 * `--seed N` replays a run's op sequence. The npm script runs node with --expose-gc; without it the
 * runner asks V8 for `gc` itself. Like bench:node, it starts Node again with the runners'
 * environment where that is not set (bench/cli.ts, withRunnerEnv: a private XDG_RUNTIME_DIR among
 * it). Exit status: 0 nothing failed (the last line says PASS, or NOT JUDGED IN FULL and which
 * checks could not run), 1 a bound or a check failed, 2 bad usage.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { workgroupsFor, type Context, type ContextOptions, type DeviceBuffer, type GpuEvent, type PinnedBuffer, type RaceReport, type Stream } from 'webgpu-streams';
import { createNodeContext } from 'webgpu-streams/node';
import { firstMismatch, randomSeed, rng, vectorAddRef } from './reference';
import { chooseVulkanDriver } from './vulkan';
import { parseFlags, runRunner } from './cli';
import { benchKernels } from './kernels/index';

const KiB = 1024;
const MiB = 1024 * 1024;

/** How far each figure may grow over the first sample after warm-up, bytes. */
export const SOAK_BOUNDS = {
  rss: 128 * MiB,
  heapUsed: 32 * MiB,
  external: 64 * MiB,
  device: 0,
  staging: 64 * MiB,
} as const;

/** Fresh download arrays that may be alive after synchronize() and a GC: the program drops each at once, and the runtime must not keep them. */
export const SOAK_HELD_DOWNLOADS = 0;

/** Elements of each stream's vectorAdd buffers (a, b, out) and of the correctness checks. */
const VEC = 4096;
/** Elements of each stream's sleep-kernel buffer. */
const SLEEP_N = 256;
/** `iterations` of the sleep launches: a few pipelines, each launch short. */
const SLEEP_ITERATIONS = [8, 32, 128] as const;
/** Bytes of each of the two large device buffers per stream (medium uploads, copies, downloads). */
const BIG = 1 * MiB;
/** Bytes of every pinned buffer. */
const PINNED = 64 * KiB;
/** Pinned upload buffers shared by all streams, filled from the host after `await ready()`. */
const SHARED_PINNED = 4;
/** Events per stream, recorded at random and waited on by other streams. */
const EVENTS_PER_STREAM = 3;
/** Ops between synchronize() calls: a random count in this range. */
const SYNC_GAP = [2000, 4000] as const;
/** Ops between yields to the event loop (so completions come back while the program enqueues). */
const YIELD_GAP = [32, 256] as const;
/** Fresh download arrays watched (the most recent ones) for the held-downloads figure. */
const WATCHED_DOWNLOADS = 16384;

/** The op mix: relative weights of each kind of random op. */
const MIX = {
  uploadSmall: 16,
  uploadMedium: 2,
  uploadPinnedHostFn: 4,
  uploadPinnedShared: 1,
  downloadPinned: 4,
  downloadSmall: 12,
  downloadMedium: 1,
  copy: 13,
  vectorAdd: 12,
  sleep: 6,
  hostFn: 8,
  hostFnAsync: 4,
  record: 8,
  waitEvent: 6,
  waitStream: 3,
} as const;
export type SoakOpKind = keyof typeof MIX;
const MIX_KINDS = Object.keys(MIX) as SoakOpKind[];
const MIX_TOTAL = MIX_KINDS.reduce((s, k) => s + MIX[k], 0);

/** Makes a context for one mode (the CLI: createNodeContext; the test: its fixture). */
export type SoakContextFactory = (options: Pick<ContextOptions, 'trace' | 'label' | 'sanitize'>) => Promise<Context>;

export interface SoakOptions {
  /** Ops per mode (every enqueue counts one, the checks' too). */
  ops: number;
  streams: number;
  seed: number;
  /** Which modes to run, in order: trace off, trace on. */
  modes: readonly ('off' | 'on')[];
  /** Run with the stream sanitizer on: any race it reports fails the run (the program orders every access). */
  sanitize?: boolean;
  /** Ops between memory samples. @default 100000 */
  sampleEvery?: number;
  /** Ops of warm-up before the baseline sample. @default min(10000, ops / 10) */
  warmupOps?: number;
  /**
   * The trace's `limit` with trace on. The trace keeps up to 1.25x that many records by design,
   * so with trace on the warm-up lasts until its ring is full: growth after that is a leak.
   * @default 100000 (the library's default)
   */
  traceLimit?: number;
  /** Ops between correctness checks. @default 1000 */
  checkEvery?: number;
  createContext: SoakContextFactory;
  /** Where lines go. @default console.log */
  log?: (line: string) => void;
}

/** The figures of one sample, bytes (heldDownloads: a count). */
export interface SoakSample {
  ops: number;
  rss: number;
  heapUsed: number;
  external: number;
  arrayBuffers: number;
  device: number;
  staging: number;
  /** Of the last WATCHED_DOWNLOADS fresh download arrays, those still alive after GC (the program keeps none). */
  heldDownloads: number;
}

export interface SoakModeResult {
  trace: boolean;
  ops: number;
  /** Ops per second, sampling (synchronize + GC) excluded. */
  opsPerSec: number;
  samples: SoakSample[];
  /** Correctness checks that ran and passed. */
  checks: number;
  /** Figures past their bound: "heap grew +40.1 MiB by op 300000, past its bound +32.0 MiB (over by 8.1 MiB)". */
  violations: string[];
  /** Mismatches and failed ops (the mode stops at the first). */
  failures: string[];
  /** Checks that could not run, each with the reason: "growth bounds: no baseline sample after the warm-up ...". */
  notJudged: string[];
  /** Ops enqueued, by kind of random op (checks apart). */
  counts: Record<SoakOpKind, number>;
  ok: boolean;
}

export interface SoakResult {
  seed: number;
  modes: SoakModeResult[];
  /** Nothing failed. */
  ok: boolean;
  /** Every check of every mode ran (none not judged). */
  judged: boolean;
}

type BoundedFigure = keyof typeof SOAK_BOUNDS;
const FIGURES: { key: keyof SoakSample; name: string; bound?: BoundedFigure }[] = [
  { key: 'rss', name: 'RSS', bound: 'rss' },
  { key: 'heapUsed', name: 'heap', bound: 'heapUsed' },
  { key: 'external', name: 'external', bound: 'external' },
  { key: 'arrayBuffers', name: 'arrayBuffers' },
  { key: 'device', name: 'device', bound: 'device' },
  { key: 'staging', name: 'staging', bound: 'staging' },
];

const mib = (bytes: number): string => (bytes / MiB).toFixed(1);
const signedMib = (bytes: number): string => `${bytes >= 0 ? '+' : '-'}${mib(Math.abs(bytes))} MiB`;

/** The bounds in words, for the header. */
export function describeBounds(): string {
  const growth = FIGURES.filter((f) => f.bound)
    .map((f) => `${f.name} ${signedMib(SOAK_BOUNDS[f.bound!])}`)
    .join(', ');
  return `growth over the first sample after warm-up: ${growth}; fresh download arrays alive after synchronize() and GC (of the last ${WATCHED_DOWNLOADS}): at most ${SOAK_HELD_DOWNLOADS}`;
}

/** A full GC: `global.gc` (node --expose-gc), else V8's gc asked for at run time; null where neither works. */
function findGc(): (() => void) | null {
  const g = (globalThis as { gc?: () => void }).gc;
  if (typeof g === 'function') return g;
  try {
    setFlagsFromString('--expose-gc');
    const f = runInNewContext('gc') as unknown;
    return typeof f === 'function' ? (f as () => void) : null;
  } catch {
    return null;
  }
}

const heldWords = (held: number, ops: number): string =>
  `${held} fresh download arrays alive after synchronize() and GC at op ${ops}, past the bound ${SOAK_HELD_DOWNLOADS} (over by ${held - SOAK_HELD_DOWNLOADS})`;

const nextTask = (): Promise<void> => new Promise((r) => setImmediate(r));

/** What one stream of the soak owns. */
interface Lane {
  stream: Stream;
  big: [DeviceBuffer, DeviceBuffer];
  vecA: DeviceBuffer;
  vecB: DeviceBuffer;
  vecOut: DeviceBuffer;
  sleepBuf: DeviceBuffer;
  /** Filled only from host functions of this stream, just before its upload. */
  pinUp: PinnedBuffer;
  /** Downloaded into and read only on this stream. */
  pinDown: PinnedBuffer;
  events: GpuEvent[];
}

/** Runs the soak once per mode; never throws for a failed bound or check (see `ok`). */
export async function runSoak(options: SoakOptions): Promise<SoakResult> {
  const log = options.log ?? ((line: string) => console.log(line));
  const sampleEvery = options.sampleEvery ?? 100_000;
  const warmupOps = options.warmupOps ?? Math.min(10_000, Math.floor(options.ops / 10));
  const traceLimit = options.traceLimit ?? 100_000;
  const checkEvery = options.checkEvery ?? 1000;
  // With trace on, the baseline comes once the trace's ring of records is full.
  const traceWarmup = Math.max(warmupOps, Math.ceil(traceLimit * 1.25) + 1000);
  const warmups = options.modes.map((mode) => {
    const ops = mode === 'on' ? traceWarmup : warmupOps;
    const notes = [...(mode === 'on' ? ['until the trace is full'] : []), ...(ops >= options.ops ? ['more than the run: growth not judged'] : [])];
    return `${ops} ops${options.modes.length > 1 || mode === 'on' ? ` with trace ${mode}` : ''}${notes.length ? ` (${notes.join('; ')})` : ''}`;
  });
  log(`soak: seed ${options.seed}; ${options.ops} ops over ${options.streams} streams per mode; trace ${options.modes.join(', then ')}${options.sanitize ? '; stream sanitizer on' : ''}; warm-up ${warmups.join(', ')}; a sample every ${sampleEvery} ops; a check every ${checkEvery} ops`);
  log(`soak: bounds: ${describeBounds()}`);
  const gc = findGc();
  if (!gc) log('soak: no forced GC (run node with --expose-gc): the figures include garbage, and held downloads are not checked');
  const modes: SoakModeResult[] = [];
  for (const mode of options.modes) {
    const trace = mode === 'on';
    const warmup = trace ? traceWarmup : warmupOps;
    modes.push(await runMode({ ...options, sampleEvery, warmupOps: warmup, checkEvery, log, gc, trace, traceLimit }));
  }
  const ok = modes.every((m) => m.ok);
  const judged = modes.every((m) => m.notJudged.length === 0);
  const rates = modes.map((m) => `trace ${m.trace ? 'on' : 'off'} ${Math.round(m.opsPerSec)} ops/s`).join(', ');
  const unjudged = modes.flatMap((m) => m.notJudged.map((why) => `trace ${m.trace ? 'on' : 'off'}: ${why}`));
  log(`soak: ${!ok ? 'FAIL' : judged ? 'PASS' : 'NOT JUDGED IN FULL'}: ${rates} (${options.ops} ops, ${options.streams} stream${options.streams === 1 ? '' : 's'}, seed ${options.seed})${unjudged.length ? `; not judged: ${unjudged.join('; ')}` : ''}`);
  return { seed: options.seed, modes, ok, judged };
}

interface ModeOptions extends SoakOptions {
  sampleEvery: number;
  warmupOps: number;
  checkEvery: number;
  log: (line: string) => void;
  gc: (() => void) | null;
  trace: boolean;
  traceLimit: number;
}

async function runMode(o: ModeOptions): Promise<SoakModeResult> {
  const tag = `soak [trace ${o.trace ? 'on' : 'off'}${o.sanitize ? ', sanitizer on' : ''}]`;
  // Waits on events not recorded yet are part of the mix (they order nothing, as in CUDA): counted, not failed.
  let races = 0;
  let unrecordedWaits = 0;
  const raced = (r: RaceReport): void => {
    if (r.kind !== 'race') unrecordedWaits++;
    else if (races++ === 0) o.log(`${tag}: race reported: ${r.message}`);
  };
  const ctx = await o.createContext({ trace: o.trace ? { limit: o.traceLimit } : false, label: `soak trace ${o.trace ? 'on' : 'off'}`, ...(o.sanitize ? { sanitize: raced } : {}) });
  const until = o.trace ? ' (until the trace is full)' : '';
  if (o.warmupOps >= o.ops) {
    o.log(`${tag}: ${o.trace ? `trace limit ${o.traceLimit} records; ` : ''}warm-up ${o.warmupOps} ops${until}, more than the run's ${o.ops}: no baseline, growth not judged${o.trace ? ` (--ops above ${o.warmupOps} or a smaller --trace-limit judges it)` : ''}`);
  } else if (o.trace) o.log(`${tag}: trace limit ${o.traceLimit} records; warm-up ${o.warmupOps} ops${until}`);
  const info = ctx.adapterInfo;
  o.log(`${tag}: adapter ${[info.vendor, info.architecture, info.description].filter(Boolean).join(' / ') || 'unknown'}`);
  const r = rng(o.seed);
  const n = o.streams;
  const counts = Object.fromEntries(MIX_KINDS.map((k) => [k, 0])) as Record<SoakOpKind, number>;
  const failures: string[] = [];
  const samples: SoakSample[] = [];
  const worst = new Map<BoundedFigure, { growth: number; ops: number }>();
  let worstHeld = { held: 0, ops: 0 };
  let checks = 0;
  let done = 0;
  let sampleMs = 0;
  // The memory of the latest fresh download arrays, watched without being kept (a WeakRef would keep
  // its target to the end of the job that made or read it): after a GC, what lives is held by the runtime.
  const watched = new Set<number>();
  const collected = new FinalizationRegistry<number>((id) => watched.delete(id));
  let created = 0;
  const fail = (what: string): void => {
    if (failures.length === 0) o.log(`${tag}: FAIL at op ${done}: ${what} (seed ${o.seed})`);
    failures.push(what);
  };
  ctx.device.addEventListener('uncapturederror', (e) => fail(`WebGPU error: ${(e as GPUUncapturedErrorEvent).error.message}`));

  // Source bytes of every upload: random, made once; uploads take views of it.
  const src = new Uint8Array(r.u32Array(BIG / 4).buffer);
  const lanes: Lane[] = Array.from({ length: n }, (_, i) => {
    const label = `soak${i}`;
    return {
      stream: ctx.createStream({ label, priority: -(i % 3), nonBlocking: i % 2 === 1 }),
      big: [ctx.alloc(BIG, { label: `${label}.big0` }), ctx.alloc(BIG, { label: `${label}.big1` })],
      vecA: ctx.alloc(VEC * 4, { label: `${label}.a` }),
      vecB: ctx.alloc(VEC * 4, { label: `${label}.b` }),
      vecOut: ctx.alloc(VEC * 4, { label: `${label}.out` }),
      sleepBuf: ctx.alloc(SLEEP_N * 4, { label: `${label}.sleep` }),
      pinUp: ctx.allocHost(PINNED, 'upload', { label: `${label}.pinUp` }),
      pinDown: ctx.allocHost(PINNED, 'download', { label: `${label}.pinDown` }),
      events: Array.from({ length: EVENTS_PER_STREAM }, (_, k) => ctx.createEvent({ label: `${label}.e${k}` })),
    };
  });
  const shared = Array.from({ length: SHARED_PINNED }, (_, i) => ctx.allocHost(PINNED, 'upload', { label: `soak.shared${i}` }));
  let nextShared = 0;
  const vectorAdd = ctx.kernels.vectorAdd;
  const sleep = benchKernels(ctx).sleep;
  const vecGroups = workgroupsFor(VEC, 256);
  const sleepGroups = workgroupsFor(SLEEP_N, 64);

  const int = (lo: number, hi: number): number => lo + Math.floor(r.next() * (hi - lo + 1));
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r.next() * xs.length)]!;
  /** A multiple of 4 in [lo, hi]. */
  const size4 = (lo: number, hi: number): number => int(Math.ceil(lo / 4), Math.floor(hi / 4)) * 4;
  /** A 4-aligned offset at which `size` bytes fit in `total`. */
  const offset4 = (size: number, total: number): number => int(0, Math.floor((total - size) / 4)) * 4;
  const view = (size: number): Uint8Array => src.subarray(offset4(size, BIG)).subarray(0, size);
  const other = (i: number): number => (n === 1 ? i : (i + int(1, n - 1)) % n);
  const buffersOf = (l: Lane): DeviceBuffer[] => [l.big[0], l.big[1], l.vecA, l.vecB, l.vecOut];
  const freshDownload = (size: number): ArrayBufferView => {
    const dst = r.next() < 0.5 ? new Uint8Array(size) : new Float32Array(size / 4);
    const id = created++;
    watched.add(id);
    watched.delete(id - WATCHED_DOWNLOADS);
    collected.register(dst.buffer, id); // the memory: a view of it holds it too
    return dst;
  };

  /**
   * One random op of the mix on a random stream; returns the ops it enqueued. Synchronous but for
   * the shared pinned upload (it awaits `ready()`): an await per op would let the scheduler flush
   * after every op, and the mix would never batch.
   */
  const randomOp = (): number | Promise<number> => {
    let x = r.next() * MIX_TOTAL;
    let kind: SoakOpKind = MIX_KINDS[0]!;
    for (const k of MIX_KINDS) {
      if (x < MIX[k]) {
        kind = k;
        break;
      }
      x -= MIX[k];
    }
    counts[kind]++;
    const i = int(0, n - 1);
    const l = lanes[i]!;
    const s = l.stream;
    switch (kind) {
      case 'uploadSmall': {
        const size = size4(16, 4 * KiB);
        const dst = pick(buffersOf(l));
        s.upload(view(size), dst, { dstOffset: offset4(size, dst.size), size });
        return 1;
      }
      case 'uploadMedium': {
        const size = size4(64 * KiB, BIG);
        const dst = pick(l.big);
        s.upload(view(size), dst, { dstOffset: offset4(size, BIG), size });
        return 1;
      }
      case 'uploadPinnedHostFn': {
        const size = size4(4, PINNED);
        const from = offset4(size, BIG);
        const dst = pick(l.big);
        const p = l.pinUp;
        s.hostFn(() => p.bytes.set(src.subarray(from, from + size)));
        s.upload(p, dst, { dstOffset: offset4(size, BIG), size });
        return 2;
      }
      case 'uploadPinnedShared': {
        const size = size4(4, PINNED);
        const from = offset4(size, BIG);
        const dst = pick(l.big);
        const dstOffset = offset4(size, BIG);
        const p = shared[nextShared++ % SHARED_PINNED]!;
        return p.ready().then(() => {
          p.bytes.set(src.subarray(from, from + size));
          s.upload(p, dst, { dstOffset, size });
          return 1;
        });
      }
      case 'downloadPinned': {
        const size = size4(4, PINNED);
        const from = pick(l.big);
        s.download(from, l.pinDown, { srcOffset: offset4(size, BIG), size });
        return 1;
      }
      case 'downloadSmall':
      case 'downloadMedium': {
        const size = kind === 'downloadSmall' ? size4(16, 4 * KiB) : size4(64 * KiB, BIG);
        const from = kind === 'downloadSmall' ? pick(buffersOf(l)) : pick(l.big);
        s.download(from, freshDownload(size), { srcOffset: offset4(size, from.size), size });
        return 1;
      }
      case 'copy': {
        const bufs = buffersOf(l);
        const a = int(0, bufs.length - 1);
        const b = (a + int(1, bufs.length - 1)) % bufs.length;
        const from = bufs[a]!, to = bufs[b]!;
        const size = size4(4, Math.min(from.size, to.size, 256 * KiB));
        s.copy(from, to, { srcOffset: offset4(size, from.size), dstOffset: offset4(size, to.size), size });
        return 1;
      }
      case 'vectorAdd': {
        const vs = [l.vecA, l.vecB, l.vecOut];
        const out = int(0, 2);
        const ins = vs.filter((_, k) => k !== out);
        s.launch(vectorAdd, { bindings: [pick(ins), pick(ins), vs[out]!], workgroups: vecGroups });
        return 1;
      }
      case 'sleep':
        s.launch(sleep, { bindings: [l.sleepBuf], workgroups: sleepGroups, constants: { iterations: pick(SLEEP_ITERATIONS) } });
        return 1;
      case 'hostFn':
        s.hostFn(() => {});
        return 1;
      case 'hostFnAsync':
        s.hostFn(r.next() < 0.5 ? async () => {} : () => nextTask());
        return 1;
      case 'record':
        s.record(pick(l.events));
        return 1;
      case 'waitEvent':
        s.waitEvent(pick(lanes[other(i)]!.events));
        return 1;
      case 'waitStream':
        s.waitStream(lanes[other(i)]!.stream);
        return 1;
    }
  };

  /**
   * A correctness check on lane `c % n`: seeded vectors a and b, out = a + b on the GPU, compared
   * with the CPU reference in a hostFn after the download. The variant (c % 8) picks a's path
   * (pageable, pinned filled by a hostFn, or uploaded by another stream and copied over after an
   * event, that stream then waiting for the copy) and the download (fresh array or pinned).
   */
  const enqueueCheck = (c: number): number => {
    const l = lanes[c % n]!;
    const s = l.stream;
    const variant = c % 8;
    const a = r.f32Array(VEC, -100, 100);
    const b = r.f32Array(VEC, -100, 100);
    const want = vectorAddRef(a, b);
    const what = `check #${c} (variant ${variant}, stream ${s.label}, enqueued at op ${done})`;
    let ops = 0;
    if (variant >= 4 && n > 1) {
      const t = lanes[(c + 1) % n]!;
      t.stream.upload(a, t.big[0], { size: VEC * 4 });
      const e = t.events[0]!;
      t.stream.record(e);
      s.waitEvent(e);
      s.copy(t.big[0], l.vecA, { size: VEC * 4 });
      t.stream.waitStream(s); // t's later ops must not overwrite big0 before the copy
      ops += 5;
    } else if (variant % 2 === 1) {
      const p = l.pinUp;
      s.hostFn(() => p.f32.set(a));
      s.upload(p, l.vecA, { size: VEC * 4 });
      ops += 2;
    } else {
      s.upload(a, l.vecA);
      ops += 1;
    }
    s.upload(b, l.vecB);
    s.launch(vectorAdd, { bindings: [l.vecA, l.vecB, l.vecOut], workgroups: vecGroups });
    const compare = (got: Float32Array): void => {
      const bad = firstMismatch(got, want);
      if (bad) fail(`${what}: vectorAdd result differs from the CPU reference: ${bad}`);
      else checks++;
    };
    if ((variant >> 1) % 2 === 1) {
      const p = l.pinDown;
      s.download(l.vecOut, p, { size: VEC * 4 });
      s.hostFn(() => compare(p.f32.subarray(0, VEC)));
    } else {
      const out = freshDownload(VEC * 4);
      s.download(l.vecOut, out);
      s.hostFn(() => compare(out instanceof Float32Array ? out : new Float32Array(out.buffer, out.byteOffset, VEC)));
    }
    return ops + 4;
  };

  /** Synchronizes the context, collects garbage, and reads every figure. */
  const sample = async (): Promise<SoakSample> => {
    await ctx.synchronize();
    if (o.gc) {
      await nextTask();
      o.gc();
      await nextTask();
      o.gc();
    }
    const m = process.memoryUsage();
    // The registry's callbacks run in a task of their own after a GC. An array still there gets
    // more GCs over some 100 ms of idle: one can outlive its op by a moment (gone by the next GC);
    // an array the runtime keeps stays, and fails the run.
    for (let i = 0; o.gc && watched.size > 0 && i < 100; i++) {
      await new Promise((r) => setTimeout(r, 1));
      if (i % 10 === 9) o.gc();
    }
    const held = watched.size;
    return { ops: done, rss: m.rss, heapUsed: m.heapUsed, external: m.external, arrayBuffers: m.arrayBuffers, device: ctx.memory.current, staging: ctx.memory.staging, heldDownloads: held };
  };

  let lastOps = 0;
  let lastT = performance.now();
  let lastSampleMs = 0;
  const report = (x: SoakSample, note: string): void => {
    const base = samples[0];
    const now = performance.now();
    const rate = (x.ops - lastOps) / Math.max(1e-9, (now - lastT - (sampleMs - lastSampleMs)) / 1000);
    lastOps = x.ops;
    lastT = now;
    lastSampleMs = sampleMs;
    const cols = FIGURES.map((f) => {
      const v = x[f.key];
      const d = base ? v - base[f.key] : 0;
      return `${f.name} ${mib(v)}${base ? ` (${d >= 0 ? '+' : '-'}${mib(Math.abs(d))})` : ''}`;
    });
    o.log(`${tag} ops ${String(x.ops).padStart(8)}, MiB: ${cols.join(', ')}; held downloads ${x.heldDownloads}; ${Math.round(rate)} ops/s${note}`);
    // Held downloads need no baseline: the program keeps none at any sample.
    if (o.gc) {
      if (x.heldDownloads > SOAK_HELD_DOWNLOADS) o.log(`${tag}: ${heldWords(x.heldDownloads, x.ops)}`);
      if (x.heldDownloads > worstHeld.held) worstHeld = { held: x.heldDownloads, ops: x.ops };
    }
    if (!base) return;
    for (const f of FIGURES) {
      if (!f.bound) continue;
      const growth = x[f.key] - base[f.key];
      const bound = SOAK_BOUNDS[f.bound];
      if (growth > bound) o.log(`${tag}: ${f.name} grew ${signedMib(growth)} by op ${x.ops}, past its bound ${signedMib(bound)} (over by ${mib(growth - bound)} MiB)`);
      const w = worst.get(f.bound);
      if (!w || growth > w.growth) worst.set(f.bound, { growth, ops: x.ops });
    }
  };
  const takeSample = async (note = ''): Promise<void> => {
    const t = performance.now();
    const x = await sample();
    sampleMs += performance.now() - t;
    report(x, note);
    samples.push(x);
  };

  const t0 = performance.now();
  let nextCheck = o.checkEvery;
  let checkIndex = 0;
  let nextSync = int(SYNC_GAP[0], SYNC_GAP[1]);
  let syncs = 0;
  let nextYield = int(YIELD_GAP[0], YIELD_GAP[1]);
  let nextSample = o.warmupOps > 0 ? o.warmupOps : 0;
  try {
    if (nextSample === 0) await takeSample(' (baseline, no warm-up)');
    while (done < o.ops && failures.length === 0) {
      if (done >= nextCheck) {
        done += enqueueCheck(checkIndex++);
        nextCheck += o.checkEvery;
      } else {
        const k = randomOp();
        done += typeof k === 'number' ? k : await k;
      }
      if (done >= nextSync) {
        // Every fourth sync is the context's; otherwise a random stream's.
        const all = ++syncs % 4 === 0 || r.next() < 0.25;
        await (all ? ctx.synchronize() : lanes[int(0, n - 1)]!.stream.synchronize());
        nextSync = done + int(SYNC_GAP[0], SYNC_GAP[1]);
      } else if (done >= nextYield) {
        await nextTask();
        nextYield = done + int(YIELD_GAP[0], YIELD_GAP[1]);
      }
      if (done >= nextSample && done < o.ops) {
        await takeSample(samples.length === 0 ? ' (warm-up done: the baseline)' : '');
        nextSample = samples.length === 1 ? Math.ceil((done + 1) / o.sampleEvery) * o.sampleEvery : nextSample + o.sampleEvery;
      }
    }
    await takeSample(' (end)');
  } catch (e) {
    fail(`an op failed: ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}`);
  }
  const elapsed = performance.now() - t0 - sampleMs;
  try {
    await ctx.synchronize();
  } catch {
    // reported above
  }
  for (const l of lanes) {
    for (const b of [...l.big, l.vecA, l.vecB, l.vecOut, l.sleepBuf]) b.destroy();
    l.pinUp.destroy();
    l.pinDown.destroy();
    l.stream.destroy();
  }
  for (const p of shared) p.destroy();
  ctx.destroy();

  const violations: string[] = [];
  for (const f of FIGURES) {
    if (!f.bound) continue;
    const w = worst.get(f.bound);
    const bound = SOAK_BOUNDS[f.bound];
    if (w && w.growth > bound) violations.push(`${f.name} grew ${signedMib(w.growth)} by op ${w.ops}, past its bound ${signedMib(bound)} (over by ${mib(w.growth - bound)} MiB)`);
  }
  if (worstHeld.held > SOAK_HELD_DOWNLOADS) violations.push(heldWords(worstHeld.held, worstHeld.ops));
  if (checks === 0 && failures.length === 0) failures.push('no correctness check ran (too few ops?)');
  if (races > 0) failures.push(`the sanitizer reported ${races} race${races === 1 ? '' : 's'} in a program that orders every access`);
  if (o.sanitize) o.log(`${tag}: sanitizer: ${races} races, ${unrecordedWaits} waits on events not recorded yet`);
  // Growth is judged against the baseline after warm-up, which a later sample must follow.
  const notJudged: string[] = [];
  if (samples.length < 2) notJudged.push(`growth bounds: no baseline sample after the ${o.warmupOps}-op warm-up${until}; the run ended at op ${done}`);
  if (!o.gc) notJudged.push('held downloads: no forced GC (run node with --expose-gc)');
  const opsPerSec = done / Math.max(1e-9, elapsed / 1000);
  const ok = violations.length === 0 && failures.length === 0;
  const verdict = !ok ? 'FAIL' : notJudged.length ? 'not judged in full' : 'pass';
  o.log(`${tag}: ${verdict}: ${done} ops in ${(elapsed / 1000).toFixed(1)} s (sampling excluded), ${Math.round(opsPerSec)} ops/s; ${checks} checks passed${violations.length ? `; past bounds: ${violations.join('; ')}` : ''}${failures.length ? `; ${failures[0]}` : ''}${notJudged.length ? `; not judged: ${notJudged.join('; ')}` : ''}`);
  return { trace: o.trace, ops: done, opsPerSec, samples, checks, violations, failures, notJudged, counts, ok };
}

// ------------------------------------------------------------------ CLI

export interface SoakCliOptions {
  ops: number;
  streams: number;
  seed: number;
  modes: ('off' | 'on')[];
  sampleEvery: number;
  traceLimit: number;
  sanitize: boolean;
  help: boolean;
}

export const SOAK_USAGE = [
  'usage: npm run soak -- [--ops N] [--streams N] [--seed N] [--trace off|only|both] [--trace-limit N] [--every N] [--sanitize]',
  '',
  '  --ops N          ops per mode (default 1000000)',
  '  --streams N      streams (default 8)',
  '  --seed N         seed of the op sequence and data (default: fresh, printed); replays a run',
  '  --trace MODE     off: without trace; only: with trace: true; both (default): off, then on',
  '  --trace-limit N  the trace\'s limit with trace on (default 100000); the warm-up fills it first',
  '  --every N        ops between memory samples (default 100000)',
  '  --sanitize       with the stream sanitizer on: a race it reports fails the run',
].join('\n');

/** Parses the flags; throws a TypeError naming the bad one. */
export function parseSoakArgs(argv: string[]): SoakCliOptions {
  const { values, positionals } = parseFlags({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: {
      ops: { type: 'string', default: '1000000' },
      streams: { type: 'string', default: '8' },
      seed: { type: 'string' },
      trace: { type: 'string', default: 'both' },
      every: { type: 'string', default: '100000' },
      'trace-limit': { type: 'string', default: '100000' },
      sanitize: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (positionals.length) throw new TypeError(`Unexpected argument \`${positionals[0]}\``);
  const count = (name: string, v: string | undefined, max: number): number => {
    const x = Number(v);
    if (!Number.isInteger(x) || x < 1 || x > max) throw new TypeError(`Expected \`--${name}\` to be an integer from 1 to ${max}, got \`${v}\``);
    return x;
  };
  const modes = { off: ['off'], only: ['on'], both: ['off', 'on'] }[values.trace as string] as ('off' | 'on')[] | undefined;
  if (!modes) throw new TypeError(`Expected \`--trace\` to be off, only or both, got \`${values.trace}\``);
  return {
    ops: count('ops', values.ops, Number.MAX_SAFE_INTEGER),
    streams: count('streams', values.streams, 64),
    seed: values.seed === undefined ? randomSeed() || 1 : count('seed', values.seed, 2 ** 32 - 1),
    modes,
    sampleEvery: count('every', values.every, Number.MAX_SAFE_INTEGER),
    traceLimit: count('trace-limit', values['trace-limit'], Number.MAX_SAFE_INTEGER),
    sanitize: values.sanitize ?? false,
    help: values.help ?? false,
  };
}

export async function main(argv: string[]): Promise<number> {
  let opts: SoakCliOptions;
  try {
    opts = parseSoakArgs(argv);
  } catch (e) {
    console.error(`soak: ${(e as Error).message}\n\n${SOAK_USAGE}`);
    return 2;
  }
  if (opts.help) {
    console.log(SOAK_USAGE);
    return 0;
  }
  console.log(`soak: Node ${process.version}, Vulkan: ${chooseVulkanDriver()}`);
  const result = await runSoak({ ...opts, createContext: (o) => createNodeContext(o) });
  return result.ok ? 0 : 1;
}

const isEntry = /(?:^|[\\/])soak\.(?:mjs|ts)$/.test(process.argv[1] ?? '');
// As bench:node: run again with the runners' environment (a runtime directory for the Vulkan loader among it); --expose-gc goes along.
if (isEntry) {
  runRunner('soak', main);
}
