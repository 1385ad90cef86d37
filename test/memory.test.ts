/**
 * Memory the runtime must give back, on Dawn: user arrays once their op completed, the trace's
 * records and submit log past their limit, and staging for many small pageable uploads.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { gpuContext, useGpuContext, randomSeed, rng, firstMismatch } from './gpu.js';
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

describe('trace memory is bounded', () => {
  it('op records and the submit log keep about `trace.limit` entries', async () => {
    const c = await gpuContext({ trace: { limit: 1000 }, maxOpsPerSubmit: 1 });
    const s = c.createStream();
    const a = c.alloc(64), b = c.alloc(64);
    for (let round = 0; round < 5; round++) {
      for (let i = 0; i < 1000; i++) s.copy(i & 1 ? a : b, i & 1 ? b : a);
      await s.synchronize();
    }
    expect(c.trace.records.length).toBeLessThanOrEqual(1250);
    expect(c.trace.records.length).toBeGreaterThanOrEqual(1000);
    expect(c.trace.submits.length).toBeLessThanOrEqual(1250);
    expect(c.errors).toEqual([]);
    c.destroy();
  });
});

describe('small pageable uploads share staging', () => {
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
