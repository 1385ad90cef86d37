/**
 * A minimal PNG decoder for tests (node:zlib only): 8-bit, non-interlaced grayscale, gray+alpha,
 * RGB and RGBA, which is what Chromium's screenshots are. Enough to tell a rendered image from a
 * blank one.
 */
import { inflateSync } from 'node:zlib';

export interface DecodedPng {
  width: number;
  height: number;
  /** Bytes per pixel: 1 (gray), 2 (gray + alpha), 3 (RGB), 4 (RGBA). */
  channels: number;
  /** Unfiltered pixel rows, `width * channels` bytes each, top to bottom. */
  pixels: Uint8Array;
}

const SIGNATURE = [137, 80, 78, 71, 13, 10, 26, 10];
const CHANNELS: Record<number, number> = { 0: 1, 2: 3, 4: 2, 6: 4 };

/** Decode a PNG; throws on anything it does not support (palette, 16-bit, interlaced) or a bad file. */
export function decodePng(data: Uint8Array): DecodedPng {
  const buf = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  if (buf.length < 8 || SIGNATURE.some((b, i) => buf[i] !== b)) throw new Error('not a PNG (bad signature)');
  let pos = 8;
  let width = 0;
  let height = 0;
  let channels = 0;
  const idat: Buffer[] = [];
  let sawEnd = false;
  while (pos + 8 <= buf.length) {
    const len = buf.readUInt32BE(pos);
    const type = buf.toString('latin1', pos + 4, pos + 8);
    const body = buf.subarray(pos + 8, pos + 8 + len);
    if (body.length !== len) throw new Error(`truncated ${type} chunk`);
    pos += 12 + len;
    if (type === 'IHDR') {
      width = body.readUInt32BE(0);
      height = body.readUInt32BE(4);
      const depth = body[8]!;
      const colorType = body[9]!;
      const interlace = body[12]!;
      if (depth !== 8) throw new Error(`unsupported bit depth ${depth}`);
      if (interlace !== 0) throw new Error('interlaced PNGs are not supported');
      const c = CHANNELS[colorType];
      if (!c) throw new Error(`unsupported color type ${colorType}`);
      channels = c;
    } else if (type === 'IDAT') {
      idat.push(body);
    } else if (type === 'IEND') {
      sawEnd = true;
      break;
    }
  }
  if (!channels) throw new Error('no IHDR chunk');
  if (!sawEnd) throw new Error('no IEND chunk (truncated file)');
  const raw = inflateSync(Buffer.concat(idat));
  const stride = width * channels;
  if (raw.length < height * (stride + 1)) throw new Error(`image data too short: ${raw.length} < ${height * (stride + 1)}`);
  const pixels = new Uint8Array(height * stride);
  for (let y = 0; y < height; y++) {
    const filter = raw[y * (stride + 1)]!;
    const src = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    const row = pixels.subarray(y * stride, (y + 1) * stride);
    const prev = y > 0 ? pixels.subarray((y - 1) * stride, y * stride) : new Uint8Array(stride);
    for (let x = 0; x < stride; x++) {
      const a = x >= channels ? row[x - channels]! : 0;
      const b = prev[x]!;
      const c = x >= channels ? prev[x - channels]! : 0;
      let v = src[x]!;
      switch (filter) {
        case 0:
          break;
        case 1:
          v += a;
          break;
        case 2:
          v += b;
          break;
        case 3:
          v += (a + b) >> 1;
          break;
        case 4: {
          const p = a + b - c;
          const pa = Math.abs(p - a);
          const pb = Math.abs(p - b);
          const pc = Math.abs(p - c);
          v += pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
          break;
        }
        default:
          throw new Error(`bad filter type ${filter} on row ${y}`);
      }
      row[x] = v & 0xff;
    }
  }
  return { width, height, channels, pixels };
}

/** How many distinct pixel values the image has, counting up to `limit`. */
export function distinctColors(png: DecodedPng, limit = 1 << 16): number {
  const seen = new Set<number>();
  const { pixels, channels } = png;
  for (let i = 0; i < pixels.length && seen.size < limit; i += channels) {
    let key = 0;
    for (let c = 0; c < channels; c++) key = key * 256 + pixels[i + c]!;
    seen.add(key);
  }
  return seen.size;
}
