/**
 * P2: upload bandwidth through the library (pageable `stream.upload(array)` via the pooled
 * staging, and a pinned `allocHost('upload')` buffer) over plain JS memcpy (`Uint8Array.set`) on
 * the same host, and over `queue.writeBuffer`.
 * P3: read-back into a pinned `allocHost('download')` buffer (download, synchronize, take the view)
 * over the raw path (copy, `mapAsync(READ)`, `getMappedRange` view).
 * Every timed transfer is end to end: from the call until the data is usable where it went
 * (on the device after a completed submit; in a host view).
 */
import type { Context, DeviceBuffer } from 'webgpu-streams';
import type { Check } from '../scenarios/common';
import { checkBytes } from '../scenarios/common';
import {
  MiB,
  gbps,
  interleaved,
  median,
  metric,
  num,
  randomBytes,
  round,
  seedOf,
  sizeText,
  type PerfGroup,
  type PerfGroupResult,
  type PerfOptions,
} from './common';

interface Params {
  bytes: number;
  repeats: number;
}
const FULL: Params = { bytes: 256 * MiB, repeats: 7 };
const QUICK: Params = { bytes: 1 * MiB, repeats: 3 };

export const TARGET_P2_MEMCPY = 0.9;
export const TARGET_P2_WRITEBUFFER = 2.5;
export const TARGET_P3 = 0.8;

/** Reads a device buffer back through the library (for the checks, untimed). */
async function readBack(ctx: Context, buf: DeviceBuffer, bytes: number): Promise<Uint8Array> {
  const s = ctx.createStream({ label: 'perf check', nonBlocking: true });
  try {
    const out = new Uint8Array(bytes);
    s.download(buf, out);
    await s.synchronize();
    return out;
  } finally {
    s.destroy();
  }
}

export const uploadGroup: PerfGroup = {
  id: 'upload',
  title: 'P2: upload bandwidth (pool, pinned) vs JS memcpy and writeBuffer',
  metrics: ['P2', 'P2.writeBuffer'],
  async run(ctx: Context, opts: PerfOptions): Promise<PerfGroupResult> {
    const p = opts.quick ? QUICK : FULL;
    const bytes = Math.min(p.bytes, ctx.limits.maxBufferSize);
    const seed = seedOf(opts);
    const progress = opts.progress ?? (() => {});
    progress(`P2: ${sizeText(bytes)} random bytes`, 0);
    // One random block; each path uploads a different window of it, so a path that moved
    // nothing cannot pass on what an earlier path left behind.
    const base = randomBytes(seed, bytes + 64);
    const srcOf = (k: number): Uint8Array<ArrayBuffer> => base.subarray(16 * k, 16 * k + bytes);
    const plain = new Uint8Array(bytes);
    plain.set(srcOf(0)); // first touch
    const dst = ctx.alloc(bytes, { label: 'p2.dst' });
    const pin = ctx.allocHost(bytes, 'upload', { label: 'p2.pinned' });
    const s = ctx.createStream({ label: 'p2', nonBlocking: true });
    const checks: Check[] = [];
    const stagingBefore = ctx.memory.staging;
    let stagingAfterWarmup = 0;
    let stagingAtLast = 0;
    try {
      pin.bytes.set(srcOf(0)); // first touch of the mapped range
      const samples = await interleaved(
        {
          memcpy: async ({ last }) => {
            const t0 = performance.now();
            plain.set(srcOf(1));
            const ms = performance.now() - t0;
            if (last) checks.push(checkBytes('memcpy', plain, srcOf(1)));
            return ms;
          },
          pool: async ({ last, warmup }) => {
            const t0 = performance.now();
            s.upload(srcOf(2), dst);
            await s.synchronize();
            const ms = performance.now() - t0;
            if (warmup) stagingAfterWarmup = ctx.memory.staging;
            if (last) stagingAtLast = ctx.memory.staging; // before the check's read-back adds its own staging
            if (last) checks.push(checkBytes('pool upload (stream.upload(array))', await readBack(ctx, dst, bytes), srcOf(2)));
            return ms;
          },
          pinned: async ({ last }) => {
            await pin.ready();
            const t0 = performance.now();
            pin.bytes.set(srcOf(3));
            s.upload(pin, dst);
            await s.synchronize();
            const ms = performance.now() - t0;
            if (last) checks.push(checkBytes('pinned upload (allocHost + fill + stream.upload)', await readBack(ctx, dst, bytes), srcOf(3)));
            return ms;
          },
          writeBuffer: async ({ last }) => {
            const t0 = performance.now();
            ctx.queue.writeBuffer(dst.buffer, 0, srcOf(4));
            ctx.queue.submit([]);
            await ctx.queue.onSubmittedWorkDone();
            const ms = performance.now() - t0;
            if (last) checks.push(checkBytes('queue.writeBuffer', await readBack(ctx, dst, bytes), srcOf(4)));
            return ms;
          },
        },
        p.repeats,
        2,
      );
      const stagingGrowth = stagingAtLast - stagingAfterWarmup;
      const g = (k: keyof typeof samples): number => gbps(bytes, median(samples[k]));
      const memcpy = g('memcpy');
      const pool = g('pool');
      const pinned = g('pinned');
      const wb = g('writeBuffer');
      const figures = {
        seed,
        bytes,
        memcpyGBps: round(memcpy),
        poolGBps: round(pool),
        pinnedGBps: round(pinned),
        writeBufferGBps: round(wb),
        poolOverMemcpy: round(pool / memcpy),
        pinnedOverMemcpy: round(pinned / memcpy),
        poolOverWriteBuffer: round(pool / wb),
        pinnedOverWriteBuffer: round(pinned / wb),
        stagingBytesBefore: stagingBefore,
        stagingBytesGrownDuringMeasuredRuns: stagingGrowth,
      };
      const common = `${sizeText(bytes)} end to end (call -> completed submit): pool ${num(pool)} GB/s, pinned ${num(pinned)} GB/s, JS memcpy ${num(memcpy)} GB/s, writeBuffer ${num(wb)} GB/s` +
        (stagingGrowth > 0 ? `; the staging pool grew by ${sizeText(stagingGrowth)} during measured runs (a buffer was not back in the pool in time)` : '; pool reused its staging buffer every run');
      return {
        metrics: [
          metric(ctx, {
            id: 'P2',
            name: 'upload through the pinned pool / JS memcpy',
            value: pool / memcpy,
            unit: 'ratio',
            target: `>= ${TARGET_P2_MEMCPY.toFixed(2)}`,
            meets: pool / memcpy >= TARGET_P2_MEMCPY,
            detail: `${common}; pinned buffer path ${num(pinned / memcpy)}x memcpy`,
            figures,
            checks,
            seed,
          }),
          metric(ctx, {
            id: 'P2.writeBuffer',
            name: 'upload through the pinned pool / queue.writeBuffer',
            value: pool / wb,
            unit: 'x',
            target: `>= ${TARGET_P2_WRITEBUFFER.toFixed(1)}`,
            meets: pool / wb >= TARGET_P2_WRITEBUFFER,
            detail: `${common}; pinned buffer path ${num(pinned / wb)}x writeBuffer`,
            figures,
            checks,
            seed,
          }),
        ],
        tables: [],
      };
    } finally {
      await s.synchronize().catch(() => undefined);
      s.destroy();
      dst.destroy();
      pin.destroy();
    }
  },
};

export const readbackGroup: PerfGroup = {
  id: 'readback',
  title: 'P3: read-back into pinned buffers vs raw copy + mapAsync',
  metrics: ['P3'],
  async run(ctx: Context, opts: PerfOptions): Promise<PerfGroupResult> {
    const p = opts.quick ? QUICK : FULL;
    const bytes = Math.min(p.bytes, ctx.limits.maxBufferSize);
    const seed = seedOf(opts);
    const progress = opts.progress ?? (() => {});
    progress(`P3: ${sizeText(bytes)} random bytes`, 0);
    const data = randomBytes(seed ^ 0x5bd1e995, bytes);
    const src = ctx.alloc(bytes, { label: 'p3.src' });
    ctx.queue.writeBuffer(src.buffer, 0, data);
    const pin = ctx.allocHost(bytes, 'download', { label: 'p3.pinned' });
    const raw = ctx.device.createBuffer({ size: bytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST, label: 'p3.raw' });
    const s = ctx.createStream({ label: 'p3', nonBlocking: true });
    const copyOut = new Uint8Array(bytes);
    copyOut.set(data); // first touch
    const pageable = new Uint8Array(bytes);
    const checks: Check[] = [];
    try {
      await ctx.queue.onSubmittedWorkDone();
      const samples = await interleaved(
        {
          pinned: async ({ last }) => {
            const t0 = performance.now();
            s.download(src, pin);
            await s.synchronize();
            const view = pin.bytes;
            const ms = performance.now() - t0;
            if (last) checks.push(checkBytes('pinned download view', view, data));
            return ms;
          },
          raw: async ({ last }) => {
            const t0 = performance.now();
            // Like the pinned buffer, which is unmapped when the next download is encoded, the raw
            // buffer stays mapped after its view was taken and is unmapped here, inside the timing.
            if (raw.mapState === 'mapped') raw.unmap();
            const enc = ctx.device.createCommandEncoder();
            enc.copyBufferToBuffer(src.buffer, 0, raw, 0, bytes);
            ctx.queue.submit([enc.finish()]);
            await raw.mapAsync(GPUMapMode.READ);
            const view = new Uint8Array(raw.getMappedRange());
            const ms = performance.now() - t0;
            if (last) checks.push(checkBytes('raw copy + mapAsync view', view, data));
            return ms;
          },
          pinnedCopyOut: async ({ last }) => {
            const t0 = performance.now();
            s.download(src, pin);
            await s.synchronize();
            copyOut.set(pin.bytes);
            const ms = performance.now() - t0;
            if (last) checks.push(checkBytes('pinned download + copy out', copyOut, data));
            return ms;
          },
          rawCopyOut: async ({ last }) => {
            if (raw.mapState === 'mapped') raw.unmap();
            const t0 = performance.now();
            const enc = ctx.device.createCommandEncoder();
            enc.copyBufferToBuffer(src.buffer, 0, raw, 0, bytes);
            ctx.queue.submit([enc.finish()]);
            await raw.mapAsync(GPUMapMode.READ);
            copyOut.set(new Uint8Array(raw.getMappedRange()));
            raw.unmap();
            const ms = performance.now() - t0;
            if (last) checks.push(checkBytes('raw copy + mapAsync + copy out', copyOut, data));
            return ms;
          },
          pageable: async ({ last }) => {
            if (last) pageable.fill(0);
            const t0 = performance.now();
            s.download(src, pageable);
            await s.synchronize();
            const ms = performance.now() - t0;
            if (last) checks.push(checkBytes('pageable download (stream.download(array))', pageable, data));
            return ms;
          },
        },
        p.repeats,
        2,
      );
      const g = (k: keyof typeof samples): number => gbps(bytes, median(samples[k]));
      const pinned = g('pinned');
      const rawV = g('raw');
      const pinnedCopy = g('pinnedCopyOut');
      const rawCopy = g('rawCopyOut');
      const pageableG = g('pageable');
      return {
        metrics: [
          metric(ctx, {
            id: 'P3',
            name: 'read-back into pinned buffers / raw copy + mapAsync',
            value: pinned / rawV,
            unit: 'ratio',
            target: `>= ${TARGET_P3.toFixed(2)}`,
            meets: pinned / rawV >= TARGET_P3,
            detail:
              `${sizeText(bytes)}, call -> view: pinned ${num(pinned)} GB/s vs raw ${num(rawV)} GB/s; ` +
              `with a copy out into a JS array: pinned ${num(pinnedCopy)} vs raw ${num(rawCopy)} GB/s (${num(pinnedCopy / rawCopy)}x); ` +
              `pageable stream.download(array) ${num(pageableG)} GB/s`,
            figures: {
              seed,
              bytes,
              pinnedViewGBps: round(pinned),
              rawViewGBps: round(rawV),
              pinnedCopyOutGBps: round(pinnedCopy),
              rawCopyOutGBps: round(rawCopy),
              pageableGBps: round(pageableG),
              copyOutRatio: round(pinnedCopy / rawCopy),
            },
            checks,
            seed,
          }),
        ],
        tables: [],
      };
    } finally {
      await s.synchronize().catch(() => undefined);
      s.destroy();
      src.destroy();
      pin.destroy();
      if (raw.mapState === 'mapped') raw.unmap();
      raw.destroy();
    }
  },
};
