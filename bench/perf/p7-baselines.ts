/**
 * What P7's uploadFrom is measured against, none of it using the library: raw reads of the file
 * into plain memory, the same loads hand-written in WebGPU, and raw reads while the GPU copies
 * staging out (what host memory leaves the reads when a staged upload's copies share it).
 */
import type { RandomAccessSource } from 'webgpu-streams';
import { readAt } from '../scenarios/common';

const MiB = 1024 * 1024;

/**
 * Reads [at, at + size) of `src` into plain memory: `parallel` readers, each taking the next 2 MiB
 * of the range into its own 2 MiB array until the range is read (the best a reader pool does: the
 * arrays stay in the CPU's caches), or, given `whole` (`size` bytes, touched), each 2 MiB into its
 * own place in it, as a loader that keeps what it read; given `ring` (mapped staging ranges of
 * equal size), into the ring's ranges in turn, as a staged upload reads.
 */
export async function rawRead(src: RandomAccessSource, at: number, size: number, parallel: number, whole?: Uint8Array, ring?: readonly Uint8Array[]): Promise<void> {
  const piece = ring?.[0]?.length ?? 0;
  // Parts of 2 MiB (of a staging range where those are smaller), so a part never spans two ranges.
  const chunk = ring ? Math.min(2 * MiB, piece) : 2 * MiB;
  let next = 0;
  while (readerArrays.length < parallel) readerArrays.push(new Uint8Array(2 * MiB));
  const into = (r: number, p: number, n: number): Uint8Array => {
    if (whole) return whole.subarray(p, p + n);
    if (!ring) return readerArrays[r]!.subarray(0, n);
    const o = p % piece;
    return ring[Math.floor(p / piece) % ring.length]!.subarray(o, o + n);
  };
  const reader = async (r: number): Promise<void> => {
    for (;;) {
      const p = next;
      next += chunk;
      if (p >= size) return;
      const n = Math.min(chunk, size - p);
      await readAt(src, into(r, p, n), at + p);
    }
  };
  await Promise.all(Array.from({ length: parallel }, (_, r) => reader(r)));
}

/** The readers' arrays, kept across calls: new ones per call would leave the timed runs after them garbage to collect. */
const readerArrays: Uint8Array[] = [];

/**
 * The same loads in hand-written WebGPU, without the library: `parallel` reads of 2 MiB in flight
 * into MAP_WRITE staging buffers of a piece each (a piece's parts at once), each unmapped and
 * copied into its slot once read, and mapped again for another piece once its copy completed.
 * Reading into staging while the GPU copies out of it is what a staged upload costs on this host.
 * `staging` must be mapped on entry; it is mapped again on return.
 */
export async function rawStagedLoads(device: GPUDevice, src: RandomAccessSource, at: number, layerBytes: number, layers: number, slots: GPUBuffer[], staging: GPUBuffer[], parallel: number): Promise<void> {
  const piece = staging[0]!.size;
  const free = [...staging];
  const waiting: ((b: GPUBuffer) => void)[] = [];
  const give = (b: GPUBuffer): void => void (waiting.length ? waiting.shift()!(b) : free.push(b));
  const take = (): Promise<GPUBuffer> => (free.length ? Promise.resolve(free.pop()!) : new Promise((r) => waiting.push(r)));
  const perLayer = Math.ceil(layerBytes / piece);
  const pieces = perLayer * layers;
  const part = 2 * MiB;
  const copies: Promise<void>[] = [];
  let next = 0;
  const reader = async (): Promise<void> => {
    for (let k = next++; k < pieces; k = next++) {
      const layer = Math.floor(k / perLayer);
      const off = (k % perLayer) * piece;
      const n = Math.min(piece, layerBytes - off);
      const buf = await take();
      const view = new Uint8Array(buf.getMappedRange(0, n));
      const reads: Promise<void>[] = [];
      for (let a = 0; a < n; a += part) {
        reads.push(readAt(src, view.subarray(a, Math.min(n, a + part)), at + layer * layerBytes + off + a));
      }
      await Promise.all(reads);
      buf.unmap();
      const enc = device.createCommandEncoder();
      enc.copyBufferToBuffer(buf, 0, slots[layer % 2]!, off, n);
      device.queue.submit([enc.finish()]);
      copies.push(buf.mapAsync(2 /* GPUMapMode.WRITE */).then(() => give(buf)));
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.round((parallel * part) / piece)) }, reader));
  await Promise.all(copies);
}

/** Reads under copy traffic: the reads' rate, and the copies' over the same time. */
export interface ReadsUnderCopies {
  readGBs: number;
  copyGBs: number;
}

/**
 * Raw reads of [at, at + size) (`readers` readers, plain memory, as `rawRead`) while the GPU copies
 * `staging` (unmapped MAP_WRITE | COPY_SRC buffers: host memory) into `dst` at `rateGBs` (copies
 * submitted as they fall due, up to 3 submits queued; Infinity: flat out). A staged upload at
 * throughput T reads the file at T while the GPU copies at T: where the reads fall below T under
 * copies at T, no staged upload reaches T on this host.
 */
export async function readsUnderCopies(device: GPUDevice, src: RandomAccessSource, at: number, size: number, readers: number, staging: GPUBuffer[], dst: GPUBuffer, rateGBs: number): Promise<ReadsUnderCopies> {
  const piece = staging[0]!.size;
  const slotsInDst = Math.max(1, Math.floor(dst.size / piece));
  const queued: Promise<undefined>[] = [];
  let reading = true;
  let submitted = 0;
  let j = 0;
  const t0 = performance.now();
  const pump = (async (): Promise<void> => {
    while (reading) {
      const due = rateGBs * 1e6 * (performance.now() - t0);
      if (submitted + piece <= due && queued.length < 3) {
        const enc = device.createCommandEncoder();
        for (let n = 0; n < staging.length && submitted + piece <= due; n++, j++, submitted += piece) {
          enc.copyBufferToBuffer(staging[j % staging.length]!, 0, dst, (j % slotsInDst) * piece, piece);
        }
        device.queue.submit([enc.finish()]);
        queued.push(device.queue.onSubmittedWorkDone());
      } else if (queued.length >= 3) await queued.shift();
      else await new Promise<void>((r) => setTimeout(r, 0));
    }
  })();
  await rawRead(src, at, size, readers);
  const readMs = performance.now() - t0;
  reading = false;
  await pump;
  // The copies' rate: every byte submitted while reading, over the time until the last completed.
  await Promise.all(queued);
  const copyMs = performance.now() - t0;
  return { readGBs: size / readMs / 1e6, copyGBs: submitted / copyMs / 1e6 };
}

/**
 * ms of `read` into `staging` mapped for writing (their ranges, in order), with no GPU work:
 * what reading into staging costs on this host, where its memory may sit across PCIe.
 */
export async function readIntoStaging(staging: GPUBuffer[], read: (ring: Uint8Array[]) => Promise<void>): Promise<number> {
  await Promise.all(staging.map((b) => b.mapAsync(2 /* GPUMapMode.WRITE */)));
  const ring = staging.map((b) => new Uint8Array(b.getMappedRange()));
  try {
    const t0 = performance.now();
    await read(ring);
    return performance.now() - t0;
  } finally {
    for (const b of staging) b.unmap();
  }
}
