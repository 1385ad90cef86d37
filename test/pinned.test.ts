/**
 * Pinned buffers (src/pinned.ts) on real WebGPU (Dawn). Ownership: once an op that uses a pinned
 * buffer is enqueued, the only code that may write it is a host function of that op's own stream,
 * enqueued before it (the CUDA prefetch pattern). Every other writer gets PinnedBufferBusyError or
 * a detached view, and what the GPU uploads is what that host function wrote. Also: views throw
 * while the GPU owns the buffer and ready() hands them back, the mapped range is detached at the
 * enqueue, unmap(), skipped ops hand the buffer back, the wrong kind and a destroyed buffer are
 * refused; after device loss, the buffer is never handed back.
 */
import { describe, expect, it } from 'vitest';
import { gpuContext, useGpuContext, randomSeed, rng, firstMismatch } from './fixtures/gpu.js';
import { delay, gate } from './fixtures/gate.js';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { Context, DeviceBuffer, PinnedBuffer, Stream, StreamError } from '../src/index.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** Full GCs with GPU work between them (Dawn frees a collected buffer's memory at a later tick). */
async function collect(tick: () => Promise<void>): Promise<void> {
  for (let i = 0; i < 3; i++) {
    await new Promise((r) => setImmediate(r));
    gc();
    await tick();
  }
}

type GpuCtx = Context & { errors: string[] };
let ctx: GpuCtx;
useGpuContext((c) => (ctx = c));

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
    expect(sErr).toMatchObject({ name: 'PinnedBufferBusyError', op: 'view', context: ctx.label, message: expect.stringMatching(/'upload' #\d+ on stream 'o'/) });
    expect((sErr as Error).message, 'the view names the line that touched it').toMatch(/\n {2}called at .*pinned\.test\.ts/);
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

describe('pinned buffers', () => {
  it('ready() hands a buffer back once the GPU is done with its ops and it is mapped, before those ops complete (their batch still validating)', async () => {
    const seed = randomSeed();
    const a = rng(seed).f32Array(256);
    const up = ctx.allocHost(1024, 'upload', { label: 'early-up' });
    const down = ctx.allocHost(1024, 'download', { label: 'early-down' });
    const d = ctx.alloc(1024);
    const s = ctx.createStream({ label: 'early' });
    const ev = ctx.createEvent({ label: 'after-download' });
    // Hold the submit's validation result back: its ops cannot complete until it comes.
    const device = ctx.device;
    const pop = device.popErrorScope;
    const held = gate();
    device.popErrorScope = () => {
      const p = pop.call(device);
      return held.wait.then(() => p);
    };
    const order: string[] = [];
    try {
      up.f32.set(a);
      s.upload(up, d);
      s.download(d, down);
      s.record(ev);
      ctx.flush();
      const ready = down.ready().then(() => order.push('ready'));
      await device.queue.onSubmittedWorkDone(); // the GPU ran the copies; the maps come with or before this
      for (let i = 0; i < 20 && order.length === 0; i++) await new Promise((r) => setImmediate(r));
      order.push(ev.query() ? 'ops done' : 'ops pending');
      expect(order, `seed ${seed}`).toEqual(['ready', 'ops pending']);
      expect(down.isHostOwned && up.isHostOwned).toBe(true);
      expect(firstMismatch(down.f32, a), `seed ${seed}`).toBeNull(); // readable while its op completes
      held.open();
      await ready;
      await s.synchronize();
      expect(ev.query()).toBe(true);
      // The buffers serve the next round as before.
      up.f32.set(a.map((x) => -x));
      s.upload(up, d);
      s.download(d, down);
      await down.ready();
      expect(firstMismatch(down.f32, a.map((x) => -x)), `seed ${seed}`).toBeNull();
    } finally {
      device.popErrorScope = pop;
      held.open();
    }
    // Destroyed while a download into it runs: freed once the GPU is done with it (not left mapped).
    s.download(d, down);
    down.destroy();
    await s.synchronize();
    expect(down.buffer.mapState).toBe('unmapped');
    for (const b of [up, d]) b.destroy();
  });

  it('copies from and into one pinned buffer, flushed part by part, are submitted one after another with no map between them; each buffer is mapped back once, after its last', async () => {
    const seed = randomSeed();
    const parts = 4;
    const a = rng(seed).f32Array(parts * 256);
    const up = ctx.allocHost(parts * 1024, 'upload', { label: 'parts-up' });
    const down = ctx.allocHost(parts * 1024, 'download', { label: 'parts-down' });
    const d = Array.from({ length: parts }, (_, i) => ctx.alloc(1024, { label: `part ${i}` }));
    const s = ctx.createStream({ label: 'parts' });
    const queue = ctx.device.queue;
    const submit = queue.submit;
    const maps = { up: 0, down: 0 };
    const count = (b: PinnedBuffer, k: 'up' | 'down'): (() => void) => {
      const map = b.buffer.mapAsync;
      b.buffer.mapAsync = (...args) => (maps[k]++, map.apply(b.buffer, args));
      return () => void (b.buffer.mapAsync = map);
    };
    const restore = [count(up, 'up'), count(down, 'down')];
    let submits = 0;
    queue.submit = (cmds) => (submits++, submit.call(queue, cmds));
    try {
      up.f32.set(a);
      for (let i = 0; i < parts; i++) {
        s.upload(up, d[i]!, { srcOffset: i * 1024, size: 1024 });
        s.download(d[i]!, down, { dstOffset: i * 1024, size: 1024 });
        ctx.flush();
      }
      expect(submits, 'each flush submitted its part: none waited for a map').toBe(parts);
      await down.ready();
      await up.ready();
      expect(maps).toEqual({ up: 1, down: 1 });
      expect(firstMismatch(down.f32, a), `seed ${seed}`).toBeNull();
    } finally {
      queue.submit = submit;
      for (const r of restore) r();
    }
    await s.synchronize();
    for (const b of [up, down, ...d]) b.destroy();
  });

  it('views throw while the GPU owns the buffer, naming the stream and op; ready() hands them back', async () => {
    const seed = randomSeed();
    const v = rng(seed).f32Array(256);
    const up = ctx.allocHost(1024, 'upload', { label: 'pin-up' });
    const down = ctx.allocHost(1024, 'download', { label: 'pin-down' });
    const s = ctx.createStream({ label: 'copier' });
    const d = ctx.alloc(1024);
    up.f32.set(v);
    s.upload(up, d);
    expect(() => up.f32).toThrow(expect.objectContaining({ name: 'PinnedBufferBusyError', message: expect.stringMatching(/'upload' #\d+ on stream 'copier' until/) }));
    // Two holders: the first one is named (the others wait behind it).
    const other = ctx.createStream({ label: 'second holder' });
    other.upload(up, ctx.alloc(1024));
    expect(() => up.f32).toThrow(expect.objectContaining({ name: 'PinnedBufferBusyError', message: expect.stringMatching(/in use by op 'upload' #\d+ on stream 'copier' \(and 1 more op after it\)/) }));
    s.download(d, down);
    expect(() => down.bytes).toThrow(expect.objectContaining({ name: 'PinnedBufferBusyError' }));
    await s.synchronize();
    expect(down.isHostOwned).toBe(true);
    expect(firstMismatch(down.f32, v), `seed ${seed}`).toBeNull();
    await up.ready();
    expect(up.isHostOwned).toBe(true);
    // Reuse: fill again, upload again.
    const w = rng(seed + 1).f32Array(256);
    up.f32.set(w);
    s.upload(up, d);
    s.download(d, down);
    await s.synchronize();
    expect(firstMismatch(down.f32, w), `seed ${seed}`).toBeNull();
  });

  it('a host function may fill the pinned buffer that the next op of its stream uploads (as CUDA allows)', async () => {
    const seed = randomSeed();
    const r = rng(seed);
    const s = ctx.createStream({ label: 'prefetch' });
    const pin = ctx.allocHost(1024, 'upload', { label: 'ring' });
    const d = ctx.alloc(1024);
    const batches = [r.u32Array(256), r.u32Array(256), r.u32Array(256)];
    const outs = batches.map(() => new Uint32Array(256));
    batches.forEach((batch, i) => {
      s.hostFn(async () => {
        await Promise.resolve(); // async callbacks keep the window until they settle
        pin.u32.set(batch);
      });
      s.upload(pin, d);
      s.download(d, outs[i]!);
    });
    await s.synchronize();
    batches.forEach((b, i) => expect(firstMismatch(outs[i]!, b), `batch ${i}, seed ${seed}`).toBeNull());
    expect(() => {
      s.upload(pin, d);
      pin.u32[0] = 2; // after enqueue, outside a callback: refused
    }).toThrow(expect.objectContaining({ name: 'PinnedBufferBusyError' }));
    await s.synchronize();
  });

  it('enqueuing hands the mapped range back at once when nothing ahead can use it; a host function ahead keeps it', async () => {
    const seed = randomSeed();
    const r = rng(seed);
    const a = r.f32Array(256);
    const b = r.f32Array(256);
    const up = ctx.allocHost(1024, 'upload', { label: 'eager-up' });
    const down = ctx.allocHost(1024, 'download', { label: 'eager-down' });
    const d = ctx.alloc(1024);
    const s = ctx.createStream({ label: 'eager' });
    const s2 = ctx.createStream({ label: 'eager-2', nonBlocking: true });
    // Nothing ahead: the range is detached at the enqueue (V8 stops counting it), not at the flush.
    const held = up.f32;
    held.set(a);
    s.upload(up, d);
    expect(held.length).toBe(0);
    const out = new Float32Array(256);
    s.download(d, out);
    // A second stream reads the same buffer: both uses see the same bytes. Its download waits
    // behind its upload, a GPU op: the download buffer's range is detached at the enqueue too.
    const d2 = ctx.alloc(1024);
    const heldDown = down.f32;
    s2.upload(up, d2);
    s2.download(d2, down);
    expect(heldDown.length).toBe(0);
    await ctx.synchronize();
    expect(firstMismatch(out, a), `seed ${seed}`).toBeNull();
    expect(firstMismatch(down.f32, a), `seed ${seed}`).toBeNull();
    // A host function ahead on the stream may still fill it: the mapping stays until it ran, but a
    // view taken before the enqueue detaches there (only that host function writes what is sent).
    await up.ready();
    const gateOpen = gate();
    const view = up.f32;
    s.hostFn(async () => {
      await gateOpen.wait;
      up.f32.set(b);
    });
    s.upload(up, d);
    expect(view.length).toBe(0);
    expect(() => up.f32).toThrow(expect.objectContaining({ name: 'PinnedBufferBusyError' }));
    s.download(d, out);
    gateOpen.open();
    await s.synchronize();
    expect(firstMismatch(out, b), `seed ${seed}`).toBeNull();
    // A host function that threw is done too: the next enqueue detaches at once again.
    s.hostFn(() => {
      throw new Error('boom');
    });
    await expect(s.synchronize()).rejects.toMatchObject({ name: 'HostFnError' });
    await expect(ctx.synchronize()).rejects.toMatchObject({ name: 'HostFnError', stream: 'eager' });
    await up.ready();
    const again = up.f32;
    s.upload(up, d);
    expect(again.length).toBe(0);
    await s.synchronize();
  });

  it('an upload skipped behind a failed op hands its detached buffer back to the host, bytes intact', async () => {
    const seed = randomSeed();
    const a = rng(seed).f32Array(256);
    const up = ctx.allocHost(1024, 'upload', { label: 'skipped-up' });
    const s = ctx.createStream({ label: 'doomed', nonBlocking: true });
    const bad = ctx.kernel('@group(0) @binding(0) var<storage, read_write> d: array<u32>;\n@compute @workgroup_size(1) fn main() { d[0] = nope; }', { label: 'bad' });
    up.f32.set(a);
    s.launch(bad, { bindings: [ctx.alloc(256)], workgroups: 1 });
    const held = up.f32;
    s.upload(up, ctx.alloc(1024)); // detached at the enqueue, then skipped: the launch fails
    expect(held.length).toBe(0);
    await expect(s.synchronize()).rejects.toMatchObject({ name: 'GpuValidationError' });
    await expect(ctx.synchronize()).rejects.toMatchObject({ name: 'GpuValidationError', stream: 'doomed' });
    await up.ready();
    expect(firstMismatch(up.f32, a), `seed ${seed}`).toBeNull();
  });

  it('unmap() lets the host mapping go: views detach, ready() maps it back with its bytes, ops use it as before', async () => {
    const seed = randomSeed();
    const r = rng(seed);
    const a = r.f32Array(256);
    const b = r.f32Array(256);
    const up = ctx.allocHost(1024, 'upload', { label: 'unmap-up' });
    const down = ctx.allocHost(1024, 'download', { label: 'unmap-down' });
    const d = ctx.alloc(1024);
    const s = ctx.createStream({ label: 'unmap' });
    up.f32.set(a);
    s.upload(up, d);
    s.download(d, down);
    await down.ready();
    expect(firstMismatch(down.f32, a), `seed ${seed}`).toBeNull();
    // Done reading: the range detaches, and the views refuse with a hint until ready().
    const held = down.f32;
    down.unmap();
    expect(held.length).toBe(0);
    expect(() => down.f32).toThrow(expect.objectContaining({ name: 'PinnedBufferBusyError', message: expect.stringContaining('await pinned.ready()') }));
    down.unmap(); // idempotent
    await down.ready();
    expect(firstMismatch(down.f32, a), `contents kept, seed ${seed}`).toBeNull();
    // Unmapped and then used by an op: the op needs no mapping, and the buffer comes back after it.
    down.unmap();
    await up.ready();
    up.f32.set(b);
    up.unmap(); // an upload of an unmapped buffer uploads what was written before
    s.upload(up, d);
    s.download(d, down);
    await s.synchronize();
    await down.ready();
    expect(firstMismatch(down.f32, b), `seed ${seed}`).toBeNull();
    // While an op uses it, unmap() does nothing: the op hands it back.
    s.download(d, down);
    down.unmap();
    await s.synchronize();
    await down.ready();
    expect(firstMismatch(down.f32, b), `seed ${seed}`).toBeNull();
    down.destroy();
    expect(() => down.unmap()).toThrow(expect.objectContaining({ name: 'DestroyedError' }));
  });

  it('a view keeps its pinned buffer alive: dropped buffers are not freed under a view in use, and are collected with their last view', async () => {
    const seed = randomSeed();
    const r = rng(seed);
    const want = r.u32Array(64 << 10);
    // Only the views are kept: without a link from the mapped range to its buffer, Dawn frees the
    // collected buffer's memory at its next tick and the next access through the view crashes.
    const made = (kind: 'upload' | 'download'): [WeakRef<PinnedBuffer>, Uint32Array] => {
      const p = ctx.allocHost(want.byteLength, kind, { label: `gc-${kind}` });
      return [new WeakRef(p), p.u32];
    };
    const [upRef, upView] = made('upload');
    const [downRef, downView] = made('download');
    const s = ctx.createStream({ label: 'gc-tick' });
    const d = ctx.alloc(want.byteLength);
    await collect(() => { s.upload(new Uint32Array(4), d); return s.synchronize(); });
    expect(upRef.deref(), 'the upload buffer, held by its view').toBeDefined();
    expect(downRef.deref(), 'the download buffer, held by its view').toBeDefined();
    upView.set(want);
    downView.set(want);
    expect(firstMismatch(downView, want), `seed ${seed}`).toBeNull();
    // The memory is still the buffer's mapping: what the view holds is what the GPU gets.
    const up = upRef.deref()!;
    const out = new Uint32Array(want.length);
    s.upload(up, d);
    s.download(d, out);
    await s.synchronize();
    expect(firstMismatch(out, want), `seed ${seed}`).toBeNull();
    // With the views gone too, nothing keeps them: no leak.
    const lostRef = ((): WeakRef<PinnedBuffer> => made('upload')[0])();
    await collect(() => s.synchronize());
    expect(lostRef.deref(), 'a buffer whose views are gone').toBeUndefined();
  });

  it('a pinned buffer of the wrong kind is refused', () => {
    const s = ctx.createStream();
    const down = ctx.allocHost(64, 'download');
    expect(() => s.upload(down, ctx.alloc(64))).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', message: expect.stringContaining("allocHost(bytes, 'upload')") }));
  });

  it('a destroyed pinned buffer throws on use and rejects ready()', async () => {
    const p = ctx.allocHost(64, 'upload', { label: 'p' });
    p.destroy();
    p.destroy();
    expect(() => p.f32).toThrow(expect.objectContaining({ name: 'DestroyedError' }));
    await expect(p.ready()).rejects.toMatchObject({ name: 'DestroyedError' });
    expect(() => ctx.createStream().upload(p, ctx.alloc(64))).toThrow(expect.objectContaining({ name: 'DestroyedError' }));
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

  it('ctx.destroy() right after a pinned buffer was destroyed while in use raises no WebGPU error (it mapped the freed buffer)', async () => {
    for (const kind of ['upload', 'download'] as const) {
      const c = await gpuContext({ label: `closing ${kind}` });
      const s = c.createStream();
      const d = c.alloc(1 << 16);
      const pin = c.allocHost(1 << 16, kind);
      if (kind === 'upload') s.upload(pin, d);
      else s.download(d, pin);
      pin.destroy(); // deferred while the op uses it
      await Promise.resolve(); // submitted
      c.destroy();
      await new Promise((r) => setTimeout(r, 20));
      expect(c.errors, kind).toEqual([]);
    }
  });

  /** `s` still moves seeded random data through `d` intact. */
  const goesOn = async (s: Stream, d: DeviceBuffer): Promise<void> => {
    const seed = randomSeed();
    const x = rng(seed).u32Array(1024);
    const back = new Uint32Array(1024);
    s.upload(x, d);
    s.download(d, back);
    await s.synchronize();
    expect(firstMismatch(back, x), `seed ${seed}`).toBeNull();
  };

  it('a pinned buffer that cannot map (invalid: out of memory, its device lost) fails its ops once; nothing spins and nothing hangs', async () => {
    const c = await gpuContext({ label: 'cannot map' });
    try {
      const s = c.createStream({ label: 'reads back' });
      const d = c.alloc(4096);
      const pin = c.allocHost(4096, 'download', { label: 'broken' });
      let maps = 0;
      pin.buffer.mapAsync = () => (maps++, Promise.reject(new DOMException('the buffer is invalid', 'OperationError')));
      s.download(d, pin);
      await expect(s.synchronize()).rejects.toMatchObject({ op: 'download', stream: 'reads back', message: expect.stringMatching(/the buffer is invalid/) });
      await expect(pin.ready()).rejects.toMatchObject({ message: expect.stringMatching(/the buffer is invalid/) });
      expect(maps).toBe(1);
      await goesOn(s, d); // the stream goes on with other buffers
    } finally {
      c.destroy();
    }
  }, 20_000);

  it("a map cut short by the device's loss before the loss is known (Chrome's order) rejects ready() with the loss, and a map that just fails with a typed error", async () => {
    for (const lose of [true, false]) {
      const c = await gpuContext({ label: lose ? 'loses its device' : 'map fails' });
      try {
        const s = c.createStream({ label: 'reads back' });
        const d = c.alloc(4096);
        const pin = c.allocHost(4096, 'download', { label: 'cut' });
        pin.buffer.mapAsync = () => {
          if (lose) queueMicrotask(() => c.device.destroy());
          return Promise.reject(new DOMException('Buffer was unmapped before mapping was resolved.', 'AbortError'));
        };
        s.download(d, pin);
        const waited = pin.ready().then(() => null, (e: unknown) => e as StreamError);
        await s.synchronize().catch(() => undefined);
        const err = await waited;
        if (lose) expect(err).toMatchObject({ name: 'DeviceLostError' });
        else expect(err).toMatchObject({ name: 'GpuValidationError', op: 'ready', message: expect.stringMatching(/pinned buffer 'cut' could not be mapped back: .*Buffer was unmapped/) });
      } finally {
        c.destroy();
      }
    }
  });

  it('a pinned buffer the device had no memory for: its ops, ready() and views fail with OutOfMemoryError naming it, and calls once known', async () => {
    const c = await gpuContext({ label: 'oom' });
    try {
      const s = c.createStream({ label: 'reads back' });
      const d = c.alloc(4096, { label: 'd' });
      const pin = c.allocHost(c.limits.maxBufferSize, 'download', { label: 'huge' }); // SwiftShader cannot allocate 1 GiB
      s.download(d, pin, { size: 4096 }); // before WebGPU's verdict: the op finds out
      const tooBig = { name: 'OutOfMemoryError', message: expect.stringMatching(/pinned buffer 'huge' \(\d+ bytes\) could not be allocated: out of memory/) };
      await expect(s.synchronize()).rejects.toMatchObject({ ...tooBig, op: 'download', stream: 'reads back' });
      await expect(pin.ready()).rejects.toMatchObject({ ...tooBig, op: 'ready' });
      expect(() => pin.bytes).toThrow(expect.objectContaining({ ...tooBig, op: 'view' }));
      expect(() => s.download(d, pin, { size: 4096 })).toThrow(expect.objectContaining({ ...tooBig, op: 'download' }));
      await goesOn(s, d); // the stream goes on with other buffers
      pin.destroy();
      // Called before the verdict, run after it (behind a host function): the op fails unsubmitted, nothing spins.
      const up = c.allocHost(c.limits.maxBufferSize, 'upload', { label: 'huge up' });
      s.hostFn(() => new Promise((r) => setTimeout(r, 200)));
      s.upload(up, d, { size: 4096 });
      await expect(s.synchronize()).rejects.toMatchObject({ name: 'OutOfMemoryError', op: 'upload', message: expect.stringMatching(/pinned buffer 'huge up'/) });
      up.destroy();
      await goesOn(s, d);
      expect(c.errors).toEqual([]);
    } finally {
      c.destroy();
    }
  });
});
