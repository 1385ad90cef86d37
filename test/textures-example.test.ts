/**
 * The texture example (examples/textures) in headless Chromium: the page runs its two-stream
 * blur and tone map and checks the read-back against the CPU; this test then screenshots the
 * canvas and compares what is on screen with the CPU reference recomputed here from the page's
 * seed, and with the unprocessed source, which it must not be.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { build } from 'vite';
import { describe, expect, it } from 'vitest';
import { launchChrome } from '../bench/browser.js';
import { serveDir } from '../bench/serve.js';
import { decodePng } from '../bench/test/e2e/png.js';
import { browserMissing, root } from './e2e/util.js';
import { HEIGHT, WIDTH, compareRgba, reference } from '../examples/textures/image.js';

/** Per-channel difference a screenshot texel may have from the CPU's. */
const TOLERANCE = 3;

/** The screenshot's pixels as RGBA8, whatever its channel count (RGB or RGBA). */
function rgbaPixels(png: Uint8Array): { width: number; height: number; rgba: Uint8Array } {
  const { width, height, channels, pixels } = decodePng(png);
  if (channels !== 3 && channels !== 4) throw new Error(`screenshot has ${channels} channels; expected RGB or RGBA`);
  const rgba = new Uint8Array(width * height * 4);
  for (let p = 0; p < width * height; p++) {
    for (let c = 0; c < 3; c++) rgba[p * 4 + c] = pixels[p * channels + c]!;
    rgba[p * 4 + 3] = channels === 4 ? pixels[p * channels + 3]! : 255;
  }
  return { width, height, rgba };
}

describe.skipIf(browserMissing() !== null)('the texture example', () => {
  it('draws the blurred, tone-mapped image on its canvas in headless Chromium', async () => {
    const out = mkdtempSync(join(tmpdir(), 'webgpu-streams-textures-'));
    await build({ configFile: join(root, 'vite.config.ts'), mode: 'browser-example-textures', logLevel: 'warn', build: { outDir: out, emptyOutDir: true } });
    const server = await serveDir(out);
    // A WebGPU canvas in headless Chromium needs a compositor that can take its frames: Vulkan and
    // ANGLE on SwiftShader (without them the GPU process fails the swap chain's shared image and the
    // device is lost at the first present).
    const chrome = await launchChrome({ extraArgs: ['--enable-features=Vulkan', '--use-vulkan=swiftshader', '--use-angle=swiftshader'] });
    const logs: string[] = [];
    try {
      const page = await chrome.newPage();
      page.on('console', (m) => logs.push(`[${m.type()}] ${m.text()}`));
      page.on('pageerror', (e) => logs.push(`[pageerror] ${String(e)}`));
      await page.goto(`${server.origin}/`, { waitUntil: 'load' });
      await page.waitForFunction('window.exampleResult !== undefined', { timeout: 90_000 });
      const result = String(await page.evaluate('window.exampleResult'));
      const seed = Number(await page.evaluate('window.exampleSeed'));
      const context = `seed ${seed}: ${result}\n${logs.join('\n')}`;
      expect(result, context).toMatch(/^ok: 512x384, 4 bands on 2 streams/);
      expect(logs.filter((l) => /^\[(error|warn)/.test(l) || l.startsWith('[pageerror]')), context).toEqual([]);

      const canvas = await page.$('#view');
      expect(canvas, 'the page has no #view canvas').not.toBeNull();
      const shot = rgbaPixels(await canvas!.screenshot({ type: 'png' }));
      expect([shot.width, shot.height], `screenshot size, seed ${seed}`).toEqual([WIDTH, HEIGHT]);
      const { source, expected } = reference(seed);
      const processed = compareRgba(shot.rgba, expected, TOLERANCE);
      const raw = compareRgba(shot.rgba, source, TOLERANCE);
      console.log(
        `textures example, seed ${seed}: screenshot vs CPU reference max diff ${processed.maxDiff}, ` +
          `${(processed.within * 100).toFixed(2)}% within ${TOLERANCE}; vs the unprocessed source ${(raw.within * 100).toFixed(2)}% within ${TOLERANCE}`,
      );
      const at = (p: number): string => `texel (${p % WIDTH}, ${Math.floor(p / WIDTH)})`;
      expect(processed.within, `seed ${seed}: ${(processed.within * 100).toFixed(2)}% of texels within ${TOLERANCE} of the CPU; first off at ${at(processed.first)}`).toBeGreaterThanOrEqual(0.99);
      expect(raw.within, `seed ${seed}: the canvas shows the unprocessed source`).toBeLessThan(0.5);
    } finally {
      await chrome.close();
      await server.close();
      rmSync(out, { recursive: true, force: true });
    }
  }, 150_000);
});
