/**
 * Checks of a stream call's arguments that need no stream: a transfer's byte range, a launch's
 * workgroup counts. Each throws InvalidArgumentError at the call, naming the option.
 */
import { InvalidArgumentError, type ErrorSite } from './errors.js';
import { expectAligned, expectInteger, expectKnownKeys, expectObject, showValue } from './validate.js';

/** Byte offsets and size of a transfer. Every value must be a multiple of 4. */
export interface CopyOptions {
  /** @default 0 */
  srcOffset?: number;
  /** @default 0 */
  dstOffset?: number;
  /** @default the rest of the source (src size - srcOffset); a source larger than the destination's room is refused */
  size?: number;
}

const COPY_KEYS = ['srcOffset', 'dstOffset', 'size'] as const;

/** A transfer's offsets and size, checked against both sides (multiples of 4, in bounds). */
export function copyRange(options: CopyOptions | undefined, srcSize: number, dstSize: number, srcLabel: string, dstLabel: string, site: ErrorSite): { srcOffset: number; dstOffset: number; size: number } {
  if (options === undefined) {
    if (srcSize > dstSize) cutShort(srcSize, dstSize, 0, 0, srcLabel, dstLabel, site);
    if (srcSize % 4 !== 0) unaligned(srcSize, 0, srcLabel, site);
    return { srcOffset: 0, dstOffset: 0, size: srcSize };
  }
  const o = expectObject('options', options, site);
  expectKnownKeys('options', o, COPY_KEYS, site);
  const srcOffset = expectAligned('srcOffset', expectInteger('srcOffset', o.srcOffset ?? 0, 0, Number.MAX_SAFE_INTEGER, site), 4, site);
  const dstOffset = expectAligned('dstOffset', expectInteger('dstOffset', o.dstOffset ?? 0, 0, Number.MAX_SAFE_INTEGER, site), 4, site);
  if (srcOffset > srcSize) throw new InvalidArgumentError(`srcOffset ${srcOffset} is past the end of source '${srcLabel}' (${srcSize} bytes)`, site);
  if (dstOffset > dstSize) throw new InvalidArgumentError(`dstOffset ${dstOffset} is past the end of destination '${dstLabel}' (${dstSize} bytes)`, site);
  if (o.size === undefined && srcSize - srcOffset > dstSize - dstOffset) cutShort(srcSize, dstSize, srcOffset, dstOffset, srcLabel, dstLabel, site);
  if (o.size === undefined && (srcSize - srcOffset) % 4 !== 0) unaligned(srcSize, srcOffset, srcLabel, site);
  const size = expectAligned('size', expectInteger('size', o.size ?? srcSize - srcOffset, 0, Number.MAX_SAFE_INTEGER, site), 4, site);
  if (srcOffset + size > srcSize) throw new InvalidArgumentError(`range [${srcOffset}, ${srcOffset + size}) is out of bounds of source '${srcLabel}' (${srcSize} bytes)`, site);
  if (dstOffset + size > dstSize) throw new InvalidArgumentError(`range [${dstOffset}, ${dstOffset + size}) is out of bounds of destination '${dstLabel}' (${dstSize} bytes)`, site);
  return { srcOffset, dstOffset, size };
}

/** A transfer without `size` whose source holds more than its destination takes: refused, as PyTorch's `copy_` refuses mismatched sizes, rather than cut short silently. */
function cutShort(srcSize: number, dstSize: number, srcOffset: number, dstOffset: number, srcLabel: string, dstLabel: string, site: ErrorSite): never {
  const src = srcSize - srcOffset;
  const dst = dstSize - dstOffset;
  const at = (o: number): string => (o ? ` from offset ${o}` : '');
  throw new InvalidArgumentError(`source '${srcLabel}'${at(srcOffset)} (${src} bytes) is larger than destination '${dstLabel}'${at(dstOffset)} (${dst} bytes): ${src - dst} bytes would be left out; pass \`{ size }\` to move part of it`, site);
}

/** A transfer without `size` of a source whose bytes (from `srcOffset`) are not whole 4-byte words. */
function unaligned(srcSize: number, srcOffset: number, srcLabel: string, site: ErrorSite): never {
  throw new InvalidArgumentError(`source '${srcLabel}' has ${srcSize - srcOffset} bytes${srcOffset ? ` from offset ${srcOffset}` : ''}, not a multiple of 4: WebGPU copies whole 4-byte words; pad it, or pass \`{ size }\` (a multiple of 4)`, site);
}

/** Workgroup counts [x, y, z] from a number or [x, y?, z?], each at most `max`. */
export function workgroupCounts(w: unknown, max: number, site: ErrorSite): [number, number, number] {
  const arr = typeof w === 'number' ? [w] : Array.isArray(w) ? w : null;
  if (!arr || arr.length < 1 || arr.length > 3) throw new InvalidArgumentError(`Expected \`workgroups\` to be a number or [x, y?, z?], got ${showValue(w)}`, site);
  // As CUDA refuses an empty grid (cudaErrorInvalidConfiguration); WebGPU would run nothing, and Dawn warns.
  if (arr.includes(0)) throw new InvalidArgumentError(`\`workgroups\` ${showValue(w)} has a count of 0: a launch of no workgroups runs nothing (CUDA refuses an empty grid too); skip the launch when there is no work`, site);
  // x is required (a hole or undefined is no count); y and z default to 1.
  return [expectInteger('workgroups[0]', arr[0], 1, max, site), expectInteger('workgroups[1]', arr[1] ?? 1, 1, max, site), expectInteger('workgroups[2]', arr[2] ?? 1, 1, max, site)];
}
