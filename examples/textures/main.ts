// `npm run example:textures`: a texture pipeline on two streams, drawn onto a canvas (Chrome 113+;
// serve it from localhost or https). `?seed=<n>` repeats a run. The result lands in <pre id="out">
// and in `window.exampleResult`, the seed in `window.exampleSeed`. Headless Chromium on SwiftShader
// presents a WebGPU canvas only with `--enable-features=Vulkan --use-vulkan=swiftshader
// --use-angle=swiftshader` (without them the device is lost at the first present).
import { createContext, type Context, type DeviceTexture, type PinnedBuffer, type Stream } from 'webgpu-streams';
import blurWgsl from './blur.wgsl?raw';
import toneWgsl from './tonemap.wgsl?raw';
import drawWgsl from './draw.wgsl?raw';
import { BANDS, BAND_ROWS, EXPOSURE, HALO_ROWS, HEIGHT, WIDTH, compareRgba, decodeBand, makeScene, reference } from './image';

/** The page's seed: `?seed=<n>` in the address, else a fresh one. */
function pickSeed(): number {
  const given = new URLSearchParams(location.search).get('seed');
  return given !== null ? Number(given) >>> 0 : Math.floor(Math.random() * 2 ** 31);
}

/** A render pipeline that draws a texture over a whole canvas of `format`, with a nearest sampler. */
function drawPipeline(device: GPUDevice, format: GPUTextureFormat): { pipeline: GPURenderPipeline; sampler: GPUSampler } {
  const module = device.createShaderModule({ code: drawWgsl, label: 'draw' });
  const pipeline = device.createRenderPipeline({
    label: 'draw',
    layout: 'auto',
    vertex: { module, entryPoint: 'vs' },
    fragment: { module, entryPoint: 'fs', targets: [{ format }] },
    primitive: { topology: 'triangle-list' },
  });
  return { pipeline, sampler: device.createSampler({ magFilter: 'nearest', minFilter: 'nearest', label: 'draw' }) };
}

/** The canvas, configured for the context's device. */
function canvasContext(ctx: Context): { canvas: GPUCanvasContext; format: GPUTextureFormat } {
  const el = document.querySelector<HTMLCanvasElement>('#view')!;
  [el.width, el.height] = [WIDTH, HEIGHT];
  const canvas = el.getContext('webgpu');
  if (!canvas) throw new Error('this canvas has no WebGPU context');
  const format = navigator.gpu.getPreferredCanvasFormat();
  canvas.configure({ device: ctx.device, format, alphaMode: 'opaque' });
  return { canvas, format };
}

/**
 * Runs the pipeline on the image of `seed`; returns the texels read back (RGBA8, tight rows). Each
 * band stream has its own textures for the band in hand (the streams' kernels never share one);
 * the bands meet in `image`, at rows of their own, and the display stream takes it from there.
 */
async function run(ctx: Context, seed: number): Promise<Uint8Array> {
  const bands: Stream[] = [ctx.createStream({ label: 'bands A' }), ctx.createStream({ label: 'bands B' })];
  const display = ctx.createStream({ label: 'display' });
  const texture = (label: string, rows: number): DeviceTexture => ctx.allocTexture({ size: [WIDTH, rows], format: 'rgba8unorm', label });
  const slots = bands.map((s) => ({ source: texture(`${s.label} source`, HALO_ROWS), blurred: texture(`${s.label} blurred`, BAND_ROWS), toned: texture(`${s.label} toned`, BAND_ROWS) }));
  const image = texture('image', HEIGHT);
  const blur = ctx.kernel(blurWgsl, { label: 'blur' });
  const tone = ctx.kernel(toneWgsl, { label: 'tone-map' });
  const workgroups: [number, number] = [Math.ceil(WIDTH / 8), Math.ceil(BAND_ROWS / 8)];
  const scene = makeScene(seed);

  // The host decodes band b (with its halo) straight into pinned memory; the band's stream uploads,
  // blurs and tone-maps it and puts it into its rows of `image`, while the host decodes the next.
  const pinned: PinnedBuffer[] = [];
  for (let b = 0; b < BANDS; b++) {
    const host = ctx.allocHost(WIDTH * HALO_ROWS * 4, 'upload', { label: `band ${b}` });
    decodeBand(scene, b, host.bytes);
    const s = bands[b % 2]!, slot = slots[b % 2]!;
    s.upload(host, slot.source);
    s.launch(blur, { bindings: [slot.source, slot.blurred], workgroups });
    s.launch(tone, { bindings: [slot.blurred, slot.toned], workgroups, constants: { exposure: EXPOSURE } });
    s.copy(slot.toned, image, { dstOrigin: [0, b * BAND_ROWS] });
    ctx.flush();
    pinned.push(host);
  }

  // The display stream waits for both band streams, then draws the image and reads it back.
  for (const s of bands) {
    const done = ctx.createEvent({ label: `${s.label} done` });
    s.record(done);
    display.waitEvent(done);
  }
  const { canvas, format } = canvasContext(ctx);
  const { pipeline, sampler } = drawPipeline(ctx.device, format);
  const bindGroup = ctx.device.createBindGroup({
    label: 'draw',
    layout: pipeline.getBindGroupLayout(0),
    entries: [{ binding: 0, resource: image.texture.createView() }, { binding: 1, resource: sampler }],
  });
  display.encode(
    (encoder) => {
      // The frame's canvas texture, taken when the stream encodes this op (after both band streams' work), not at the enqueue.
      const view = canvas.getCurrentTexture().createView();
      const pass = encoder.beginRenderPass({ label: 'draw', colorAttachments: [{ view, loadOp: 'clear', storeOp: 'store', clearValue: [0, 0, 0, 1] }] });
      pass.setPipeline(pipeline);
      pass.setBindGroup(0, bindGroup);
      pass.draw(3);
      pass.end();
    },
    { reads: [image], label: 'draw' },
  );
  const result = new Uint8Array(WIDTH * HEIGHT * 4);
  display.download(image, result);
  await display.synchronize();
  for (const p of pinned) p.destroy();
  return result;
}

/** Runs the example and checks what came back against the CPU. */
async function main(seed: number): Promise<string> {
  // The context stays up: its device drew what the canvas shows.
  const ctx = await createContext({ sanitize: 'throw' });
  const got = await run(ctx, seed);
  const { source, expected } = reference(seed);
  const check = compareRgba(got, expected, 1);
  const raw = compareRgba(got, source, 1);
  const where = `${WIDTH}x${HEIGHT}, ${BANDS} bands on 2 streams, seed ${seed}`;
  if (check.within < 1) {
    const p = check.first;
    return `FAIL: ${where}: texel (${p % WIDTH}, ${Math.floor(p / WIDTH)}) is ${[...got.subarray(p * 4, p * 4 + 4)]}, the CPU says ${[...expected.subarray(p * 4, p * 4 + 4)]} (max diff ${check.maxDiff})`;
  }
  if (raw.within > 0.5) return `FAIL: ${where}: the output is the unprocessed source in ${(raw.within * 100).toFixed(1)}% of texels`;
  return `ok: ${where}: blur and tone map match the CPU in every texel (max diff ${check.maxDiff})`;
}

const seed = pickSeed();
document.getElementById('out')!.textContent = `running, seed ${seed}...`;
const show = (text: string): void => {
  Object.assign(window, { exampleSeed: seed, exampleResult: text });
  document.getElementById('out')!.textContent = text;
};
main(seed).then(show, (e: unknown) => show(`FAIL: seed ${seed}: ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}`));
