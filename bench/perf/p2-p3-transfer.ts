/**
 * P2: upload bandwidth through the library's pooled staging (pageable `stream.upload(array)`)
 * against its bound from the same run: the host's copy into staging (`Uint8Array.set` into a mapped
 * MAP_WRITE range, the memory an upload writes) and then the GPU's copy out of staging (timed with
 * GPU timestamps), in series.
 * Beside it: the same upload by hand on raw WebGPU (map, fill, unmap, copyBufferToBuffer, submit,
 * wait), a pinned `allocHost('upload')` buffer, JS memcpy alone and `queue.writeBuffer`.
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
  BOUND_FRACTION,
  RAW_SLACK,
  boundRule,
  boundRuleText,
  finiteOrNull,
  pairedRatio,
  pairedRatioInterval,
  ratioText,
  type BoundedRow,
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

/**
 * The GPU's copy of `bytes` out of a staging buffer (MAP_WRITE | COPY_SRC, the kind a mapped
 * upload goes through) into `dst`, timed on the GPU with raw timestamp queries: an empty compute
 * pass writes a timestamp before the copy and another after it, as the library times copies.
 */
class RawCopyTimer {
  readonly staging: GPUBuffer;
  readonly #qs: GPUQuerySet;
  readonly #resolve: GPUBuffer;
  readonly #read: GPUBuffer;

  constructor(
    readonly device: GPUDevice,
    readonly bytes: number,
    contents: Uint8Array,
  ) {
    this.staging = device.createBuffer({ size: bytes, usage: GPUBufferUsage.MAP_WRITE | GPUBufferUsage.COPY_SRC, mappedAtCreation: true, label: 'p2.bound.staging' });
    new Uint8Array(this.staging.getMappedRange()).set(contents);
    this.staging.unmap();
    this.#qs = device.createQuerySet({ type: 'timestamp', count: 2, label: 'p2.bound.queries' });
    this.#resolve = device.createBuffer({ size: 16, usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC, label: 'p2.bound.resolve' });
    this.#read = device.createBuffer({ size: 16, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST, label: 'p2.bound.read' });
  }

  /** One copy into `dst`; its GPU time, ms. */
  async copy(dst: GPUBuffer): Promise<number> {
    const enc = this.device.createCommandEncoder();
    enc.beginComputePass({ timestampWrites: { querySet: this.#qs, endOfPassWriteIndex: 0 } }).end();
    enc.copyBufferToBuffer(this.staging, 0, dst, 0, this.bytes);
    enc.beginComputePass({ timestampWrites: { querySet: this.#qs, endOfPassWriteIndex: 1 } }).end();
    enc.resolveQuerySet(this.#qs, 0, 2, this.#resolve, 0);
    enc.copyBufferToBuffer(this.#resolve, 0, this.#read, 0, 16);
    this.device.queue.submit([enc.finish()]);
    await this.#read.mapAsync(GPUMapMode.READ);
    const t = new BigInt64Array(this.#read.getMappedRange().slice(0));
    this.#read.unmap();
    return Number(t[1]! - t[0]!) / 1e6;
  }

  destroy(): void {
    this.staging.destroy();
    this.#qs.destroy();
    this.#resolve.destroy();
    this.#read.destroy();
  }
}

/**
 * The upload by hand on raw WebGPU, as a careful user writes it: a MAP_WRITE | COPY_SRC staging
 * buffer of its own; per upload, wait for its map, fill it (getMappedRange + copy in), unmap,
 * copyBufferToBuffer, submit, map it again at once (mapAsync right after the submit, as the
 * library's staging pool re-maps a buffer once its copy is done) and wait for the submit.
 */
class RawUpload {
  readonly staging: GPUBuffer;
  #map: Promise<void> | null = null;

  constructor(
    readonly device: GPUDevice,
    readonly bytes: number,
  ) {
    this.staging = device.createBuffer({ size: bytes, usage: GPUBufferUsage.MAP_WRITE | GPUBufferUsage.COPY_SRC, mappedAtCreation: true, label: 'p2.raw.staging' });
  }

  /** src -> dst, call to completed submit; ms. */
  async upload(src: Uint8Array, dst: GPUBuffer): Promise<number> {
    const t0 = performance.now();
    if (this.#map) {
      await this.#map;
      this.#map = null;
    }
    new Uint8Array(this.staging.getMappedRange()).set(src);
    this.staging.unmap();
    const enc = this.device.createCommandEncoder();
    enc.copyBufferToBuffer(this.staging, 0, dst, 0, this.bytes);
    this.device.queue.submit([enc.finish()]);
    this.#map = this.staging.mapAsync(GPUMapMode.WRITE);
    await this.device.queue.onSubmittedWorkDone();
    return performance.now() - t0;
  }

  async destroy(): Promise<void> {
    await this.#map?.catch(() => undefined);
    this.staging.destroy();
  }
}

/**
 * P2's bound, from figures of the same run: the host's copy into mapped staging and then
 * the GPU's copy out of staging (PCIe on a discrete GPU) in series. Without pieces
 * (`uploadPieceBytes`) an upload cannot overlap the two, so it takes at least their sum.
 */
export function uploadBound(bytes: number, hostCopyMs: number, gpuCopyMs: number): { ms: number; gbps: number } {
  const ms = hostCopyMs + gpuCopyMs;
  return { ms, gbps: gbps(bytes, ms) };
}

export const uploadGroup: PerfGroup = {
  id: 'upload',
  title: 'P2: upload bandwidth (pool, pinned) vs its bound (host copy into mapped staging, then GPU copy), raw WebGPU, JS memcpy and writeBuffer',
  metrics: ['P2', 'P2.writeBuffer'],
  async run(ctx: Context, opts: PerfOptions): Promise<PerfGroupResult> {
    const p = opts.quick ? QUICK : FULL;
    const bytes = Math.min(p.bytes, ctx.limits.maxBufferSize);
    const seed = seedOf(opts);
    const progress = opts.progress ?? (() => {});
    progress(`P2: ${sizeText(bytes)} random bytes`, 0);
    // One random block; each path uploads a different window of it, so a path that moved
    // nothing cannot pass on what an earlier path left behind.
    const base = randomBytes(seed, bytes + 128);
    const srcOf = (k: number): Uint8Array<ArrayBuffer> => base.subarray(16 * k, 16 * k + bytes);
    const plain = new Uint8Array(bytes);
    plain.set(srcOf(0)); // first touch
    const dst = ctx.alloc(bytes, { label: 'p2.dst' });
    const pin = ctx.allocHost(bytes, 'upload', { label: 'p2.pinned' });
    const s = ctx.createStream({ label: 'p2', nonBlocking: true });
    // Beside the pool: the same upload the other way (a context of its own, where the runner can make
    // one): in 8 pieces (`uploadPieceBytes`: the GPU copies one out while the host copies the next in)
    // where this context uploads whole, and whole where its default is pieces (Node, see ContextOptions).
    const piecesByDefault = ctx.uploadPieceBytes > 0 && ctx.uploadPieceBytes < bytes;
    const pieceBytes = piecesByDefault ? 0 : Math.max(4096, Math.ceil(bytes / 8 / 4) * 4);
    const pc = opts.createContext ? await opts.createContext({ uploadPieceBytes: pieceBytes, label: piecesByDefault ? 'perf p2 whole' : 'perf p2 pieces' }).catch(() => null) : null;
    const pDst = pc?.alloc(bytes, { label: 'p2.pieces.dst' });
    const ps = pc?.createStream({ label: 'p2 pieces', nonBlocking: true });
    const ts = ctx.features.timestampQuery;
    const raw = new RawUpload(ctx.device, bytes);
    // The bound's first half: the host's copy into a mapped MAP_WRITE range, kept mapped.
    const hostStaging = ctx.device.createBuffer({ size: bytes, usage: GPUBufferUsage.MAP_WRITE | GPUBufferUsage.COPY_SRC, mappedAtCreation: true, label: 'p2.bound.host' });
    const hostRange = new Uint8Array(hostStaging.getMappedRange());
    const copier = ts ? new RawCopyTimer(ctx.device, bytes, srcOf(6)) : null;
    const checks: Check[] = [];
    const stagingBefore = ctx.memory.staging;
    let stagingAfterWarmup = 0;
    let stagingAtLast = 0;
    try {
      pin.bytes.set(srcOf(0)); // first touch of the mapped ranges
      hostRange.set(srcOf(0));
      /** A timed JS memcpy of window `k` into `into`. */
      const memcpyInto =
        (into: Uint8Array, k: number, what: string) =>
        async ({ last }: { last: boolean }): Promise<number> => {
          const t0 = performance.now();
          into.set(srcOf(k));
          const ms = performance.now() - t0;
          if (last) checks.push(checkBytes(what, into, srcOf(k)));
          return ms;
        };
      const variants = {
        memcpy: memcpyInto(plain, 1, 'memcpy'),
        memcpyMapped: memcpyInto(hostRange, 7, 'memcpy into a mapped staging range'),
        pool: async ({ last, warmup }: { last: boolean; warmup: boolean }) => {
          const t0 = performance.now();
          s.upload(srcOf(2), dst);
          await s.synchronize();
          const ms = performance.now() - t0;
          if (warmup) stagingAfterWarmup = ctx.memory.staging;
          if (last) stagingAtLast = ctx.memory.staging; // before the check's read-back adds its own staging
          if (last) checks.push(checkBytes('pool upload (stream.upload(array))', await readBack(ctx, dst, bytes), srcOf(2)));
          return ms;
        },
        pieces: async ({ last }: { last: boolean }) => {
          if (!pc || !ps || !pDst) return Number.NaN;
          const t0 = performance.now();
          ps.upload(srcOf(8), pDst);
          await ps.synchronize();
          const ms = performance.now() - t0;
          if (last) checks.push(checkBytes(piecesByDefault ? 'pool upload whole (uploadPieceBytes: 0)' : `pool upload in pieces of ${sizeText(pieceBytes)} (uploadPieceBytes)`, await readBack(pc, pDst, bytes), srcOf(8)));
          return ms;
        },
        // Right after the pool in every round: the pair the library / raw ratio is taken over.
        raw: async ({ last }: { last: boolean }) => {
          const ms = await raw.upload(srcOf(5), dst.buffer);
          if (last) checks.push(checkBytes('raw WebGPU upload (map, fill, unmap, copyBufferToBuffer, submit, wait)', await readBack(ctx, dst, bytes), srcOf(5)));
          return ms;
        },
        // The bound's second half: the GPU's copy of the same bytes out of staging, GPU time. After
        // the pool's run, so its check's read-back staging lands after the pool's last staging count.
        gpuCopy: async ({ last }: { last: boolean }) => {
          if (!copier) return 0;
          const ms = await copier.copy(dst.buffer);
          if (last) checks.push(checkBytes('GPU copy out of staging (timestamps)', await readBack(ctx, dst, bytes), srcOf(6)));
          return ms;
        },
        pinned: async ({ last }: { last: boolean }) => {
          await pin.ready();
          const t0 = performance.now();
          pin.bytes.set(srcOf(3));
          s.upload(pin, dst);
          await s.synchronize();
          const ms = performance.now() - t0;
          if (last) checks.push(checkBytes('pinned upload (allocHost + fill + stream.upload)', await readBack(ctx, dst, bytes), srcOf(3)));
          return ms;
        },
        writeBuffer: async ({ last }: { last: boolean }) => {
          const t0 = performance.now();
          ctx.queue.writeBuffer(dst.buffer, 0, srcOf(4));
          ctx.queue.submit([]);
          await ctx.queue.onSubmittedWorkDone();
          const ms = performance.now() - t0;
          if (last) checks.push(checkBytes('queue.writeBuffer', await readBack(ctx, dst, bytes), srcOf(4)));
          return ms;
        },
      };
      const samples = await interleaved(variants, p.repeats, 2);
      const stagingGrowth = stagingAtLast - stagingAfterWarmup;
      const g = (k: keyof typeof samples): number => gbps(bytes, median(samples[k]));
      const memcpy = g('memcpy');
      const pool = g('pool');
      const pinned = g('pinned');
      const wb = g('writeBuffer');
      const pieces = pc ? g('pieces') : Number.NaN;
      const rawG = g('raw');
      const tMemcpy = median(samples.memcpy);
      const tHostCopy = median(samples.memcpyMapped);
      const tPool = median(samples.pool);
      const tRaw = median(samples.raw);
      const tCopy = copier ? median(samples.gpuCopy) : Number.NaN;
      const poolOverRaw = pairedRatio(samples.pool, samples.raw);
      const poolOverRawInterval = pairedRatioInterval(samples.pool, samples.raw);
      // The bound: the host's copy into mapped staging, then the GPU's copy, in series (uploadBound).
      const noBound = !copier
        ? "the device has no 'timestamp-query': the GPU's copy cannot be timed apart from the submit and its completion"
        : !(tCopy > 0)
          ? `GPU timestamps gave no positive copy time (${num(tCopy)} ms)`
          : undefined;
      const bound = noBound ? null : uploadBound(bytes, tHostCopy, tCopy);
      const ofBound = bound ? bound.ms / tPool : null;
      // In pieces the two copies overlap, so the pool can pass the series bound: also give the
      // overlapped one (the host's copy, then the last piece's GPU copy).
      const nPieces = piecesByDefault ? Math.min(8, Math.ceil(bytes / ctx.uploadPieceBytes)) : 1;
      const overlappedMs = bound && piecesByDefault ? tHostCopy + tCopy / nPieces : null;
      const old = pool / memcpy;
      const oldText = `pool / memcpy ${ratioText(old, TARGET_P2_MEMCPY)} ${old >= TARGET_P2_MEMCPY ? '>=' : '<'} ${TARGET_P2_MEMCPY.toFixed(2)}`;
      const verdict = boundRule({ ofBound, fallback: { meets: old >= TARGET_P2_MEMCPY, text: oldText }, libOverRaw: poolOverRaw, libOverRawInterval: poolOverRawInterval });
      const row: BoundedRow = {
        label: '',
        measured: `pool ${num(pool)} GB/s (${num(tPool)} ms)`,
        bound: bound
          ? `${num(bound.gbps)} GB/s = ${sizeText(bytes)} / (host copy into mapped staging ${num(tHostCopy)} ms + GPU copy out of staging ${num(tCopy)} ms, GPU timestamps, ${num(gbps(bytes, tCopy))} GB/s)` +
            (overlappedMs ? `; in ${nPieces} pieces the copies overlap: ${num(overlappedMs / tPool)} of their overlapped bound (host copy + one piece's GPU copy, ${num(overlappedMs)} ms)` : '')
          : `no bound: ${noBound}`,
        ofBound: finiteOrNull(ofBound, 6),
        raw: `raw WebGPU upload ${num(rawG)} GB/s (${num(tRaw)} ms${bound ? `, ${num(bound.ms / tRaw)} of the bound` : ''})`,
        libOverRaw: finiteOrNull(poolOverRaw, 6),
        libOverRawInterval: poolOverRawInterval,
        pass: verdict.pass,
        verdict: verdict.verdict,
      };
      const figures = {
        seed,
        bytes,
        memcpyGBps: round(memcpy),
        poolGBps: round(pool),
        pinnedGBps: round(pinned),
        writeBufferGBps: round(wb),
        rawGBps: round(rawG),
        memcpyMs: round(tMemcpy),
        hostCopyMs: round(tHostCopy),
        hostCopyGBps: round(gbps(bytes, tHostCopy)),
        poolMs: round(tPool),
        rawMs: round(tRaw),
        ...(bound ? { gpuCopyMs: round(tCopy), gpuCopyGBps: round(gbps(bytes, tCopy)), boundMs: round(bound.ms), boundGBps: round(bound.gbps), ofBound: round(ofBound!) } : { noBound: noBound! }),
        ...(overlappedMs ? { overlappedBoundMs: round(overlappedMs), ofOverlappedBound: round(overlappedMs / tPool) } : {}),
        poolOverRawPaired: round(poolOverRaw),
        poolPieceBytes: ctx.uploadPieceBytes,
        ...(pc ? (piecesByDefault ? { wholeGBps: round(pieces), poolOverWhole: round(pool / pieces) } : { piecesGBps: round(pieces), piecesOverPool: round(pieces / pool) }) : {}),
        poolOverMemcpy: round(pool / memcpy),
        pinnedOverMemcpy: round(pinned / memcpy),
        poolOverWriteBuffer: round(pool / wb),
        pinnedOverWriteBuffer: round(pinned / wb),
        stagingBytesBefore: stagingBefore,
        stagingBytesGrownDuringMeasuredRuns: stagingGrowth,
      };
      const common = `${sizeText(bytes)} end to end (call -> completed submit): pool ${num(pool)} GB/s${piecesByDefault ? ` (in pieces of ${sizeText(ctx.uploadPieceBytes)}, this context's default${pc ? `; whole: ${num(pieces)} GB/s` : ''})` : pc ? ` (in 8 pieces: ${num(pieces)} GB/s)` : ''}, pinned ${num(pinned)} GB/s, raw WebGPU ${num(rawG)} GB/s, JS memcpy ${num(memcpy)} GB/s (into mapped staging ${num(gbps(bytes, tHostCopy))} GB/s), writeBuffer ${num(wb)} GB/s` +
        (stagingGrowth > 0 ? `; the staging pool grew by ${sizeText(stagingGrowth)} during measured runs (a buffer was not back in the pool in time)` : '; pool reused its staging buffer every run');
      return {
        metrics: [
          metric(ctx, {
            id: 'P2',
            name: 'upload through the pinned pool / its bound (host copy into mapped staging, then the GPU copy out of staging)',
            value: bound ? ofBound! : old,
            unit: bound ? 'of bound' : 'x memcpy',
            target: bound ? `>= ${BOUND_FRACTION.toFixed(2)} of bound, <= ${RAW_SLACK.toFixed(2)}x raw` : `>= ${TARGET_P2_MEMCPY.toFixed(2)} x memcpy (no bound), <= ${RAW_SLACK.toFixed(2)}x raw`,
            meets: verdict.pass,
            detail: `${common}; pinned buffer path ${num(pinned / memcpy)}x memcpy; old target: ${oldText}`,
            figures,
            checks,
            seed,
            bounded: { rule: boundRuleText(), rows: [row] },
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
      await ctx.queue.onSubmittedWorkDone().catch(() => undefined);
      s.destroy();
      dst.destroy();
      pin.destroy();
      await raw.destroy();
      copier?.destroy();
      hostStaging.destroy();
      if (pc) {
        await ps!.synchronize().catch(() => undefined);
        pc.destroy();
      }
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
