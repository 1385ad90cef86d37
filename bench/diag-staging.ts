/**
 * Staging for uploads (a diagnostic, not a metric): what a pageable upload's host copy and GPU copy
 * cost by how the staging is cut, on Dawn.
 * - Fill speed: `--mib` of random bytes copied into 1, 2, 4, 8 and 32 mapped MAP_WRITE buffers
 *   (raw WebGPU, the buffers reused round after round as a pool reuses them), with getMappedRange
 *   and unmap timed apart, next to the same copy into 1 and N plain JS arrays: whether the host
 *   copies into smaller mappings slower, and whether that is about mapped memory at all. Minor page
 *   faults per round say whether a re-map costs faults.
 * - The library's pageable upload end to end (call to completed submit), whole and in pieces
 *   (`uploadPieceBytes`: 2, 4 and 8 pieces), each in its own context, interleaved.
 * - The staging pool's limit: an upload above `ctx.staging.maxPooledBytes` gets a new staging
 *   buffer every call; timed with the default limit and with it raised.
 * Every upload is read back and checked against the source. Exits 1 on a mismatch.
 *
 *   node dist/cli/diag-staging.mjs [--mib 256] [--repeats 7] [--out DIR]
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { chooseVulkanDriver } from './vulkan';
import { createNodeContext, type Context } from '../src/node';
import { BufferUsage, MapMode } from '../src/index';
import { median, randomBytes } from './perf/common';
import { checkBytes } from './scenarios/common';
import { randomSeed } from './reference';

const MiB = 1024 * 1024;
const now = (): number => performance.now();
const faults = (): number => process.resourceUsage().minorPageFault;

function fail(msg: string): never {
  console.error(`MISMATCH: ${msg}`);
  process.exit(1);
}

/** Host copy of `src` into `n` mapped buffers of `src.length / n` bytes, per round: ms of each part. */
async function fillSpeed(ctx: Context, src: Uint8Array, n: number, repeats: number): Promise<Record<string, number>> {
  const d = ctx.device;
  const piece = src.length / n;
  const bufs = Array.from({ length: n }, (_, i) => d.createBuffer({ size: piece, usage: BufferUsage.MAP_WRITE | BufferUsage.COPY_SRC, mappedAtCreation: true, label: `diag.fill ${i}/${n}` }));
  const dev = d.createBuffer({ size: src.length, usage: BufferUsage.COPY_DST, label: 'diag.fill dst' });
  const plain = Array.from({ length: n }, () => new Uint8Array(piece).fill(1));
  const rows: { range: number; set: number; unmap: number; plain: number; faults: number }[] = [];
  for (let r = 0; r < repeats + 1; r++) {
    let range = 0, set = 0, unmap = 0;
    const f0 = faults();
    for (let k = 0; k < n; k++) {
      const a = now();
      const v = new Uint8Array(bufs[k]!.getMappedRange());
      const b = now();
      v.set(src.subarray(k * piece, (k + 1) * piece));
      const c = now();
      bufs[k]!.unmap();
      unmap += now() - c;
      range += b - a;
      set += c - b;
    }
    const f = faults() - f0;
    const p0 = now();
    for (let k = 0; k < n; k++) plain[k]!.set(src.subarray(k * piece, (k + 1) * piece));
    const plainMs = now() - p0;
    // The GPU copies out of every buffer, as after an upload; then they are mapped again.
    const e = d.createCommandEncoder();
    for (let k = 0; k < n; k++) e.copyBufferToBuffer(bufs[k]!, 0, dev, k * piece, piece);
    d.queue.submit([e.finish()]);
    await Promise.all(bufs.map((b) => b.mapAsync(MapMode.WRITE)));
    if (r > 0) rows.push({ range, set, unmap, plain: plainMs, faults: f });
  }
  for (let k = 0; k < n; k++) {
    const c = checkBytes(`plain copy ${k}`, plain[k]!, src.subarray(k * piece, (k + 1) * piece));
    if (!c.ok) fail(c.mismatch!);
  }
  for (const b of bufs) {
    b.unmap();
    b.destroy();
  }
  dev.destroy();
  const med = (k: keyof (typeof rows)[number]): number => median(rows.map((x) => x[k]));
  return { buffers: n, pieceMiB: piece / MiB, getMappedRangeMs: med('range'), fillMs: med('set'), unmapMs: med('unmap'), fillGBps: src.length / 1e6 / med('set'), plainGBps: src.length / 1e6 / med('plain'), minorFaults: med('faults') };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      mib: { type: 'string', default: '256' },
      repeats: { type: 'string', default: '7' },
      seed: { type: 'string' },
      out: { type: 'string' },
    },
  });
  const bytes = Number(values.mib) * MiB;
  const repeats = Number(values.repeats);
  const seed = values.seed ? Number(values.seed) : randomSeed();
  console.log(`vulkan: ${chooseVulkanDriver()}`);
  const src = randomBytes(seed, bytes);
  const one = await createNodeContext({ label: 'diag-staging' });
  const info = one.adapterInfo;
  console.log(`device: ${info.vendor} ${info.device} ${info.description}; ${values.mib} MiB, seed ${seed}`);

  // ---- fill speed by how the staging is cut
  const fill: Record<string, number>[] = [];
  for (const n of [1, 2, 4, 8, 32]) if (bytes / n >= 4096 && (bytes / n) % 4 === 0) fill.push(await fillSpeed(one, src, n, repeats));
  console.log(`\nhost copy of ${values.mib} MiB into N mapped MAP_WRITE buffers (reused, mapped again after a GPU copy), median of ${repeats}; plain = the same copy into N JS arrays`);
  console.table(fill.map((r) => ({ buffers: r.buffers, 'piece MiB': +r.pieceMiB!.toFixed(3), 'fill GB/s': +r.fillGBps!.toFixed(2), 'plain GB/s': +r.plainGBps!.toFixed(2), 'getMappedRange ms': +r.getMappedRangeMs!.toFixed(3), 'unmap ms': +r.unmapMs!.toFixed(3), 'minor faults': r.minorFaults })));
  one.destroy();

  // ---- the library's pageable upload, whole and in pieces, each in its own context
  const variants: { name: string; pieces: number; pool?: number }[] = [
    { name: 'whole', pieces: 1 },
    { name: '2 pieces', pieces: 2 },
    { name: '4 pieces', pieces: 4 },
    { name: '8 pieces', pieces: 8 },
  ];
  const poolLimit = 512 * MiB; // StagingPool's default maxPooledBytes
  if (bytes > poolLimit) variants.push({ name: `whole, pool limit raised to ${values.mib} MiB`, pieces: 1, pool: bytes });
  const ctxs: { v: (typeof variants)[number]; ctx: Context; dst: ReturnType<Context['alloc']>; s: ReturnType<Context['createStream']>; ms: number[]; call: number[] }[] = [];
  for (const v of variants) {
    const piece = Math.ceil(bytes / v.pieces / 4) * 4;
    const ctx = await createNodeContext({ label: `diag-staging ${v.name}`, uploadPieceBytes: v.pieces > 1 ? Math.max(4096, piece) : 0 });
    if (v.pool) ctx.staging.maxPooledBytes = v.pool;
    ctxs.push({ v, ctx, dst: ctx.alloc(bytes, { label: 'diag.upload dst' }), s: ctx.createStream({ label: 'upload', nonBlocking: true }), ms: [], call: [] });
  }
  for (let r = 0; r < repeats + 2; r++) {
    for (const c of ctxs) {
      const t0 = now();
      c.s.upload(src, c.dst);
      const t1 = now();
      await c.s.synchronize();
      const t2 = now();
      if (r >= 2) {
        c.call.push(t1 - t0);
        c.ms.push(t2 - t0);
      }
    }
  }
  const stagingMiB = ctxs.map((c) => c.ctx.memory.staging / MiB); // before the checks' read-backs add theirs
  for (const c of ctxs) {
    const out = new Uint8Array(bytes);
    c.s.download(c.dst, out);
    await c.s.synchronize();
    const k = checkBytes(`upload, ${c.v.name}`, out, src);
    if (!k.ok) fail(`${k.mismatch} (seed ${seed})`);
  }
  console.log(`\nlibrary stream.upload(array) of ${values.mib} MiB end to end (call -> completed submit), median of ${repeats}, interleaved; staging pool limit ${poolLimit / MiB} MiB unless raised`);
  console.table(ctxs.map((c, i) => ({ upload: c.v.name, 'call ms': +median(c.call).toFixed(2), 'end to end ms': +median(c.ms).toFixed(2), 'GB/s': +(bytes / 1e6 / median(c.ms)).toFixed(2), 'staging MiB': stagingMiB[i] })));
  console.log(`verified: every upload read back equal to the source (${values.mib} MiB)`);
  const result = {
    seed,
    bytes,
    fill,
    uploads: ctxs.map((c) => ({ name: c.v.name, pieces: c.v.pieces, poolLimit: c.v.pool ?? poolLimit, callMs: c.call, ms: c.ms })),
  };
  if (values.out) writeFileSync(join(values.out, 'diag-staging.json'), JSON.stringify(result, null, 1));
  for (const c of ctxs) c.ctx.destroy();
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
