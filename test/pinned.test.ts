/**
 * Pinned-buffer ownership on Dawn: once an op that uses a pinned buffer is enqueued, the only code
 * that may write it is a host function of that op's own stream, enqueued before it (the CUDA
 * prefetch pattern). Every other writer gets PinnedBufferBusyError or a detached view, and what
 * the GPU uploads is what that host function wrote. After device loss, the buffer is never
 * handed back.
 */
import { describe, expect, it } from 'vitest';
import { gpuContext, useGpuContext, randomSeed, rng, firstMismatch } from './gpu.js';
import type { Context } from '../src/index.js';

type GpuCtx = Context & { errors: string[] };
let ctx: GpuCtx;
useGpuContext((c) => (ctx = c));

function gate(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((r) => (open = r));
  return { wait, open };
}
const delay = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const BUSY = expect.objectContaining({ name: 'PinnedBufferBusyError' });

describe('pinned ownership', () => {
  it('while the owning stream\'s host function runs, top-level code cannot write the buffer; the GPU gets what the host function wrote', async () => {
    const seed = randomSeed();
    const r = rng(seed);
    const want = r.u32Array(64);
    const s = ctx.createStream({ label: 'owner' });
    const pin = ctx.allocHost(256, 'upload', { label: 'pin' });
    const dev = ctx.alloc(256);
    const g = gate();
    let started = false;
    s.hostFn(async () => {
      started = true;
      await g.wait;
      pin.u32.set(want); // the host function itself, after an await
    });
    s.upload(pin, dev);
    const out = new Uint32Array(64);
    s.download(dev, out);
    await delay(5);
    expect(started).toBe(true);
    expect(() => pin.u32).toThrow(BUSY); // top level, while the host function runs
    expect(() => pin.bytes).toThrow(BUSY);
    g.open();
    await s.synchronize();
    expect(firstMismatch(out, want), `seed ${seed}`).toBeNull();
    pin.destroy();
  });

  it('another stream\'s host function cannot write a buffer claimed by this stream, even while this stream\'s host function runs', async () => {
    const seed = randomSeed();
    const r = rng(seed);
    const want = r.u32Array(64);
    const o = ctx.createStream({ label: 'o' });
    const s = ctx.createStream({ label: 's', nonBlocking: true });
    const pin = ctx.allocHost(256, 'upload', { label: 'o-pin' });
    const dev = ctx.alloc(256);
    const g = gate();
    o.hostFn(async () => {
      pin.u32.set(want);
      await g.wait;
    });
    o.upload(pin, dev);
    const out = new Uint32Array(64);
    o.download(dev, out);
    let sErr: unknown = 'no error';
    s.hostFn(() => {
      try {
        pin.u32.fill(0xbad); // stream s tries to change stream o's upload
      } catch (e) {
        sErr = e;
      }
    });
    await s.synchronize();
    expect(sErr).toMatchObject({ name: 'PinnedBufferBusyError', message: expect.stringMatching(/'upload' #\d+ on stream 'o'/) });
    g.open();
    await o.synchronize();
    expect(firstMismatch(out, want), `seed ${seed}`).toBeNull();
    pin.destroy();
  });

  it('a host function cannot fill a buffer whose upload is on another stream', async () => {
    const up = ctx.createStream({ label: 'uploader' });
    const filler = ctx.createStream({ label: 'filler', nonBlocking: true });
    const pin = ctx.allocHost(256, 'upload', { label: 'cross' });
    const g = gate();
    up.hostFn(() => g.wait);
    up.upload(pin, ctx.alloc(256));
    let err: unknown = 'no error';
    filler.hostFn(() => {
      try {
        pin.u32[0] = 1;
      } catch (e) {
        err = e;
      }
    });
    await filler.synchronize();
    expect(err).toMatchObject({ name: 'PinnedBufferBusyError' });
    g.open();
    await up.synchronize();
    pin.destroy();
  });

  it('a view taken before the enqueue detaches at the enqueue, also with a host function ahead; the GPU gets what that function wrote', async () => {
    const seed = randomSeed();
    const r = rng(seed);
    const early = r.u32Array(64);
    const want = r.u32Array(64);
    const s = ctx.createStream({ label: 'stale' });
    const pin = ctx.allocHost(256, 'upload', { label: 'stale-pin' });
    const dev = ctx.alloc(256);
    const kept = pin.u32;
    kept.set(early);
    const g = gate();
    s.hostFn(async () => {
      await g.wait;
      pin.u32.set(want);
    });
    s.upload(pin, dev);
    expect(kept.length).toBe(0); // detached: writes through it go nowhere
    kept[0] = 0xbad;
    const out = new Uint32Array(64);
    s.download(dev, out);
    g.open();
    await s.synchronize();
    expect(firstMismatch(out, want), `seed ${seed}`).toBeNull();
    // Without a host function ahead, what was written before the enqueue is what is sent.
    await pin.ready();
    pin.u32.set(early);
    s.upload(pin, dev);
    s.download(dev, out);
    await s.synchronize();
    expect(firstMismatch(out, early), `seed ${seed}`).toBeNull();
    pin.destroy();
  });

  it('the prefetch pattern: each host function fills the ring slot the next upload of its stream sends (sync and after an await)', async () => {
    const seed = randomSeed();
    const r = rng(seed);
    const s = ctx.createStream({ label: 'prefetch' });
    const ring = [ctx.allocHost(1024, 'upload', { label: 'ring0' }), ctx.allocHost(1024, 'upload', { label: 'ring1' })];
    const dev = ctx.alloc(1024);
    const chunks = Array.from({ length: 8 }, () => r.u32Array(256));
    const outs = chunks.map(() => new Uint32Array(256));
    chunks.forEach((c, i) => {
      const slot = ring[i & 1]!;
      s.hostFn(i & 2 ? () => void slot.u32.set(c) : async () => {
        await delay(1);
        slot.u32.set(c);
      });
      s.upload(slot, dev);
      s.download(dev, outs[i]!);
    });
    await s.synchronize();
    chunks.forEach((c, i) => expect(firstMismatch(outs[i]!, c), `chunk ${i}, seed ${seed}`).toBeNull());
    ring.forEach((p) => p.destroy());
  });
});

describe('after device loss', () => {
  it('a pending ready() rejects with DeviceLostError, the buffer is not host-owned, its views throw DeviceLostError', async () => {
    const c = await gpuContext({ label: 'losing' });
    const s = c.createStream();
    const pin = c.allocHost(256, 'download', { label: 'lost-pin' });
    const up = c.allocHost(256, 'upload', { label: 'lost-up' });
    const dev = c.alloc(256);
    const g = gate();
    s.hostFn(() => g.wait);
    s.download(dev, pin);
    const ready = pin.ready();
    c.device.destroy(); // the device goes: every wait must settle with DeviceLostError
    await expect(ready).rejects.toMatchObject({ name: 'DeviceLostError', context: 'losing' });
    await c.lost;
    expect(pin.isHostOwned).toBe(false);
    expect(() => pin.f32).toThrow(expect.objectContaining({ name: 'DeviceLostError' }));
    expect(up.isHostOwned).toBe(false);
    expect(() => up.bytes).toThrow(expect.objectContaining({ name: 'DeviceLostError' }));
    await expect(up.ready()).rejects.toMatchObject({ name: 'DeviceLostError' });
    await expect(c.synchronize()).rejects.toMatchObject({ name: 'DeviceLostError' });
    g.open();
    c.destroy();
  });
});
