/**
 * `stream.copyPeer` (src/peer.ts) between contexts on two devices (Dawn, SwiftShader): seeded
 * random bytes of several staging pieces cross and land byte for byte; the copy reads the source
 * only once its op runs (after a wait on the other device's event); offsets; a source destroyed
 * after the call is still read; the other context destroyed midway fails that op alone, typed;
 * argument checks at the call.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { firstMismatch, gpuContext, randomSeed, rng, vectorAddRef } from './fixtures/gpu.js';
import { DestroyedError, InvalidArgumentError, StreamError, workgroupsFor, type Context } from '../src/index.js';

type GpuCtx = Context & { errors: string[] };
let a: GpuCtx, b: GpuCtx;
beforeAll(async () => {
  a = await gpuContext({ label: 'A' });
  b = await gpuContext({ label: 'B' });
});
afterAll(() => {
  expect(a.errors).toEqual([]);
  expect(b.errors).toEqual([]);
  a.destroy();
  b.destroy();
});

const seed = randomSeed();
const r = rng(seed);
const same = (x: Uint32Array, y: Uint32Array): number => {
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return i;
  return x.length === y.length ? -1 : -2;
};

describe(`copyPeer (seed ${seed})`, () => {
  it('moves 20 MiB (three staging pieces) from device A to device B, byte for byte, and with offsets', async () => {
    const n = (20 << 20) / 4 + 3;
    const data = r.u32Array(n);
    const src = a.alloc(n * 4, { label: 'A.src' }), dst = b.alloc(n * 4, { label: 'B.dst' });
    const sa = a.createStream(), sb = b.createStream();
    sa.upload(data, src);
    const ready = a.createEvent();
    sa.record(ready);
    sb.waitEvent(ready);
    sb.copyPeer(src, dst);
    const back = new Uint32Array(n);
    sb.download(dst, back);
    await sb.synchronize();
    expect(same(back, data), `seed ${seed}`).toBe(-1);
    // A range: source bytes [4096, 4096 + 1 MiB) to destination offset 64.
    const part = new Uint32Array((1 << 20) / 4);
    sb.copyPeer(src, dst, { srcOffset: 4096, dstOffset: 64, size: 1 << 20 });
    sb.download(dst, part, { srcOffset: 64, size: 1 << 20 });
    await sb.synchronize();
    expect(same(part, data.subarray(1024, 1024 + part.length)), `seed ${seed}`).toBe(-1);
    src.destroy();
    dst.destroy();
  });

  it('reads the source only once its op runs: after the kernel on A that the wait orders it behind', async () => {
    const n = 1 << 16;
    const [x, y] = [r.f32Array(n, -10, 10), r.f32Array(n, -10, 10)];
    const da = a.alloc(n * 4), db = a.alloc(n * 4), sum = a.alloc(n * 4, { label: 'A.sum' }), dst = b.alloc(n * 4);
    const sa = a.createStream({ label: 'A.compute' }), sb = b.createStream({ label: 'B.copy' });
    sa.upload(x, da);
    sa.upload(y, db);
    sa.hostFn(() => new Promise((res) => setTimeout(res, 50))); // holds the kernel back
    sa.launch(a.kernels.vectorAdd, { bindings: [da, db, sum], workgroups: workgroupsFor(n, 256) });
    const done = a.createEvent();
    sa.record(done);
    sb.waitEvent(done);
    sb.copyPeer(sum, dst);
    const out = new Float32Array(n);
    sb.download(dst, out);
    await sb.synchronize();
    expect(firstMismatch(out, vectorAddRef(x, y)), `seed ${seed}`).toBeNull();
    for (const buf of [da, db, sum, dst]) buf.destroy();
  });

  it('the sanitizer sees the read of the source: a write on its device unordered with the copy races, before or after it; ordered, none', async () => {
    const sa = await gpuContext({ label: 'A (sanitized)', sanitize: 'throw' });
    const sb = await gpuContext({ label: 'B (sanitized)', sanitize: 'throw' });
    try {
      const n = 4096;
      const x = sa.alloc(n * 4, { label: 'x' }), y = sb.alloc(n * 4, { label: 'y' });
      const A = sa.createStream({ label: 'A' }), B = sb.createStream({ label: 'B' });
      const race = (op: string, second: string, first: string) => expect.objectContaining({ name: 'StreamRaceError', op, message: expect.stringMatching(new RegExp(`race on buffer 'x' .*${second}.*${first}`)) });
      A.upload(r.u32Array(n), x);
      expect(() => B.copyPeer(x, y)).toThrow(race('copyPeer', "'copyPeer' on stream 'B' reads them", "'upload ->x' on stream 'A' writes them"));
      const written = sa.createEvent();
      A.record(written);
      B.waitEvent(written);
      B.copyPeer(x, y); // ordered after the write: no race
      expect(() => A.upload(r.u32Array(n), x)).toThrow(race('upload', "'upload ->x' on stream 'A' writes them", "'copyPeer' on stream 'B' reads them"));
      await sb.synchronize();
      await sa.synchronize();
    } finally {
      sa.destroy();
      sb.destroy();
    }
  });

  it('a source destroyed after the call is still read (destroy is deferred); the call checks its arguments', async () => {
    const n = 4096;
    const data = r.u32Array(n);
    const src = a.alloc(n * 4, { label: 'A.gone' }), dst = b.alloc(n * 4);
    const sa = a.createStream(), sb = b.createStream({ label: 'B.checks' });
    sa.upload(data, src);
    await sa.synchronize();
    sb.copyPeer(src, dst);
    src.destroy();
    const back = new Uint32Array(n);
    sb.download(dst, back);
    await sb.synchronize();
    expect(same(back, data), `seed ${seed}`).toBe(-1);
    expect(() => sb.copyPeer(src, dst)).toThrow(DestroyedError);
    const local = b.alloc(n * 4);
    expect(() => sb.copyPeer(local, dst)).toThrow(/is on this stream's device; copy it with stream.copy\(\)/);
    const big = a.alloc(n * 8);
    const e = (() => {
      try {
        sb.copyPeer(big, dst, { size: 6 });
      } catch (err) {
        return err as StreamError;
      }
    })();
    expect(e).toBeInstanceOf(InvalidArgumentError);
    expect(e?.op).toBe('copyPeer');
    expect(e?.stream).toBe('B.checks');
    expect(() => sb.copyPeer(big, dst, { size: n * 8 })).toThrow(/out of bounds of destination/);
    expect(() => sb.copyPeer(new Uint8Array(4) as never, dst)).toThrow(/Expected `src` to be a DeviceBuffer/);
    for (const buf of [dst, local, big]) buf.destroy();
  });

  it('the source context destroyed before the copy ran fails that op alone, typed; B goes on', async () => {
    const other = await gpuContext({ label: 'A2' });
    const src = other.alloc(1 << 20), dst = b.alloc(1 << 20);
    const sb = b.createStream({ label: 'B.victim' }), fine = b.createStream({ label: 'B.fine' });
    sb.hostFn(() => {
      other.destroy();
    });
    sb.copyPeer(src, dst);
    const data = r.u32Array(256), back = new Uint32Array(256);
    const ok = b.alloc(1024);
    fine.upload(data, ok);
    fine.download(ok, back);
    const failure = await sb.synchronize().then(() => null, (err: unknown) => err);
    expect(() => sb.copyPeer(src, dst), 'a destroyed context is refused at the call').toThrow(
      expect.objectContaining({ name: 'DestroyedError', op: 'copyPeer', stream: 'B.victim', context: 'B', message: expect.stringMatching(/: src '.*' belongs to context 'A2', which was destroyed/) }),
    );
    expect(failure).toBeInstanceOf(StreamError);
    expect((failure as StreamError).op).toBe('copyPeer');
    await fine.synchronize();
    expect(same(back, data)).toBe(-1);
    await sb.synchronize(); // reported once; the stream goes on
    dst.destroy();
    ok.destroy();
  });

  it("a source whose device was lost is refused at the call, naming this stream and context and the source's", async () => {
    const other = await gpuContext({ label: 'A3' });
    const src = other.alloc(1024, { label: 'A3.src' }), dst = b.alloc(1024);
    other.device.destroy();
    await other.lost;
    const sb = b.createStream({ label: 'B.after loss' });
    expect(() => sb.copyPeer(src, dst)).toThrow(
      expect.objectContaining({ name: 'DeviceLostError', op: 'copyPeer', stream: 'B.after loss', context: 'B', message: expect.stringMatching(/: src 'A3.src' belongs to context 'A3': the GPU device was lost/) }),
    );
    other.destroy();
    dst.destroy();
  });

  it('a copy from a source with no memory fails with OutOfMemoryError named for copyPeer on its stream, and later copies from that context go on (its internal stream is not left failed)', async () => {
    const good = a.alloc(4096, { label: 'A.good' });
    const data = r.u32Array(1024);
    const sa = a.createStream({ label: 'A.fill' });
    sa.upload(data, good);
    await sa.synchronize();
    const sb = b.createStream({ label: 'B.copies' });
    const dst = b.alloc(4096, { label: 'B.dst' });
    const big = a.alloc(a.limits.maxBufferSize, { label: 'A.big' }); // SwiftShader cannot allocate 1 GiB
    sb.copyPeer(big, dst, { size: 4096 }); // before WebGPU's verdict: the op finds out
    await expect(sb.synchronize()).rejects.toMatchObject({ name: 'OutOfMemoryError', op: 'copyPeer', stream: 'B.copies', message: expect.stringMatching(/buffer 'A.big'/) });
    expect(() => sb.copyPeer(big, dst, { size: 4096 }), 'once known, refused at the call').toThrow(expect.objectContaining({ name: 'OutOfMemoryError' }));
    for (let i = 0; i < 3; i++) {
      sb.copyPeer(good, dst);
      const back = new Uint32Array(1024);
      sb.download(dst, back);
      await sb.synchronize();
      expect(same(back, data), `copy ${i} after the failure`).toBe(-1);
    }
    await expect(a.synchronize(), 'the internal stream reports nothing of its own').resolves.toBeUndefined();
    big.destroy();
    good.destroy();
    dst.destroy();
  });
});
