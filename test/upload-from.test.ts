/**
 * `stream.uploadFrom` (src/upload-from.ts) on real WebGPU (Dawn): from a file (random access,
 * parallel reads into the staging ring), a ReadableStream and an async iterable, with offsets and
 * sizes, checked byte for byte against the source on fresh seeded random data; stream order around
 * it; and sources that fail it: each fails that op alone, typed, with nothing leaked.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Readable } from 'node:stream';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { gpuContext, useGpuContext, rng, randomSeed } from './fixtures/gpu.js';
import { benchKernels } from '../bench/kernels/index';
import { openFile } from '../src/node.js';
import { serveDir } from '../bench/serve.js';
import { encodeSafetensors, httpSource, InvalidArgumentError, SafetensorsFile, StreamError, UploadSourceError, type Context, type DeviceBuffer, type RaceReport, type Stream } from '../src/index.js';

type GpuCtx = Context & { errors: string[] };
let ctx: GpuCtx;
const races: RaceReport[] = [];
useGpuContext((c) => (ctx = c), { sanitize: (r) => void races.push(r) });

const dir = mkdtempSync(join(tmpdir(), 'webgpu-streams-upload-from-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const seed = randomSeed();
const r = rng(seed);
/** An integer in [lo, hi]. */
const int = (lo: number, hi: number): number => lo + (r.u32() % (hi - lo + 1));
const bytesOf = (n: number): Uint8Array => new Uint8Array(r.u32Array(Math.ceil(n / 4)).buffer, 0, n);
const fileOf = (name: string, data: Uint8Array): string => {
  const path = join(dir, name);
  writeFileSync(path, data);
  return path;
};
/** dst's bytes [at, at + n), read back on a stream of its own. */
async function readBack(buf: DeviceBuffer, at = 0, n = buf.size - at): Promise<Uint8Array> {
  const s = ctx.createStream({ label: 'readback', nonBlocking: true });
  const out = new Uint8Array(n);
  s.download(buf, out, { srcOffset: at, size: n });
  await s.synchronize();
  return out;
}
/**
 * A random-access source of `data` whose reads stay in flight until the test ends them (as a
 * thread-pool read ends when the kernel is done; `failFirst`: the first read fails at once), and a
 * watch on `own`'s device.destroy(): how many reads were in flight when it was called.
 */
function heldReads(own: Context, data: Uint8Array, failFirst = false) {
  let inFlight = 0;
  let first = failFirst;
  const ends: (() => void)[] = [];
  const src = { size: data.length, parallel: 4, read: (into: Uint8Array, at: number): Promise<number> => {
    if (first) {
      first = false;
      return Promise.reject(new Error('disk gone'));
    }
    inFlight++;
    return new Promise<number>((resolve) => ends.push(() => { inFlight--; into.set(data.subarray(at, at + into.byteLength)); resolve(into.byteLength); }));
  } };
  const destroyedWith: number[] = [];
  const device = own.device;
  const destroy = device.destroy.bind(device);
  device.destroy = () => { destroyedWith.push(inFlight); destroy(); };
  return {
    src,
    ends,
    inFlight: () => inFlight,
    /** After ctx.destroy(): not before the reads end, then at once. */
    async expectDeviceDestroyedAfterReads(): Promise<void> {
      await new Promise((r) => setTimeout(r, 20));
      expect(destroyedWith, 'device.destroy() while reads were in flight').toEqual([]);
      for (const end of ends.splice(0)) end();
      await vi.waitFor(() => expect(destroyedWith, 'the device is destroyed once the reads ended').toEqual([0]), { timeout: 2000 });
    },
  };
}

async function readBackOn(c: Context, buf: DeviceBuffer): Promise<ArrayBuffer> {
  const out = new Uint8Array(buf.size);
  const s = c.createStream({ label: 'readback', nonBlocking: true });
  s.download(buf, out);
  await s.synchronize();
  return out.buffer;
}
/** Some turns of the event loop: reads, flushes and submits that can happen, have. */
const settle = async (): Promise<void> => {
  for (let i = 0; i < 50; i++) await new Promise((res) => setImmediate(res));
};
/**
 * Holds back `c`'s submitted-work completions (onSubmittedWorkDone) until `release()`, so work is
 * submitted (ordered) but not done; counts submits.
 */
function holdCompletions(c: Context): { submits: () => number; release: () => void } {
  const queue = c.device.queue;
  const done = queue.onSubmittedWorkDone.bind(queue);
  const submit = queue.submit.bind(queue);
  const held: (() => void)[] = [];
  let hold = true;
  let submits = 0;
  queue.onSubmittedWorkDone = () => done().then(() => (hold ? new Promise<undefined>((res) => held.push(() => res(undefined))) : undefined));
  queue.submit = (cmds: Iterable<GPUCommandBuffer>) => (submits++, submit(cmds));
  return {
    submits: () => submits,
    release: () => {
      hold = false;
      for (const res of held.splice(0)) res();
    },
  };
}
const firstDiff = (a: Uint8Array, b: Uint8Array): number => {
  if (a.length !== b.length) return -2;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return i;
  return -1;
};
/** Chunks of random sizes (1 byte to 3 MiB) over `data`, as an async iterable. */
async function* chunks(data: Uint8Array): AsyncGenerator<Uint8Array> {
  for (let at = 0; at < data.length; ) {
    const n = Math.min(data.length - at, int(0, 3) === 0 ? int(1, 64) : int(1, 3 << 20));
    yield data.slice(at, at + n);
    at += n;
    await new Promise((res) => setImmediate(res));
  }
}
const readable = (data: Uint8Array): ReadableStream<Uint8Array> => {
  const it = chunks(data);
  return new ReadableStream({ pull: async (c) => { const x = await it.next(); if (x.done) c.close(); else c.enqueue(x.value); } });
};

describe(`uploadFrom (seed ${seed})`, () => {
  it('moves a file of several staging pieces into a buffer, from an offset, in stream order', async () => {
    const data = bytesOf(20 * 1048576 + 12 + 4 * int(0, 1000)); // 3 pieces of 8 MiB
    const file = await openFile(fileOf('a.bin', data));
    try {
      const offset = 4 * int(0, 1000) + int(0, 3); // any byte position in the file
      const size = (data.length - offset) & ~3;
      const dst = ctx.alloc(size + 8, { label: 'dst' });
      const load = ctx.createStream({ label: 'load' });
      load.uploadFrom(file, dst, { offset, size, dstOffset: 8 - 8 }); // dstOffset 0
      const after = new Uint8Array(size);
      load.download(dst, after, { size }); // stream order: after the last byte landed
      await load.synchronize();
      expect(firstDiff(after, data.subarray(offset, offset + size)), `seed ${seed}`).toBe(-1);
    } finally {
      await file.close();
    }
  });

  it('moves a ReadableStream and an async iterable of uneven chunks, skipping `offset` bytes, into dstOffset', async () => {
    for (const make of [readable, chunks]) {
      const data = bytesOf(4 * int(1, 5 << 18)); // up to 5 MiB
      const skip = 4 * int(0, 100);
      const dst = ctx.alloc(data.length + 64, { label: 'dst' });
      const s = ctx.createStream({ label: 'load' });
      s.uploadFrom(make(data), dst, { offset: skip, dstOffset: 64 });
      await s.synchronize();
      expect(firstDiff(await readBack(dst, 64, data.length - skip), data.subarray(skip)), `seed ${seed}`).toBe(-1);
    }
  });

  it('a transfer under a piece takes staging of its size rounded up to a power of two, not a whole 8 MiB piece', async () => {
    const own = await gpuContext();
    try {
      const n = 4 * int(16 << 10, 40 << 10); // 64-160 KiB
      const data = bytesOf(n);
      const path = fileOf(`small-${seed}.bin`, data);
      const file = await openFile(path);
      const dst = own.alloc(n, { label: 'small dst' });
      const s = own.createStream({ label: 'small' });
      s.uploadFrom(file, dst);
      s.uploadFrom(readable(data), dst, { size: n });
      await s.synchronize();
      await file.close();
      const want = Math.max(64 << 10, 2 ** Math.ceil(Math.log2(n)));
      // One buffer of that size, two if the second transfer took its own before the first gave one back.
      expect([want, 2 * want], `staging for ${n} bytes (seed ${seed})`).toContain(own.memory.staging);
      const back = new Uint8Array(n);
      s.download(dst, back);
      await s.synchronize();
      expect(firstDiff(back, data), `seed ${seed}`).toBe(-1);
    } finally {
      own.destroy();
    }
  });

  it('a source that ends early, errors midway, or is longer than the destination fails that op alone, typed; nothing leaks', async () => {
    const staging = ctx.memory.staging;
    const other = ctx.createStream({ label: 'other', nonBlocking: true });
    const x = ctx.alloc(4096, { label: 'x' });
    const want = bytesOf(4096);
    other.upload(want, x);
    const cases: [string, () => AsyncIterable<Uint8Array> | ReadableStream<Uint8Array>, { size?: number }, RegExp][] = [
      ['ends early', () => chunks(bytesOf(1000)), { size: 4096 }, /ended after 1000 of the 4096 bytes asked for/],
      ['errors midway', () => { let n = 0; return new ReadableStream<Uint8Array>({ pull: (c) => (n++ === 0 ? c.enqueue(bytesOf(2048)) : c.error(new Error('connection reset'))) }); }, {}, /failed after 2048 bytes/],
      ['longer than dst', () => chunks(bytesOf(8192)), {}, /longer than the 4096 bytes of 'small'/],
      ['longer than dst, past a chunk that fills it', () => (async function* () { yield bytesOf(4096); yield new Uint8Array(0); yield bytesOf(16); })(), {}, /longer than the 4096 bytes of 'small'/],
      ['a Blob longer than dst, past a chunk that fills it', () => new Blob([bytesOf(4096) as Uint8Array<ArrayBuffer>, bytesOf(4) as Uint8Array<ArrayBuffer>]).stream(), {}, /longer than the 4096 bytes of 'small'/],
      ['not a multiple of 4', () => chunks(bytesOf(1001)), {}, /ended after 1001 bytes, not a multiple of 4/],
    ];
    for (const [what, source, opts, message] of cases) {
      const s = ctx.createStream({ label: `bad: ${what}`, nonBlocking: true });
      const small = ctx.alloc(4096, { label: 'small' });
      const id = s.uploadFrom(source(), small, opts);
      const later = s.download(small, new Uint8Array(16), { size: 16 });
      const err = await s.synchronize().then(() => null, (e: unknown) => e);
      expect(err, what).toBeInstanceOf(UploadSourceError);
      expect((err as Error).message, what).toMatch(message);
      expect((err as UploadSourceError).stream).toBe(`bad: ${what}`);
      expect(id).toBeLessThan(later);
      if (what === 'errors midway') expect(String((err as Error).cause)).toMatch(/connection reset/);
      await s.synchronize(); // reported once; the stream starts clean
      small.destroy();
    }
    await other.synchronize();
    expect(firstDiff(await readBack(x), want), 'the other stream is untouched').toBe(-1);
    expect(ctx.memory.staging, 'the staging ring is kept for reuse, not grown').toBeLessThanOrEqual(staging + 4 * (8 << 20));
  });

  it('into a buffer the device had no memory for: OutOfMemoryError named for uploadFrom on its stream, reported once to ctx.synchronize()', async () => {
    const own = await gpuContext({ label: 'oom' });
    try {
      const s = own.createStream({ label: 'loader' });
      const big = own.alloc(own.limits.maxBufferSize, { label: 'weights' }); // SwiftShader cannot allocate 1 GiB
      s.uploadFrom(chunks(bytesOf(1 << 20)), big);
      const tooBig = { name: 'OutOfMemoryError', op: 'uploadFrom', stream: 'loader', message: expect.stringMatching(/buffer 'weights'/) };
      await expect(own.synchronize()).rejects.toMatchObject(tooBig); // one stream's failure: not an aggregate with an internal stream's
      await expect(s.synchronize()).rejects.toMatchObject(tooBig);
      await own.synchronize();
      big.destroy();
      expect(own.errors).toEqual([]);
    } finally {
      own.destroy();
    }
  });

  it('a stream source whose op never runs (skipped behind a failure, its context destroyed) is cancelled, not left open', async () => {
    const cancelled: string[] = [];
    const source = (name: string): ReadableStream<Uint8Array> =>
      new ReadableStream<Uint8Array>({ pull: (c) => c.enqueue(bytesOf(1024)), cancel: () => void cancelled.push(name) });
    const s = ctx.createStream({ label: 'skips', nonBlocking: true });
    const dst = ctx.alloc(4096, { label: 'dst' });
    s.uploadFrom(chunks(bytesOf(1000)), dst, { size: 4096 }); // fails: ends early
    s.uploadFrom(source('behind a failure'), dst);
    const nodeStream = Readable.from([bytesOf(1024)]);
    s.uploadFrom(nodeStream, dst);
    const gen = (async function* () {
      yield bytesOf(1024);
    })();
    s.uploadFrom(gen, dst);
    expect(await s.synchronize().then(() => null, (e: unknown) => e)).toBeInstanceOf(UploadSourceError);
    await vi.waitFor(() => expect(cancelled).toEqual(['behind a failure']));
    expect(nodeStream.destroyed, 'a Node stream is destroyed').toBe(true);
    expect(await gen.next(), 'an async generator is returned').toEqual({ done: true, value: undefined });
    const own = await gpuContext();
    const t = own.createStream({ label: 'doomed' });
    t.hostFn(() => new Promise<void>((r) => setTimeout(r, 20)));
    t.uploadFrom(source('context destroyed'), own.alloc(4096, { label: 'dst' }));
    own.destroy();
    expect(await t.synchronize().then(() => null, (e: unknown) => e)).toMatchObject({ name: 'DestroyedError' });
    await vi.waitFor(() => expect(cancelled).toEqual(['behind a failure', 'context destroyed']));
    dst.destroy();
  });

  it("a random-access source's parallel, label and readAhead are checked at the call (a NaN parallel read nothing and the op moved the ring's stale bytes)", async () => {
    const data = bytesOf(1 << 16), dst = ctx.alloc(1 << 16);
    const read = async (into: Uint8Array, at: number): Promise<number> => (into.set(data.subarray(at, at + into.byteLength)), Math.min(into.byteLength, data.byteLength - at));
    const s = ctx.createStream({ label: 'checked source' });
    for (const [bad, what] of [[{ parallel: NaN }, /source.parallel/], [{ parallel: 'x' }, /source.parallel/], [{ parallel: Symbol('p') }, /source.parallel/], [{ parallel: 0 }, /source.parallel/], [{ label: Symbol('l') }, /source.label/], [{ readAhead: 'no' }, /source.readAhead/]] as const) {
      expect(() => s.uploadFrom({ size: data.byteLength, read, ...bad } as never, dst), JSON.stringify(Object.keys(bad))).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', op: 'uploadFrom', message: expect.stringMatching(what) }));
    }
    s.uploadFrom({ size: data.byteLength, read, parallel: 3, label: 'ok' }, dst);
    const back = new Uint8Array(data.byteLength);
    s.download(dst, back);
    await s.synchronize();
    expect(back.every((b, i) => b === data[i]), `seed ${seed}`).toBe(true);
    dst.destroy();
  });

  it('a stream source is read once: a locked one, or one given to an earlier uploadFrom, is refused at the call; a reusable iterable is not', async () => {
    const s = ctx.createStream({ label: 'once' });
    const dst = ctx.alloc(4096, { label: 'dst' });
    const stream = (): ReadableStream<Uint8Array> => new ReadableStream<Uint8Array>({ pull: (c) => c.enqueue(bytesOf(1024)) });
    const locked = stream();
    locked.getReader();
    expect(() => s.uploadFrom(locked, dst, { size: 1024 })).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', op: 'uploadFrom', stream: 'once', message: expect.stringMatching(/locked/) }));
    const twice = stream();
    s.uploadFrom(twice, dst, { size: 1024 });
    expect(() => s.uploadFrom(twice, dst, { size: 1024 })).toThrow(/given to an earlier uploadFrom/);
    const gen = chunks(bytesOf(1024));
    s.uploadFrom(gen, dst);
    expect(() => s.uploadFrom(gen, dst)).toThrow(/given to an earlier uploadFrom/);
    // An iterable that makes a fresh iterator each time may be given again.
    const data = bytesOf(2048);
    const reusable = { [Symbol.asyncIterator]: () => chunks(data)[Symbol.asyncIterator]() };
    s.uploadFrom(reusable, dst);
    s.uploadFrom(reusable, dst, { dstOffset: 2048 });
    await s.synchronize();
    expect(firstDiff(await readBack(dst, 0, 2048), data), `seed ${seed}`).toBe(-1);
    expect(firstDiff(await readBack(dst, 2048, 2048), data), `seed ${seed}`).toBe(-1);
    // A source that cannot be read when its turn comes fails its op, typed and named.
    const broken = { getReader: (): never => { throw new Error('no reader'); } } as unknown as ReadableStream<Uint8Array>;
    s.uploadFrom(broken, dst);
    expect(await s.synchronize().then(() => null, (e: unknown) => e)).toMatchObject({ name: 'UploadSourceError', op: 'uploadFrom', stream: 'once', message: expect.stringMatching(/could not be read/) });
    // A source's own getter that throws: read at the call (its parallel is checked there), its error passes through.
    const odd = { size: 4096, read: async (): Promise<number> => 0, get parallel(): number { throw new Error('odd source'); } };
    expect(() => s.uploadFrom(odd, dst)).toThrow(/odd source/);
    expect(s.pendingOps).toBe(0);
    dst.destroy();
  });

  it('checks the call: a source of the wrong kind, a range past a file, a size that does not fit', async () => {
    const s = ctx.createStream({ label: 's' });
    const dst = ctx.alloc(1024, { label: 'dst' });
    const file = await openFile(fileOf('b.bin', bytesOf(2048)));
    try {
      expect(() => s.uploadFrom(new Uint8Array(4) as never, dst)).toThrow(InvalidArgumentError);
      expect(() => s.uploadFrom('weights.safetensors' as never, dst)).toThrow(/openFile\("weights.safetensors"\)/);
      expect(() => s.uploadFrom(file, dst, { offset: 4096 })).toThrow(/past the end of the source \(2048 bytes\)/);
      expect(() => s.uploadFrom(file, dst, { offset: 1024, size: 2048 })).toThrow(/has 1024 bytes from offset 1024; 2048 asked for/);
      expect(() => s.uploadFrom(file, dst)).toThrow(/size 2048 does not fit 'dst' \(1024 bytes/);
      expect(() => s.uploadFrom(file, dst, { size: 6 })).toThrow(/multiple of 4/);
      for (const size of [8.5, Infinity, -4]) expect(() => s.uploadFrom({ size, read: async () => 0 }, dst), String(size)).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', message: expect.stringMatching(/`source.size`/) }));
      await expect(openFile(fileOf('c.bin', bytesOf(64)), { paralel: 8 } as never)).rejects.toMatchObject({ name: 'InvalidArgumentError', op: 'openFile', message: expect.stringMatching(/paralel/) });
      await expect(openFile(join(dir, 'no such file'))).rejects.toMatchObject({ name: 'UploadSourceError', op: 'openFile', cause: expect.objectContaining({ code: 'ENOENT' }) });
      await expect(openFile(dir)).rejects.toMatchObject({ name: 'UploadSourceError', message: expect.stringMatching(/is not a regular file/) });
      expect(s.pendingOps).toBe(0);
    } finally {
      await file.close();
    }
  });

  it('openFile wraps a FileHandle of node:fs/promises, which stays open for its owner; uploadFrom of a handle says to open it', async () => {
    const data = bytesOf(1 << 20);
    const fh = await (await import('node:fs/promises')).open(fileOf('h.bin', data), 'r');
    try {
      const s = ctx.createStream({ label: 'handle' });
      const dst = ctx.alloc(data.length, { label: 'dst' });
      expect(() => s.uploadFrom(fh as never, dst)).toThrow(/openFile\(handle\)/);
      const file = await openFile(fh);
      s.uploadFrom(file, dst, { offset: 0, size: data.length });
      await s.synchronize();
      await file.close();
      expect(firstDiff(await readBack(dst), data), `seed ${seed}`).toBe(-1);
      expect((await fh.stat()).size, 'the handle is still open').toBe(data.length);
    } finally {
      await fh.close();
    }
  });

  it('a failed file read fails the op with its cause, and the stream goes on after the report', async () => {
    const s = ctx.createStream({ label: 'flaky' });
    const dst = ctx.alloc(1 << 20, { label: 'dst' });
    let reads = 0;
    // At most 64 KiB a read, the third one failing.
    const flaky = {
      size: 1 << 20,
      label: 'flaky.bin',
      read: async (into: Uint8Array): Promise<number> => {
        if (++reads === 3) throw new Error('EIO');
        const n = Math.min(into.byteLength, 65536);
        into.fill(7, 0, n);
        return n;
      },
    };
    s.uploadFrom(flaky, dst);
    const next = s.download(dst, new Uint8Array(4), { size: 4 });
    const err = await s.synchronize().then(() => null, (e: unknown) => e);
    expect(err).toBeInstanceOf(UploadSourceError);
    expect((err as Error).message).toMatch(/reading 'flaky.bin' at byte \d+ failed/);
    expect(String((err as Error).cause)).toMatch(/EIO/);
    void next;
    const data = bytesOf(1 << 20);
    s.uploadFrom(chunks(data), dst);
    await s.synchronize();
    expect(firstDiff(await readBack(dst), data)).toBe(-1);
  });

  it("reads a file ahead while the stream's earlier work runs; copies wait for it; a dropped op gives its staging back", async () => {
    const data = bytesOf(3 << 20);
    let reads = 0;
    const src = { size: data.length, label: 'counted', read: async (into: Uint8Array, at: number): Promise<number> => (reads++, into.set(data.subarray(at, at + into.byteLength)), into.byteLength) };
    const s = ctx.createStream({ label: 'ahead' });
    const dst = ctx.alloc(data.length, { label: 'dst' });
    let release!: () => void;
    s.hostFn(() => new Promise<void>((r) => (release = r))); // earlier work that has not finished
    s.uploadFrom(src, dst);
    const got = new Uint8Array(data.length);
    s.download(dst, got);
    for (let i = 0; i < 50 && reads === 0; i++) await new Promise((r) => setImmediate(r));
    expect(reads, 'the file is read before the earlier work finished').toBeGreaterThan(0);
    release();
    await s.synchronize();
    expect(firstDiff(got, data)).toBe(-1);
    // A transfer whose op never runs (its stream's earlier op failed) gives its read-ahead back.
    const staging = ctx.memory.staging;
    const bad = ctx.createStream({ label: 'dropped' });
    bad.hostFn(() => Promise.reject(new Error('earlier work failed')));
    bad.uploadFrom(src, dst);
    await bad.synchronize().catch(() => undefined);
    await new Promise((r) => setTimeout(r, 20));
    const again = ctx.createStream({ label: 'again' });
    again.uploadFrom(src, dst);
    await again.synchronize();
    expect(ctx.memory.staging, 'no staging was lost').toBe(staging);
  });

  it('reads three transfers ahead of a stream that is held up (three rings), not four; all land in order once it goes on', async () => {
    const part = 1 << 20;
    const data = bytesOf(4 * part);
    const read = new Set<number>(); // which transfers' bytes were read
    const src = { size: data.length, label: 'layers', read: async (into: Uint8Array, at: number): Promise<number> => (read.add(Math.floor(at / part)), into.set(data.subarray(at, at + into.byteLength)), into.byteLength) };
    const s = ctx.createStream({ label: 'held' });
    const dst = ctx.alloc(data.length, { label: 'dst' });
    let release!: () => void;
    s.hostFn(() => new Promise<void>((r) => (release = r)));
    for (let j = 0; j < 4; j++) s.uploadFrom(src, dst, { offset: j * part, size: part, dstOffset: j * part });
    for (let i = 0; i < 200 && read.size < 3; i++) await new Promise((r) => setImmediate(r));
    await new Promise((r) => setTimeout(r, 20));
    expect([...read].sort(), 'the first three transfers read ahead, the fourth waits for the first to give its ring back').toEqual([0, 1, 2]);
    release();
    await s.synchronize();
    expect([...read].sort()).toEqual([0, 1, 2, 3]);
    expect(firstDiff(await readBack(dst), data), `seed ${seed}`).toBe(-1);
  });

  it("a transfer read ahead queues its copies behind the stream's earlier GPU work before that work is done; a chunk source waits for it", async () => {
    const c = await gpuContext();
    const held = holdCompletions(c);
    try {
      const n = 4 * int(1 << 14, 1 << 16);
      const [first, second, before] = [bytesOf(n), bytesOf(n), bytesOf(n)];
      const s = c.createStream({ label: 'ordered' });
      const a = c.alloc(n, { label: 'a' });
      const b = c.alloc(n, { label: 'b' });
      const dst = c.alloc(n, { label: 'dst' });
      s.upload(before, a);
      s.copy(a, dst); // the earlier GPU work, writing dst
      await settle();
      const afterEarlier = held.submits();
      s.uploadFrom({ size: n, read: async (into: Uint8Array, at: number) => (into.set(first.subarray(at, at + into.byteLength)), into.byteLength) }, dst);
      await settle();
      expect(held.submits(), "the file's copies are submitted while the earlier work is not done").toBeGreaterThan(afterEarlier);
      expect(s.query(), 'the earlier work is still not done').toBe(false);
      const afterFile = held.submits();
      s.uploadFrom(chunks(second), b);
      await settle();
      expect(held.submits(), "a chunk source's op waits for the earlier work to be done").toBe(afterFile);
      held.release();
      await s.synchronize();
      expect(firstDiff(new Uint8Array(await readBackOn(c, dst)), first), `the file's bytes land after the earlier copy (seed ${seed})`).toBe(-1);
      expect(firstDiff(new Uint8Array(await readBackOn(c, b)), second), `seed ${seed}`).toBe(-1);
    } finally {
      held.release();
      c.destroy();
    }
  });

  it('transfers behind GPU work that is not done read three ahead (three rings), not four: a ring goes back only once its op is done', async () => {
    const c = await gpuContext();
    const held = holdCompletions(c);
    try {
      const n = 4 * int(1 << 14, 1 << 16);
      const data = [0, 1, 2, 3].map(() => bytesOf(n));
      const read = new Set<number>();
      const s = c.createStream({ label: 'ordered' });
      const a = c.alloc(n, { label: 'a' });
      const dsts = data.map((_, j) => c.alloc(n, { label: `dst${j}` }));
      s.upload(bytesOf(n), a);
      s.copy(a, dsts[0]!); // the earlier GPU work
      data.forEach((d, j) => s.uploadFrom({ size: n, read: async (into: Uint8Array, at: number) => (read.add(j), into.set(d.subarray(at, at + into.byteLength)), into.byteLength) }, dsts[j]!));
      await settle();
      expect([...read].sort(), 'the fourth transfer waits for the first to be done (its copies queued, not completed)').toEqual([0, 1, 2]);
      expect(s.query()).toBe(false);
      held.release();
      await s.synchronize();
      for (const [j, d] of data.entries()) expect(firstDiff(new Uint8Array(await readBackOn(c, dsts[j]!)), d), `transfer ${j} (seed ${seed})`).toBe(-1);
    } finally {
      held.release();
      c.destroy();
    }
  });

  it('reads at most three pieces at once, however many reads the source allows, and lands intact', async () => {
    // Each piece being read is a mapped range (V8 external memory): five at once made V8 collect every
    // couple of pieces. 16 reads of 2 MiB would span five 8 MiB pieces; the reader keeps to three.
    const piece = 8 << 20;
    const data = bytesOf(6 * piece);
    const active = new Map<number, number>();
    let most = 0;
    const src = {
      size: data.length,
      parallel: 16,
      read: async (into: Uint8Array, at: number): Promise<number> => {
        const k = Math.floor(at / piece);
        active.set(k, (active.get(k) ?? 0) + 1);
        most = Math.max(most, active.size);
        await new Promise((r) => setTimeout(r, 2));
        into.set(data.subarray(at, at + into.byteLength));
        const left = active.get(k)! - 1;
        if (left) active.set(k, left);
        else active.delete(k);
        return into.byteLength;
      },
    };
    const s = ctx.createStream({ label: 'window' });
    const dst = ctx.alloc(data.length, { label: 'dst' });
    s.uploadFrom(src, dst, { ring: 6 });
    await s.synchronize();
    expect(most, 'pieces with reads in flight at once').toBe(3);
    expect(firstDiff(await readBack(dst), data), `seed ${seed}`).toBe(-1);
  });

  it('a transfer longer than its ring, read ahead while its stream is held, reads ring-size pieces ahead and lands intact', async () => {
    // 5 pieces through a ring of 2: piece k reuses piece k - 2's buffer only once that piece's copy was enqueued.
    const piece = 8 << 20;
    const data = bytesOf(5 * piece);
    const read = new Set<number>();
    const src = { size: data.length, parallel: 2, read: async (into: Uint8Array, at: number): Promise<number> => (read.add(Math.floor(at / piece)), into.set(data.subarray(at, at + into.byteLength)), into.byteLength) };
    const s = ctx.createStream({ label: 'ring' });
    const dst = ctx.alloc(data.length, { label: 'dst' });
    let release!: () => void;
    s.hostFn(() => new Promise<void>((r) => (release = r)));
    s.uploadFrom(src, dst, { ring: 2 });
    for (let i = 0; i < 200 && read.size < 2; i++) await new Promise((r) => setImmediate(r));
    await new Promise((r) => setTimeout(r, 30));
    expect([...read].sort(), 'two pieces (the ring) read ahead; the third waits for the first one\'s copy').toEqual([0, 1]);
    release();
    await s.synchronize();
    expect(firstDiff(await readBack(dst), data), `seed ${seed}`).toBe(-1);
  });

  it('with the submit window full, a transfer waits for its copies\' place in the queue without polling timers, then lands intact', async () => {
    // One submit in flight at a time, held by a long kernel: the copies are enqueued behind it, and
    // the transfer's end waits on the flush that follows its completion (no setTimeout loop).
    const c = await gpuContext({ maxSubmitsInFlight: 1 });
    const original = globalThis.setTimeout;
    let polls = 0;
    globalThis.setTimeout = ((fn: () => void, ms?: number, ...rest: unknown[]) => {
      if (new Error().stack?.includes('whenSubmitted')) polls++;
      return original(fn, ms, ...rest);
    }) as typeof setTimeout;
    try {
      const data = bytesOf(4 * int(1 << 14, 1 << 16));
      const busy = c.alloc(16, { label: 'busy' });
      const other = c.createStream({ label: 'other', nonBlocking: true });
      other.launch(benchKernels(c).sleep, { bindings: [busy], workgroups: 4, constants: { iterations: 1 << 17 } });
      c.flush();
      const load = c.createStream({ label: 'load', nonBlocking: true });
      const dst = c.alloc(data.length, { label: 'dst' });
      load.uploadFrom(chunks(data), dst);
      const after = new Uint8Array(data.length);
      load.download(dst, after); // stream order: after the transfer
      await Promise.all([load.synchronize(), other.synchronize()]);
      expect(firstDiff(after, data), `seed ${seed}`).toBe(-1);
      expect(polls, 'timers set while waiting for the copies to be ordered').toBe(0);
    } finally {
      globalThis.setTimeout = original;
      c.destroy();
    }
  });

  it.each([
    ['by default', undefined, 0, false],
    ['stagingPoolBytes 0 keeps the 24 only', 0, 2, false],
    ['stagingPoolBytes 0 keeps 24 across two sizes', 0, 2, true],
  ] as const)('keeps as many free staging buffers as were ever in use at once, up to stagingPoolBytes (%s)', async (_, stagingPoolBytes, again, twoSizes) => {
    const c = await gpuContext(stagingPoolBytes === undefined ? {} : { stagingPoolBytes });
    const device = c.device;
    const create = device.createBuffer.bind(device);
    let created = 0;
    device.createBuffer = (d: GPUBufferDescriptor) => ((created += d.label?.includes('uploadFrom staging') ? 1 : 0), create(d));
    try {
      // 13 held streams, 2 transfers each read ahead: 26 ring buffers at once, more than the 24 always kept.
      const round = async (): Promise<void> => {
        const gates: (() => void)[] = [];
        const runs: [Stream, DeviceBuffer, Uint8Array][] = [];
        for (let s = 0; s < 13; s++) {
          const st = c.createStream({ label: `held ${s}`, nonBlocking: true });
          st.hostFn(() => new Promise<void>((res) => gates.push(res)));
          for (let j = 0; j < 2; j++) {
            const n = twoSizes && j === 1 ? 100 << 10 : 64; // 64 KiB and 128 KiB staging buffers
            const data = bytesOf(n);
            const dst = c.alloc(n, { label: `dst ${s}.${j}` });
            st.uploadFrom({ size: n, read: async (into: Uint8Array, at: number) => (into.set(data.subarray(at, at + into.byteLength)), into.byteLength) }, dst);
            runs.push([st, dst, data]);
          }
        }
        for (let i = 0; i < 200 && gates.length < 13; i++) await new Promise((res) => setImmediate(res));
        for (let i = 0; i < 20; i++) await new Promise((res) => setImmediate(res)); // reads ahead take their rings
        gates.forEach((g) => g());
        await c.synchronize();
        for (const [, dst, data] of runs) expect(firstDiff(await readBackOn(c, dst).then((b) => new Uint8Array(b)), data), `seed ${seed}`).toBe(-1);
      };
      await round();
      const first = created;
      await round();
      expect(first, 'the first round needs more than the 24 buffers kept by default').toBeGreaterThan(24);
      expect(created - first, 'staging buffers created by the second round').toBe(again);
    } finally {
      device.createBuffer = create;
      c.destroy();
    }
  });

  it('a transfer read ahead goes out in one submit: copies into a DeviceBuffer batch, each into a raw GPUBuffer goes alone', async () => {
    const traced = await gpuContext({ trace: true });
    try {
      const data = bytesOf(3 * (8 << 20)); // three 8 MiB pieces
      let reads = 0;
      const src = { size: data.length, parallel: 4, read: async (into: Uint8Array, at: number): Promise<number> => (reads++, into.set(data.subarray(at, at + into.byteLength)), into.byteLength) };
      const submitsOf = async (dst: DeviceBuffer | GPUBuffer): Promise<number> => {
        const s = traced.createStream({ label: 'one submit' });
        let release!: () => void;
        s.hostFn(() => new Promise<void>((r) => (release = r)));
        const before = traced.trace.submits.length;
        reads = 0;
        const id = s.uploadFrom(src, dst);
        for (let i = 0; i < 500 && reads < 12; i++) await new Promise((r) => setTimeout(r, 1)); // 3 pieces x 4 reads of 2 MiB
        release();
        await s.synchronize();
        const copyIds = new Set(traced.trace.spans().filter((x) => x.lane.endsWith('(uploadFrom)') && (x.op ?? 0) > id).map((x) => x.op));
        return traced.trace.submits.slice(before).filter((ids) => ids.some((op) => copyIds.has(op))).length;
      };
      const dev = traced.alloc(data.length, { label: 'dst' });
      expect(await submitsOf(dev), 'three copies, one submit').toBe(1);
      expect(firstDiff(new Uint8Array(await readBackOn(traced, dev)), data), `seed ${seed}`).toBe(-1);
      expect(await submitsOf(dev.buffer), 'a raw GPUBuffer: each copy alone (its validation waited for)').toBe(3);
    } finally {
      traced.destroy();
    }
  });

  it('a context destroyed while a transfer reads ahead fails its op typed; nothing hangs, nothing goes unhandled', async () => {
    const own = await gpuContext();
    const data = bytesOf(3 * (8 << 20));
    let reads = 0;
    // Slow reads: the context goes while pieces are still being read into its staging.
    const src = { size: data.length, parallel: 4, read: async (into: Uint8Array, at: number): Promise<number> => (reads++, await new Promise((r) => setTimeout(r, 5)), into.set(data.subarray(at, at + into.byteLength)), into.byteLength) };
    const s = own.createStream({ label: 'doomed' });
    const dst = own.alloc(data.length, { label: 'dst' });
    s.hostFn(() => new Promise<void>((r) => setTimeout(r, 50)));
    s.uploadFrom(src, dst);
    s.uploadFrom(src, dst);
    for (let i = 0; i < 100 && reads === 0; i++) await new Promise((r) => setTimeout(r, 1));
    own.destroy();
    const err = await s.synchronize().then(() => null, (e: unknown) => e);
    expect(err, 'synchronize rejects with a typed error').toBeInstanceOf(StreamError);
    await new Promise((r) => setTimeout(r, 100)); // reads in flight settle; an unhandled rejection would fail the run
    // The same with libuv's reads from a file writing into the staging while the context goes.
    const file = await openFile(fileOf('doomed.bin', data), { parallel: 4 });
    try {
      for (let round = 0; round < 3; round++) {
        const c = await gpuContext();
        const t = c.createStream({ label: 'doomed file' });
        const d = c.alloc(data.length, { label: 'dst' });
        t.hostFn(() => new Promise<void>((r) => setTimeout(r, 30)));
        t.uploadFrom(file, d);
        await new Promise((r) => setTimeout(r, 1 + round));
        c.destroy();
        expect(await t.synchronize().then(() => null, (e: unknown) => e)).toBeInstanceOf(StreamError);
      }
      await new Promise((r) => setTimeout(r, 100));
    } finally {
      await file.close();
    }
  });

  it('a destroyed context destroys its device only once no read writes into its staging (a native read would write into freed memory)', async () => {
    const own = await gpuContext();
    const h = heldReads(own, bytesOf(2 * (8 << 20)));
    const s = own.createStream({ label: 'reading' });
    s.uploadFrom(h.src, own.alloc(h.src.size, { label: 'dst' }));
    for (let i = 0; i < 100 && h.inFlight() < 4; i++) await new Promise((r) => setTimeout(r, 1));
    expect(h.inFlight(), 'reads in flight').toBe(4);
    own.destroy();
    expect(await s.synchronize().then(() => null, (e: unknown) => e)).toMatchObject({ name: 'DestroyedError' });
    await h.expectDeviceDestroyedAfterReads();
    expect(h.ends, 'no read started after the destroy').toEqual([]);
    expect(own.memory.staging, 'staging freed').toBe(0);
  });

  it('a piece whose read failed gives its staging back only once its other reads ended (they may still be writing into it)', async () => {
    const own = await gpuContext();
    // The first read fails at once; the other three of the piece stay in flight until the test ends them.
    const h = heldReads(own, bytesOf(8 << 20), true);
    const s = own.createStream({ label: 'failing' });
    s.uploadFrom(h.src, own.alloc(h.src.size, { label: 'dst' }));
    for (let i = 0; i < 100 && h.inFlight() < 3; i++) await new Promise((r) => setTimeout(r, 1));
    expect(h.inFlight(), 'reads in flight beside the failed one').toBe(3);
    // The op fails at once on the failed read, while the others are still in flight.
    expect(await s.synchronize().then(() => null, (e: unknown) => e)).toMatchObject({ name: 'UploadSourceError', cause: expect.objectContaining({ message: 'disk gone' }) });
    expect(h.inFlight()).toBe(3);
    own.destroy();
    await h.expectDeviceDestroyedAfterReads();
    expect(own.memory.staging, 'staging freed').toBe(0);
  });

  it('reads a safetensors file over HTTP byte ranges (httpSource), several requests at once', async () => {
    const layers = Array.from({ length: 3 }, () => bytesOf(4 * int(1 << 18, 3 << 18)));
    writeFileSync(join(dir, 'model.safetensors'), encodeSafetensors(layers.map((data, i) => ({ name: `layers.${i}.w`, dtype: 'U8', shape: [data.length], data }))));
    const server = await serveDir(dir);
    try {
      const src = await httpSource(`${server.origin}/model.safetensors`);
      const st = await SafetensorsFile.open(src);
      const s = ctx.createStream({ label: 'http' });
      for (let i = 0; i < layers.length; i++) {
        const dst = ctx.alloc(layers[i]!.length, { label: `l${i}` });
        s.uploadFrom(src, dst, st.span(st.layer(i)));
        const got = new Uint8Array(layers[i]!.length);
        s.download(dst, got);
        await s.synchronize();
        expect(firstDiff(got, layers[i]!), `layer ${i}, seed ${seed}`).toBe(-1);
      }
      const noRanges = async (): Promise<Response> => new Response(null, { headers: { 'content-length': '10' } });
      await expect(httpSource('http://example.invalid/x', { fetch: noRanges as typeof fetch })).rejects.toThrow(/not served in byte ranges/);
      // A server that answers ranges without saying Accept-Ranges (optional in HTTP; Vite's static server): one byte asked for tells.
      const data = bytesOf(64 << 10);
      const quiet = async (_url: string | URL, init?: RequestInit): Promise<Response> => {
        if (init?.method === 'HEAD') return new Response(null, { headers: { 'content-length': String(data.length) } });
        const m = /bytes=(\d+)-(\d+)/.exec((init?.headers as Record<string, string> | undefined)?.['Range'] ?? '');
        if (!m) return new Response(data as Uint8Array<ArrayBuffer>);
        const [a, b] = [Number(m[1]), Number(m[2])];
        return new Response(data.slice(a, b + 1) as Uint8Array<ArrayBuffer>, { status: 206, headers: { 'content-range': `bytes ${a}-${b}/${data.length}` } });
      };
      const q = await httpSource('http://example.invalid/quiet', { fetch: quiet as typeof fetch });
      const s2 = ctx.createStream({ label: 'quiet server' });
      const dq = ctx.alloc(data.length);
      s2.uploadFrom(q, dq);
      const back = new Uint8Array(data.length);
      s2.download(dq, back);
      await s2.synchronize();
      expect(firstDiff(back, data), `seed ${seed}`).toBe(-1);
      await expect(httpSource(`${server.origin}/missing.bin`)).rejects.toThrow(UploadSourceError);
    } finally {
      await server.close();
    }
  });

  it('httpSource refuses a HEAD without a size (no Content-Length: it read as 0 bytes) or not ok, a malformed Content-Range and unknown options; its signal cuts a stalled server', async () => {
    const data = bytesOf(4096);
    const fake = (head: Record<string, string>, status = 200, range?: (a: number, b: number) => string, stall?: AbortSignal) =>
      (async (_url: string | URL, init?: RequestInit): Promise<Response> => {
        if (init?.method === 'HEAD') return new Response(null, { status, headers: head });
        const [, a, b] = /bytes=(\d+)-(\d+)/.exec((init?.headers as Record<string, string>).Range ?? '')!.map(Number) as [number, number, number];
        if (stall) await new Promise((_, reject) => init!.signal!.addEventListener('abort', () => reject(init!.signal!.reason)));
        return new Response(data.slice(a, b + 1) as Uint8Array<ArrayBuffer>, { status: 206, headers: { 'content-range': range ? range(a, b) : `bytes ${a}-${b}/${data.length}` } });
      }) as typeof fetch;
    const ranged = { 'accept-ranges': 'bytes' };
    await expect(httpSource('http://x/no-length', { fetch: fake(ranged) })).rejects.toMatchObject({ name: 'UploadSourceError', message: expect.stringMatching(/answered without a Content-Length: the size is unknown/) });
    await expect(httpSource('http://x/missing', { fetch: fake({ ...ranged, 'content-length': '9' }, 404) })).rejects.toMatchObject({ name: 'UploadSourceError', message: expect.stringMatching(/HEAD http:\/\/x\/missing answered 404/) });
    await expect(httpSource('http://x/m', { fetch: fake(ranged), paralel: 8 } as never)).rejects.toMatchObject({ name: 'InvalidArgumentError', message: expect.stringMatching(/paralel/) });
    const s = ctx.createStream({ label: 'http' });
    const dst = ctx.alloc(4096, { label: 'dst' });
    const head = { ...ranged, 'content-length': String(data.length) };
    s.uploadFrom(await httpSource('http://x/bad-range', { fetch: fake(head, 200, (a, b) => `bytes=${a}-${b}/${data.length}`) }), dst);
    await expect(s.synchronize()).rejects.toMatchObject({ name: 'UploadSourceError', cause: expect.objectContaining({ message: expect.stringMatching(/answered Content-Range bytes=0-4095/) }) });
    const cut = new AbortController();
    s.uploadFrom(await httpSource('http://x/stalls', { fetch: fake(head, 200, undefined, cut.signal), signal: cut.signal }), dst);
    setTimeout(() => cut.abort(new Error('stalled')), 20);
    await expect(s.synchronize()).rejects.toMatchObject({ name: 'UploadSourceError', stream: 'http' });
    s.uploadFrom(await httpSource('http://x/fine', { fetch: fake(head) }), dst);
    await s.synchronize();
    expect(firstDiff(await readBack(dst), data), `seed ${seed}`).toBe(-1);
  });

  it('httpSource refuses a range answered for other bytes, and a file that changed since it was opened (its ETag)', async () => {
    const v1 = bytesOf(64 << 10), v2 = bytesOf(64 << 10);
    /** A server of `data()` with an ETag per version; `shift` answers each range from the wrong start. */
    const server = (data: () => Uint8Array, etag: () => string, shift = 0) =>
      (async (_url: string | URL, init?: RequestInit): Promise<Response> => {
        const h = (init?.headers ?? {}) as Record<string, string>;
        const base = { 'accept-ranges': 'bytes', etag: etag() };
        if (init?.method === 'HEAD') return new Response(null, { headers: { ...base, 'content-length': String(data().length) } });
        const [, a, b] = /bytes=(\d+)-(\d+)/.exec(h.Range ?? '')!.map(Number) as [number, number, number];
        const from = a + shift, to = b + shift;
        return new Response(data().slice(from, to + 1) as Uint8Array<ArrayBuffer>, { status: 206, headers: { ...base, 'content-range': `bytes ${from}-${to}/${data().length}` } });
      }) as typeof fetch;
    const s = ctx.createStream({ label: 'http checks' });
    const dst = ctx.alloc(64 << 10, { label: 'dst' });
    // The right bytes: landed and checked.
    s.uploadFrom(await httpSource('http://x/model', { fetch: server(() => v1, () => '"v1"') }), dst);
    await s.synchronize();
    expect(firstDiff(await readBack(dst), v1), `seed ${seed}`).toBe(-1);
    // A 206 for other bytes than asked for.
    s.uploadFrom(await httpSource('http://x/model', { fetch: server(() => v1, () => '"v1"', 4096) }), dst, { size: 8192 });
    expect(await s.synchronize().then(() => null, (e: unknown) => e)).toMatchObject({ name: 'UploadSourceError', cause: expect.objectContaining({ message: expect.stringMatching(/Content-Range bytes 4096-/) }) });
    // The file replaced between opening it and reading it: the ETag no longer matches.
    let version = 1;
    const changing = await httpSource('http://x/model', { fetch: server(() => (version === 1 ? v1 : v2), () => `"v${version}"`) });
    version = 2;
    s.uploadFrom(changing, dst);
    expect(await s.synchronize().then(() => null, (e: unknown) => e)).toMatchObject({ name: 'UploadSourceError', cause: expect.objectContaining({ message: expect.stringMatching(/changed since it was opened/) }) });
    dst.destroy();
  });

  it('the sanitizer sees the transfer as one write of its stream', async () => {
    races.length = 0;
    const [load, compute] = [ctx.createStream({ label: 'load', nonBlocking: true }), ctx.createStream({ label: 'compute', nonBlocking: true })];
    const w = ctx.alloc(4096, { label: 'w' });
    load.uploadFrom(chunks(bytesOf(4096)), w);
    compute.download(w, new Uint8Array(4096)); // no wait: a race
    await Promise.all([load.synchronize(), compute.synchronize()]);
    expect(races.map((x) => `${x.buffer} ${x.first?.name} / ${x.second.name}`)).toEqual(['w uploadFrom / download w->host']);
    races.length = 0;
    const ev = ctx.createEvent();
    load.uploadFrom(chunks(bytesOf(4096)), w);
    ev.record(load);
    compute.waitEvent(ev);
    compute.download(w, new Uint8Array(4096));
    await Promise.all([load.synchronize(), compute.synchronize()]);
    expect(races).toEqual([]);
  });
});
