// The texture example's image and its CPU reference, pure functions of a seed: the page "decodes"
// the image band by band into pinned memory and checks the GPU against `reference`, and the
// screenshot test recomputes both from the seed the page shows.

/** Image size in texels, and the horizontal bands it is decoded and processed in. */
export const WIDTH = 512;
export const HEIGHT = 384;
export const BANDS = 4;
export const BAND_ROWS = HEIGHT / BANDS;
/** Blur radius: a (2R+1) x (2R+1) box, edges clamped (an odd count: rounding never meets a tie). */
export const RADIUS = 2;
/** Rows of a band with RADIUS rows of its neighbors above and below: what the band's blur reads. */
export const HALO_ROWS = BAND_ROWS + 2 * RADIUS;
/** Tone-map exposure: Reinhard per channel, normalized so that 1 stays 1. */
export const EXPOSURE = 2;

interface Shape {
  kind: 'disc' | 'box';
  x: number;
  y: number;
  r: number;
  rgb: [number, number, number];
}

/** What the seed decides: the shapes and the noise key. */
export interface Scene {
  seed: number;
  shapes: Shape[];
  noiseKey: number;
}

/** mulberry32: a small seeded generator of floats in [0, 1). */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), a | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The scene a seed picks: eight discs and boxes of random place, size and color. */
export function makeScene(seed: number): Scene {
  const rand = mulberry32(seed);
  const int = (n: number): number => Math.floor(rand() * n);
  const shapes = Array.from({ length: 8 }, (): Shape => ({
    kind: rand() < 0.5 ? 'disc' : 'box',
    x: int(WIDTH),
    y: int(HEIGHT),
    r: 16 + int(80),
    rgb: [int(256), int(256), int(256)],
  }));
  return { seed, shapes, noiseKey: int(0x7fffffff) };
}

/** A hash of (x, y, key) in [0, 2^32). */
function hash(x: number, y: number, key: number): number {
  let h = Math.imul(x, 0x27d4eb2d) ^ Math.imul(y, 0x165667b1) ^ key;
  h = Math.imul(h ^ (h >>> 15), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/**
 * "Decodes" rows [y0, y0 + rows) of the scene as RGBA8 into `into` (tight rows): gradients, shapes,
 * noise. Rows above and below the image repeat its first and last (the blur's clamped edges).
 */
export function decodeRows(scene: Scene, y0: number, rows: number, into: Uint8Array): void {
  for (let row = 0; row < rows; row++) {
    const y = Math.min(HEIGHT - 1, Math.max(0, y0 + row));
    for (let x = 0; x < WIDTH; x++) {
      let rgb = [Math.floor((x * 255) / (WIDTH - 1)), Math.floor((y * 255) / (HEIGHT - 1)), Math.floor(((x + y) * 255) / (WIDTH + HEIGHT - 2))];
      for (const s of scene.shapes) {
        const dx = x - s.x, dy = y - s.y;
        const inside = s.kind === 'disc' ? dx * dx + dy * dy <= s.r * s.r : Math.abs(dx) <= s.r && Math.abs(dy) <= s.r / 2;
        if (inside) rgb = rgb.map((v, c) => (v + 3 * s.rgb[c]!) >> 2);
      }
      const noise = hash(x, y, scene.noiseKey);
      const i = (row * WIDTH + x) * 4;
      for (let c = 0; c < 3; c++) into[i + c] = Math.min(255, Math.max(0, rgb[c]! + ((noise >>> (8 * c)) & 63) - 32));
      into[i + 3] = 255;
    }
  }
}

/** "Decodes" band `b` with its halo (HALO_ROWS rows) into `into`. */
export function decodeBand(scene: Scene, b: number, into: Uint8Array): void {
  decodeRows(scene, b * BAND_ROWS - RADIUS, HALO_ROWS, into);
}

/** The whole image, as the page decodes it band by band. */
export function decodeImage(scene: Scene): Uint8Array {
  const img = new Uint8Array(WIDTH * HEIGHT * 4);
  decodeRows(scene, 0, HEIGHT, img);
  return img;
}

/** The box blur of blur.wgsl on the CPU: mean of the (2R+1)^2 texels around each, edges clamped, rounded. */
export function boxBlur(img: Uint8Array): Uint8Array {
  const out = new Uint8Array(img.length);
  const n = (2 * RADIUS + 1) ** 2;
  const clamp = (v: number, hi: number): number => Math.min(hi, Math.max(0, v));
  for (let y = 0; y < HEIGHT; y++) {
    for (let x = 0; x < WIDTH; x++) {
      for (let c = 0; c < 4; c++) {
        let sum = 0;
        for (let dy = -RADIUS; dy <= RADIUS; dy++) {
          for (let dx = -RADIUS; dx <= RADIUS; dx++) sum += img[(clamp(y + dy, HEIGHT - 1) * WIDTH + clamp(x + dx, WIDTH - 1)) * 4 + c]!;
        }
        out[(y * WIDTH + x) * 4 + c] = Math.round(sum / n);
      }
    }
  }
  return out;
}

/** The tone map of tonemap.wgsl on the CPU: v * (1 + e) / (1 + e * v) per color channel, alpha 1. */
export function toneMap(img: Uint8Array): Uint8Array {
  const out = new Uint8Array(img.length);
  for (let i = 0; i < img.length; i++) {
    const v = img[i]! / 255;
    out[i] = i % 4 === 3 ? 255 : Math.round(((v * (1 + EXPOSURE)) / (1 + EXPOSURE * v)) * 255);
  }
  return out;
}

/** The source image of a seed and what the pipeline should make of it (RGBA8, tight rows). */
export function reference(seed: number): { source: Uint8Array; expected: Uint8Array } {
  const source = decodeImage(makeScene(seed));
  return { source, expected: toneMap(boxBlur(source)) };
}

/** How far two RGBA8 images are apart in their color channels: the largest difference and the share of texels within `tolerance`. */
export function compareRgba(a: Uint8Array, b: Uint8Array, tolerance: number): { maxDiff: number; within: number; first: number } {
  let maxDiff = 0, ok = 0, first = -1;
  for (let p = 0; p < a.length / 4; p++) {
    let d = 0;
    for (let c = 0; c < 3; c++) d = Math.max(d, Math.abs(a[p * 4 + c]! - b[p * 4 + c]!));
    maxDiff = Math.max(maxDiff, d);
    if (d <= tolerance) ok++;
    else if (first < 0) first = p;
  }
  return { maxDiff, within: ok / (a.length / 4), first };
}
