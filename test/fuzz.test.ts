/**
 * Differential fuzzing of the stream runtime: random race-free multi-stream programs
 * (test/fuzz-model.ts) run by the library on the GPU and by a sequential CPU model; every buffer
 * must match bit for bit. Plus a few targeted programs the generator rarely produces.
 *
 * Families, drawn from each seed: one context (the majority); two contexts on one device (the
 * second borrows the fixture's GPUDevice); two contexts on two devices (a second Dawn device); three
 * contexts (two devices); and, across all of them, programs with injected failures (ops that the
 * call accepts and WebGPU rejects at submit), where the model also says which ops fail, what each
 * synchronize reports, and which words it cannot know. About a third of the pageable uploads go as
 * `uploadFrom` from a random-access source over the same words (see `viaFile`).
 *
 *   npx vitest run test/fuzz.test.ts                  # 200 random programs (FUZZ_RUNS=N for N;
 *                                                     # FUZZ_RUNS=10000 for a long local run)
 *   SEED=<n> FUZZ_RUNS=1 npx vitest run test/fuzz.test.ts   # replay one program
 *   FUZZ_VARIANT=twoDevice+failing ...                # only that family (single, sameDevice,
 *                                                     # twoDevice, threeCtx; failing or clean)
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { gpuContext, randomSeed, rng, sleepRef, vectorAddRef } from './fixtures/gpu.js';
import { createContext, PinnedBufferBusyError, workgroupsFor, type Context, type DeviceBuffer, type GpuEvent, type PinnedBuffer, type RaceReport, type Stream } from '../src/index.js';
import { CTX_VARIANTS, describeProgram, describeStep, findRaces, generateProgram, programFamily, rangeSize, showOutcome, type CtxVariant, type ErrName, type Force, type Program, type Range, type ResSpec, type Step } from './fuzz-model.js';
import { benchKernels } from '../bench/kernels/index';

type GpuCtx = Context & { errors: string[] };

const RUNS = Number(process.env.FUZZ_RUNS ?? 200);
const BASE_SEED = process.env.SEED !== undefined ? Number(process.env.SEED) >>> 0 : randomSeed();
/** Program i's seed; program 0 uses the base seed, so `SEED=<seed> FUZZ_RUNS=1` replays any program. */
const seedOf = (i: number): number => (i === 0 ? BASE_SEED : (BASE_SEED + Math.imul(i, 0x9e3779b9)) >>> 0);
/** FUZZ_VARIANT: tokens joined by '+': a context family and/or 'failing' / 'clean'. */
const FORCE: Force = parseVariant(process.env.FUZZ_VARIANT);
/** A hang is a failure with a listing, not a bare test timeout. Not an ordering assertion: far above any real wait here. */
const WATCHDOG_MS = 15_000;
const PAD_SENTINEL = 0xdeadbeef;
const RAW_USAGE = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;

function parseVariant(v: string | undefined): Force {
  const force: Force = {};
  for (const t of (v ?? '').split('+').filter(Boolean)) {
    if ((CTX_VARIANTS as readonly string[]).includes(t)) force.ctx = t as CtxVariant;
    else if (t === 'failing' || t === 'clean') force.failing = t === 'failing';
    else throw new Error(`FUZZ_VARIANT: unknown '${t}' (known: ${CTX_VARIANTS.join(', ')}, failing, clean)`);
  }
  return force;
}

/**
 * The fixture's context (A) and, made on first use, a second context on A's device (B) and a
 * context on a second Dawn device (C). They live for the whole file: each program creates its own
 * streams, events and buffers on them and reports every failure before the next one starts. B and
 * C use other options than A, so one program mixes submit windows, batch sizes and upload pieces.
 */
let ctx: GpuCtx;
let ctxB: Context | undefined;
/**
 * Every context runs with the stream sanitizer: the programs are race-free, so it must report no
 * race, and exactly one unrecorded wait per waitEvent step on an event not recorded before it.
 */
const sanReports: RaceReport[] = [];
const sanitize = (r: RaceReport): void => void sanReports.push(r);
let ctxC: GpuCtx | undefined;
beforeAll(async () => {
  // Pageable uploads above 4 KiB (up to 1100 words in the generator) go in pieces, so random
  // programs cover both the whole and the pieced path (ContextOptions.uploadPieceBytes).
  ctx = await gpuContext({ uploadPieceBytes: 4096, sanitize });
});
afterAll(() => {
  ctxC?.destroy();
  ctxB?.destroy();
  ctx?.destroy();
});

/** The contexts of `p`, by CtxSpec id. */
async function contextsFor(p: Program): Promise<Context[]> {
  const out: Context[] = [];
  for (const c of p.contexts) {
    if (c.id === 0) out.push(ctx);
    else if (c.device === 0) {
      // Borrowed device, a small submit window and small batches: B's work queues on the host more
      // often, where it waits on A's and A's waits on it.
      ctxB ??= await createContext({ device: ctx.device, label: 'B', maxSubmitsInFlight: 2, maxOpsPerSubmit: 4, sanitize });
      out.push(ctxB);
    } else {
      ctxC ??= await gpuContext({ label: 'C', uploadPieceBytes: 8192, captureStacks: 'all', sanitize });
      out.push(ctxC);
    }
  }
  return out;
}

/** The uncaptured-error lists of the devices `p` uses (B shares A's device, so A's list). */
function errorLists(p: Program): string[][] {
  return [...new Set(p.contexts.map((c) => c.device))].map((d) => (d === 0 ? ctx.errors : ctxC!.errors));
}

/**
 * Set when a wait of the running program hung: its stuck work stays queued on the shared contexts
 * (a stuck op of a default stream holds every blocking stream), so the program's cleanup skips
 * its waits, and the contexts are replaced before the next test (see `replaceContexts`).
 */
let hung = false;

/** Destroys the shared contexts (destroy never blocks: stuck work fails) and makes fresh ones. */
async function replaceContexts(): Promise<void> {
  ctxC?.destroy();
  ctxB?.destroy();
  ctx.destroy();
  ctxB = ctxC = undefined;
  ctx = await gpuContext({ uploadPieceBytes: 4096, sanitize });
  hung = false;
}

function watch<T>(p: Promise<T>, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new HangError(`hang: ${what} did not resolve within ${WATCHDOG_MS} ms`)), WATCHDOG_MS);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

class HangError extends Error {
  override name = 'HangError';
}

const hex = (x: number): string => `0x${(x >>> 0).toString(16).padStart(8, '0')}`;
const asF32 = (x: number): number => new Float32Array(new Uint32Array([x]).buffer)[0]!;

/** Bit-exact comparison of 32-bit words, skipping those `unknown` marks; null when equal. */
function diffWords(got: Uint32Array, want: Uint32Array, cls: 'f32' | 'u32', unknown: Uint8Array | null = null): string | null {
  if (got.length !== want.length) return `length: got ${got.length}, want ${want.length}`;
  let first = -1;
  let count = 0;
  for (let i = 0; i < want.length; i++) {
    if (got[i] !== want[i] && !unknown?.[i]) {
      if (first < 0) first = i;
      count++;
    }
  }
  if (first < 0) return null;
  const g = got[first]!;
  const w = want[first]!;
  const show = (x: number): string => (cls === 'f32' ? `${asF32(x)} (${hex(x)})` : hex(x));
  const skipped = unknown ? unknown.reduce((s, u) => s + u, 0) : 0;
  return `word ${first}: got ${show(g)}, want ${show(w)} [${count} of ${want.length - skipped} compared words differ${skipped ? `; ${skipped} not compared` : ''}]`;
}

const sleep0 = (): Promise<void> => new Promise((r) => setImmediate(r));

/**
 * Whether pageable upload step `i` goes as `uploadFrom` from a random-access source over the same
 * words instead (about one in three, from the seed, not the generator's draws): the same bytes
 * land in stream order, so the model is the same. Its reads sometimes take a turn of the event loop.
 */
const viaFile = (p: Program, i: number): boolean => Math.imul((p.seed ^ Math.imul(i + 1, 0x9e3779b9)) >>> 0, 0x85ebca6b) >>> 0 < 0x55555555;
const slowReads = (p: Program, i: number): boolean => (Math.imul(p.seed + i, 0xc2b2ae35) >>> 31) === 1;

function toOptions(r: Range): { srcOffset: number; dstOffset: number; size?: number } | undefined {
  if (!r.withOptions) return undefined;
  return { srcOffset: r.srcOff * 4, dstOffset: r.dstOff * 4, ...(r.size !== null ? { size: r.size * 4 } : {}) };
}

const errName = (e: unknown): string => (e instanceof Error ? e.name : String(e));
const firstLine = (e: unknown): string => (e instanceof Error ? `${e.name}: ${e.message.split('\n')[0]}` : String(e));

/**
 * Null when a synchronize settled as the model says: `err` is what it rejected with (undefined:
 * it resolved). Every DependencyError must name, as its cause, the GpuValidationError it comes from
 * (the only root failure these programs inject).
 */
function checkOutcome(err: unknown, want: readonly ErrName[] | undefined): string | null {
  const w = want ?? [];
  if (err === undefined) return w.length === 0 ? null : `resolved; the model says it ${showOutcome(w)}`;
  if (w.length === 0) return `rejected with ${firstLine(err)}; the model says it resolves`;
  let got: unknown[];
  if (w.length === 1) {
    if (errName(err) !== w[0]) return `rejected with ${firstLine(err)}; the model says it ${showOutcome(w)}`;
    got = [err];
  } else {
    const errs = (err as { errors?: unknown[] }).errors;
    if (errName(err) !== 'AggregateStreamError' || !Array.isArray(errs)) return `rejected with ${firstLine(err)}; the model says it ${showOutcome(w)}`;
    const names = errs.map(errName).sort().join(', ');
    if (names !== [...w].sort().join(', ')) return `rejected with AggregateStreamError [${names}]; the model says it ${showOutcome(w)}`;
    got = errs;
  }
  for (const e of got) {
    const cause = (e as { cause?: unknown }).cause;
    if (errName(e) === 'DependencyError' && errName(cause) !== 'GpuValidationError') return `${firstLine(e)}: its cause is ${cause === undefined ? 'missing' : firstLine(cause)}, not the GpuValidationError it comes from`;
  }
  return null;
}

/** The doomed buffers a step uses (ResSpec.doom). */
function doomsOf(p: Program, step: Step): ResSpec[] {
  const ids: number[] = [];
  if (step.k === 'copy' || step.k === 'download') ids.push(step.src, step.dst);
  else if (step.k === 'upload') ids.push(step.dst);
  else if (step.k === 'add') ids.push(step.a, step.b, step.out);
  else if (step.k === 'sleep') ids.push(step.buf);
  return ids.map((id) => p.res[id]!).filter((r) => r.kind === 'doom');
}

/**
 * Runs `p` on the library; returns everything that went wrong (empty: the GPU matched the model).
 * `racy`: `p` had a wait dropped, so its results are not compared; only hangs and throws count
 * (the caller reads the sanitizer's reports).
 */
async function runProgram(p: Program, racy = false): Promise<string[]> {
  const problems: string[] = [];
  const ctxs = await contextsFor(p);
  const errors = errorLists(p);
  const errorsBefore = errors.map((l) => l.length);
  const memBefore = ctxs.map((c) => c.memory.current);
  const streams: Stream[] = p.streams.map((s) => (s.isDefault ? ctxs[s.ctx]!.defaultStream : ctxs[s.ctx]!.createStream({ label: s.name, priority: s.priority, nonBlocking: s.nonBlocking })));
  const events: GpuEvent[] = p.events.map((e) => ctxs[e.ctx]!.createEvent({ label: e.name, timing: e.timing }));
  const dev = new Map<number, DeviceBuffer>();
  const raw = new Map<number, GPUBuffer>();
  const dooms = new Map<number, GPUBuffer>();
  const pins = new Map<number, PinnedBuffer>();
  /** arr resources: the whole padded backing store, and the view the program uses. */
  const arrays = new Map<number, { backing: Uint32Array; view: Float32Array | Uint32Array }>();
  for (const r of p.res) {
    const c = ctxs[r.ctx]!;
    if (r.kind === 'dev') dev.set(r.id, c.alloc(r.words * 4, { label: r.name }));
    else if (r.kind === 'raw') raw.set(r.id, c.device.createBuffer({ size: r.words * 4, usage: RAW_USAGE, label: r.name }));
    else if (r.kind === 'pinUp' || r.kind === 'pinDown') pins.set(r.id, c.allocHost(r.words * 4, r.kind === 'pinUp' ? 'upload' : 'download', { label: r.name }));
    else if (r.kind === 'arr') {
      const backing = new Uint32Array(r.padBefore + r.words + r.padAfter).fill(PAD_SENTINEL);
      backing.set(r.init!, r.padBefore);
      const view = r.cls === 'f32' ? new Float32Array(backing.buffer, r.padBefore * 4, r.words) : new Uint32Array(backing.buffer, r.padBefore * 4, r.words);
      arrays.set(r.id, { backing, view });
    } // doom: made at its step
  }
  /** A device-side operand: ours, raw, or doomed. */
  const G = (id: number): DeviceBuffer | GPUBuffer => dev.get(id) ?? raw.get(id) ?? dooms.get(id)!;
  const readHost = (r: ResSpec): Uint32Array => {
    if (r.kind === 'arr') {
      const a = arrays.get(r.id)!;
      return new Uint32Array(a.backing.buffer, r.padBefore * 4, r.words).slice();
    }
    return pins.get(r.id)!.u32.slice();
  };

  let at = -1;
  const ran = new Set<number>();
  sanReports.length = 0;
  const recorded = new Set<number>();
  let unrecordedWaits = 0;
  const hostFn = (i: number, step: Extract<Step, { k: 'hostFn' }>): (() => void | Promise<void>) => {
    const check = (): void => {
      ran.add(i);
      for (const ch of step.checks) {
        const r = p.res[ch.res]!;
        try {
          const d = diffWords(readHost(r), ch.expect, r.cls, ch.unknown);
          if (d && !racy) problems.push(`hostFn of step #${i} (${p.streams[step.s]!.name}) saw stale data in ${r.name}: ${d}`);
        } catch (e) {
          if (!racy) problems.push(`hostFn of step #${i} (${p.streams[step.s]!.name}) could not read ${r.name}: ${(e as Error).name}: ${(e as Error).message}`);
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
      // A doomed buffer is made right before the call that uses it; 'destroyed' ones go right after
      // it, before the flush (a microtask away), so the call accepts the op and the submit rejects it.
      const doomed = doomsOf(p, step);
      for (const r of doomed) dooms.set(r.id, ctxs[r.ctx]!.device.createBuffer({ size: r.words * 4, usage: RAW_USAGE, mappedAtCreation: r.doom === 'mapped', label: r.name }));
      switch (step.k) {
        case 'upload': {
          const opts = toOptions(step.range);
          const src = step.src;
          if ('pin' in src) streams[step.s]!.upload(pins.get(src.pin)!, G(step.dst) as DeviceBuffer, opts);
          else if ('host' in src) streams[step.s]!.upload(arrays.get(src.host)!.view, G(step.dst) as DeviceBuffer, opts);
          else if (viaFile(p, i) && p.res[step.dst]!.kind !== 'doom') {
            const bytes = new Uint8Array(src.arr.slice(src.padBefore).buffer);
            const n = rangeSize(step.range, bytes.byteLength / 4, p.res[step.dst]!.words);
            const slow = slowReads(p, i);
            const source = {
              size: bytes.byteLength,
              read: async (into: Uint8Array, at: number): Promise<number> => {
                if (slow) await sleep0();
                into.set(bytes.subarray(at, at + into.byteLength));
                return into.byteLength;
              },
            };
            streams[step.s]!.uploadFrom(source, G(step.dst), { offset: step.range.srcOff * 4, size: n * 4, dstOffset: step.range.dstOff * 4 });
          } else {
            const words = src.arr.slice();
            const n = words.length - src.padBefore;
            const view = p.res[step.dst]!.cls === 'f32' ? new Float32Array(words.buffer, src.padBefore * 4, n) : new Uint32Array(words.buffer, src.padBefore * 4, n);
            streams[step.s]!.upload(view, G(step.dst) as DeviceBuffer, opts);
            words.fill(0); // pageable source: copied at the call, so scribbling on it now must not matter
          }
          break;
        }
        case 'download': {
          const r = p.res[step.dst]!;
          const dst = r.kind === 'pinDown' ? pins.get(r.id)! : arrays.get(r.id)!.view;
          streams[step.s]!.download(G(step.src) as DeviceBuffer, dst, toOptions(step.range));
          break;
        }
        case 'copy':
          streams[step.s]!.copy(G(step.src) as DeviceBuffer, G(step.dst) as DeviceBuffer, toOptions(step.range));
          break;
        case 'add': {
          const n = p.res[step.out]!.words;
          const wg = workgroupsFor(n, 256);
          wg[0] += step.extraGroups;
          streams[step.s]!.launch(ctxs[step.kc]!.kernels.vectorAdd, { bindings: [G(step.a), G(step.b), G(step.out)], workgroups: wg });
          break;
        }
        case 'sleep':
          streams[step.s]!.launch(benchKernels(ctxs[step.kc]!).sleep, { bindings: [G(step.buf)], workgroups: workgroupsFor(p.res[step.buf]!.words, 64), constants: { iterations: step.iterations } });
          break;
        case 'record':
          if (p.streams[step.s]!.isDefault && i % 2 === 0) events[step.e]!.record(); // event.record() defaults to its context's default stream
          else streams[step.s]!.record(events[step.e]!);
          recorded.add(step.e);
          break;
        case 'waitEvent':
          if (!recorded.has(step.e)) unrecordedWaits++;
          streams[step.s]!.waitEvent(events[step.e]!);
          break;
        case 'waitStream':
          streams[step.s]!.waitStream(streams[step.t]!);
          break;
        case 'hostFn':
          streams[step.s]!.hostFn(hostFn(i, step));
          break;
        case 'fill':
          try {
            pins.get(step.res)!.u32.set(step.data, step.off);
          } catch (e) {
            // With a wait dropped, the buffer may still be the GPU's: the runtime refuses the view.
            if (!(racy && e instanceof PinnedBufferBusyError)) throw e;
          }
          break;
        case 'flush':
          ctxs[step.c]!.flush();
          break;
        case 'yield':
          for (let k = 0; k < step.turns; k++) await sleep0();
          break;
        case 'hostWait': {
          const w = step.w;
          const what = `step #${i} ${describeStep(p, step)}`;
          const wait = w.on === 'stream' ? streams[w.s]!.synchronize() : w.on === 'event' ? events[w.e]!.synchronize() : w.on === 'ctx' ? ctxs[w.c]!.synchronize() : pins.get(w.res)!.ready();
          const settled = await watch(
            wait.then(
              () => undefined,
              (e: unknown) => ({ e }),
            ),
            what,
          );
          const d = checkOutcome(settled?.e, step.expect);
          if (d && !racy) problems.push(`step #${i} ${describeStep(p, step)}: ${d}`);
          break;
        }
      }
      for (const r of doomed) if (r.doom === 'destroyed') dooms.get(r.id)!.destroy();
    }
    at = p.steps.length;
    if (racy) {
      for (const c of ctxs) await watch(c.synchronize().catch(() => undefined), 'final synchronize');
      return problems;
    }

    // Compare everything with the model. Each device buffer is read back on some stream of its
    // device, and ours are destroyed right away, while the read is pending: the destroy must wait
    // for it. The program's last steps synchronized every context, so every stream starts clean.
    const readback = new Map<number, Uint32Array>();
    let k = 0;
    for (const r of p.res) {
      if (r.kind !== 'dev' && r.kind !== 'raw') continue;
      const on = p.streams.filter((s) => p.contexts[s.ctx]!.device === r.device);
      const out = new Uint32Array(r.words);
      streams[on[k++ % on.length]!.id]!.download(G(r.id) as DeviceBuffer, out);
      dev.get(r.id)?.destroy();
      readback.set(r.id, out);
    }
    for (const c of ctxs) await watch(c.synchronize(), 'final read-back');
    for (const r of p.res) {
      let got: Uint32Array;
      if (r.kind === 'doom') continue;
      if (r.kind === 'dev' || r.kind === 'raw') got = readback.get(r.id)!;
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
      const d = diffWords(got, p.final[r.id]!, r.cls, p.unknown[r.id]);
      if (d) problems.push(`final ${r.name} (${r.kind} ${r.cls}[${r.words}]): ${d}`);
    }
    for (const r of sanReports) if (r.kind === 'race') problems.push(`sanitizer reported a race in a race-free program: ${r.message}`);
    const unrecorded = sanReports.filter((r) => r.kind === 'unrecorded-wait').length;
    if (unrecorded !== unrecordedWaits) problems.push(`sanitizer reported ${unrecorded} waits on unrecorded events; the program has ${unrecordedWaits}`);
    // A host function runs exactly when the model says its op runs.
    for (const [i, step] of p.steps.entries()) {
      if (step.k !== 'hostFn') continue;
      if (step.fail && ran.has(i)) problems.push(`hostFn of step #${i} (${p.streams[step.s]!.name}) ran, but it depends on a failed op (the model says ${step.fail})`);
      if (!step.fail && !ran.has(i)) problems.push(`hostFn of step #${i} (${p.streams[step.s]!.name}) never ran`);
    }
  } catch (e) {
    const err = e as Error;
    if (err instanceof HangError) hung = true;
    problems.push(`threw ${at < p.steps.length ? `at step #${at}` : 'after the last step'}: ${err.name}: ${err.message}${err.cause ? ` (cause: ${String(err.cause)})` : ''}`);
  } finally {
    // A failed op stays its stream's failure until that stream's synchronize() reports it, and
    // separately its context's: report everything on both (the default streams live on into the
    // next program) so the next program starts clean.
    for (let k = 0; k < 3 && !hung; k++) {
      let clean = true;
      // One at a time: a synchronize made before an earlier one settled would reject unhandled.
      for (const sync of [...streams.map((s) => () => s.synchronize()), ...ctxs.map((c) => () => c.synchronize())]) {
        if (!(await watch(sync(), 'cleanup synchronize()').then(() => true, (e: unknown) => ((hung ||= e instanceof HangError), false)))) clean = false;
        if (hung) break;
      }
      if (clean) break;
    }
    for (const s of streams) s.destroy();
    for (const b of dev.values()) b.destroy();
    for (const pb of pins.values()) pb.destroy();
    for (const b of [...raw.values(), ...dooms.values()]) b.destroy();
  }
  if (hung) problems.push('the contexts are replaced for the next test: the stuck work stays on them');
  errors.forEach((list, d) => {
    const errs = list.splice(errorsBefore[d]!);
    if (errs.length > 0) problems.push(`uncaptured WebGPU errors${errors.length > 1 ? ` on device ${d}` : ''}: ${errs.join(' | ')}`);
  });
  ctxs.forEach((c, i) => {
    if (problems.length === 0 && ctxs.indexOf(c) === i && c.memory.current !== memBefore[i]) problems.push(`device memory of context ${p.contexts[i]!.name} not freed: ${c.memory.current - memBefore[i]!} bytes still allocated after destroy()`);
  });
  return problems;
}

function failureReport(p: Program, problems: string[], index: number): string {
  const variant = process.env.FUZZ_VARIANT ? `FUZZ_VARIANT=${process.env.FUZZ_VARIANT} ` : '';
  return [
    `fuzz program ${index} failed: seed ${p.seed} (run base seed ${BASE_SEED}), ${p.variant}${p.failing ? ' + injected failures' : ''}`,
    `reproduce: ${variant}SEED=${p.seed} FUZZ_RUNS=1 npx vitest run test/fuzz.test.ts   (whole run: ${variant}SEED=${BASE_SEED} FUZZ_RUNS=${RUNS})`,
    `pageable uploads sent as uploadFrom from a random-access source over the same words: steps ${p.steps.flatMap((st, i) => (st.k === 'upload' && 'arr' in st.src && viaFile(p, i) && p.res[st.dst]!.kind !== 'doom' ? [`#${i}`] : [])).join(', ') || 'none'}`,
    ...problems.map((x) => `  - ${x}`),
    'program:',
    describeProgram(p),
  ].join('\n');
}

describe('fuzz model', () => {
  it('generates the same program for the same seed (replays are faithful)', () => {
    const seed = seedOf(0);
    expect(describeProgram(generateProgram(seed, FORCE))).toBe(describeProgram(generateProgram(seed, FORCE)));
  });

  it('draws every family, and each failing program injects a failure that its synchronizes report', () => {
    // Families cost a few draws each: count them over many seeds (the rarest is 2% of programs).
    const seen = new Map<string, number>();
    for (let i = 0; i < 2000; i++) {
      const family = programFamily(seedOf(i));
      seen.set(family, (seen.get(family) ?? 0) + 1);
    }
    for (const v of CTX_VARIANTS) for (const f of ['', '+failing']) expect(seen.get(v + f) ?? 0, `${v}${f} in 2000 seeds from ${BASE_SEED}`).toBeGreaterThan(0);
    expect(seen.get('single')! + seen.get('single+failing')!, 'single-context programs are the majority').toBeGreaterThan(1000);
    for (let i = 0; i < 200; i++) {
      const seed = seedOf(i);
      const p = generateProgram(seed);
      expect(programFamily(seed), `seed ${seed}`).toBe(p.failing ? `${p.variant}+failing` : p.variant);
      const bad = p.steps.filter((s) => s.fail === 'GpuValidationError').length;
      const rejects = p.steps.filter((s) => s.k === 'hostWait' && s.expect).length;
      if (p.failing) {
        expect(bad, `seed ${seed}: bad ops`).toBeGreaterThan(0);
        expect(rejects, `seed ${seed}: synchronizes that reject`).toBeGreaterThan(0);
      } else expect(bad + rejects + p.steps.filter((s) => s.fail).length, `seed ${seed}`).toBe(0);
      expect(new Set(p.contexts.map((c) => c.device)).size, `seed ${seed}`).toBe(p.variant === 'twoDevice' || p.variant === 'threeCtx' ? 2 : 1);
    }
  });
});

describe(`fuzz: ${RUNS} random programs (one or more contexts, some with injected failures) vs a sequential model (base seed ${BASE_SEED})`, () => {
  const cases = Array.from({ length: RUNS }, (_, i) => [i, seedOf(i), programFamily(seedOf(i), FORCE)] as const);
  it.each(cases)('program %i (seed %i, %s)', async (i, seed) => {
    const p = generateProgram(seed, FORCE);
    const problems = await runProgram(p);
    if (problems.length > 0) throw new Error(failureReport(p, problems, i));
    expect(ctx.errors).toEqual([]);
  });
});

/**
 * The sanitizer on racy programs: a race-free program with one inserted wait (waitEvent or
 * waitStream) dropped. The model (`findRaces`, its own vector clocks under the sanitizer's access
 * model) says whether that leaves a race on memory the sanitizer sees (device and pinned buffers);
 * then the sanitizer must report a race, and where the model finds none it must report none. A race
 * only on host arrays (pageable transfers, which the sanitizer cannot see) may go either way.
 */
const RACY_RUNS = Number(process.env.FUZZ_RACY_RUNS ?? Math.max(1, Math.round(RUNS / 2)));
const racyTally = { racy: 0, flagged: 0, raceFree: 0, clean: 0, hostOnly: 0, hostOnlyFlagged: 0, noWait: 0 };
describe(`fuzz: ${RACY_RUNS} programs with one wait dropped, the sanitizer vs the model (base seed ${BASE_SEED})`, () => {
  afterAll(() => {
    const t = racyTally;
    const pct = (a: number, b: number): string => (b ? `${((100 * a) / b).toFixed(0)}%` : 'n/a');
    console.log(
      `dropped-wait fuzz: ${t.racy} racy on buffers the sanitizer sees, ${t.flagged} flagged (${pct(t.flagged, t.racy)}); ` +
        `${t.raceFree} still race-free (the wait was redundant), ${t.clean} not flagged (${pct(t.clean, t.raceFree)}); ` +
        `${t.hostOnly} racy only on host arrays (not tracked), ${t.hostOnlyFlagged} flagged; ${t.noWait} had no wait to drop`,
    );
  });
  // FUZZ_RACY_SEED=<seed> replays one program (the seed its failure message names).
  const only = process.env.FUZZ_RACY_SEED;
  const cases = only ? [[0, Number(only) >>> 0] as const] : Array.from({ length: RACY_RUNS }, (_, i) => [i, seedOf(i + 100_000)] as const);
  it.each(cases)('program %i (seed %i)', async (i, seed) => {
    const base = generateProgram(seed, { ...FORCE, failing: false });
    const waits = base.steps.map((st, k) => ((st.k === 'waitEvent' || st.k === 'waitStream') && st.why?.startsWith('sync') ? k : -1)).filter((k) => k >= 0);
    if (waits.length === 0) {
      racyTally.noWait++;
      return;
    }
    const drop = waits[seed % waits.length]!;
    const p: Program = { ...base, steps: base.steps.filter((_, k) => k !== drop) };
    const races = findRaces(p);
    const tracked = races.filter((r) => r.tracked);
    const problems = await runProgram(p, true);
    const found = sanReports.filter((r) => r.kind === 'race');
    const why = `dropped step #${drop} ${describeStep(base, base.steps[drop]!)}; the model: ${races.length ? races.map((r) => `${r.tracked ? '' : '(host array) '}${r.res} at step #${r.step + (r.step >= drop ? 1 : 0)} vs #${r.other + (r.other >= drop ? 1 : 0)}`).join(', ') : 'no race'}; the sanitizer: ${found.length ? found.map((r) => r.message.split('\n')[0]).join(' | ') : 'nothing'}`;
    if (tracked.length > 0) {
      racyTally.racy++;
      if (found.length > 0) racyTally.flagged++;
      else problems.push(`the model finds a race the sanitizer did not report: ${why}`);
    } else if (races.length > 0) {
      racyTally.hostOnly++;
      if (found.length > 0) {
        racyTally.hostOnlyFlagged++;
        if (process.env.FUZZ_RACY_LOG) console.log(`host-array-only race, and the sanitizer flagged: seed ${seed}: ${why}`);
      }
    } else {
      racyTally.raceFree++;
      if (found.length === 0) racyTally.clean++;
      else problems.push(`the sanitizer reported a race the model does not find: ${why}`);
    }
    if (problems.length > 0) throw new Error(failureReport(p, problems, i));
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
  if (hung) await replaceContexts();
  else await ctx?.synchronize().catch(() => {});
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
    const sleepK = benchKernels(ctx).sleep;
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
    blocked.launch(benchKernels(ctx).sleep, { bindings: [bufA], workgroups: workgroupsFor(n, 64), constants: { iterations: 17 } });
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
    b1.launch(benchKernels(ctx).sleep, { bindings: [X], workgroups: wg, constants: { iterations: 256 } });
    b1.hostFn(() => g.promise);
    b1.launch(benchKernels(ctx).sleep, { bindings: [X], workgroups: wg, constants: { iterations: 1 } });
    // The default stream reads X with no explicit sync: legacy semantics order it after blocking1.
    D.copy(X, Y);
    // blocking2 (high priority) reads Y with no explicit sync: ordered after the default stream.
    b2.copy(Y, Z);
    b2.launch(benchKernels(ctx).sleep, { bindings: [Z], workgroups: wg, constants: { iterations: 17 } });
    // The nonBlocking stream ignores the default stream: it finishes while the gate is closed.
    const w0 = r.u32Array(n);
    nb.upload(w0, W);
    nb.launch(benchKernels(ctx).sleep, { bindings: [W], workgroups: wg, constants: { iterations: 17 } });
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

describe('fuzz: targeted programs across contexts', () => {
  // What the random programs cannot check: a context's synchronize() and its legacy default stream
  // do not wait for another context's streams (they would only be slower). Gates hold one
  // context's streams while the other's work must complete.
  it("one context's synchronize() and default stream do not wait for another context's streams", async () => {
    const seed = randomSeed();
    const data = rng(seed).u32Array(64);
    const b = await createContext({ device: ctx.device, label: 'other' });
    const heldA = ctx.createStream({ label: 'held-A' }); // blocking: only A's default stream waits for it
    const heldB = b.createStream({ label: 'held-B' });
    const gA = gate(), gB = gate();
    const x = b.alloc(256, { label: 'x' });
    const out = new Uint32Array(64);
    try {
      heldA.hostFn(() => gA.promise);
      heldB.hostFn(() => gB.promise);
      // B's default stream waits for B's blocking streams (open held-B), never for A's.
      gB.open();
      b.defaultStream.upload(data, x);
      const xDone = b.createEvent({ label: 'x-done' });
      xDone.record(b.defaultStream);
      await watch(xDone.synchronize(), "B's default stream while A's blocking stream is held");
      await watch(b.synchronize(), "B's synchronize() while A's stream is held");
      expect(heldA.query(), "A's stream is still held").toBe(false);
      // And the other way: hold B again; A's default stream and synchronize() go on.
      const gB2 = gate();
      heldB.hostFn(() => gB2.promise);
      gA.open();
      ctx.defaultStream.waitEvent(xDone);
      ctx.defaultStream.download(x, out);
      await watch(ctx.synchronize(), "A's synchronize() while B's stream is held");
      expect(heldB.query(), "B's stream is still held").toBe(false);
      expect(diffWords(out, data, 'u32'), `seed ${seed}`).toBeNull();
      gB2.open();
      await watch(b.synchronize(), "B's synchronize()");
    } finally {
      for (const open of gates.splice(0)) open();
      await ctx.synchronize().catch(() => {});
      await b.synchronize().catch(() => {});
      x.destroy();
      heldA.destroy();
      b.destroy();
    }
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

  // The findings below come from the multi-context and injected-failure programs; each test is
  // the smallest program that shows one.

  /** A raw GPUBuffer that WebGPU rejects at submit although the call accepts it: destroyed right after the call. */
  function doomed(c: Context = ctx, label = 'doomed'): { buffer: DeviceBuffer; destroy: () => void } {
    const b = c.device.createBuffer({ size: 256, usage: RAW_USAGE, label });
    // The stream methods take raw GPUBuffers at run time (Op.isolated); copy/upload/download are typed for DeviceBuffers.
    return { buffer: b as unknown as DeviceBuffer, destroy: () => b.destroy() };
  }
  const settle = async (turns = 20): Promise<void> => {
    for (let i = 0; i < turns; i++) await sleep0();
  };
  const outcome = (p: Promise<void>): Promise<string> => p.then(
    () => 'resolved',
    (e: unknown) => firstLine(e),
  );

  // Legacy default-stream edges must carry a failure like event and waitStream edges do. They were
  // added only while the other stream's last op was not yet done, so whether the op failed with
  // DependencyError or ran on the failed op's output depended on timing.
  it('a default-stream edge carries a failure whether or not the failed op already completed', async () => {
    const blocking = ctx.createStream({ label: 'blocking' });
    const a = ctx.alloc(256, { label: 'a' }), b = ctx.alloc(256, { label: 'b' });
    const seen = ctx.createEvent({ label: 'seen' });
    try {
      for (const [from, to] of [[blocking, ctx.defaultStream], [ctx.defaultStream, blocking]] as const) {
        const x = doomed();
        from.copy(x.buffer, a);
        x.destroy();
        seen.record(from);
        await seen.synchronize().catch(() => {}); // the failed op completed; nothing reported it yet
        to.copy(a, b);
        expect(await outcome(to.synchronize()), `${to.label} after a failed, completed op of ${from.label}`).toMatch(/^DependencyError/);
        await from.synchronize().catch(() => {});
        await ctx.synchronize().catch(() => {});
      }
    } finally {
      await ctx.synchronize().catch(() => {});
      a.destroy();
      b.destroy();
      blocking.destroy();
    }
  });

  // A stream reports each failure once: a failure after a report is a new one. The runtime
  // extended the reported failure's run with it, so the stream reported the old error again and
  // the new one never surfaced.
  it("a stream's second failure, after its synchronize reported the first, is reported as itself", async () => {
    const s = ctx.createStream({ label: 'twice' });
    const a = ctx.alloc(256, { label: 'a' });
    try {
      const first = doomed(ctx, 'first');
      s.copy(first.buffer, a);
      first.destroy();
      expect(await outcome(s.synchronize())).toMatch(/GpuValidationError.*"first"/);
      const second = doomed(ctx, 'second');
      s.copy(second.buffer, a);
      second.destroy();
      expect(await outcome(s.synchronize())).toMatch(/GpuValidationError.*"second"/);
    } finally {
      await ctx.synchronize().catch(() => {});
      a.destroy();
      s.destroy();
    }
  });

  // API.md: the GPU owns a pinned buffer until the op that uses it completes, and after
  // stream.synchronize() the host owns it again. An op skipped because an earlier op failed
  // completed before its buffer was mapped back, so touching the views right after the
  // synchronize threw PinnedBufferBusyError.
  it('after a synchronize reports a failure, the pinned buffer of a skipped op is the host\'s again', async () => {
    const s = ctx.createStream({ label: 'skips' });
    const dev = ctx.alloc(256, { label: 'dev' });
    const up = ctx.allocHost(256, 'upload', { label: 'up' });
    try {
      const x = doomed();
      s.copy(x.buffer, dev);
      x.destroy();
      s.upload(up, dev); // skipped: the copy before it failed
      expect(await outcome(s.synchronize())).toMatch(/^GpuValidationError/);
      expect(up.isHostOwned).toBe(true);
      expect(() => up.u32.fill(1)).not.toThrow();
    } finally {
      await ctx.synchronize().catch(() => {});
      dev.destroy();
      up.destroy();
      s.destroy();
    }
  });

  // An isolated op (here: it reads a raw GPUBuffer) that uses a pinned buffer, right after an op
  // of the same flush that uses that buffer too: submitting the first op's batch starts mapping
  // the buffer back, and the isolated op was encoded after that check, so WebGPU rejected it
  // ("used in submit while pending map"). No failure was injected.
  it('an isolated op may use the pinned buffer that the batch before it maps back', async () => {
    const s = ctx.createStream({ label: 'isolated-pinned' });
    const dev = ctx.alloc(256, { label: 'dev' });
    const raw = ctx.device.createBuffer({ size: 256, usage: RAW_USAGE, label: 'raw' });
    const down = ctx.allocHost(256, 'download', { label: 'down' });
    const up = ctx.allocHost(256, 'upload', { label: 'up' });
    try {
      s.download(dev, down);
      s.download(raw as unknown as DeviceBuffer, down);
      expect(await outcome(s.synchronize()), 'download dev -> pinned, then raw -> same pinned').toBe('resolved');
      s.upload(up, dev);
      s.upload(up, raw as unknown as DeviceBuffer);
      expect(await outcome(s.synchronize()), 'upload pinned -> dev, then same pinned -> raw').toBe('resolved');
    } finally {
      await ctx.synchronize().catch(() => {});
      dev.destroy();
      raw.destroy();
      down.destroy();
      up.destroy();
      s.destroy();
    }
  });

  // An isolated op's submit can be validated and done on the GPU before the reaction that marks the
  // op ordered runs (the order of those promise reactions is the platform's); the op after it on
  // the stream waited for "ordered" forever. Found by this seed once the submit's completion
  // stopped going through Promise.all (program replayed; no failure injected).
  it('the op after an isolated op runs even when the isolated op completed before it was marked ordered', async () => {
    const p = generateProgram(3797949501, FORCE);
    const problems = await runProgram(p);
    if (problems.length > 0) throw new Error(failureReport(p, problems, 0));
  });

  // A pinned buffer of context A used by a stream of context B on the same device: once the buffer
  // is mapped back, A's scheduler flushed, never B's, so B's op waited forever. No failure was injected.
  it("another context's stream is woken when the pinned buffer it waits for is mapped back", async () => {
    const b = await createContext({ device: ctx.device, label: 'borrower' });
    const s = b.createStream({ label: 'borrower-stream' });
    const dev = ctx.alloc(256, { label: 'dev' });
    const down = ctx.allocHost(256, 'download', { label: 'down' });
    try {
      down.unmap();
      void down.ready(); // mapping it back now
      s.download(dev, down);
      let timer: ReturnType<typeof setTimeout> | undefined;
      const late = new Promise<string>((r) => (timer = setTimeout(() => r('still pending after 5 s'), 5000)));
      expect(await Promise.race([outcome(s.synchronize()), late])).toBe('resolved');
      clearTimeout(timer);
    } finally {
      b.destroy(); // fails the stuck op, if any
      await ctx.synchronize().catch(() => {});
      dev.destroy();
      down.destroy();
    }
  });

  // A launch binding a raw GPUBuffer of another device is accepted at the call (a GPUBuffer does
  // not say its device) and must fail alone, inside the submit's error scope. Its bind group was
  // made outside that scope, so WebGPU also raised an uncaptured error on the device.
  it("a launch with another device's raw GPUBuffer fails its op without an uncaptured WebGPU error", async () => {
    ctxC ??= await gpuContext({ label: 'C', uploadPieceBytes: 8192, captureStacks: 'all', sanitize });
    const s = ctx.createStream({ label: 'foreign' });
    const foreign = ctxC.device.createBuffer({ size: 256, usage: RAW_USAGE, label: 'foreign' });
    const before = ctx.errors.length;
    try {
      s.launch(benchKernels(ctx).sleep, { bindings: [foreign], workgroups: 1, constants: { iterations: 1 } });
      expect(await outcome(s.synchronize())).toMatch(/^GpuValidationError/);
      await settle();
      expect(ctx.errors.splice(before)).toEqual([]);
    } finally {
      ctx.errors.splice(before);
      await ctx.synchronize().catch(() => {});
      foreign.destroy();
      s.destroy();
    }
  });
});

function firstMismatchF32(got: Float32Array, want: Float32Array): string | null {
  return diffWords(new Uint32Array(got.buffer, got.byteOffset, got.length), new Uint32Array(want.buffer, want.byteOffset, want.length), 'f32');
}
