/**
 * Peer copies (`stream.copyPeer`, CUDA's `cudaMemcpyPeerAsync`): bytes of a buffer on one device
 * into a buffer on another. WebGPU devices share no memory, so the bytes go through the host: the
 * source's context reads them back (PeerHost.readBack), piece by piece, straight into the
 * destination context's pinned staging (one host copy), and `uploadFrom` copies each piece out
 * while the next is read back. Both PCIe directions and the host copy overlap.
 */
import { DependencyError, InvalidArgumentError, StreamError, type ErrorSite } from './errors.js';
import { BufferUsage } from './gpu-constants.js';
import { DeviceBuffer } from './memory.js';
import type { RandomAccessSource } from './upload-from.js';
import { showValue } from './validate.js';

/** Read-backs in flight: one whole staging piece at a time (fewer, larger read-backs move more per op than several smaller ones). */
const PARALLEL = 1;

/** `src` as a source of bytes another device's stream reads (only once the op runs: earlier work may write it). */
export function peerSource(src: unknown, device: GPUDevice, site: ErrorSite): RandomAccessSource {
  if (!(src instanceof DeviceBuffer)) throw new InvalidArgumentError(`Expected \`src\` to be a DeviceBuffer of another device's context (its ctx.alloc), got ${showValue(src)}`, site);
  src.checkAlive(site);
  const peer = src.peer;
  if (src.device === device) throw new InvalidArgumentError(`src '${src.label}' is on this stream's device; copy it with stream.copy()`, site);
  if (!peer) throw new InvalidArgumentError(`src '${src.label}' belongs to no context`, site);
  peer.checkAlive(site, src.label);
  if (!(src.usage & BufferUsage.COPY_SRC)) throw new InvalidArgumentError(`src '${src.label}' lacks COPY_SRC usage`, site);
  const buffer = src.buffer;
  return {
    size: src.size,
    label: `${src.label}' of context '${peer.label}`,
    parallel: PARALLEL,
    readAhead: false,
    // The raw GPUBuffer: a destroy() after this call is deferred until the op is done (the op keeps `src`).
    // Once WebGPU has made it: a source it had no memory for fails the copy as OutOfMemoryError.
    read: (into, position) => src.allocated().then(() => peer.readBack(buffer, into, position)).then(() => into.byteLength),
  };
}

/** A context's internal stream for peer read-backs, as `peerReadBack` uses it (a Stream). */
interface ReadBackStream<E> {
  download(src: GPUBuffer, dst: Uint8Array, options: { srcOffset: number; size: number }): number;
  record(event: E): number;
  synchronize(): Promise<void>;
}

/** A context's PeerHost.readBack: bytes of `src` into `into` on the internal stream `stream()`, awaited through an event of `event()`. */
export function peerReadBack<E extends { synchronize(): Promise<void> }>(stream: () => ReadBackStream<E>, event: () => E) {
  return async (src: GPUBuffer, into: Uint8Array, offset: number): Promise<void> => {
    const s = stream();
    s.download(src, into, { srcOffset: offset, size: into.byteLength });
    const done = event();
    s.record(done);
    try {
      await done.synchronize();
    } catch (e) {
      // This read's failure alone: reported to the internal stream so later reads start clean (a
      // failed op fails its stream's later ops until a synchronize reports it), its cause thrown.
      await s.synchronize().catch(() => undefined);
      throw e instanceof DependencyError && e.cause instanceof StreamError ? e.cause : e;
    }
  };
}
