/**
 * Textures: `DeviceTexture` (`ctx.allocTexture`), texel sizes of the formats transfers move, and
 * `TextureRegion`, the texels one texture transfer copies with the layout of its buffer side.
 * WebGPU wants a buffer's rows 256-byte aligned when a copy takes more than one row: a pageable
 * transfer stages its rows aligned, a pinned or device buffer with other rows copies row by row.
 */
import { calledAt, InvalidArgumentError, type ErrorSite } from './errors.js';
import { TextureUsage } from './gpu-constants.js';
import { DeviceResource, type MemoryStats } from './memory.js';
import { expectInteger, showValue } from './validate.js';

/** A whole texture's rows, as the sanitizer's range (see TextureRegion.rowsStart). */
export const WHOLE = Number.MAX_SAFE_INTEGER;

/** Bytes of one texel of the uncompressed color formats a texture transfer can move. */
const TEXEL_BYTES: Readonly<Record<string, number>> = {
  r8unorm: 1, r8snorm: 1, r8uint: 1, r8sint: 1,
  r16uint: 2, r16sint: 2, r16float: 2, rg8unorm: 2, rg8snorm: 2, rg8uint: 2, rg8sint: 2,
  r32uint: 4, r32sint: 4, r32float: 4, rg16uint: 4, rg16sint: 4, rg16float: 4, rgba8unorm: 4, 'rgba8unorm-srgb': 4, rgba8snorm: 4,
  rgba8uint: 4, rgba8sint: 4, bgra8unorm: 4, 'bgra8unorm-srgb': 4, rgb10a2uint: 4, rgb10a2unorm: 4, rg11b10ufloat: 4, rgb9e5ufloat: 4,
  rg32uint: 8, rg32sint: 8, rg32float: 8, rgba16uint: 8, rgba16sint: 8, rgba16float: 8,
  rgba32uint: 16, rgba32sint: 16, rgba32float: 16,
};
/** Formats every device can bind as storage textures (WebGPU core). */
const STORAGE_FORMATS = new Set(['rgba8unorm', 'rgba8snorm', 'rgba8uint', 'rgba8sint', 'rgba16uint', 'rgba16sint', 'rgba16float', 'r32uint', 'r32sint', 'r32float', 'rg32uint', 'rg32sint', 'rg32float', 'rgba32uint', 'rgba32sint', 'rgba32float']);

/** Bytes per texel of `format` for memory accounting: exact for color and depth formats, per block for compressed ones. */
function accountedTexelBytes(format: string): number {
  const exact = TEXEL_BYTES[format];
  if (exact !== undefined) return exact;
  if (format === 'stencil8') return 1;
  if (format === 'depth16unorm') return 2;
  if (format === 'depth32float-stencil8') return 8;
  if (format.startsWith('depth')) return 4;
  const astc = /^astc-(\d+)x(\d+)/.exec(format);
  if (astc) return 16 / (Number(astc[1]) * Number(astc[2]));
  return /^(bc1|bc4|etc2-rgb8|eac-r11)/.test(format) ? 0.5 : 1; // 8- or 16-byte 4x4 blocks
}

/** The sample type a kernel's texture binding needs for `format`: 'float' binds both float kinds. */
export function sampleKind(format: string): 'float' | 'unfilterable-float' | 'uint' | 'sint' | 'depth' {
  if (format.endsWith('uint') || format === 'stencil8') return 'uint';
  if (format.endsWith('sint')) return 'sint';
  if (format.startsWith('depth')) return 'depth';
  return /^r(g|gba)?32float$/.test(format) ? 'unfilterable-float' : 'float';
}

/** How to lay out a texture region's rows in a buffer for one copy command: `bytesPerRow` 256-aligned. */
export function textureLayout(format: GPUTextureFormat, size: readonly number[]): { bytesPerRow: number; rowsPerImage: number; byteLength: number } {
  const site = calledAt('textureLayout', textureLayout);
  const texel = typeof format === 'string' && Object.hasOwn(TEXEL_BYTES, format) ? TEXEL_BYTES[format] : undefined;
  if (texel === undefined) throw new InvalidArgumentError(`format ${showValue(format)} has no texel size here (compressed, depth or unknown); transfers move uncompressed color formats`, site);
  const [w, h, d] = extent(size, 'size', site);
  const bytesPerRow = Math.ceil((w * texel) / 256) * 256;
  return { bytesPerRow, rowsPerImage: h, byteLength: bytesPerRow * h * d };
}

export interface TextureOptions {
  /** Texels: [width, height?, depthOrArrayLayers?]. */
  size: readonly number[];
  format: GPUTextureFormat;
  /** @default TEXTURE_BINDING | COPY_SRC | COPY_DST, and STORAGE_BINDING where the format allows it */
  usage?: number;
  /** @default 1 */
  mipLevelCount?: number;
  /** @default '2d' */
  dimension?: GPUTextureDimension;
  label?: string;
}

/** A texture in device memory, made by `ctx.allocTexture`; counted in `ctx.memory`, `destroy()` deferred while streams use it. */
export class DeviceTexture extends DeviceResource {
  readonly texture: GPUTexture;
  readonly format: GPUTextureFormat;
  readonly width: number;
  readonly height: number;
  readonly depthOrArrayLayers: number;
  readonly mipLevelCount: number;
  readonly dimension: GPUTextureDimension;
  readonly usage: number;

  /** @internal use `ctx.allocTexture` */
  constructor(device: GPUDevice, stats: MemoryStats, o: Required<TextureOptions>, site: ErrorSite) {
    const [w, h, d] = o.size as [number, number, number];
    let bytes = 0;
    const [bw, bh] = blockOf(o.format); // a compressed level takes whole blocks, however small
    for (let l = 0; l < o.mipLevelCount; l++) bytes += Math.ceil(Math.max(1, w >> l) / bw) * bw * Math.ceil(Math.max(1, h >> l) / bh) * bh * (o.dimension === '3d' ? Math.max(1, d >> l) : d);
    let texture: GPUTexture;
    device.pushErrorScope('out-of-memory');
    device.pushErrorScope('validation');
    try {
      texture = device.createTexture({ size: [w, h, d], format: o.format, usage: o.usage, mipLevelCount: o.mipLevelCount, dimension: o.dimension, label: o.label });
    } catch (e) {
      void device.popErrorScope().catch(() => undefined);
      void device.popErrorScope().catch(() => undefined);
      throw new InvalidArgumentError(`WebGPU refused the texture: ${e instanceof Error ? e.message : String(e)}`, { ...site, cause: e }); // a value its binding cannot convert
    }
    const validation = device.popErrorScope();
    const outOfMemory = device.popErrorScope();
    super(device, stats, Math.ceil(bytes * accountedTexelBytes(o.format)), o.label);
    // Until WebGPU has judged it, the ops using it wait (one it refused fails only them).
    this.judge(outOfMemory, validation);
    this.context = site.context ?? '';
    [this.width, this.height, this.depthOrArrayLayers] = [w, h, d];
    this.format = o.format;
    this.mipLevelCount = o.mipLevelCount;
    this.dimension = o.dimension;
    this.usage = o.usage;
    this.texture = texture;
    this.track(this.texture);
  }

  /** @internal */
  get noun(): 'texture' {
    return 'texture';
  }
  protected destroyNow(): void {
    this.texture.destroy();
  }
}

/** A format's texel block, [width, height]: [1, 1] but for compressed formats. */
export function blockOf(format: string): [number, number] {
  const astc = /^astc-(\d+)x(\d+)/.exec(format);
  if (astc) return [Number(astc[1]), Number(astc[2])];
  return /^(bc|etc2|eac)/.test(format) ? [4, 4] : [1, 1];
}

/** A depth or stencil format: WebGPU copies these only whole, one subresource at a time. */
function depthOrStencil(format: string): boolean {
  return format.startsWith('depth') || format === 'stencil8';
}

/** The features a texture format needs beyond core WebGPU (any one of them), [] for none, undefined for no such format. */
function formatFeatures(format: string): string[] | undefined {
  if (TEXEL_BYTES[format] !== undefined || /^(stencil8|depth16unorm|depth24plus|depth24plus-stencil8|depth32float)$/.test(format)) return [];
  if (format === 'depth32float-stencil8') return [format];
  if (/^(r|rg|rgba)16(unorm|snorm)$/.test(format)) return ['texture-formats-tier1', `${format.endsWith('unorm') ? 'unorm' : 'snorm'}16-texture-formats`];
  if (/^bc[1-7]h?-rg?b?a?-(unorm|snorm|ufloat|float)(-srgb)?$/.test(format)) return ['texture-compression-bc'];
  if (/^(etc2|eac)-[a-z0-9]+(-srgb)?$/.test(format)) return ['texture-compression-etc2'];
  if (/^astc-\d+x\d+-unorm(-srgb)?$/.test(format)) return ['texture-compression-astc'];
  return undefined;
}

/** `ctx.allocTexture`'s options checked against `device` (its limits and features), defaults filled in. */
export function textureOptions(options: TextureOptions, device: GPUDevice, label: string, site: ErrorSite): Required<TextureOptions> {
  const limits = device.limits;
  const format = options.format;
  if (typeof format !== 'string') throw new InvalidArgumentError(`Expected \`format\` to be a GPUTextureFormat such as 'rgba8unorm', got ${showValue(format)}`, site);
  const features = formatFeatures(format);
  if (features === undefined) throw new InvalidArgumentError(`Expected \`format\` to be a GPUTextureFormat such as 'rgba8unorm', got ${showValue(format)}`, site);
  if (features.length && !features.some((f) => device.features.has(f))) throw new InvalidArgumentError(`format '${format}' needs the device feature '${features.join("' or '")}', which this device was not created with`, site);
  const dimension = options.dimension ?? '2d';
  if (dimension !== '1d' && dimension !== '2d' && dimension !== '3d') throw new InvalidArgumentError(`Expected \`dimension\` to be '1d', '2d' or '3d', got ${showValue(dimension)}`, site);
  const size = extent(options.size, 'size', site);
  if (dimension === '1d' && (size[1] !== 1 || size[2] !== 1)) throw new InvalidArgumentError(`a '1d' texture is one row: \`size\` [${size.join(', ')}] has a height or depth above 1`, site);
  const block = blockOf(format), compressed = block[0] > 1;
  if (compressed && (size[0] % block[0] !== 0 || size[1] % block[1] !== 0)) throw new InvalidArgumentError(`'${format}' is stored in ${block[0]}x${block[1]} blocks: \`size\` [${size.join(', ')}] is not a whole number of them`, site);
  if (dimension === '1d' && (compressed || depthOrStencil(format))) throw new InvalidArgumentError(`a '1d' texture cannot have format '${format}' (compressed, depth or stencil)`, site);
  if (dimension === '3d' && depthOrStencil(format)) throw new InvalidArgumentError(`a '3d' texture cannot have the depth or stencil format '${format}'`, site);
  const sliced = format.startsWith('bc') ? 'texture-compression-bc-sliced-3d' : format.startsWith('astc') ? 'texture-compression-astc-sliced-3d' : '';
  if (dimension === '3d' && compressed && !(sliced && device.features.has(sliced))) {
    throw new InvalidArgumentError(`a '3d' texture of the compressed format '${format}' needs ${sliced ? `the device feature '${sliced}', which this device was not created with` : 'a format WebGPU stores in 3D (BC or ASTC)'}`, site);
  }
  const max = dimension === '1d' ? limits.maxTextureDimension1D : dimension === '2d' ? limits.maxTextureDimension2D : limits.maxTextureDimension3D;
  size.forEach((n, i) => {
    const cap = i === 2 && dimension === '2d' ? limits.maxTextureArrayLayers : max;
    if (n > cap) throw new InvalidArgumentError(`\`size[${i}]\` ${n} is above the device's ${i === 2 && dimension === '2d' ? 'maxTextureArrayLayers' : `maxTextureDimension${dimension.toUpperCase()}`} (${cap})`, site);
  });
  // WebGPU gives a '1d' texture one mip level.
  const mips = dimension === '1d' ? 1 : Math.floor(Math.log2(Math.max(size[0], size[1], dimension === '3d' ? size[2] : 1))) + 1;
  const mipLevelCount = expectInteger('mipLevelCount', options.mipLevelCount ?? 1, 1, mips, site);
  const storage = STORAGE_FORMATS.has(format) ? TextureUsage.STORAGE_BINDING : 0;
  const usage = options.usage === undefined ? TextureUsage.TEXTURE_BINDING | TextureUsage.COPY_SRC | TextureUsage.COPY_DST | storage : expectInteger('usage', options.usage, 1, 0x1f, site);
  // Storage on other formats needs a feature (bgra8unorm-storage, the format tiers): refused here only where none is on.
  const extra = format === 'bgra8unorm' ? ['bgra8unorm-storage'] : ['texture-formats-tier1', 'texture-formats-tier2'];
  if (usage & TextureUsage.STORAGE_BINDING && !storage && !extra.some((f) => device.features.has(f))) {
    throw new InvalidArgumentError(`format '${format}' cannot be a storage texture on this device (STORAGE_BINDING usage); the formats every device stores to: ${[...STORAGE_FORMATS].join(', ')}`, site);
  }
  return { size, format, usage, mipLevelCount, dimension, label };
}

/** Texture region options of a transfer (`stream.upload/download/copy` with a texture). */
export interface TextureCopyOptions {
  /** First texel: [x, y?, z?]. @default [0, 0, 0] */
  origin?: readonly number[];
  /** Texels: [width, height?, depth?]. @default the mip level's extent from `origin` */
  size?: readonly number[];
  /** @default 0 */
  mipLevel?: number;
  /** Byte offset of the first texel on the buffer or host side. @default 0 */
  offset?: number;
  /** Bytes from one row to the next on the buffer or host side. @default tightly packed (width x texel bytes) */
  bytesPerRow?: number;
  /** Rows from one image to the next on the buffer or host side (3D and array textures). @default the height */
  rowsPerImage?: number;
}

/** What a texture copy touches of its texture, and the layout of its buffer side. */
export class TextureRegion {
  /** Rows [rowsStart, rowsEnd) of the texture in mip-major, image-major order: the sanitizer's range. */
  readonly rowsStart: number;
  readonly rowsEnd: number;
  constructor(
    readonly texture: GPUTexture,
    readonly label: string,
    readonly mipLevel: number,
    readonly origin: readonly [number, number, number],
    readonly size: readonly [number, number, number],
    /** Bytes of one row of texels (0 for formats without a texel size). */
    readonly rowBytes: number,
    /** The buffer side's row and image strides (set by the transfer). */
    public bytesPerRow: number,
    public rowsPerImage: number,
  ) {
    const [h, d] = [texture.height, texture.depthOrArrayLayers];
    const row = (z: number, y: number): number => (mipLevel * d + z) * h + y;
    this.rowsStart = row(origin[2], origin[1]);
    this.rowsEnd = row(origin[2] + size[2] - 1, origin[1] + size[1]);
    this.imageRows = h;
  }

  /** Rows from one image to the next in the sanitizer's row space. */
  readonly imageRows: number;

  /** The region's rows as ranges [start, end), one per image unless they are whole images (contiguous). */
  rowRanges(): [number, number][] {
    const [, h, d] = this.size;
    if (d === 1 || h === this.imageRows) return [[this.rowsStart, this.rowsEnd]];
    return Array.from({ length: d }, (_, z): [number, number] => [this.rowsStart + z * this.imageRows, this.rowsStart + z * this.imageRows + h]);
  }

  /** Bytes the buffer side spans, from its offset. */
  get bytes(): number {
    const [, h, d] = this.size;
    return (d - 1) * this.rowsPerImage * this.bytesPerRow + (h - 1) * this.bytesPerRow + this.rowBytes;
  }
}

/** A GPUTexture, or a DeviceTexture's: anything else is null. */
export function asTexture(x: unknown): GPUTexture | null {
  if (x instanceof DeviceTexture) return x.texture;
  return typeof x === 'object' && x !== null && typeof (x as GPUTexture).createView === 'function' && 'format' in x ? (x as GPUTexture) : null;
}

/**
 * The region of texture `t` (argument `what`) that `o` names, checked: mip level, origin and size
 * inside the level, and (`buffered`: a buffer or host side) a format with a texel size.
 */
export function textureRegion(t: GPUTexture, what: string, o: TextureCopyOptions, buffered: boolean, site: ErrorSite): TextureRegion {
  const label = t.label || 'GPUTexture';
  const mipLevel = expectInteger('mipLevel', o.mipLevel ?? 0, 0, t.mipLevelCount - 1, site);
  // A compressed level's extent in whole blocks (WebGPU's physical size: a 3x3 level of 4x4 blocks copies as 4x4).
  const [bw, bh] = blockOf(t.format), up = (n: number, b: number): number => Math.ceil(n / b) * b;
  const level = [up(Math.max(1, t.width >> mipLevel), bw), up(Math.max(1, t.height >> mipLevel), bh), t.dimension === '3d' ? Math.max(1, t.depthOrArrayLayers >> mipLevel) : t.depthOrArrayLayers];
  const origin = o.origin === undefined ? ([0, 0, 0] as [number, number, number]) : extent(o.origin, 'origin', site, 0);
  const size = o.size === undefined ? (level.map((n, i) => n - origin[i]!) as [number, number, number]) : extent(o.size, 'size', site);
  for (let i = 0; i < 3; i++) {
    if (origin[i]! >= level[i]! || origin[i]! + size[i]! > level[i]!) {
      throw new InvalidArgumentError(`${what} texture '${label}': origin ${origin.join(',')} + size ${size.join('x')} is outside mip level ${mipLevel} (${level.join('x')})`, site);
    }
  }
  const texel = TEXEL_BYTES[t.format];
  if (buffered && t.sampleCount > 1) throw new InvalidArgumentError(`${what} texture '${label}' is multisampled (sampleCount ${t.sampleCount}); WebGPU copies those only to other textures`, site);
  if (buffered && texel === undefined) throw new InvalidArgumentError(`${what} texture '${label}' has format '${t.format}', which buffer transfers do not move (compressed, depth or stencil); use stream.encode with your own copy`, site);
  if (origin[0] % bw || origin[1] % bh || size[0] % bw || size[1] % bh) {
    throw new InvalidArgumentError(`${what} texture '${label}' ('${t.format}') is copied in ${bw}x${bh} blocks: origin ${origin.join(',')} and size ${size.join('x')} must be whole blocks`, site);
  }
  // A subresource is one mip level of one array layer: its whole x and y.
  const whole = origin[0] === 0 && origin[1] === 0 && size[0] === level[0] && size[1] === level[1];
  if (!buffered && !whole && (depthOrStencil(t.format) || t.sampleCount > 1)) {
    throw new InvalidArgumentError(`${what} texture '${label}' (${t.sampleCount > 1 ? `sampleCount ${t.sampleCount}` : `'${t.format}'`}) is copied only whole: mip level ${mipLevel} is ${level[0]}x${level[1]} per layer, the copy names origin ${origin.join(',')} and size ${size.join('x')}`, site);
  }
  const rowBytes = (texel ?? 0) * size[0];
  return new TextureRegion(t, label, mipLevel, origin, size, rowBytes, rowBytes, size[1]);
}

/**
 * Sets `r`'s buffer side from `o` (`bytesPerRow`, `rowsPerImage`, `offset`) against a buffer or
 * host array of `bytes` named `label`; returns the offset.
 */
export function bufferSide(r: TextureRegion, o: TextureCopyOptions, bytes: number, label: string, site: ErrorSite): number {
  const texel = r.rowBytes / r.size[0];
  r.bytesPerRow = expectInteger('bytesPerRow', o.bytesPerRow ?? r.rowBytes, r.rowBytes, Number.MAX_SAFE_INTEGER, site);
  if (r.bytesPerRow % texel !== 0) throw new InvalidArgumentError(`\`bytesPerRow\` ${r.bytesPerRow} is not a multiple of the ${texel}-byte texels of '${r.label}'`, site);
  r.rowsPerImage = expectInteger('rowsPerImage', o.rowsPerImage ?? r.size[1], r.size[1], Number.MAX_SAFE_INTEGER, site);
  const offset = expectInteger('offset', o.offset ?? 0, 0, Number.MAX_SAFE_INTEGER, site);
  if (offset % texel !== 0) throw new InvalidArgumentError(`\`offset\` ${offset} is not a multiple of the ${texel}-byte texels of '${r.label}'`, site);
  if (offset + r.bytes > bytes) {
    throw new InvalidArgumentError(`'${label}' has ${bytes} bytes; ${r.size.join('x')} texels of '${r.label}' at bytesPerRow ${r.bytesPerRow} need ${r.bytes} from offset ${offset}`, site);
  }
  return offset;
}

/** `r` with its buffer side laid out for staging: rows 256-byte aligned (one copy command). */
export function staged(r: TextureRegion): TextureRegion {
  const aligned = Math.ceil(r.rowBytes / 256) * 256;
  return new TextureRegion(r.texture, r.label, r.mipLevel, r.origin, r.size, r.rowBytes, aligned, r.size[1]);
}

/** Copies `r`'s rows between two layouts: `from` (bytesPerRow, rowsPerImage) at `src` into `to` at `dst`. */
export function copyRows(r: TextureRegion, src: Uint8Array, from: { bytesPerRow: number; rowsPerImage: number }, dst: Uint8Array, to: { bytesPerRow: number; rowsPerImage: number }): void {
  const [, h, d] = r.size;
  for (let z = 0; z < d; z++) {
    for (let y = 0; y < h; y++) {
      const s = (z * from.rowsPerImage + y) * from.bytesPerRow, t = (z * to.rowsPerImage + y) * to.bytesPerRow;
      dst.set(src.subarray(s, s + r.rowBytes), t);
    }
  }
}

/** Encodes a copy with a texture on one side or both; row by row where the buffer's rows are not 256-aligned. */
export function encodeTextureCopy(enc: GPUCommandEncoder, src: GPUBuffer | TextureRegion, srcOffset: number, dst: GPUBuffer | TextureRegion, dstOffset: number): void {
  const texel = (r: TextureRegion, z = 0, y = 0): GPUTexelCopyTextureInfo => ({ texture: r.texture, mipLevel: r.mipLevel, origin: [r.origin[0], r.origin[1] + y, r.origin[2] + z] });
  if (src instanceof TextureRegion && dst instanceof TextureRegion) return enc.copyTextureToTexture(texel(src), texel(dst), src.size);
  const r = (src instanceof TextureRegion ? src : dst) as TextureRegion;
  const buffer = (src instanceof TextureRegion ? dst : src) as GPUBuffer, offset = src instanceof TextureRegion ? dstOffset : srcOffset;
  const [w, h, d] = r.size;
  const one = (layout: GPUTexelCopyBufferInfo, z: number, y: number, extent: GPUExtent3DStrict): void =>
    src instanceof TextureRegion ? enc.copyTextureToBuffer(texel(r, z, y), layout, extent) : enc.copyBufferToTexture(layout, texel(r, z, y), extent);
  if (h * d === 1) return one({ buffer, offset }, 0, 0, r.size);
  if (r.bytesPerRow % 256 === 0) return one({ buffer, offset, bytesPerRow: r.bytesPerRow, rowsPerImage: r.rowsPerImage }, 0, 0, r.size);
  for (let z = 0; z < d; z++) for (let y = 0; y < h; y++) one({ buffer, offset: offset + (z * r.rowsPerImage + y) * r.bytesPerRow }, z, y, [w, 1, 1]);
}

/** [a, b?, c?] as three integers (missing ones 1, or `fill`), each at least `min`. */
function extent(v: unknown, what: string, site: ErrorSite, fill = 1): [number, number, number] {
  const min = fill === 0 ? 0 : 1;
  if (!Array.isArray(v) || v.length < 1 || v.length > 3) throw new InvalidArgumentError(`Expected \`${what}\` to be [x, y?, z?] in texels, got ${showValue(v)}`, site);
  const max = Number.MAX_SAFE_INTEGER;
  return [expectInteger(`${what}[0]`, v[0], min, max, site), expectInteger(`${what}[1]`, v[1] ?? fill, min, max, site), expectInteger(`${what}[2]`, v[2] ?? fill, min, max, site)];
}
