/**
 * Device memory (src/memory.ts) on real WebGPU (Dawn): DeviceBuffer byte accounting, destroy
 * deferred until the streams using the buffer are done, the usage combinations alloc refuses; and
 * memory the runtime must give back: user arrays once their op completed, host-function closures.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it, vi } from 'vitest';
import { contextWithFeature, gpuContext, useGpuContext, randomSeed, rng, firstMismatch } from './fixtures/gpu.js';
import { delay, gate } from './fixtures/gate.js';
import type { Context, DeviceBuffer, Stream } from '../src/index.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

type GpuCtx = Context & { errors: string[] };
let ctx: GpuCtx;
useGpuContext((c) => (ctx = c));

/** Enqueues a download into a fresh array and returns a weak reference to it (made here, so no caller frame holds it). */
function downloadInto(s: Stream, src: DeviceBuffer, bytes: number): WeakRef<ArrayBuffer> {
  const out = new Uint8Array(bytes);
  s.download(src, out);
  return new WeakRef(out.buffer);
}

async function collect(): Promise<void> {
  for (let i = 0; i < 3; i++) {
    await new Promise((r) => setImmediate(r));
    gc();
  }
}

describe('device buffers', () => {
  it('accounts device bytes and defers destroy until the streams using the buffer are done', async () => {
    const mctx = await gpuContext();
    try {
      const before = mctx.memory.current;
      const a = mctx.alloc(1 << 16), b = mctx.alloc(1 << 16);
      expect(mctx.memory.current - before).toBe(2 << 16);
      const s = mctx.createStream();
      const g = gate();
      s.hostFn(() => g.wait);
      const v = rng(randomSeed()).u32Array(1 << 14);
      s.upload(v, a);
      s.copy(a, b);
      a.destroy(); // in use: deferred
      a.destroy(); // idempotent
      expect(mctx.memory.current - before).toBe(2 << 16);
      expect(() => s.copy(a, b)).toThrow(expect.objectContaining({ name: 'DestroyedError' }));
      const out = new Uint32Array(1 << 14);
      s.download(b, out);
      g.open();
      await s.synchronize();
      expect(mctx.memory.current - before).toBe(1 << 16);
      expect(mctx.memory.peak - before).toBe(2 << 16);
      expect(firstMismatch(out, v)).toBeNull();
    } finally {
      mctx.destroy();
    }
  });

  it('a buffer or texture dropped without destroy() leaves ctx.memory once collected (as torch.cuda.memory_allocated); nothing is subtracted twice', async () => {
    const mctx = await gpuContext();
    try {
      const s = mctx.createStream({ label: 'gc' });
      const base = mctx.memory.current;
      // Used by an op, then dropped: the op's completion lets go of it.
      ((): void => {
        for (let i = 0; i < 4; i++) s.upload(new Uint32Array(16), mctx.alloc(1 << 20));
        mctx.allocTexture({ size: [64, 64], format: 'rgba8unorm' });
      })();
      const kept = mctx.alloc(1 << 18); // alive all along
      const raw = ((): GPUBuffer => mctx.alloc(1 << 17).buffer)(); // its WebGPU buffer still held
      const destroyed = mctx.alloc(1 << 16);
      destroyed.destroy();
      expect(mctx.memory.current - base).toBe(4 * (1 << 20) + 64 * 64 * 4 + (1 << 18) + (1 << 17));
      await s.synchronize();
      for (let i = 0; i < 3; i++) {
        await collect();
        await s.synchronize();
      }
      expect(mctx.memory.current - base, 'the collected buffers and texture leave; kept, raw and destroyed count once').toBe((1 << 18) + (1 << 17));
      expect(raw.size).toBe(1 << 17);
      kept.destroy();
    } finally {
      mctx.destroy();
    }
  });

  it('alloc refuses the usage combinations WebGPU rejects (MAP_READ | STORAGE, MAP_READ | MAP_WRITE)', () => {
    expect(() => ctx.alloc(64, { usage: 0x0001 | 0x0080 })).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', op: 'alloc', message: expect.stringMatching(/MAP_READ to have no flag but COPY_DST/) }));
    expect(() => ctx.alloc(64, { usage: 0x0001 | 0x0002 })).toThrow(/MAP_READ or MAP_WRITE, not both/);
    expect(() => ctx.alloc(64, { usage: 0x0002 | 0x0008 })).toThrow(/MAP_WRITE to have no flag but COPY_SRC/);
    ctx.alloc(64, { usage: 0x0001 | 0x0008 }).destroy(); // the valid one
  });

  it('a buffer the device has no memory for: its first op fails with OutOfMemoryError naming it, later calls are refused, allocated() rejects, ctx.memory leaves it out', async () => {
    // SwiftShader cannot allocate a buffer of 1 GiB (its maxBufferSize): a real out-of-memory.
    const oom = await gpuContext({ label: 'oom' });
    try {
      const s = oom.createStream({ label: 'loads weights' });
      const seed = randomSeed();
      const x = rng(seed).u32Array(64);
      const small = oom.alloc(256, { label: 'small' });
      const before = oom.memory.current;
      const big = oom.alloc(oom.limits.maxBufferSize, { label: 'weights' });
      expect(big.verdict, 'WebGPU judges it later').toBeUndefined();
      s.copy(big, small, { size: 16 });
      const tooBig = { name: 'OutOfMemoryError', message: expect.stringMatching(/buffer 'weights' \(\d+ bytes\) could not be allocated: the device is out of memory/) };
      await expect(s.synchronize()).rejects.toMatchObject({ ...tooBig, op: 'copy', stream: 'loads weights' });
      await expect(big.allocated()).rejects.toMatchObject({ ...tooBig, op: 'allocated', context: 'oom' });
      expect(() => s.upload(x, big)).toThrow(expect.objectContaining({ ...tooBig, op: 'upload' }));
      expect(oom.memory.current, 'never allocated: not counted').toBe(before);
      expect(oom.memory.peak, 'nor in the peak').toBe(before);
      // Destroyed before WebGPU's verdict: allocated() still says it was out of memory; nothing is counted twice.
      const gone = oom.alloc(oom.limits.maxBufferSize, { label: 'gone' });
      gone.destroy();
      await expect(gone.allocated()).rejects.toMatchObject({ name: 'OutOfMemoryError' });
      expect([oom.memory.current, oom.memory.peak]).toEqual([before, before]);
      // Several refused at once (layers allocated until the memory runs out): none stays in the peak.
      const layers = [0, 1, 2].map((i) => oom.alloc(oom.limits.maxBufferSize, { label: `layer${i}` }));
      for (const l of layers) await expect(l.allocated()).rejects.toMatchObject({ name: 'OutOfMemoryError' });
      expect([oom.memory.current, oom.memory.peak]).toEqual([before, before]);
      for (const l of layers) l.destroy();
      // The stream and the context go on; the refused buffer is destroyed without counting it twice.
      s.upload(x, small);
      const back = new Uint32Array(64);
      s.download(small, back);
      await s.synchronize();
      expect(firstMismatch(back, x), `seed ${seed}`).toBeNull();
      await small.allocated();
      big.destroy();
      small.destroy();
      expect(oom.memory.current).toBe(before - 256);
      expect(oom.errors, 'captured, not left to the uncaptured-error handler').toEqual([]);
    } finally {
      oom.destroy();
    }
  });
});

describe('references to user memory end with the op', () => {
  it('100 completed 4 MiB downloads hold none of their destination arrays', async () => {
    const s = ctx.createStream({ label: 'downloads' });
    const src = ctx.alloc(4 << 20);
    const refs: WeakRef<ArrayBuffer>[] = [];
    for (let i = 0; i < 100; i++) refs.push(downloadInto(s, src, 4 << 20));
    await s.synchronize();
    await collect();
    expect(refs.filter((r) => r.deref() !== undefined).length).toBe(0);
    src.destroy();
  });

  it('a completed host function releases its closure, and a done op its buffers', async () => {
    const s = ctx.createStream({ label: 'closures' });
    const ref = ((): WeakRef<object> => {
      const big = { data: new Uint8Array(1 << 20) };
      s.hostFn(() => void big.data.length);
      return new WeakRef(big);
    })();
    await s.synchronize();
    await collect();
    expect(ref.deref()).toBeUndefined();
  });
});

describe('staging kept for reuse', () => {
  it('goes with the device: after device loss ctx.memory.staging comes back to 0 as the transfers cut short return theirs', async () => {
    const c = await gpuContext({ label: 'lost' });
    try {
      const s = c.createStream({ label: 'moves' });
      const d = c.alloc(1 << 20);
      const x = rng(randomSeed()).u32Array(1 << 18);
      s.upload(x, d);
      s.download(d, new Uint32Array(1 << 18));
      c.flush();
      expect(c.memory.staging).toBeGreaterThan(0);
      c.device.destroy();
      await expect(s.synchronize()).rejects.toMatchObject({ name: 'DeviceLostError' });
      await vi.waitFor(() => expect(c.memory.staging).toBe(0));
    } finally {
      c.destroy();
    }
  });

  it('ctx.emptyCache() frees the pooled staging and the uploadFrom ring, leaves buffers in use, and later transfers still land', async () => {
    const seed = randomSeed();
    const MiB = 1 << 20;
    const pctx = await gpuContext();
    try {
      const s = pctx.createStream();
      const d = pctx.alloc(9 * MiB);
      const round = async (k: number): Promise<void> => {
        const a = rng(seed + k).u32Array(MiB / 4);
        const w = new Uint8Array(rng(seed + 100 + k).u32Array((9 * MiB) / 4).buffer);
        async function* source(): AsyncGenerator<Uint8Array> {
          yield w; // 9 MiB: two 8 MiB pieces of the uploadFrom ring
        }
        s.uploadFrom(source(), d);
        const got = new Uint8Array(9 * MiB);
        s.download(d, got);
        s.upload(a, d); // pageable: 1 MiB of pooled staging once done
        const back = new Uint32Array(a.length);
        s.download(d, back, { size: MiB });
        await s.synchronize();
        expect(firstMismatch(got, w), `round ${k}, seed ${seed}`).toBeNull();
        expect(firstMismatch(back, a), `round ${k}, seed ${seed}`).toBeNull();
      };
      await round(0);
      expect(pctx.memory.staging).toBeGreaterThanOrEqual(16 * MiB + MiB);
      pctx.emptyCache();
      // The last upload's staging was still being mapped back: it goes when it comes back.
      await vi.waitFor(() => expect(pctx.memory.staging).toBe(0));
      await round(1); // the pool and the ring make new buffers
      expect(pctx.memory.staging).toBeGreaterThanOrEqual(16 * MiB + MiB);
      // In use at the call: the upload's staging stays until its copy is done, then is kept.
      const a = rng(seed + 2).u32Array(MiB / 4);
      s.upload(a, d);
      pctx.emptyCache();
      const back = new Uint32Array(a.length);
      s.download(d, back, { size: MiB });
      await s.synchronize();
      expect(firstMismatch(back, a), `seed ${seed}`).toBeNull();
      await vi.waitFor(() => expect(pctx.memory.staging).toBe(MiB)); // the download's 1 MiB, returned after the call
      expect(pctx.errors).toEqual([]);
    } finally {
      pctx.destroy();
    }
    expect(() => pctx.emptyCache()).toThrow(expect.objectContaining({ name: 'DestroyedError', message: expect.stringMatching(/emptyCache/) }));
  });

  it('staging comes back to 0 after what enqueued nothing or never ran: uploads a race refused, a small upload skipped behind a failure (its shared block)', async () => {
    const c = await gpuContext({ sanitize: 'throw', stagingPoolBytes: 0, label: 'staging leaks' });
    try {
      const [a, b] = [c.createStream({ label: 'a', nonBlocking: true }), c.createStream({ label: 'b', nonBlocking: true })];
      const x = c.alloc(100 << 10, { label: 'x' });
      const tex = c.allocTexture({ size: [64, 16], format: 'rgba8unorm', label: 't' });
      a.upload(new Uint8Array(100 << 10), x);
      a.upload(new Uint8Array(64 * 16 * 4), tex);
      expect(() => b.upload(new Uint8Array(100 << 10), x)).toThrow(expect.objectContaining({ name: 'StreamRaceError' }));
      expect(() => b.upload(new Uint8Array(1024), x)).toThrow(expect.objectContaining({ name: 'StreamRaceError' }));
      expect(() => b.upload(new Uint8Array(64 * 16 * 4), tex)).toThrow(expect.objectContaining({ name: 'StreamRaceError' }));
      await c.synchronize();
      c.emptyCache();
      // A staging buffer given back is re-mapped first (asynchronously), then dropped: let that finish.
      for (let i = 0; i < 200 && c.memory.staging > 0; i++) await delay(1);
      expect(c.memory.staging, 'after uploads a race refused').toBe(0);
      const f = c.createStream({ label: 'fails', nonBlocking: true });
      f.hostFn(() => {
        throw new Error('boom');
      });
      f.upload(new Uint8Array(1024), x); // skipped behind the failure
      await f.synchronize().catch(() => undefined);
      c.emptyCache();
      for (let i = 0; i < 200 && c.memory.staging > 0; i++) await delay(1);
      expect(c.memory.staging, "after a skipped small upload: its shared block").toBe(0);
      x.destroy();
      tex.destroy();
    } finally {
      c.destroy();
    }
  });

  it('a pageable upload whose staging cannot be mapped throws OutOfMemoryError at the call, naming it, and counts nothing', async () => {
    const c = await gpuContext({ label: 'no host memory' });
    try {
      const make = c.device.createBuffer.bind(c.device);
      // As Dawn does when the host has no memory for a buffer mapped at creation.
      c.device.createBuffer = (d: GPUBufferDescriptor): GPUBuffer => {
        if (d.mappedAtCreation && d.size >= 1 << 20) throw new RangeError('createBuffer failed to allocate a buffer mapped at creation');
        return make(d);
      };
      const x = c.alloc(2 << 20, { label: 'big' });
      const s = c.createStream({ label: 'uploads' });
      const before = c.memory.staging;
      expect(() => s.upload(new Uint8Array(2 << 20), x)).toThrow(expect.objectContaining({ name: 'OutOfMemoryError', op: 'upload', stream: 'uploads', message: expect.stringMatching(/no memory for the \d+-byte staging buffer a pageable upload copies into/) }));
      expect(c.memory.staging).toBe(before);
      expect(s.pendingOps).toBe(0);
      // A pinned buffer, and uploadFrom's ring of them, the same.
      expect(() => c.allocHost(2 << 20, 'upload', { label: 'pinned' })).toThrow(expect.objectContaining({ name: 'OutOfMemoryError', op: 'allocHost', message: expect.stringMatching(/no host memory to map 'pinned'/) }));
      const failed = s.uploadFrom(new Blob([new Uint8Array(2 << 20)]).stream(), x);
      const e = await s.synchronize().then(() => null, (err: unknown) => err as Error & { op?: string });
      expect(e, String(e)).toMatchObject({ name: 'OutOfMemoryError', op: 'uploadFrom', stream: 'uploads' });
      expect(failed).toBeGreaterThan(0);
      c.emptyCache();
      expect(c.memory.staging, 'nothing counted for what was not made').toBe(before);
      x.destroy();
    } finally {
      c.destroy();
    }
  });

  it('resetPeak() holds after a refused allocation is judged; a compressed texture counts whole blocks on every mip level', async () => {
    const c = await gpuContext({ label: 'peaks' });
    try {
      const MiB = 1 << 20;
      const a = c.alloc(4 * MiB);
      const huge = c.allocTexture({ size: [8192, 8192, 256], format: 'rgba32float', usage: GPUTextureUsage.TEXTURE_BINDING }); // 256 GiB: refused
      a.destroy();
      c.memory.resetPeak();
      const b = c.alloc(MiB);
      await expect(huge.allocated()).rejects.toMatchObject({ name: 'OutOfMemoryError' });
      expect([c.memory.current, c.memory.peak]).toEqual([MiB, MiB]);
      b.destroy();
    } finally {
      c.destroy();
    }
    const withBc = await contextWithFeature('texture-compression-bc', 'bc');
    if (!withBc) return;
    const bc = withBc.ctx;
    try {
      // bc1: 8 bytes a 4x4 block. 8x8 with 4 levels: 4 + 1 + 1 + 1 blocks (levels of 2x2 and 1x1 take a block each).
      const t = bc.allocTexture({ size: [8, 8], format: 'bc1-rgba-unorm', mipLevelCount: 4 });
      expect(t.byteSize).toBe(7 * 8);
      expect(bc.memory.current).toBe(7 * 8);
      t.destroy();
    } finally {
      withBc.close();
    }
  });
});
