/**
 * `stream.encode(fn, { reads, writes })`: the app's own commands at a point of a stream. What it
 * declares the commands touch (buffers, or byte ranges of them) keeps them alive until the op
 * completes and lets the stream sanitizer check them; WebGPU validates the commands themselves.
 */
import { InvalidArgumentError, type ErrorSite } from './errors.js';
import { DeviceBuffer, type DeviceResource } from './memory.js';
import { PinnedBuffer } from './pinned.js';
import { asTexture, DeviceTexture, textureRegion, WHOLE, type TextureCopyOptions } from './texture.js';
import type { ByteRange } from './op.js';
import { expectInteger, showValue } from './validate.js';

/** A buffer the commands touch, whole or in part; or a texture, whole or a region (a DeviceTexture is kept alive). */
export type EncodeAccess =
  | DeviceBuffer
  | GPUBuffer
  | DeviceTexture
  | GPUTexture
  | { buffer: DeviceBuffer | GPUBuffer; offset?: number; size?: number }
  | { texture: DeviceTexture | GPUTexture; origin?: readonly number[]; size?: readonly number[]; mipLevel?: number };

export interface EncodeOptions {
  /** Buffers (or byte ranges) the commands read. */
  reads?: readonly EncodeAccess[];
  /** Buffers (or byte ranges) the commands write. */
  writes?: readonly EncodeAccess[];
  /** Names the op in errors and traces. */
  label?: string;
}

type Unwrap = (b: unknown, what: string, site: ErrorSite) => { buffer: GPUBuffer; label: string; size: number };

/** Command buffers given to an `encode` already: a submit takes each once. */
const taken = new WeakSet<object>();

/** `list` checked to be command buffers (finished encoders, not given to an `encode` before: a submit takes each once). */
export function commandBuffers(list: readonly unknown[], site: ErrorSite): GPUCommandBuffer[] {
  const type = (globalThis as { GPUCommandBuffer?: abstract new () => unknown }).GPUCommandBuffer;
  Array.from(list).forEach((x, i) => {
    const ok = type ? x instanceof type : typeof x === 'object' && x !== null && typeof (x as GPUCommandEncoder).finish !== 'function' && !('size' in x);
    if (!ok) throw new InvalidArgumentError(`Expected \`commands[${i}]\` to be a GPUCommandBuffer (encoder.finish()), got ${showValue(x)}`, site);
    if (taken.has(x as object) || list.indexOf(x) !== i) throw new InvalidArgumentError(`\`commands[${i}]\` was given to stream.encode() before: WebGPU submits a command buffer once; record the commands again`, site);
  });
  for (const x of list) taken.add(x as object);
  return list.slice() as GPUCommandBuffer[];
}

/** `fn` records synchronously: an async function would record after its op's encoder is finished. */
export function checkSyncRecorder(fn: unknown, site: ErrorSite): void {
  const ctor = (fn as { constructor?: { name?: string } }).constructor?.name;
  if (ctor === 'AsyncFunction' || ctor === 'AsyncGeneratorFunction') {
    throw new InvalidArgumentError('`commands` is an async function: it runs while its op is encoded, and what it records after an `await` lands in a finished encoder. Await first, then call stream.encode() with a function that records synchronously', site);
  }
}

/** The byte ranges `list` (option `what`) declares; DeviceBuffers among them go into `tracked`. */
export function declaredRanges(list: unknown, what: 'reads' | 'writes', unwrap: Unwrap, site: ErrorSite, tracked: DeviceResource[], device: GPUDevice): ByteRange[] {
  if (list === undefined) return [];
  if (!Array.isArray(list)) throw new InvalidArgumentError(`Expected \`${what}\` to be an array of buffers or { buffer, offset?, size? }, got ${showValue(list)}`, site);
  return list.flatMap((x: unknown, i): ByteRange[] => {
    // A texture, whole; or `{ texture, origin?, size?, mipLevel? }`: the rows of that region (see TextureRegion).
    const region = typeof x === 'object' && x !== null && 'texture' in x && !(x instanceof DeviceTexture) ? (x as TextureCopyOptions & { texture: unknown }) : null;
    const t = asTexture(region ? region.texture : x);
    if (t) {
      const own = region ? region.texture : x;
      if (own instanceof DeviceTexture) {
        own.checkAlive(site);
        if (own.device !== device) throw new InvalidArgumentError(`\`${what}[${i}]\`: texture '${own.label}' was allocated on another GPUDevice; a stream uses its own context's device`, site);
        if (!tracked.includes(own)) tracked.push(own);
      }
      const rows = region ? textureRegion(t, `${what}[${i}]`, region, false, site) : null;
      const label = t.label || 'GPUTexture';
      return rows ? rows.rowRanges().map(([start, end]) => ({ buffer: t, label, start, end, texture: true })) : [{ buffer: t, label, start: 0, end: WHOLE, texture: true }];
    }
    if (region) throw new InvalidArgumentError(`Expected \`${what}[${i}].texture\` to be a DeviceTexture or GPUTexture, got ${showValue(region.texture)}`, site);
    if (x instanceof PinnedBuffer) throw new InvalidArgumentError(`\`${what}[${i}]\` is pinned buffer '${x.label}': your commands cannot use it (it is the host's between ops); copy it with stream.upload() or stream.download()`, site);
    // `{ buffer, offset?, size? }`; anything else is the buffer itself (a DeviceBuffer's own `buffer` is its GPUBuffer).
    const range = typeof x === 'object' && x !== null && !(x instanceof DeviceBuffer) && 'buffer' in x;
    const r = (range ? x : { buffer: x }) as { buffer: unknown; offset?: unknown; size?: unknown };
    const b = unwrap(r.buffer, `${what}[${i}]${range ? '.buffer' : ''}`, site);
    const start = expectInteger(`${what}[${i}].offset`, r.offset ?? 0, 0, b.size, site);
    const size = expectInteger(`${what}[${i}].size`, r.size ?? b.size - start, 0, b.size - start, site);
    if (r.buffer instanceof DeviceBuffer && !tracked.includes(r.buffer)) tracked.push(r.buffer);
    return [{ buffer: b.buffer, label: b.label, start, end: start + size }];
  });
}
