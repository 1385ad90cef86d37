/**
 * Texture transfers on a stream (`stream.upload`, `download` and `copy` with a texture on one side
 * or both): their arguments checked at the call, and the op payload they enqueue. A pageable
 * upload's rows are staged 256-byte aligned (one copy command); a pageable download's come back
 * aligned and go into the caller's array in its own layout.
 */
import { InvalidArgumentError, type ErrorSite } from './errors.js';
import { BufferUsage, TextureUsage } from './gpu-constants.js';
import type { DeviceResource } from './memory.js';
import { NONE, type CopyPayload, type DownloadPayload, type UploadPayload } from './op.js';
import type { PinnedBuffer } from './pinned.js';
import { asTexture, bufferSide, copyRows, DeviceTexture, staged, textureRegion, type TextureCopyOptions, type TextureRegion } from './texture.js';
import type { StagingPool } from './transfer.js';
import { checkAttached, expectKnownKeys, expectObject } from './validate.js';

/** A texture transfer's options; `dstOrigin` and `dstMipLevel` name the destination of a texture-to-texture copy. */
export interface TextureTransferOptions extends TextureCopyOptions {
  /** @default [0, 0, 0] */
  dstOrigin?: readonly number[];
  /** @default 0 */
  dstMipLevel?: number;
}

const KEYS = ['origin', 'size', 'mipLevel', 'offset', 'bytesPerRow', 'rowsPerImage', 'dstOrigin', 'dstMipLevel'] as const;

/** A texture argument: the GPUTexture and, for a DeviceTexture, the resource the op keeps alive. */
export interface TextureArg {
  texture: GPUTexture;
  tracked: DeviceResource[];
}

/** `x` (argument `what`) as a texture of `device` with `usage`, checked; null when `x` is no texture. */
export function textureArg(x: unknown, what: string, usage: number, device: GPUDevice, site: ErrorSite): TextureArg | null {
  const texture = asTexture(x);
  if (!texture) return null;
  if (x instanceof DeviceTexture) {
    x.checkAlive(site);
    if (x.device !== device) throw new InvalidArgumentError(`\`${what}\` ('${x.label}') was allocated on another GPUDevice; a stream uses its own context's device`, site);
  }
  if (!(texture.usage & usage)) throw new InvalidArgumentError(`${what} '${texture.label || 'GPUTexture'}' lacks ${usage === TextureUsage.COPY_SRC ? 'COPY_SRC' : 'COPY_DST'} usage`, site);
  return { texture, tracked: x instanceof DeviceTexture ? [x] : NONE };
}

/** A texture transfer's options checked for unknown keys (values are checked where used). */
export function textureOptions(options: unknown, site: ErrorSite): TextureTransferOptions {
  if (options === undefined) return {};
  const o = expectObject('options', options, site);
  expectKnownKeys('options', o, KEYS, site);
  return o as TextureTransferOptions;
}

/** Refuses `dstOrigin` / `dstMipLevel` where one side is a buffer or host memory (the texture's region is `origin` / `mipLevel`). */
function noDst(o: TextureTransferOptions, site: ErrorSite): void {
  for (const k of ['dstOrigin', 'dstMipLevel'] as const) {
    if (o[k] !== undefined) throw new InvalidArgumentError(`\`${k}\` names the destination of a texture-to-texture copy; with a buffer or host memory on one side the texture's region is \`${k === 'dstOrigin' ? 'origin' : 'mipLevel'}\``, site);
  }
}

/** Texture to texture (`copyTextureToTexture`): same format (or its sRGB twin), not the same mip level. */
export function textureToTexture(src: GPUTexture, dst: GPUTexture, o: TextureTransferOptions, site: ErrorSite): CopyPayload {
  const a = textureRegion(src, 'src', o, false, site);
  const b = textureRegion(dst, 'dst', { origin: o.dstOrigin, mipLevel: o.dstMipLevel, size: a.size }, false, site);
  if (src.format.replace('-srgb', '') !== dst.format.replace('-srgb', '')) {
    throw new InvalidArgumentError(`src '${a.label}' is '${src.format}' and dst '${b.label}' is '${dst.format}'; a texture copy keeps the format`, site);
  }
  if (src.sampleCount !== dst.sampleCount) throw new InvalidArgumentError(`src '${a.label}' has sampleCount ${src.sampleCount} and dst '${b.label}' ${dst.sampleCount}`, site);
  if (src === dst && a.mipLevel === b.mipLevel) throw new InvalidArgumentError(`src and dst are mip level ${a.mipLevel} of the same texture '${a.label}'; copy through a second texture`, site);
  return { kind: 'copy', src: a, srcOffset: 0, dst: b, dstOffset: 0, size: 0 };
}

/** Buffer to texture or texture to buffer (`toTexture`), the buffer's rows as `o` lays them out. */
export function bufferTexture(buffer: { buffer: GPUBuffer; label: string; size: number; usage: number }, t: GPUTexture, toTexture: boolean, o: TextureTransferOptions, site: ErrorSite): CopyPayload {
  noDst(o, site);
  const [what, usage] = toTexture ? ['src', 'COPY_SRC'] : ['dst', 'COPY_DST'];
  if (!(buffer.usage & (toTexture ? BufferUsage.COPY_SRC : BufferUsage.COPY_DST))) throw new InvalidArgumentError(`${what} '${buffer.label}' lacks ${usage} usage`, site);
  const r = textureRegion(t, toTexture ? 'dst' : 'src', o, true, site);
  const offset = bufferSide(r, o, buffer.size, buffer.label, site);
  return toTexture
    ? { kind: 'copy', src: buffer.buffer, srcOffset: offset, dst: r, dstOffset: 0, size: r.bytes }
    : { kind: 'copy', src: r, srcOffset: 0, dst: buffer.buffer, dstOffset: offset, size: r.bytes };
}

/** Pinned or pageable memory to a texture; pageable rows are staged now, 256-byte aligned. */
export function uploadTexture(src: PinnedBuffer | ArrayBufferView, t: GPUTexture, o: TextureTransferOptions, staging: StagingPool, site: ErrorSite): UploadPayload {
  noDst(o, site);
  const r = textureRegion(t, 'dst', o, true, site);
  if (!ArrayBuffer.isView(src)) {
    const offset = bufferSide(r, o, src.size, src.label, site);
    return { kind: 'upload', pinned: src, staging: null, srcOffset: offset, dst: r, dstOffset: 0, size: r.bytes };
  }
  checkAttached(src, 'src', site);
  const offset = bufferSide(r, o, src.byteLength, 'src', site);
  const s = fitsStaging(staged(r), staging.maxBufferSize, site), from = new Uint8Array(src.buffer, src.byteOffset + offset, r.bytes);
  const slice = staging.stageWith(s.bytes, site, (into) => copyRows(r, from, r, into, s));
  return { kind: 'upload', pinned: null, staging: slice, srcOffset: 0, dst: s, dstOffset: 0, size: s.bytes };
}

/** A texture to pinned or pageable memory; pageable rows come back aligned and are laid out as `o` says on completion. */
export function downloadTexture(t: GPUTexture, dst: PinnedBuffer | ArrayBufferView, o: TextureTransferOptions, maxStaging: number, site: ErrorSite): DownloadPayload {
  noDst(o, site);
  const r = textureRegion(t, 'src', o, true, site);
  if (!ArrayBuffer.isView(dst)) {
    const offset = bufferSide(r, o, dst.size, dst.label, site);
    return { kind: 'download', src: r, srcOffset: 0, pinned: dst, view: null, readback: null, dstOffset: offset, size: r.bytes };
  }
  checkAttached(dst, 'dst', site);
  const offset = bufferSide(r, o, dst.byteLength, 'dst', site);
  const s = fitsStaging(staged(r), maxStaging, site), view = new Uint8Array(dst.buffer, dst.byteOffset + offset, r.bytes);
  // Mapped read-back ranges are multiples of 4 bytes.
  return { kind: 'download', src: s, srcOffset: 0, pinned: null, view, readback: null, dstOffset: 0, size: Math.ceil(s.bytes / 4) * 4, unpack: { region: s, to: r, bytes: r.bytes } };
}

/** `s` (a region's rows, 256-byte aligned in staging), or a throw when no buffer may be that large. */
function fitsStaging(s: TextureRegion, maxBufferSize: number, site: ErrorSite): TextureRegion {
  if (s.bytes > maxBufferSize) throw new InvalidArgumentError(`the region's rows, 256-byte aligned in staging, take ${s.bytes} bytes, more than a buffer may hold (maxBufferSize ${maxBufferSize}): move it in parts (origin, size)`, site);
  return s;
}
