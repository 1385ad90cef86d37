/**
 * Differential fuzzing of the stream runtime: random race-free multi-stream programs
 * (test/fuzz-model.ts) run by the library on the GPU and by a sequential CPU model; every buffer
 * must match bit for bit. Plus a few targeted programs the generator rarely produces.
 *
 *   npx vitest run test/fuzz.test.ts                  # 200 random programs (FUZZ_RUNS=N for N)
 *   SEED=<n> FUZZ_RUNS=1 npx vitest run test/fuzz.test.ts   # replay one program
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { gpuContext, randomSeed, rng, sleepRef, vectorAddRef } from './gpu.js';
import { workgroupsFor, type Context, type DeviceBuffer, type GpuEvent, type PinnedBuffer, type Stream } from '../src/index.js';
import { describeProgram, describeStep, generateProgram, type Program, type Range, type ResSpec, type Step } from './fuzz-model.js';

type GpuCtx = Context & { errors: string[] };

const RUNS = Number(process.env.FUZZ_RUNS ?? 200);
const BASE_SEED = process.env.SEED !== undefined ? Number(process.env.SEED) >>> 0 : randomSeed();
/** Program i's seed; program 0 uses the base seed, so `SEED=<seed> FUZZ_RUNS=1` replays any program. */
const seedOf = (i: number): number => (i === 0 ? BASE_SEED : (BASE_SEED + Math.imul(i, 0x9e3779b9)) >>> 0);
/** A hang is a failure with a listing, not a bare test timeout. Not an ordering assertion. */
const WATCHDOG_MS = 30_000;
const PAD_SENTINEL = 0xdeadbeef;

let ctx: GpuCtx;
beforeAll(async () => {
  // Pageable uploads above 4 KiB (up to 1100 words in the generator) go in pieces, so random
  // programs cover both the whole and the pieced path (ContextOptions.uploadPieceBytes).
  ctx = await gpuContext({ uploadPieceBytes: 4096 });
});
afterAll(() => ctx?.destroy());

function watch<T>(p: Promise<T>, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`hang: ${what} did not resolve within ${WATCHDOG_MS} ms`)), WATCHDOG_MS);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

const hex = (x: number): string => `0x${(x >>> 0).toString(16).padStart(8, '0')}`;
const asF32 = (x: number): number => new Float32Array(new Uint32Array([x]).buffer)[0]!;

/** Bit-exact comparison of 32-bit words; null when equal. */
function diffWords(got: Uint32Array, want: Uint32Array, cls: 'f32' | 'u32'): string | null {
  if (got.length !== want.length) return `length: got ${got.length}, want ${want.length}`;
  let first = -1;
  let count = 0;
  for (let i = 0; i < want.length; i++) {
    if (got[i] !== want[i]) {
      if (first < 0) first = i;
      count++;
    }
  }
  if (first < 0) return null;
  const g = got[first]!;
  const w = want[first]!;
  const show = (x: number): string => (cls === 'f32' ? `${asF32(x)} (${hex(x)})` : hex(x));
  return `word ${first}: got ${show(g)}, want ${show(w)} [${count} of ${want.length} words differ]`;
}

const sleep0 = (): Promise<void> => new Promise((r) => setImmediate(r));

function toOptions(r: Range): { srcOffset: number; dstOffset: number; size?: number } | undefined {
  if (!r.withOptions) return undefined;
  return { srcOffset: r.srcOff * 4, dstOffset: r.dstOff * 4, ...(r.size !== null ? { size: r.size * 4 } : {}) };
}

/** Runs `p` on the library; returns everything that went wrong (empty: the GPU matched the model). */
async function runProgram(c: GpuCtx, p: Program): Promise<string[]> {
  const problems: string[] = [];
  const errorsBefore = c.errors.length;
  const memBefore = c.memory.current;
  const streams: Stream[] = p.streams.map((s) => (s.isDefault ? c.defaultStream : c.createStream({ label: s.name, priority: s.priority, nonBlocking: s.nonBlocking })));
  const events: GpuEvent[] = p.events.map((e) => c.createEvent({ label: e.name, timing: e.timing }));
  const dev = new Map<number, DeviceBuffer>();
  const pins = new Map<number, PinnedBuffer>();
  /** arr resources: the whole padded backing store, and the view the program uses. */
  const arrays = new Map<number, { backing: Uint32Array; view: Float32Array | Uint32Array }>();
  for (const r of p.res) {
    if (r.kind === 'dev') dev.set(r.id, c.alloc(r.words * 4, { label: r.name }));
    else if (r.kind === 'pinUp' || r.kind === 'pinDown') pins.set(r.id, c.allocHost(r.words * 4, r.kind === 'pinUp' ? 'upload' : 'download', { label: r.name }));
    else {
      const backing = new Uint32Array(r.padBefore + r.words + r.padAfter).fill(PAD_SENTINEL);
      backing.set(r.init!, r.padBefore);
      const view = r.cls === 'f32' ? new Float32Array(backing.buffer, r.padBefore * 4, r.words) : new Uint32Array(backing.buffer, r.padBefore * 4, r.words);
      arrays.set(r.id, { backing, view });
    }
  }
  const D = (id: number): DeviceBuffer => dev.get(id)!;
  const readHost = (r: ResSpec): Uint32Array => {
    if (r.kind === 'arr') {
      const a = arrays.get(r.id)!;
      return new Uint32Array(a.backing.buffer, r.padBefore * 4, r.words).slice();
    }
    return pins.get(r.id)!.u32.slice();
  };

  let at = -1;
  const hostFn = (i: number, step: Extract<Step, { k: 'hostFn' }>): (() => void | Promise<void>) => {
    const check = (): void => {
      for (const ch of step.checks) {
        const r = p.res[ch.res]!;
        try {
          const d = diffWords(readHost(r), ch.expect, r.cls);
          if (d) problems.push(`hostFn of step #${i} (${p.streams[step.s]!.name}) saw stale data in ${r.name}: ${d}`);
        } catch (e) {
          problems.push(`hostFn of step #${i} (${p.streams[step.s]!.name}) could not read ${r.name}: ${(e as Error).name}: ${(e as Error).message}`);
        }
      }
    };
    if (step.mode === 'sync') return () => check();
    if (step.mode === 'asyncBefore')
      return async () => {
        check();
        await sleep0();
      };
    return async () => {
      await sleep0();
      check();
    };
  };

  try {
    for (const [i, step] of p.steps.entries()) {
      at = i;
      switch (step.k) {
        case 'upload': {
          const opts = toOptions(step.range);
          if ('pin' in step.src) streams[step.s]!.upload(pins.get(step.src.pin)!, D(step.dst), opts);
          else {
            const words = step.src.arr.slice();
            const n = words.length - step.src.padBefore;
            const view = p.res[step.dst]!.cls === 'f32' ? new Float32Array(words.buffer, step.src.padBefore * 4, n) : new Uint32Array(words.buffer, step.src.padBefore * 4, n);
            streams[step.s]!.upload(view, D(step.dst), opts);
            words.fill(0); // pageable source: copied at the call, so scribbling on it now must not matter
          }
          break;
        }
        case 'download': {
          const r = p.res[step.dst]!;
          const dst = r.kind === 'pinDown' ? pins.get(r.id)! : arrays.get(r.id)!.view;
          streams[step.s]!.download(D(step.src), dst, toOptions(step.range));
          break;
        }
        case 'copy':
          streams[step.s]!.copy(D(step.src), D(step.dst), toOptions(step.range));
          break;
        case 'add': {
          const n = p.res[step.out]!.words;
          const wg = workgroupsFor(n, 256);
          wg[0] += step.extraGroups;
          streams[step.s]!.launch(c.kernels.vectorAdd, { bindings: [D(step.a), D(step.b), D(step.out)], workgroups: wg });
          break;
        }
        case 'sleep':
          streams[step.s]!.launch(c.kernels.sleep, { bindings: [D(step.buf)], workgroups: workgroupsFor(p.res[step.buf]!.words, 64), constants: { iterations: step.iterations } });
          break;
        case 'record':
          if (step.s === 0 && i % 2 === 0) events[step.e]!.record(); // event.record() defaults to the default stream
          else streams[step.s]!.record(events[step.e]!);
          break;
        case 'waitEvent':
          streams[step.s]!.waitEvent(events[step.e]!);
          break;
        case 'waitStream':
          streams[step.s]!.waitStream(streams[step.t]!);
          break;
        case 'hostFn':
          streams[step.s]!.hostFn(hostFn(i, step));
          break;
        case 'fill':
          pins.get(step.res)!.u32.set(step.data, step.off);
          break;
        case 'flush':
          c.flush();
          break;
        case 'yield':
          for (let k = 0; k < step.turns; k++) await sleep0();
          break;
        case 'hostWait': {
          const w = step.w;
          const what = `step #${i} ${describeStep(p, step)}`;
          if (w.on === 'stream') await watch(streams[w.s]!.synchronize(), what);
          else if (w.on === 'event') await watch(events[w.e]!.synchronize(), what);
          else if (w.on === 'ctx') await watch(c.synchronize(), what);
          else await watch(pins.get(w.res)!.ready(), what);
          break;
        }
      }
    }
    at = p.steps.length;
    await watch(c.synchronize(), 'final ctx.synchronize()');

    // Compare everything with the model. Each device buffer is read back on some stream and
    // destroyed right away, while the read is pending: the destroy must wait for it.
    const readback = new Map<number, Uint32Array>();
    let k = 0;
    for (const [id, b] of dev) {
      const out = new Uint32Array(p.res[id]!.words);
      streams[k++ % streams.length]!.download(b, out);
      b.destroy();
      readback.set(id, out);
    }
    await watch(c.synchronize(), 'final read-back');
    for (const r of p.res) {
      let got: Uint32Array;
      if (r.kind === 'dev') got = readback.get(r.id)!;
      else if (r.kind === 'arr') {
        got = readHost(r);
        const backing = arrays.get(r.id)!.backing;
        for (let k = 0; k < backing.length; k++) {
          if ((k < r.padBefore || k >= r.padBefore + r.words) && backing[k] !== PAD_SENTINEL) {
            problems.push(`${r.name}: padding word ${k} of its ArrayBuffer was overwritten (${hex(backing[k]!)})`);
            break;
          }
        }
      } else {
        await watch(pins.get(r.id)!.ready(), `final ${r.name}.ready()`);
        got = readHost(r);
      }
      const d = diffWords(got, p.final[r.id]!, r.cls);
      if (d) problems.push(`final ${r.name} (${r.kind} ${r.cls}[${r.words}]): ${d}`);
    }
  } catch (e) {
    const err = e as Error;
    problems.push(`threw ${at < p.steps.length ? `at step #${at}` : 'after the last step'}: ${err.name}: ${err.message}${err.cause ? ` (cause: ${String(err.cause)})` : ''}`);
  } finally {
    // A failed op stays the stream's first error until reported, and later work (on the shared
    // default stream too) would inherit it: report everything here so the next program starts clean.
    for (let k = 0; k < 3; k++) {
      const ok = await watch(c.synchronize(), 'cleanup ctx.synchronize()').then(
        () => true,
        () => false,
      );
      if (ok) break;
    }
    for (const s of streams) s.destroy();
    for (const b of dev.values()) b.destroy();
    for (const pb of pins.values()) pb.destroy();
  }
  const errs = c.errors.splice(errorsBefore);
  if (errs.length > 0) problems.push(`uncaptured WebGPU errors: ${errs.join(' | ')}`);
  if (problems.length === 0 && c.memory.current !== memBefore) problems.push(`device memory not freed: ${c.memory.current - memBefore} bytes still allocated after destroy()`);
  return problems;
}

function failureReport(p: Program, problems: string[], index: number): string {
  return [
    `fuzz program ${index} failed: seed ${p.seed} (run base seed ${BASE_SEED})`,
    `reproduce: SEED=${p.seed} FUZZ_RUNS=1 npx vitest run test/fuzz.test.ts   (whole run: SEED=${BASE_SEED} FUZZ_RUNS=${RUNS})`,
    ...problems.map((x) => `  - ${x}`),
    'program:',
    describeProgram(p),
  ].join('\n');
}

describe('fuzz model', () => {
  it('generates the same program for the same seed (replays are faithful)', () => {
    const seed = seedOf(0);
    expect(describeProgram(generateProgram(seed))).toBe(describeProgram(generateProgram(seed)));
  });
});

describe(`fuzz: ${RUNS} random multi-stream programs vs a sequential model (base seed ${BASE_SEED})`, () => {
  const cases = Array.from({ length: RUNS }, (_, i) => [i, seedOf(i)] as const);
  it.each(cases)('program %i (seed %i)', async (i, seed) => {
    const p = generateProgram(seed);
    const problems = await runProgram(ctx, p);
    if (problems.length > 0) throw new Error(failureReport(p, problems, i));
    expect(ctx.errors).toEqual([]);
  });
});

// ------------------------------------------------------------------ targeted programs

const gates: (() => void)[] = [];
/** A promise the test resolves itself (no timers). Opened after each test whatever happened, so a
 * failed assertion cannot leave a blocking stream (and with it the default stream) stuck. */
function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((r) => (open = r));
  gates.push(open);
  return { promise, open };
}
afterEach(async () => {
  for (const open of gates.splice(0)) open();
  await ctx?.synchronize().catch(() => {});
});

describe('fuzz: targeted programs', () => {
  it('chains 4 streams through events (each later stream has a higher priority)', async () => {
    const seed = randomSeed();
    const r = rng(seed);
    const n = 1024;
    const x0 = r.u32Array(n);
    const s = [0, -1, -3, -5].map((priority, i) => ctx.createStream({ label: `chain${i + 1}`, priority }));
    const [s1, s2, s3, s4] = s as [Stream, Stream, Stream, Stream];
    const e = [1, 2, 3].map((i) => ctx.createEvent({ label: `chain-e${i}` }));
    const [e1, e2, e3] = e as [GpuEvent, GpuEvent, GpuEvent];
    const x = ctx.alloc(n * 4, { label: 'x' }), y = ctx.alloc(n * 4, { label: 'y' }), z = ctx.alloc(n * 4, { label: 'z' });
    const pin = ctx.allocHost(n * 4, 'download', { label: 'out' });
    const seen: string[] = [];
    const sleepK = ctx.kernels.sleep;
    const wg = workgroupsFor(n, 64);
    // s1 (lowest priority): the slow head of the chain.
    s1.upload(x0, x);
    s1.launch(sleepK, { bindings: [x], workgroups: wg, constants: { iterations: 1500 } });
    s1.record(e1);
    // s4 is enqueued first among the waiters and has the highest priority: only the events order it.
    s4.waitEvent(e3); // e3 never recorded yet: a no-op (CUDA semantics)
    s2.waitEvent(e1);
    s2.copy(x, y);
    s2.launch(sleepK, { bindings: [y], workgroups: wg, constants: { iterations: 17 } });
    s2.record(e2);
    s3.waitEvent(e2);
    s3.copy(y, z);
    s3.launch(sleepK, { bindings: [z], workgroups: wg, constants: { iterations: 1 } });
    s3.record(e3);
    s4.waitEvent(e3);
    s4.download(z, pin);
    const want = sleepRef(sleepRef(sleepRef(x0, 1500), 17), 1);
    s4.hostFn(() => {
      const d = diffWords(pin.u32, want, 'u32');
      if (d) seen.push(`hostFn on chain4 saw ${d}`);
    });
    await s4.synchronize();
    expect(e1.query() && e2.query() && e3.query(), `seed ${seed}: all events complete once the end of the chain is`).toBe(true);
    expect(seen, `seed ${seed}`).toEqual([]);
    await pin.ready();
    expect(diffWords(pin.u32, want, 'u32'), `seed ${seed}`).toBeNull();
    await ctx.synchronize();
    for (const b of [x, y, z]) b.destroy();
    pin.destroy();
    s.forEach((st) => st.destroy());
    expect(ctx.errors).toEqual([]);
  });

  it('a stream blocked on a pending async hostFn does not hold back another stream (50 ops)', async () => {
    const seed = randomSeed();
    const r = rng(seed);
    const n = 256;
    const blocked = ctx.createStream({ label: 'blocked', priority: -5 });
    const free = ctx.createStream({ label: 'free', priority: 0 });
    const g = gate();
    let started = false;
    let finished = false;
    const a0 = r.u32Array(n);
    const bufA = ctx.alloc(n * 4, { label: 'A' });
    const outA = new Uint32Array(n).fill(PAD_SENTINEL);
    blocked.upload(a0, bufA);
    blocked.hostFn(async function slow() {
      started = true;
      await g.promise;
      finished = true;
    });
    blocked.launch(ctx.kernels.sleep, { bindings: [bufA], workgroups: workgroupsFor(n, 64), constants: { iterations: 17 } });
    blocked.download(bufA, outA);

    // 50 ops on the free stream: uploads, adds, copies, a download and a hostFn.
    const a = r.f32Array(n, -100, 100), b = r.f32Array(n, -100, 100);
    const bufs = [0, 1, 2].map((i) => ctx.alloc(n * 4, { label: `F${i}` }));
    const [f0, f1, f2] = bufs as [DeviceBuffer, DeviceBuffer, DeviceBuffer];
    free.upload(a, f0);
    free.upload(b, f1);
    let want: Float32Array = Float32Array.from(a);
    let ops = 2;
    while (ops < 46) {
      free.launch(ctx.kernels.vectorAdd, { bindings: [f0, f1, f2], workgroups: workgroupsFor(n, 256) });
      free.copy(f2, f0);
      want = vectorAddRef(want, b);
      ops += 2;
    }
    const outF = new Float32Array(n);
    free.download(f0, outF);
    let hostFnRanWhileBlocked: boolean | null = null;
    free.hostFn(() => {
      hostFnRanWhileBlocked = started && !finished;
    });
    free.record(ctx.createEvent({ label: 'free-end' }));
    free.waitEvent(ctx.createEvent({ label: 'never-recorded' }));
    ops += 4;
    expect(ops).toBe(50);

    await free.synchronize(); // must resolve while `slow` is still pending
    expect(started, 'the hostFn on the blocked stream started').toBe(true);
    expect(finished, 'the gate is still closed').toBe(false);
    expect(blocked.query(), 'the blocked stream is still busy').toBe(false);
    expect(hostFnRanWhileBlocked).toBe(true);
    expect(firstMismatchF32(outF, want), `seed ${seed}`).toBeNull();
    expect(outA[0], 'work after the pending hostFn has not run').toBe(PAD_SENTINEL);

    g.open();
    await blocked.synchronize();
    expect(finished).toBe(true);
    expect(diffWords(outA, sleepRef(a0, 17), 'u32'), `seed ${seed}`).toBeNull();
    for (const x of [bufA, ...bufs]) x.destroy();
    blocked.destroy();
    free.destroy();
    expect(ctx.errors).toEqual([]);
  });

  it('the default stream sits between two blocking streams; a nonBlocking stream passes it', async () => {
    const seed = randomSeed();
    const r = rng(seed);
    const n = 512;
    const b1 = ctx.createStream({ label: 'blocking1' });
    const b2 = ctx.createStream({ label: 'blocking2', priority: -5 });
    const nb = ctx.createStream({ label: 'nonBlocking', nonBlocking: true, priority: -5 });
    const D = ctx.defaultStream;
    const g = gate();
    const x0 = r.u32Array(n);
    const X = ctx.alloc(n * 4, { label: 'X' }), Y = ctx.alloc(n * 4, { label: 'Y' }), Z = ctx.alloc(n * 4, { label: 'Z' }), W = ctx.alloc(n * 4, { label: 'W' });
    const wg = workgroupsFor(n, 64);
    // blocking1 writes X, then is held by a host gate.
    b1.upload(x0, X);
    b1.launch(ctx.kernels.sleep, { bindings: [X], workgroups: wg, constants: { iterations: 256 } });
    b1.hostFn(() => g.promise);
    b1.launch(ctx.kernels.sleep, { bindings: [X], workgroups: wg, constants: { iterations: 1 } });
    // The default stream reads X with no explicit sync: legacy semantics order it after blocking1.
    D.copy(X, Y);
    // blocking2 (high priority) reads Y with no explicit sync: ordered after the default stream.
    b2.copy(Y, Z);
    b2.launch(ctx.kernels.sleep, { bindings: [Z], workgroups: wg, constants: { iterations: 17 } });
    // The nonBlocking stream ignores the default stream: it finishes while the gate is closed.
    const w0 = r.u32Array(n);
    nb.upload(w0, W);
    nb.launch(ctx.kernels.sleep, { bindings: [W], workgroups: wg, constants: { iterations: 17 } });
    const wOut = new Uint32Array(n);
    nb.download(W, wOut);

    await nb.synchronize();
    expect(D.query(), 'default stream waits for the gated blocking stream').toBe(false);
    expect(b2.query(), 'blocking2 waits for the default stream').toBe(false);
    expect(diffWords(wOut, sleepRef(w0, 17), 'u32'), `seed ${seed}`).toBeNull();

    g.open();
    const zOut = new Uint32Array(n);
    b2.download(Z, zOut);
    await b2.synchronize();
    expect(D.query()).toBe(true);
    const x1 = sleepRef(sleepRef(x0, 256), 1);
    expect(diffWords(zOut, sleepRef(x1, 17), 'u32'), `seed ${seed}`).toBeNull();
    await ctx.synchronize();
    for (const x of [X, Y, Z, W]) x.destroy();
    for (const s of [b1, b2, nb]) s.destroy();
    expect(ctx.errors).toEqual([]);
  });
});

describe('fuzz: findings', () => {
  // Found by this fuzzer: WebGPU rejects copyBufferToBuffer whenever source === destination, whatever the ranges; the
  // library must refuse it at the call, or the whole submit (other streams' work too) fails.
  it('copy within one buffer throws at the call and leaves other streams alone', async () => {
    const s = ctx.createStream({ label: 'same-buffer' });
    const other = ctx.createStream({ label: 'bystander', nonBlocking: true });
    const b = ctx.alloc(1024, { label: 'b' });
    const c = ctx.alloc(1024, { label: 'c' });
    try {
      const data = new Uint32Array(256).fill(7);
      other.upload(data, c);
      expect(() => s.copy(b, b, { srcOffset: 0, dstOffset: 512, size: 256 })).toThrow(/same buffer|source and destination/i);
      await other.synchronize();
      const out = new Uint32Array(256);
      other.download(c, out);
      await other.synchronize();
      expect(diffWords(out, data, 'u32')).toBeNull();
    } finally {
      await ctx.synchronize().catch(() => {});
      b.destroy();
      c.destroy();
      s.destroy();
      other.destroy();
    }
  });
});

function firstMismatchF32(got: Float32Array, want: Float32Array): string | null {
  return diffWords(new Uint32Array(got.buffer, got.byteOffset, got.length), new Uint32Array(want.buffer, want.byteOffset, want.length), 'f32');
}
