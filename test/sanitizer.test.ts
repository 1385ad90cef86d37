/**
 * The stream sanitizer (src/sanitizer.ts) on real WebGPU (Dawn): a corpus of programs with one
 * known race each, built from the patterns users write, and each one's race-free twin. A racy
 * program must be flagged exactly once, at the op (or host access) that makes the race, on the
 * right buffer and bytes; its twin must not be flagged at all. Then the three modes ('throw' at the
 * call with nothing enqueued, 'warn', a function), and what it costs nothing when off.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { firstMismatch, gpuContext, rng, randomSeed, vectorAddRef } from './fixtures/gpu.js';
import { delay, gate } from './fixtures/gate.js';
import { host } from '../src/clock.js';
import { heldAccesses } from '../src/sanitizer.js';
import { createContext, StreamRaceError, workgroupsFor, type Context, type DeviceBuffer, type GpuEvent, type PinnedBuffer, type RaceReport, type Stream } from '../src/index.js';
import { benchKernels } from '../bench/kernels/index';

type GpuCtx = Context & { errors: string[] };
let A: GpuCtx;
let B: Context;
let reports: RaceReport[] = [];
const sanitize = (r: RaceReport): void => void reports.push(r);

beforeAll(async () => {
  A = await gpuContext({ sanitize, label: 'A', uploadPieceBytes: 4096 });
  B = await createContext({ device: A.device, sanitize, label: 'B' });
});
afterAll(() => {
  expect(A.errors).toEqual([]);
  B.destroy();
  A.destroy();
});

const seed = randomSeed();
const r = rng(seed);
const N = 256; // f32 elements of the default buffer
const BYTES = N * 4;

let uid = 0;
const dev = (label: string, bytes = BYTES, ctx: Context = A): DeviceBuffer => ctx.alloc(bytes, { label: `${label}${++uid}` });
const stream = (label: string, o: { nonBlocking?: boolean; ctx?: Context } = {}): Stream => (o.ctx ?? A).createStream({ label, nonBlocking: o.nonBlocking ?? true });
/** Writes random floats into bytes [off, off + size) of `buf` on `s`. */
const write = (s: Stream, buf: DeviceBuffer, off = 0, size = buf.size - off): number => s.upload(r.f32Array(size / 4), buf, { dstOffset: off, size });
/** Reads bytes [off, off + size) of `buf` on `s` into a fresh array. */
const read = (s: Stream, buf: DeviceBuffer, off = 0, size = buf.size - off): number => s.download(buf, new Uint8Array(size), { srcOffset: off, size });
/** out = a + b on `s` (a, b read; out written). */
const add = (s: Stream, a: DeviceBuffer, b: DeviceBuffer, out: DeviceBuffer, ctx: Context = A): number =>
  s.launch(ctx.kernels.vectorAdd, { bindings: [a, b, out], workgroups: workgroupsFor(out.size / 4, 256) });
/** Orders `to`'s later work after `from`'s work so far, through an event. */
const order = (from: Stream, to: Stream, ctx: Context = A): GpuEvent => {
  const e = ctx.createEvent();
  e.record(from);
  to.waitEvent(e);
  return e;
};
/** Waits (event loop turns, no wall clock, no hand-over) until `s` has no pending op. */
const drained = async (s: Stream): Promise<void> => {
  while (s.pendingOps > 0) await new Promise((res) => setImmediate(res));
};
/** A kernel with one read-only binding and one read_write binding: out[i] = src[i] * 2. */
const READ_WGSL = `
@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  if (id.x < arrayLength(&out)) { out[id.x] = src[id.x] * 2.0; }
}`;
/** A kernel that reads a uniform: out[i] = p.scale. */
const UNIFORM_WGSL = `
struct P { scale: f32, pad0: f32, pad1: f32, pad2: f32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  if (id.x < arrayLength(&out)) { out[id.x] = p.scale; }
}`;
let doubleK: ReturnType<Context['kernel']> | undefined;
const double = (s: Stream, src: DeviceBuffer, out: DeviceBuffer): number =>
  s.launch((doubleK ??= A.kernel(READ_WGSL, { label: 'double' })), { bindings: [src, out], workgroups: workgroupsFor(out.size / 4, 64) });

/** What a racy program must report; `op` 0 is the host. */
interface Want {
  op: number;
  buffer: DeviceBuffer | PinnedBuffer | GPUBuffer | null;
  range?: [number, number];
  kind?: RaceReport['kind'];
}
interface Case {
  name: string;
  /** Builds the program (racy, or its race-free twin); returns what the racy one must report. */
  run(racy: boolean): Promise<Want | undefined> | Want | undefined;
}

const CASES: Case[] = [
  {
    name: 'producer / consumer: a kernel reads what another stream uploads, without a wait',
    run(racy) {
      const [load, compute] = [stream('load'), stream('compute')];
      const [x, y, out] = [dev('x'), dev('y'), dev('out')];
      write(load, x);
      write(load, y);
      if (!racy) order(load, compute);
      return { op: add(compute, x, y, out), buffer: x, range: [0, BYTES] };
    },
  },
  {
    name: "weight-slot ring: one waitEvent dropped (layer 2 reads slot 0 before its load)",
    run(racy) {
      const [load, compute] = [stream('load'), stream('compute')];
      const slots = [dev('slot0'), dev('slot1')];
      const act = [dev('act0'), dev('act1')];
      write(compute, act[0]!);
      let want: Want | undefined;
      for (let layer = 0; layer < 4; layer++) {
        const slot = slots[layer % 2]!;
        if (layer >= 2) order(compute, load); // the slot's previous reader finished
        write(load, slot);
        if (!(racy && layer === 2)) order(load, compute);
        const id = add(compute, act[layer % 2]!, slot, act[(layer + 1) % 2]!);
        if (racy && layer === 2) want = { op: id, buffer: slot, range: [0, BYTES] };
      }
      return want;
    },
  },
  {
    name: 'weight-slot ring: a slot is overwritten before the layer that reads it finished',
    run(racy) {
      const [load, compute] = [stream('load'), stream('compute')];
      const slots = [dev('slot0'), dev('slot1')];
      const act = [dev('act0'), dev('act1')];
      write(compute, act[0]!);
      let want: Want | undefined;
      for (let layer = 0; layer < 4; layer++) {
        const slot = slots[layer % 2]!;
        if (layer >= 2 && !(racy && layer === 2)) order(compute, load); // slot 0's reader (layer 0) finished
        const id = write(load, slot);
        if (racy && layer === 2) want = { op: id, buffer: slot, range: [0, BYTES] };
        order(load, compute);
        add(compute, act[layer % 2]!, slot, act[(layer + 1) % 2]!);
      }
      return want;
    },
  },
  {
    name: 'chunked pipeline: a download not ordered after its kernel',
    run(racy) {
      const [up, down] = [stream('up'), stream('down')];
      let want: Want | undefined;
      for (let k = 0; k < 3; k++) {
        const [x, y] = [dev(`in${k}-`), dev(`out${k}-`)];
        write(up, x);
        double(up, x, y);
        if (!(racy && k === 1)) order(up, down);
        const id = read(down, y);
        if (racy && k === 1) want = { op: id, buffer: y, range: [0, BYTES] };
      }
      return want;
    },
  },
  {
    name: 'legacy default stream: a non-blocking stream reads what the default stream wrote (a blocking one is ordered)',
    run(racy) {
      const x = dev('x');
      write(A.defaultStream, x);
      const s = stream('reader', { nonBlocking: racy });
      return { op: read(s, x), buffer: x };
    },
  },
  {
    name: 'legacy default stream: it reads what a non-blocking stream wrote (a blocking one is ordered)',
    run(racy) {
      const x = dev('x');
      const s = stream('writer', { nonBlocking: racy });
      write(s, x);
      return { op: read(A.defaultStream, x), buffer: x };
    },
  },
  {
    name: "legacy default stream: a blocking stream of another context is not ordered (it is per context)",
    run(racy) {
      const x = dev('x');
      const s = racy ? B.createStream({ label: 'B.blocking' }) : A.createStream({ label: 'A.blocking' });
      write(s, x);
      return { op: read(A.defaultStream, x), buffer: x };
    },
  },
  {
    name: 'partially overlapping byte ranges race on the overlap; adjacent ranges do not',
    run(racy) {
      const [a, b] = [stream('a'), stream('b')];
      const x = dev('x', 1024);
      write(a, x, 0, 512);
      return { op: write(b, x, racy ? 256 : 512, 512), buffer: x, range: [256, 512] };
    },
  },
  {
    name: 'a read overlapping a write races; two reads of the same bytes do not',
    run(racy) {
      const [a, b] = [stream('a'), stream('b')];
      const x = dev('x');
      write(a, x);
      order(a, b);
      read(a, x, 0, 64);
      return { op: racy ? write(b, x, 32, 64) : read(b, x, 32, 64), buffer: x, range: [32, 64] };
    },
  },
  {
    name: 'a chain through three events orders the ends; dropping its last link does not',
    run(racy) {
      const [a, b, c] = [stream('a'), stream('b'), stream('c')];
      const x = dev('x');
      write(a, x);
      order(a, b);
      if (!racy) order(b, c);
      return { op: read(c, x), buffer: x };
    },
  },
  {
    name: 'waitStream covers only the work enqueued before it',
    run(racy) {
      const [a, b] = [stream('a'), stream('b')];
      const x = dev('x');
      write(a, x);
      if (!racy) write(a, x, 0, 64);
      b.waitStream(a);
      if (racy) write(a, x, 0, 64);
      return { op: read(b, x), buffer: x, range: [0, 64] };
    },
  },
  {
    name: 'waitEvent takes the record current at the call, not a later re-record',
    run(racy) {
      const [a, b] = [stream('a'), stream('b')];
      const x = dev('x');
      const e = A.createEvent();
      write(a, x, 0, 64);
      e.record(a);
      if (!racy) {
        write(a, x, 64, 64);
        e.record(a);
        b.waitEvent(e);
      } else {
        b.waitEvent(e);
        write(a, x, 64, 64);
        e.record(a);
      }
      return { op: read(b, x, 0, 128), buffer: x, range: [64, 128] };
    },
  },
  {
    name: 'write after read: a stream overwrites what a kernel of another stream still reads',
    run(racy) {
      const [a, b] = [stream('a'), stream('b')];
      const [x, y] = [dev('x'), dev('y')];
      write(a, x);
      double(a, x, y);
      if (!racy) order(a, b);
      return { op: write(b, x), buffer: x };
    },
  },
  {
    name: "a read-only binding does not conflict with another read; a read_write binding does",
    run(racy) {
      const [a, b] = [stream('a'), stream('b')];
      const [x, y, z] = [dev('x'), dev('y'), dev('z')];
      write(a, x);
      order(a, b);
      double(a, x, y);
      // racy: x bound read_write (the output of double); twin: x bound read-only (its input)
      return { op: racy ? double(b, z, x) : double(b, x, z), buffer: x };
    },
  },
  {
    name: 'copy chain: a copy reads what another stream copied in, without a wait',
    run(racy) {
      const [a, b] = [stream('a'), stream('b')];
      const [x, y, z] = [dev('x'), dev('y'), dev('z')];
      write(a, x);
      a.copy(x, y);
      if (!racy) order(a, b);
      return { op: b.copy(y, z), buffer: y };
    },
  },
  {
    name: 'pageable upload in pieces: a read of one piece races only with that piece',
    run(racy) {
      const [a, b] = [stream('a'), stream('b')];
      const x = dev('x', 32768);
      write(a, x); // 32 KiB in pieces of 4 KiB (uploadPieceBytes)
      if (!racy) order(a, b);
      return { op: read(b, x, 8192, 1024), buffer: x, range: [8192, 9216] };
    },
  },
  {
    name: 'two-stage pipeline: stage 1 overwrites its output before stage 2 read it (no back-pressure event)',
    run(racy) {
      const [s1, s2] = [stream('stage1'), stream('stage2')];
      const [inp, act, out] = [dev('in'), dev('act'), dev('out')];
      let want: Want | undefined;
      for (let i = 0; i < 3; i++) {
        write(s1, inp);
        if (i > 0 && !(racy && i === 2)) order(s2, s1);
        const id = double(s1, inp, act);
        if (racy && i === 2) want = { op: id, buffer: act };
        order(s1, s2);
        double(s2, act, out);
      }
      return want;
    },
  },
  {
    name: 'a uniform buffer updated on another stream while a kernel reads it',
    run(racy) {
      const [a, b] = [stream('a'), stream('b')];
      const params = A.alloc(16, { label: `params${++uid}`, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
      const out = dev('out');
      a.upload(new Float32Array([2, 0, 0, 0]), params);
      a.launch(A.kernel(UNIFORM_WGSL, { label: 'fill' }), { bindings: [params, out], workgroups: workgroupsFor(N, 64) });
      if (!racy) order(a, b);
      return { op: b.upload(new Float32Array([3, 0, 0, 0]), params), buffer: params };
    },
  },
  {
    name: 'two downloads into one pinned buffer from two streams (write / write)',
    run(racy) {
      const [a, b] = [stream('a'), stream('b')];
      const [x, y] = [dev('x'), dev('y')];
      const p = A.allocHost(BYTES, 'download', { label: `pd${++uid}` });
      write(a, x);
      write(b, y);
      a.download(x, p);
      if (!racy) order(a, b);
      return { op: b.download(y, p), buffer: p };
    },
  },
  {
    name: 'one pinned upload buffer read by two streams at once is fine; downloading into it is not',
    run(racy) {
      const [a, b] = [stream('a'), stream('b')];
      const [x, y] = [dev('x'), dev('y')];
      const p = A.allocHost(BYTES, 'upload', { label: `pu${++uid}` });
      p.f32.set(r.f32Array(N));
      a.upload(p, x);
      b.upload(p, y); // two reads of p: no race
      const z = dev('z');
      const q = A.allocHost(BYTES, 'download', { label: `pq${++uid}` });
      write(a, z);
      a.download(z, q);
      if (!racy) order(a, b);
      return { op: b.download(y, q), buffer: q };
    },
  },
  {
    name: 'host reads a pinned download buffer that completed but was never handed over (no ready(), no synchronize)',
    async run(racy) {
      const s = stream('s');
      const x = dev('x');
      const p = A.allocHost(BYTES, 'download', { label: `pd${++uid}` });
      write(s, x);
      s.download(x, p);
      if (racy) await drained(s);
      else await p.ready();
      void p.f32[0];
      return { op: 0, buffer: p };
    },
  },
  {
    name: 'host refills a pinned upload buffer whose upload completed but was never handed over',
    async run(racy) {
      const s = stream('s');
      const x = dev('x');
      const p = A.allocHost(BYTES, 'upload', { label: `pu${++uid}` });
      p.f32.set(r.f32Array(N));
      s.upload(p, x);
      if (racy) await drained(s);
      else await s.synchronize();
      p.f32.set(r.f32Array(N));
      return { op: 0, buffer: p };
    },
  },
  {
    name: 'isHostOwned is a hand-over: polling it orders the host after the download',
    async run(racy) {
      const s = stream('s');
      const x = dev('x');
      const p = A.allocHost(BYTES, 'download', { label: `pd${++uid}` });
      write(s, x);
      s.download(x, p);
      if (racy) await drained(s);
      else while (!p.isHostOwned) await new Promise((res) => setImmediate(res));
      void p.f32[0];
      return { op: 0, buffer: p };
    },
  },
  {
    name: 'a host function fills a pinned buffer another stream already uploaded from',
    async run(racy) {
      const [a, b] = [stream('a'), stream('b')];
      const x = dev('x');
      const p = A.allocHost(BYTES, 'upload', { label: `pu${++uid}` });
      const g = gate();
      let fillId = 0;
      if (racy) {
        a.hostFn(() => g.wait);
        fillId = a.hostFn(() => void p.f32.set(r.f32Array(N)));
        b.upload(p, x);
        await drained(b); // the upload read p; nothing hands that over to the host or to stream a
        g.open();
        await a.synchronize().catch(() => undefined);
      } else {
        a.hostFn(() => void p.f32.set(r.f32Array(N)));
        a.upload(p, x);
        await a.synchronize();
      }
      return { op: fillId, buffer: p };
    },
  },
  {
    name: "a later op that covers another stream's read does not hide it from a host function enqueued before that op",
    async run(racy) {
      const [a, b] = [stream('a'), stream('b')];
      const [x, y] = [dev('x'), dev('y')];
      const p = A.allocHost(BYTES, 'upload', { label: `pu${++uid}` });
      const g = gate();
      b.upload(p, x); // b reads p
      if (!racy) a.waitStream(b);
      a.hostFn(() => g.wait);
      const fillId = a.hostFn(() => void p.f32.set(r.f32Array(N))); // writes p when it runs
      if (racy) a.waitStream(b);
      a.upload(p, y); // covers b's read and follows it: it must not stand in for it
      await drained(b);
      g.open();
      await a.synchronize().catch(() => undefined);
      return { op: fillId, buffer: p };
    },
  },
  {
    name: 'stream.synchronize() of the writer orders the host; of another stream it does not',
    async run(racy) {
      const [a, b, c] = [stream('a'), stream('b'), stream('c')];
      const x = dev('x');
      write(a, x);
      await (racy ? c : a).synchronize();
      return { op: read(b, x), buffer: x };
    },
  },
  {
    name: 'event.synchronize() orders the host after the record, not after later work',
    async run(racy) {
      const [a, b] = [stream('a'), stream('b')];
      const x = dev('x');
      const e = A.createEvent();
      if (racy) e.record(a);
      write(a, x);
      if (!racy) e.record(a);
      await e.synchronize();
      return { op: read(b, x), buffer: x };
    },
  },
  {
    name: 'ctx.synchronize() orders the host after every stream of that context only',
    async run(racy) {
      const a = stream('a');
      const bs = B.createStream({ label: 'B.reader', nonBlocking: true });
      const x = dev('x');
      write(a, x);
      await (racy ? B : A).synchronize();
      return { op: read(bs, x), buffer: x };
    },
  },
  {
    name: 'event.query() returning true orders the host; another event does not',
    async run(racy) {
      const [a, b, c] = [stream('a'), stream('b'), stream('c')];
      const x = dev('x');
      write(a, x);
      const e = A.createEvent();
      e.record(racy ? c : a);
      while (!e.query()) await new Promise((res) => setImmediate(res));
      await drained(a);
      return { op: read(b, x), buffer: x };
    },
  },
  {
    name: 'a host function enqueues work ordered after its own stream, not after another',
    async run(racy) {
      const [a, b, c] = [stream('a'), stream('b'), stream('c')];
      const x = dev('x');
      write(a, x);
      let id = 0;
      (racy ? c : a).hostFn(() => void (id = read(b, x)));
      await (racy ? c : a).synchronize();
      return { op: id, buffer: x };
    },
  },
  {
    name: 'events across contexts on one device order their streams',
    run(racy) {
      const a = stream('A.writer');
      const b = B.createStream({ label: 'B.reader', nonBlocking: true });
      const x = dev('x');
      write(a, x);
      if (!racy) order(a, b);
      return { op: read(b, x), buffer: x };
    },
  },
  {
    name: 'waitStream on a stream of another context orders it',
    run(racy) {
      const a = stream('A.writer');
      const b = B.createStream({ label: 'B.reader', nonBlocking: true });
      const x = dev('x');
      write(a, x);
      if (!racy) b.waitStream(a);
      return { op: read(b, x), buffer: x };
    },
  },
  {
    name: 'a raw GPUBuffer is tracked like a DeviceBuffer',
    run(racy) {
      const [a, b] = [stream('a'), stream('b')];
      const raw = A.device.createBuffer({ size: BYTES, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST, label: `raw${++uid}` });
      a.upload(r.f32Array(N), raw);
      if (!racy) order(a, b);
      const id = b.download(raw, new Float32Array(N));
      return { op: id, buffer: raw };
    },
  },
  {
    name: 'a wait on a never-recorded event is reported (CUDA proceeds silently)',
    run(racy) {
      const [a, b] = [stream('a'), stream('b')];
      const e = A.createEvent();
      if (!racy) e.record(a);
      return { op: b.waitEvent(e), buffer: null, kind: 'unrecorded-wait' };
    },
  },
  {
    name: 'a sleep kernel (read_write) and a download of its buffer on another stream',
    run(racy) {
      const [a, b] = [stream('a'), stream('b')];
      const x = dev('x');
      a.upload(new Uint32Array(N), x);
      a.launch(benchKernels(A).sleep, { bindings: [x], workgroups: workgroupsFor(N, 64), constants: { iterations: 4 } });
      if (!racy) order(a, b);
      return { op: read(b, x), buffer: x };
    },
  },
  {
    name: 'the same bytes written by two streams (write / write)',
    run(racy) {
      const [a, b] = [stream('a'), stream('b')];
      const x = dev('x');
      write(a, x, 128, 128);
      if (!racy) order(a, b);
      return { op: write(b, x, 0, 256), buffer: x, range: [128, 256] };
    },
  },
];

const labelOf = (b: Want['buffer']): string => (b === null ? '' : (b as { label: string }).label);

describe(`stream sanitizer: race corpus (${CASES.length} programs and their race-free twins; seed ${seed})`, () => {
  it('has at least 30 programs', () => expect(CASES.length).toBeGreaterThanOrEqual(30));
  for (const c of CASES) {
    it(c.name, async () => {
      for (const racy of [true, false]) {
        reports = [];
        const want = await c.run(racy);
        await A.synchronize().catch(() => undefined);
        await B.synchronize().catch(() => undefined);
        const got = reports.map((x) => `${x.kind} at op #${x.second.op} on '${x.buffer}' [${x.range?.join(', ')}]`);
        if (!racy) {
          expect(got, 'the race-free twin is not flagged').toEqual([]);
          continue;
        }
        expect(got, 'flagged exactly once').toHaveLength(1);
        const rep = reports[0]!;
        expect(rep.kind).toBe(want!.kind ?? 'race');
        expect(rep.second.op, 'at the op that makes the race').toBe(want!.op);
        expect(rep.buffer).toBe(labelOf(want!.buffer));
        if (want!.range) expect(rep.range).toEqual(want!.range);
        expect(rep.fix.length).toBeGreaterThan(10);
      }
    });
  }
});

describe('stream sanitizer: modes', () => {
  it("'throw' throws StreamRaceError at the call, enqueues nothing, and other streams and their data are intact", async () => {
    const ctx = await gpuContext({ sanitize: 'throw', label: 'T' });
    try {
      const [load, compute, other] = ['load', 'compute', 'other'].map((l) => ctx.createStream({ label: l, nonBlocking: true })) as [Stream, Stream, Stream];
      const [x, y, out, o1, o2] = ['x', 'y', 'out', 'o1', 'o2'].map((l) => ctx.alloc(BYTES, { label: l })) as DeviceBuffer[];
      const a = r.f32Array(N), b = r.f32Array(N);
      load.upload(a, x!);
      load.upload(b, y!);
      other.upload(a, o1!);
      other.launch(ctx.kernels.vectorAdd, { bindings: [o1!, o1!, o2!], workgroups: workgroupsFor(N, 256) });
      const pending = compute.pendingOps;
      let err: unknown;
      try {
        compute.launch(ctx.kernels.vectorAdd, { bindings: [x!, y!, out!], workgroups: workgroupsFor(N, 256) }); // line of the race
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(StreamRaceError);
      const e = err as StreamRaceError;
      expect(e.report.first?.name).toBe('upload ->x');
      expect(e.report.second.stream).toBe('compute');
      expect(e.report.fix).toBe(`record an event on 'load' after op #${e.report.first!.op} and waitEvent it on 'compute' before op #${e.report.second.op}`);
      expect(e.callSite).toMatch(/sanitizer\.test\.ts/);
      expect(compute.pendingOps, 'nothing was enqueued').toBe(pending);
      // The fixed program runs, and the other stream's result is right.
      const ev = ctx.createEvent();
      ev.record(load);
      compute.waitEvent(ev);
      compute.launch(ctx.kernels.vectorAdd, { bindings: [x!, y!, out!], workgroups: workgroupsFor(N, 256) });
      const got = new Float32Array(N), got2 = new Float32Array(N);
      compute.download(out!, got);
      other.download(o2!, got2);
      await ctx.synchronize();
      expect(got).toEqual(vectorAddRef(a, b));
      expect(got2).toEqual(vectorAddRef(a, a));
    } finally {
      ctx.destroy();
    }
  });

  it("'throw' refuses a pageable upload whole (in pieces, the first was enqueued and written before a later one threw), and a refused uploadFrom leaves its source to the next call", async () => {
    const ctx = await gpuContext({ sanitize: 'throw', uploadPieceBytes: 4096, label: 'pieces' });
    try {
      const [a, b] = [ctx.createStream({ label: 'a', nonBlocking: true }), ctx.createStream({ label: 'b', nonBlocking: true })];
      const x = ctx.alloc(8192, { label: 'px' });
      const seed0 = randomSeed(), g = rng(seed0);
      const first = g.u32Array(2048), second = g.u32Array(2048);
      a.upload(first, x);
      await a.synchronize();
      a.download(x, new Uint32Array(1024), { srcOffset: 4096, size: 4096 }); // reads the second half
      expect(() => b.upload(second, x)).toThrow(StreamRaceError);
      expect(b.pendingOps, 'no piece was enqueued').toBe(0);
      expect(ctx.uploadPieceBytes, "'throw' uploads whole").toBe(0);
      await ctx.synchronize();
      const back = new Uint32Array(2048);
      b.download(x, back);
      await b.synchronize();
      expect(firstMismatch(back, first), `seed ${seed0}`).toBeNull();
      // uploadFrom: refused by a race, then given again with the wait that orders it.
      const data = new Uint8Array(g.u32Array(2048).buffer as ArrayBuffer);
      const source = new Blob([data]).stream();
      a.download(x, new Uint32Array(2048));
      expect(() => b.uploadFrom(source, x)).toThrow(StreamRaceError);
      b.waitStream(a);
      b.uploadFrom(source, x);
      b.download(x, back);
      await ctx.synchronize();
      expect(firstMismatch(new Uint8Array(back.buffer), data), `seed ${seed0}`).toBeNull();
    } finally {
      ctx.destroy();
    }
  });

  it('a report callback that synchronizes or queries the racing stream does not hide a later race on it', async () => {
    const got: RaceReport[] = [];
    let a: Stream | undefined;
    const ctx = await gpuContext({ sanitize: (x) => (got.push(x), void a?.query(), void ctx.synchronize().catch(() => undefined)), label: 'reentrant' });
    try {
      a = ctx.createStream({ label: 'a', nonBlocking: true });
      const b = ctx.createStream({ label: 'b', nonBlocking: true });
      const [x, z] = [ctx.alloc(BYTES, { label: 'rx' }), ctx.alloc(BYTES, { label: 'rz' })];
      b.upload(r.f32Array(N), x);
      await b.synchronize();
      b.upload(r.f32Array(N), x);
      const first = a.copy(x, z); // races with b's second upload: the callback queries `a` meanwhile
      const c = ctx.createStream({ label: 'c', nonBlocking: true });
      const second = c.upload(r.f32Array(N), z); // races with a's copy
      expect(got.map((g) => g.second.op)).toEqual([first, second]);
      await ctx.synchronize();
    } finally {
      ctx.destroy();
    }
  });

  it("with captureStacks 'all' a race whose first access is the host's view names the host's line", async () => {
    const got: RaceReport[] = [];
    const ctx = await gpuContext({ sanitize: (x) => void got.push(x), captureStacks: 'all', label: 'host first' });
    try {
      const p = ctx.allocHost(BYTES, 'upload', { label: 'hf' });
      await p.ready();
      const x = ctx.alloc(BYTES);
      const s = ctx.createStream({ label: 's', nonBlocking: true }), g = gate();
      s.hostFn(() => g.wait);
      s.hostFn(() => void p.u32[1]); // enqueued before the host's write, run after it
      p.u32[0] = 1; // the first access
      g.open();
      await ctx.synchronize();
      expect(got).toHaveLength(1);
      expect(got[0]!.first).toMatchObject({ kind: 'host' });
      expect(got[0]!.first!.callSite).toMatch(/sanitizer\.test\.ts/);
      x.destroy();
    } finally {
      ctx.destroy();
    }
  });

  it("'warn' prints the report once and goes on", async () => {
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => undefined);
    const ctx = await gpuContext({ sanitize: 'warn', label: 'W' });
    try {
      const [a, b] = [ctx.createStream({ label: 'a', nonBlocking: true }), ctx.createStream({ label: 'b', nonBlocking: true })];
      const x = ctx.alloc(BYTES, { label: 'wx' });
      a.upload(r.f32Array(N), x);
      b.download(x, new Float32Array(N));
      await ctx.synchronize();
      expect(warn).toHaveBeenCalledTimes(1);
      expect(String(warn.mock.calls[0]![0])).toMatch(/race on buffer 'wx' bytes \[0, 1024\)/);
    } finally {
      warn.mockRestore();
      ctx.destroy();
    }
  });

  it('puts a race on the trace: a link from the first op to the second, a flow arrow in the Chrome trace', async () => {
    const got: RaceReport[] = [];
    const ctx = await gpuContext({ sanitize: (r) => void got.push(r), trace: true, label: 'traced' });
    try {
      const [a, b] = [ctx.createStream({ label: 'a', nonBlocking: true }), ctx.createStream({ label: 'b', nonBlocking: true })];
      const x = ctx.alloc(BYTES, { label: 'tx' });
      const first = a.upload(r.f32Array(N), x);
      const second = b.download(x, new Float32Array(N));
      await ctx.synchronize();
      expect(got).toHaveLength(1);
      expect(ctx.trace.raceLinks()).toEqual([{ from: first, to: second, name: 'race on tx [0, 1024)' }]);
      const events = ctx.trace.toChromeTrace().traceEvents;
      const tids = new Map(events.filter((e) => e.ph === 'M' && e.name === 'thread_name').map((e) => [(e.args as { name: string }).name, e.tid]));
      const s = events.find((e) => e.ph === 's')!;
      const f = events.find((e) => e.ph === 'f')!;
      expect(s).toMatchObject({ cat: 'race', id: f.id, tid: tids.get('a') });
      expect(f).toMatchObject({ cat: 'race', bp: 'e', tid: tids.get('b') });
      const span = (op: number): { ts?: number } => events.find((e) => e.ph === 'X' && (e.args as { op?: number; lane: string }).op === op && (e.args as { lane: string }).lane !== 'host')!;
      expect(s.ts).toBe(span(first).ts);
      expect(f.ts).toBe(span(second).ts);
    } finally {
      ctx.destroy();
    }
  });

  it('rejects a bad sanitize option at createContext', async () => {
    await expect(gpuContext({ sanitize: 'loud' as never })).rejects.toThrow(/Expected `sanitize` to be false, 'throw', 'warn' or a function/);
  });
});

describe('stream sanitizer: streams that come and go', () => {
  it("reuses a destroyed stream's clock entry once the host saw its work, and still finds a new stream's races", async () => {
    // Each round: stream `old` writes x several times, is synchronized and destroyed (its entry can
    // go to the next stream); a new stream then writes y, and a third reads y with no wait. A new
    // stream whose epochs restarted below the old one's would look seen by the host: no race found.
    for (let round = 0; round < 50; round++) {
      reports = [];
      const x = dev('x'), y = dev('y');
      const old = stream(`old${round}`);
      for (let k = 0; k < 3; k++) write(old, x);
      await old.synchronize();
      old.destroy();
      const fresh = stream(`fresh${round}`), other = stream(`other${round}`);
      read(fresh, x); // after the host saw old's writes: ordered, no race
      const w = write(fresh, y);
      const rd = read(other, y);
      expect(reports.map((x) => [x.first?.op, x.second.op]), `round ${round}`).toEqual([[w, rd]]);
      await Promise.all([fresh.synchronize(), other.synchronize()]);
      fresh.destroy();
      other.destroy();
      x.destroy();
      y.destroy();
    }
  });

  it('a destroyed stream whose work the host has not seen keeps its entry: its write races with every later reader', async () => {
    reports = [];
    const x = dev('x', 16);
    const g = gate();
    const old = stream('unseen');
    old.hostFn(() => g.wait);
    const w = write(old, x);
    old.destroy(); // not synchronized: its write is not known to be done
    // Enough new streams to use up every entry retired before (and to reach this one, were it handed out).
    const readers = Array.from({ length: 1000 }, (_, i) => stream(`reader${i}`));
    const rds = readers.map((s) => read(s, x));
    expect(reports.length).toBe(rds.length);
    expect(reports.every((x, i) => x.first?.op === w && x.second.op === rds[i])).toBe(true);
    g.open();
    await A.synchronize().catch(() => undefined);
    for (const s of readers) s.destroy();
  });

  it('streams synchronized and dropped without destroy() give their clock entries back (they lengthened every clock until collected)', async () => {
    const ctx = await gpuContext({ sanitize: 'throw', label: 'churn' });
    try {
      const x = ctx.alloc(BYTES, { label: 'cx' });
      const kept: Stream[] = []; // alive (as if the app held them), their work seen by the host
      for (let i = 0; i < 300; i++) {
        const s = ctx.createStream({ label: `churn${i}`, nonBlocking: true });
        kept.push(s);
        s.upload(r.f32Array(N), x);
        if (i % 2) await s.synchronize();
        else await ctx.synchronize();
      }
      expect(kept.filter((k) => k.queue.clock !== null).length, 'streams holding a clock entry: none has work the host has not seen').toBe(0);
      // A stream that gave its entry back takes one at its next op, and its races are still found.
      const [a, b] = [ctx.createStream({ label: 'a', nonBlocking: true }), ctx.createStream({ label: 'b', nonBlocking: true })];
      a.upload(r.f32Array(N), x);
      await a.synchronize();
      a.upload(r.f32Array(N), x);
      expect(() => b.download(x, new Float32Array(N))).toThrow(StreamRaceError);
      await ctx.synchronize();
    } finally {
      ctx.destroy();
    }
  });

  it("ctx.synchronize() orders the host after the work of destroyed streams the context already forgot (a false race before), and their entries go to later streams", async () => {
    const ctx = await gpuContext({ sanitize: 'throw', label: 'pruned' });
    try {
      const x = ctx.alloc(BYTES, { label: 'px' });
      const writer = ctx.createStream({ label: 'writer', nonBlocking: true });
      writer.upload(r.f32Array(N), x);
      // Done, without the host seeing it through the library (a raw WebGPU wait), then destroyed.
      ctx.flush();
      await ctx.device.queue.onSubmittedWorkDone();
      for (let i = 0; i < 100 && writer.pendingOps > 0; i++) await delay(1);
      expect(writer.pendingOps).toBe(0);
      writer.destroy();
      const before = host.clock.length;
      for (let round = 0; round < 4; round++) {
        // Enough streams to make the context forget the destroyed ones whose work is done.
        const many = Array.from({ length: 80 }, (_, i) => ctx.createStream({ label: `m${round}.${i}`, nonBlocking: true }));
        for (const s of many) s.hostFn(() => undefined);
        for (const s of many) s.destroy();
        await ctx.synchronize();
      }
      const reader = ctx.createStream({ label: 'reader', nonBlocking: true });
      const back = new Float32Array(N);
      reader.download(x, back); // after ctx.synchronize(): ordered after writer's upload
      await reader.synchronize();
      expect(host.clock.length - before, 'entries of 320 destroyed streams, 80 alive at a time').toBeLessThanOrEqual(90);
    } finally {
      ctx.destroy();
    }
  });

  it('host functions waiting to run keep only the accesses they may race with: those of mappable buffers not covered by the host (the cost grew with each pending one)', async () => {
    const ctx = await gpuContext({ sanitize: 'throw', label: 'pending fns' });
    const g = gate();
    try {
      const s = ctx.createStream({ label: 'held', nonBlocking: true });
      s.hostFn(() => g.wait); // the host functions after it stay pending
      const [a, b] = [ctx.alloc(BYTES, { label: 'ha' }), ctx.alloc(BYTES, { label: 'hb' })];
      for (let i = 0; i < 2000; i++) {
        s.hostFn(() => undefined);
        s.copy(a, b);
      }
      expect(heldAccesses(b.buffer), 'copies of one stream into a device buffer cover each other').toBeLessThanOrEqual(2);
      // A host function enqueued before the host's writes, run after them, races with them: the newest is kept for it.
      const p = ctx.allocHost(BYTES, 'upload', { label: 'hp' });
      await p.ready();
      const q = ctx.createStream({ label: 'reads p', nonBlocking: true });
      const g2 = gate();
      q.hostFn(() => g2.wait);
      q.hostFn(() => void p.f32[0]);
      for (let i = 0; i < 500; i++) p.f32[i % N] = i;
      expect(heldAccesses(p.buffer), "the host's own views cover each other").toBeLessThanOrEqual(2);
      g2.open();
      const failed = await q.synchronize().then(() => null, (e: unknown) => e as Error & { cause?: unknown });
      expect(failed?.cause, String(failed)).toMatchObject({ name: 'StreamRaceError', report: { buffer: 'hp', first: { kind: 'host' } } });
    } finally {
      g.open();
      await ctx.synchronize().catch(() => undefined);
      ctx.destroy();
    }
  });
});
