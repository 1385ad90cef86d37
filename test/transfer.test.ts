/**
 * Pageable transfers (src/transfer.ts) on real WebGPU (Dawn): upload data is captured at the call,
 * offsets and sizes are honoured, an array detached before or during its op fails with a typed
 * error; uploads above `uploadPieceBytes` go in pieces, in stream order; and the staging pool
 * never reuses a buffer early, keeps at most `stagingPoolBytes` free, and packs small uploads
 * into shared blocks. Order is asserted through data and the scheduler's submit log.
 */
import { describe, expect, it } from 'vitest';
import { gpuContext, useGpuContext, rng, randomSeed, firstMismatch, vectorAddRef } from './fixtures/gpu.js';
import { gate } from './fixtures/gate.js';
import { workgroupsFor, type Context, type StreamError } from '../src/index.js';

type GpuCtx = Context & { errors: string[] };
let ctx: GpuCtx;
useGpuContext((c) => (ctx = c));

describe('pageable uploads and downloads', () => {
  it('captures pageable upload data at the call, so the array can be reused at once', async () => {
    const seed = randomSeed();
    const src = rng(seed).u32Array(64);
    const want = src.slice();
    const s = ctx.createStream();
    const d = ctx.alloc(256);
    s.upload(src, d);
    src.fill(7); // CUDA: cudaMemcpyAsync from pageable memory returns after staging the data
    const out = new Uint32Array(64);
    s.download(d, out);
    await s.synchronize();
    expect(firstMismatch(out, want), `seed ${seed}`).toBeNull();
  });

  it('honours offsets and sizes (N and N-4 bytes)', async () => {
    const seed = randomSeed();
    const data = rng(seed).u32Array(32);
    const s = ctx.createStream();
    const d = ctx.alloc(128);
    s.upload(rng(seed + 1).u32Array(32), d);
    s.upload(data, d, { srcOffset: 8, dstOffset: 16, size: 60 });
    const out = new Uint32Array(32);
    s.download(d, out);
    const part = new Uint32Array(4);
    s.download(d, part, { srcOffset: 16, size: 12 });
    await s.synchronize();
    expect(Array.from(out.subarray(4, 19)), `seed ${seed}`).toEqual(Array.from(data.subarray(2, 17)));
    expect(Array.from(part.subarray(0, 3))).toEqual(Array.from(data.subarray(2, 5)));
    expect(part[3]).toBe(0);
  });

  it('a download into an array transferred before the op completes fails that op with a typed error; other streams land', async () => {
    const seed = randomSeed();
    const x = rng(seed).u32Array(1024);
    const s = ctx.createStream({ label: 'victim' });
    const other = ctx.createStream({ label: 'bystander', nonBlocking: true });
    const buf = ctx.alloc(4096);
    const buf2 = ctx.alloc(4096);
    s.upload(x, buf);
    const dst = new Uint32Array(1024);
    s.download(buf, dst);
    let after = false;
    s.hostFn(() => void (after = true));
    other.upload(x, buf2);
    const out = new Uint32Array(1024);
    other.download(buf2, out);
    structuredClone(dst.buffer, { transfer: [dst.buffer] }); // detaches dst
    const err = await s.synchronize().then(() => null, (e: unknown) => e as StreamError);
    expect(err).toMatchObject({ name: 'InvalidArgumentError', op: 'download', stream: 'victim', message: expect.stringMatching(/detached/) });
    expect(err!.callSite).toMatch(/^at .*transfer\.test\.ts/); // the line of the download, though it failed at completion
    expect(after).toBe(false);
    await other.synchronize();
    expect(firstMismatch(out, x), `seed ${seed}`).toBeNull();
    await expect(ctx.synchronize()).rejects.toMatchObject({ name: 'InvalidArgumentError' });
  });

  it('an upload from, or a download into, an already detached array throws at the call', () => {
    const s = ctx.createStream();
    const arr = new Uint32Array(16);
    structuredClone(arr.buffer, { transfer: [arr.buffer] });
    const buf = ctx.alloc(64);
    expect(() => s.upload(arr, buf)).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', op: 'upload', message: expect.stringMatching(/detached/) }));
    expect(() => s.download(buf, arr)).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', op: 'download' }));
    // A view past the end of a resizable buffer that shrank reads as empty (a DataView's byteLength throws): refused, not a silent 0-byte copy.
    const rab = new (ArrayBuffer as unknown as new (n: number, o: { maxByteLength: number }) => ArrayBuffer & { resize(n: number): void })(64, { maxByteLength: 128 });
    const typed = new Float32Array(rab, 0, 16);
    const dv = new DataView(rab, 32, 32);
    rab.resize(16);
    for (const [view, what] of [[typed, 'typed array'], [dv, 'DataView']] as const) {
      expect(() => s.upload(view, buf), what).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', op: 'upload', message: expect.stringMatching(/`src` is a view past the end of its ArrayBuffer/) }));
      expect(() => s.download(buf, view, { size: 16 }), what).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', op: 'download', message: expect.stringMatching(/`dst` is a view past the end/) }));
    }
    // A length-tracking view of the same buffer is fine: it holds what the buffer holds now.
    s.upload(new Uint8Array(rab), buf);
  });

  it('without a size, a source larger than its destination throws at the call (nothing dropped silently); a smaller one fills a prefix', async () => {
    const seed = randomSeed();
    const r = rng(seed);
    const s = ctx.createStream({ label: 'sizes' });
    const other = ctx.createStream({ label: 'bystander' });
    const keep = r.u32Array(32);
    const kept = ctx.alloc(128, { label: 'kept' });
    other.upload(keep, kept);
    const small = ctx.alloc(64, { label: 'small' });
    const big = ctx.alloc(256, { label: 'big' });
    const up = ctx.allocHost(128, 'upload', { label: 'up' });
    const sizeError = (op: string, src: string, dst: string) =>
      expect.objectContaining({ name: 'InvalidArgumentError', op, stream: 'sizes', message: expect.stringMatching(new RegExp(`source '${src}'.* is larger than destination '${dst}'.*pass \`\\{ size \\}\``)) });
    expect(() => s.upload(r.u32Array(32), small)).toThrow(sizeError('upload', 'src', 'small'));
    expect(() => s.upload(up, small)).toThrow(sizeError('upload', 'up', 'small'));
    expect(() => s.copy(big, small)).toThrow(sizeError('copy', 'big', 'small'));
    expect(() => s.download(big, new Uint32Array(16))).toThrow(sizeError('download', 'big', 'dst'));
    expect(() => s.copy(big, small, { srcOffset: 128, dstOffset: 16 })).toThrow(expect.objectContaining({ message: expect.stringMatching(/from offset 128 \(128 bytes\).*from offset 16 \(48 bytes\): 80 bytes would be left out/) }));
    expect(() => s.copy(big, small, { srcOffset: 260 })).toThrow(expect.objectContaining({ op: 'copy', message: expect.stringMatching(/: srcOffset 260 is past the end of source 'big' \(256 bytes\)$/m) }));
    expect(() => s.copy(small, big, { dstOffset: 260 })).toThrow(expect.objectContaining({ op: 'copy', message: expect.stringMatching(/: dstOffset 260 is past the end of destination 'big' \(256 bytes\)$/m) }));
    // A smaller source fills a prefix; `size` moves part of a larger one.
    const data = r.u32Array(64);
    const before = r.u32Array(64);
    s.upload(before, big);
    s.upload(data.subarray(0, 16), big);
    s.copy(big, small, { size: 64 });
    const outBig = new Uint32Array(64), outSmall = new Uint32Array(16), outKept = new Uint32Array(32);
    s.download(big, outBig);
    s.download(small, outSmall);
    other.download(kept, outKept);
    await ctx.synchronize();
    const want = before.slice();
    want.set(data.subarray(0, 16));
    expect(firstMismatch(outBig, want), `seed ${seed}`).toBeNull();
    expect(firstMismatch(outSmall, want.subarray(0, 16)), `seed ${seed}`).toBeNull();
    expect(firstMismatch(outKept, keep), `seed ${seed}`).toBeNull();
  });
});

describe('pageable uploads in pieces', () => {
  it('sends a pageable upload above uploadPieceBytes as pieces, one submit each while the stream can run, in order, data intact', async () => {
    const pctx = await gpuContext({ trace: true, uploadPieceBytes: 4096 });
    try {
      const seed = randomSeed();
      const r = rng(seed);
      const n = 10_000; // 40000 bytes: 8 pieces of 5000 (at most 8 per upload)
      const a = r.f32Array(n, -50, 50), b = r.f32Array(n, -50, 50);
      const s = pctx.createStream({ label: 'pieces' });
      const da = pctx.alloc(n * 4), db = pctx.alloc(n * 4), out = pctx.alloc(n * 4);
      s.upload(b, db); // 8 pieces too
      const before = pctx.trace.submits.length;
      const id = s.upload(a, da);
      // Seven pieces went out during the call (the eighth waits for the microtask flush); the first
      // shares its submit with b's last piece, each other has its own.
      const during = pctx.trace.submits.slice(before);
      expect(during).toHaveLength(7);
      expect(during.map((ops) => ops.length)).toEqual([2, 1, 1, 1, 1, 1, 1]);
      expect(id).toBe(during[6]![0]! + 1); // the call returns the last piece's op id
      s.launch(pctx.kernels.vectorAdd, { bindings: [da, db, out], workgroups: workgroupsFor(n, 256) });
      const got = new Float32Array(n);
      s.download(out, got);
      await s.synchronize();
      expect(firstMismatch(got, vectorAddRef(a, b)), `seed ${seed}`).toBeNull();
      // Pieces of one upload stay in stream order.
      const order = pctx.trace.submits.flat();
      const pieces = order.filter((o) => o >= during[0]![1]! && o <= id);
      expect(pieces).toHaveLength(8);
      expect(pieces).toEqual([...pieces].sort((x, y) => x - y));
      expect(pctx.errors).toEqual([]);
    } finally {
      pctx.destroy();
    }
  });

  it('keeps pieces behind what the stream waits for, and honours offsets across piece boundaries', async () => {
    const pctx = await gpuContext({ trace: true, uploadPieceBytes: 4096 });
    try {
      const seed = randomSeed();
      const r = rng(seed);
      const words = 5000;
      const data = r.u32Array(words);
      const init = r.u32Array(words + 16);
      const s = pctx.createStream({ label: 'blocked pieces' });
      const d = pctx.alloc((words + 16) * 4);
      s.upload(init, d);
      const g = gate();
      const log: string[] = [];
      s.hostFn(() => g.wait.then(() => void log.push('host')));
      pctx.flush(); // the last piece of `init`
      const before = pctx.trace.submits.flat().length;
      // srcOffset 12, dstOffset 40, 19000 bytes: 5 pieces of 3800, all behind the host function.
      s.upload(data, d, { srcOffset: 12, dstOffset: 40, size: 19_000 });
      await new Promise((res) => setImmediate(res));
      expect(pctx.trace.submits.flat().length).toBe(before); // nothing passed the host function
      g.open();
      const got = new Uint32Array(words + 16);
      s.download(d, got);
      await s.synchronize();
      const want = init.slice();
      want.set(data.subarray(3, 3 + 19_000 / 4), 10);
      expect(firstMismatch(got, want), `seed ${seed}`).toBeNull();
      expect(log).toEqual(['host']);
      expect(pctx.errors).toEqual([]);
    } finally {
      pctx.destroy();
    }
  });

  it('validates uploadPieceBytes', async () => {
    await expect(gpuContext({ uploadPieceBytes: 4094 })).rejects.toThrow(/`uploadPieceBytes` to be 0 \(uploads go whole\) or a multiple of 4 of at least 4096, got 4094/);
    await expect(gpuContext({ uploadPieceBytes: -4 })).rejects.toThrow(expect.objectContaining({ name: 'InvalidArgumentError' }));
  });
});

describe('staging pool', () => {
  it('never reuses a staging buffer before the GPU is done with it: 24 pageable uploads in flight', async () => {
    const seed = randomSeed();
    const r = rng(seed);
    const s = ctx.createStream();
    const n = 1000; // same size bucket for every upload
    const bufs = Array.from({ length: 24 }, () => ctx.alloc(n * 4));
    const data = bufs.map(() => r.u32Array(n));
    const scratch = new Uint32Array(n);
    bufs.forEach((b, i) => {
      scratch.set(data[i]!);
      s.upload(scratch, b); // one host array, refilled each time: the pool must have copied it
    });
    const outs = bufs.map(() => new Uint32Array(n));
    bufs.forEach((b, i) => s.download(b, outs[i]!));
    await s.synchronize();
    outs.forEach((o, i) => expect(firstMismatch(o, data[i]!), `upload ${i}, seed ${seed}`).toBeNull());
    expect(ctx.memory.staging).toBeGreaterThan(0);
  });

  it('stagingPoolBytes bounds the free staging kept: with 0 a read-back buffer is destroyed once its download completes', async () => {
    const seed = randomSeed();
    const data = rng(seed).u32Array(2000);
    for (const [poolBytes, kept] of [[0, 0], [1 << 20, 8192]] as const) {
      const pctx = await gpuContext({ stagingPoolBytes: poolBytes });
      try {
        const s = pctx.createStream();
        const d = pctx.alloc(data.byteLength);
        pctx.queue.writeBuffer(d.buffer, 0, data as Uint32Array<ArrayBuffer>); // no staging of ours
        const out = new Uint32Array(data.length);
        s.download(d, out); // 8000 bytes: an 8192-byte read-back bucket, back in the pool before the op completes
        await s.synchronize();
        expect(firstMismatch(out, data), `seed ${seed}`).toBeNull();
        expect(pctx.memory.staging, `stagingPoolBytes ${poolBytes}`).toBe(kept);
        expect(pctx.errors).toEqual([]);
      } finally {
        pctx.destroy();
      }
    }
    await expect(gpuContext({ stagingPoolBytes: -1 })).rejects.toThrow(/`stagingPoolBytes`/);
  });

  it('a large transfer stages in whole MiB, not a quarter more (897 MiB staged in 1 GiB ran out of memory where the buffer fit)', async () => {
    const seed = randomSeed();
    const n = (65 << 20) + 4096;
    const data = new Uint8Array(rng(seed).u32Array(n / 4).buffer);
    const pctx = await gpuContext({ stagingPoolBytes: 1 << 30 });
    try {
      const s = pctx.createStream({ label: 'large' });
      const d = pctx.alloc(n);
      s.upload(data, d);
      const out = new Uint8Array(n);
      s.download(d, out);
      await s.synchronize();
      expect(firstMismatch(out, data), `seed ${seed}`).toBeNull();
      expect(pctx.memory.staging / (1 << 20), 'an upload and a read-back buffer of 66 MiB each (80 MiB buckets before)').toBe(2 * 66);
    } finally {
      pctx.destroy();
    }
  });

  it('a full pool makes room by dropping the free buffer used longest ago, not the one just returned', async () => {
    // The old pool kept a stale 192 KiB buffer and dropped every newer one: each later transfer of
    // another size created (and zeroed) a staging buffer again.
    const seed = randomSeed();
    const KiB = 1024;
    const pctx = await gpuContext({ stagingPoolBytes: 256 * KiB });
    try {
      const created: number[] = [];
      const device = pctx.device;
      const create = device.createBuffer.bind(device);
      device.createBuffer = (d: GPUBufferDescriptor) => (created.push(d.size), create(d));
      const s = pctx.createStream();
      const big = rng(seed).u32Array((192 * KiB) / 4);
      const small = rng(seed + 1).u32Array((128 * KiB) / 4);
      const dBig = pctx.alloc(big.byteLength);
      const dSmall = pctx.alloc(small.byteLength);
      pctx.queue.writeBuffer(dBig.buffer, 0, big as Uint32Array<ArrayBuffer>);
      pctx.queue.writeBuffer(dSmall.buffer, 0, small as Uint32Array<ArrayBuffer>);
      const outBig = new Uint32Array(big.length);
      s.download(dBig, outBig);
      await s.synchronize();
      expect(pctx.memory.staging).toBe(192 * KiB);
      for (let round = 0; round < 3; round++) {
        created.length = 0;
        const out = new Uint32Array(small.length);
        s.download(dSmall, out);
        await s.synchronize();
        expect(firstMismatch(out, small), `round ${round}, seed ${seed}`).toBeNull();
        expect(created, `round ${round}: staging buffers created`).toEqual(round === 0 ? [128 * KiB] : []);
        expect(pctx.memory.staging, `round ${round}`).toBe(128 * KiB);
      }
      expect(firstMismatch(outBig, big), `seed ${seed}`).toBeNull();
      expect(pctx.errors).toEqual([]);
    } finally {
      pctx.destroy();
    }
  });

  it('100,000 uploads of 16 B hold a few MiB of staging, not one 4 KiB buffer each; every byte lands', async () => {
    const seed = randomSeed();
    const words = 100_000 * 4;
    const data = rng(seed).u32Array(words);
    const s = ctx.createStream({ label: 'tiny' });
    const dst = ctx.alloc(words * 4);
    const before = ctx.memory.staging;
    for (let i = 0; i < 100_000; i++) s.upload(data.subarray(i * 4, i * 4 + 4), dst, { dstOffset: i * 16 });
    const held = ctx.memory.staging - before;
    const out = new Uint32Array(words);
    s.download(dst, out);
    await s.synchronize();
    expect(firstMismatch(out, data), `seed ${seed}`).toBeNull();
    // 1.6 MB of data in 256 KiB blocks: 7 blocks; allow the pool's blocks in flight beside them.
    expect(held).toBeLessThanOrEqual(4 << 20);
    dst.destroy();
  });
});
