/**
 * Textures (src/texture.ts, src/texture-copy.ts, launch bindings in src/launch-args.ts) on real
 * WebGPU (Dawn): uploads from pageable and pinned memory in any row layout, downloads, copies
 * between buffers and textures and between textures, kernels that bind textures, storage
 * textures, samplers and a second bind group; memory accounting and deferred destroy; the
 * sanitizer on texture rows; argument checks at the call. Texels are seeded random bytes, checked
 * byte for byte against what went in or a CPU reference.
 */
import { describe, expect, it } from 'vitest';
import { contextWithFeature, gpuContext, useGpuContext, rng, randomSeed, firstMismatch } from './fixtures/gpu.js';
import { textureProgram } from './fixtures/textures.js';
import { DestroyedError, GpuValidationError, InvalidArgumentError, StreamRaceError, textureLayout, type Context, type DeviceBuffer } from '../src/index.js';
import { downloadTexture } from '../src/texture-copy.js';

type GpuCtx = Context & { errors: string[] };
let ctx: GpuCtx;
useGpuContext((c) => (ctx = c), { sanitize: 'throw' });

const seed = randomSeed();
const r = rng(seed);
const bytes = (n: number): Uint8Array => new Uint8Array(r.u32Array(Math.ceil(n / 4)).buffer, 0, n);
/** The rows of a w x h region at (x, y) of a tightly packed `full` image `fw` texels wide. */
function crop(full: Uint8Array, fw: number, texel: number, x: number, y: number, w: number, h: number): Uint8Array {
  const out = new Uint8Array(w * h * texel);
  for (let row = 0; row < h; row++) out.set(full.subarray(((y + row) * fw + x) * texel, ((y + row) * fw + x + w) * texel), row * w * texel);
  return out;
}
const same = (a: Uint8Array, b: Uint8Array): number => {
  if (a.length !== b.length) return -2;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return i;
  return -1;
};

describe(`textures (seed ${seed})`, () => {
  it.each([
    ['rgba8unorm', 4],
    ['r8unorm', 1],
    ['rgba32float', 16],
  ] as const)('%s: a pageable upload of tight rows and a pageable download give the texels back, whole and as a region', async (format, texel) => {
    const [w, h] = [37 + (r.u32() % 20), 23];
    const tex = ctx.allocTexture({ size: [w, h], format, label: 'img' });
    const s = ctx.createStream({ label: 'tex' });
    const data = bytes(w * h * texel);
    s.upload(data, tex);
    const back = new Uint8Array(w * h * texel);
    s.download(tex, back);
    // A region, into an array whose rows are padded (bytesPerRow) and offset.
    const [x, y, rw, rh] = [3, 5, 11, 7];
    const pad = rw * texel + 2 * texel;
    const region = new Uint8Array(16 + pad * rh).fill(0xee);
    s.download(tex, region, { origin: [x, y], size: [rw, rh], offset: 16, bytesPerRow: pad });
    await s.synchronize();
    expect(same(back, data), `seed ${seed}`).toBe(-1);
    const want = crop(data, w, texel, x, y, rw, rh);
    for (let row = 0; row < rh; row++) expect(same(region.subarray(16 + row * pad, 16 + row * pad + rw * texel), want.subarray(row * rw * texel, (row + 1) * rw * texel)), `row ${row}, seed ${seed}`).toBe(-1);
    expect(region[16 + rw * texel], 'padding between rows is left alone').toBe(0xee);
    expect(region[0]).toBe(0xee);
    tex.destroy();
  });

  it('pinned memory in unaligned rows (row by row) and in textureLayout rows (one copy) uploads and downloads', async () => {
    const [w, h] = [45, 17];
    const tex = ctx.allocTexture({ size: [w, h], format: 'rgba8unorm' });
    const s = ctx.createStream();
    const data = bytes(w * h * 4);
    const tight = ctx.allocHost(w * h * 4, 'upload');
    tight.bytes.set(data);
    s.upload(tight, tex); // 180-byte rows: one copy per row
    const layout = textureLayout('rgba8unorm', [w, h]);
    expect(layout.bytesPerRow).toBe(256);
    const down = ctx.allocHost(layout.byteLength, 'download');
    s.download(tex, down, { bytesPerRow: layout.bytesPerRow });
    await s.synchronize();
    await down.ready();
    const got = down.bytes;
    for (let y = 0; y < h; y++) expect(same(got.subarray(y * 256, y * 256 + w * 4), data.subarray(y * w * 4, (y + 1) * w * 4)), `row ${y}, seed ${seed}`).toBe(-1);
    const tightDown = ctx.allocHost(w * h * 4, 'download');
    s.download(tex, tightDown);
    await s.synchronize();
    await tightDown.ready();
    expect(same(tightDown.bytes, data), `seed ${seed}`).toBe(-1);
    for (const b of [tight, down, tightDown]) b.destroy();
    tex.destroy();
  });

  it('copies buffer -> texture -> texture (at an origin) -> buffer on the GPU', async () => {
    const [w, h] = [64, 9];
    const data = bytes(w * h * 4);
    const src = ctx.alloc(w * h * 4), dst = ctx.alloc(w * h * 4);
    const a = ctx.allocTexture({ size: [w, h], format: 'rgba8unorm', label: 'a' });
    const b = ctx.allocTexture({ size: [w + 8, h + 4], format: 'rgba8unorm', label: 'b' });
    const s = ctx.createStream();
    s.upload(data, src);
    s.copy(src, a, { bytesPerRow: w * 4 }); // 256-byte rows: one command
    s.copy(a, b, { dstOrigin: [8, 4] });
    s.copy(b, dst, { origin: [8, 4], size: [w, h] });
    const out = new Uint8Array(w * h * 4);
    s.download(dst, out);
    await s.synchronize();
    expect(same(out, data), `seed ${seed}`).toBe(-1);
    for (const x of [src, dst, a, b]) x.destroy();
  });

  it('counts textures in ctx.memory (every mip level) and defers destroy while a stream uses one', async () => {
    const base = ctx.memory.current;
    const tex = ctx.allocTexture({ size: [64, 32], format: 'rgba16float', mipLevelCount: 3 });
    expect(tex.byteSize).toBe((64 * 32 + 32 * 16 + 16 * 8) * 8);
    expect(ctx.memory.current - base).toBe(tex.byteSize);
    const s = ctx.createStream();
    s.hostFn(() => new Promise((res) => setTimeout(res, 20)));
    const data = bytes(16 * 8 * 8);
    s.upload(data, tex, { mipLevel: 2 });
    const back = new Uint8Array(data.length);
    s.download(tex, back, { mipLevel: 2 });
    tex.destroy();
    expect(tex.pendingUses).toBe(2);
    expect(ctx.memory.current - base, 'destroy waits for the stream').toBe(tex.byteSize);
    expect(() => s.upload(data, tex, { mipLevel: 2 })).toThrow(DestroyedError);
    await s.synchronize();
    expect(same(back, data), `seed ${seed}`).toBe(-1);
    expect(ctx.memory.current).toBe(base);
  });

  it('the shared texture program (also run in Chromium): pinned rows, a load + sample + store kernel with @group(1), copies, padded rows', async () => {
    const checks = await textureProgram(ctx, seed);
    expect(checks.filter((c) => c.problem !== null), `seed ${seed}`).toEqual([]);
    expect(checks).toHaveLength(3);
  });

  it("a kernel binds raw GPUTextureViews (the sanitizer cannot see them) or DeviceTextures (whole: another stream's unordered write races)", async () => {
    const [w, h] = [16, 8];
    const k = ctx.kernel(`
      @group(0) @binding(0) var src: texture_2d<f32>;
      @group(0) @binding(1) var dst: texture_storage_2d<rgba8unorm, write>;
      @compute @workgroup_size(8, 8) fn main(@builtin(global_invocation_id) id: vec3u) {
        if (id.x < ${w}u && id.y < ${h}u) { textureStore(dst, vec2i(id.xy), textureLoad(src, vec2i(id.xy), 0)); }
      }`, { label: 'copyTexels' });
    const src = ctx.allocTexture({ size: [w, h], format: 'rgba8unorm', label: 'src' }), dst = ctx.allocTexture({ size: [w, h], format: 'rgba8unorm', label: 'dst' });
    const [a, b] = [ctx.createStream({ label: 'k-a' }), ctx.createStream({ label: 'k-b' })];
    const data = bytes(w * h * 4);
    a.upload(data, src);
    a.launch(k, { bindings: [src.texture.createView(), dst.texture.createView()], workgroups: [2, 1] });
    const out = new Uint8Array(w * h * 4);
    a.download(dst, out);
    await a.synchronize();
    expect(same(out, data), `seed ${seed}`).toBe(-1);
    a.launch(k, { bindings: [src, dst], workgroups: [2, 1] });
    expect(() => b.launch(k, { bindings: [src, dst], workgroups: [2, 1] })).toThrow(/race on texture 'dst'/);
    await a.synchronize();
    src.destroy();
    dst.destroy();
  });

  it('two streams write disjoint bands of one texture unordered (no race); overlapping bands race at the call', async () => {
    const [w, h] = [16, 16];
    const tex = ctx.allocTexture({ size: [w, h], format: 'rgba8unorm', label: 'bands' });
    const [a, b] = [ctx.createStream({ label: 'top' }), ctx.createStream({ label: 'bottom' })];
    const [top, bottom] = [bytes(w * 8 * 4), bytes(w * 8 * 4)];
    a.upload(top, tex, { size: [w, 8] });
    b.upload(bottom, tex, { origin: [0, 8], size: [w, 8] });
    expect(() => b.upload(bottom, tex, { origin: [0, 7], size: [w, 2] })).toThrow(/race on texture 'bands'/);
    await Promise.all([a.synchronize(), b.synchronize()]);
    const back = new Uint8Array(w * h * 4);
    a.waitStream(b);
    a.download(tex, back);
    await a.synchronize();
    expect(same(back.subarray(0, top.length), top), `seed ${seed}`).toBe(-1);
    expect(same(back.subarray(top.length), bottom), `seed ${seed}`).toBe(-1);
    tex.destroy();
  });

  it('a region over several images covers its rows of each image only: disjoint rows of the same images do not race', async () => {
    for (const dimension of ['3d', '2d'] as const) {
      const tex = ctx.allocTexture({ size: [8, 8, 4], format: 'r32float', dimension, label: `stack ${dimension}` });
      const [a, b] = [ctx.createStream({ label: 'lower rows' }), ctx.createStream({ label: 'upper rows' })];
      const r = rng(seed);
      const low = r.f32Array(8 * 2 * 2), up = r.f32Array(8 * 2 * 1);
      a.upload(low, tex, { origin: [0, 4, 0], size: [8, 2, 2] }); // rows 4-5 of images 0 and 1
      b.upload(up, tex, { origin: [0, 0, 1], size: [8, 2, 1] }); // rows 0-1 of image 1: no texel shared
      expect(() => b.upload(up, tex, { origin: [0, 5, 1], size: [8, 2, 1] }), dimension).toThrow(/race on texture 'stack/);
      await Promise.all([a.synchronize(), b.synchronize()]);
      const back = new Float32Array(8 * 8 * 4);
      a.waitStream(b);
      a.download(tex, back);
      await a.synchronize();
      const at = (z: number, y: number): Float32Array => back.subarray((z * 8 + y) * 8, (z * 8 + y + 2) * 8);
      expect([...at(0, 4)], `${dimension} seed ${seed}`).toEqual([...low.subarray(0, 16)]);
      expect([...at(1, 4)], `${dimension} seed ${seed}`).toEqual([...low.subarray(16, 32)]);
      expect([...at(1, 0)], `${dimension} seed ${seed}`).toEqual([...up]);
      tex.destroy();
    }
  });

  it('stream.encode keeps a declared DeviceTexture alive until its op completed, and the sanitizer sees it', async () => {
    const tex = ctx.allocTexture({ size: [64, 4], format: 'rgba8unorm', label: 'drawn' }); // 256-byte rows
    const s = ctx.createStream({ label: 'app' }), other = ctx.createStream({ label: 'other' });
    const data = bytes(1024);
    s.hostFn(() => new Promise((res) => setTimeout(res, 20)));
    s.upload(data, tex);
    const buf = ctx.alloc(1024);
    s.encode((enc) => enc.copyTextureToBuffer({ texture: tex.texture }, { buffer: buf.buffer, bytesPerRow: 256 }, [64, 4]), { reads: [tex], writes: [buf] });
    tex.destroy();
    expect(tex.pendingUses).toBe(2);
    expect(() => other.download(buf, new Uint8Array(1024))).toThrow(StreamRaceError);
    const out = new Uint8Array(1024);
    s.download(buf, out);
    await s.synchronize();
    expect(same(out, data), `seed ${seed}`).toBe(-1);
    expect(tex.pendingUses).toBe(0);
    buf.destroy();
  });

  it('stream.encode declares texture regions: two streams drawing disjoint bands do not race, overlapping ones do', async () => {
    const [w, h] = [64, 8]; // 256-byte rows
    const tex = ctx.allocTexture({ size: [w, h], format: 'rgba8unorm', label: 'canvas' });
    const [top, bottom] = [ctx.alloc(w * 4 * 4, { label: 'top' }), ctx.alloc(w * 4 * 4, { label: 'bottom' })];
    const [a, b] = [ctx.createStream({ label: 'draw-top' }), ctx.createStream({ label: 'draw-bottom' })];
    const [dTop, dBottom] = [bytes(w * 4 * 4), bytes(w * 4 * 4)];
    a.upload(dTop, top);
    b.upload(dBottom, bottom);
    const band = (src: DeviceBuffer, y: number) => (enc: GPUCommandEncoder): void => enc.copyBufferToTexture({ buffer: src.buffer, bytesPerRow: w * 4 }, { texture: tex.texture, origin: [0, y] }, [w, 4]);
    a.encode(band(top, 0), { reads: [top], writes: [{ texture: tex, size: [w, 4] }] });
    b.encode(band(bottom, 4), { reads: [bottom], writes: [{ texture: tex, origin: [0, 4], size: [w, 4] }] });
    expect(() => b.encode(band(bottom, 3), { reads: [bottom], writes: [{ texture: tex, origin: [0, 3], size: [w, 4] }] })).toThrow(/race on texture 'canvas'/);
    expect(() => b.encode(() => undefined, { writes: [{ texture: tex, origin: [0, 6], size: [w, 4] }] })).toThrow(/outside mip level 0/);
    await Promise.all([a.synchronize(), b.synchronize()]);
    a.waitStream(b);
    const back = new Uint8Array(w * h * 4);
    a.download(tex, back);
    await a.synchronize();
    expect(same(back.subarray(0, dTop.length), dTop), `seed ${seed}`).toBe(-1);
    expect(same(back.subarray(dTop.length), dBottom), `seed ${seed}`).toBe(-1);
    for (const x of [tex, top, bottom]) x.destroy();
  });

  it('a copy WebGPU rejects (a destroyed raw GPUTexture) fails that op alone; another stream runs on', async () => {
    const raw = ctx.device.createTexture({ size: [8, 8], format: 'rgba8unorm', usage: 0x2 | 0x1, label: 'raw' });
    raw.destroy();
    const [bad, good] = [ctx.createStream({ label: 'bad' }), ctx.createStream({ label: 'good' })];
    bad.upload(bytes(256), raw);
    const data = bytes(64);
    const buf = ctx.alloc(64), out = new Uint8Array(64);
    good.upload(data, buf);
    good.download(buf, out);
    await expect(bad.synchronize()).rejects.toBeInstanceOf(GpuValidationError);
    await good.synchronize();
    expect(same(out, data)).toBe(-1);
    buf.destroy();
  });

  it("a texture of another device, and a download's array detached before completion: typed errors, the stream goes on", async () => {
    const other = await gpuContext({ label: 'other' });
    try {
      const foreign = other.allocTexture({ size: [4, 4], format: 'rgba8unorm', label: 'foreign' });
      const s = ctx.createStream({ label: 'edges' });
      expect(() => s.upload(new Uint8Array(64), foreign)).toThrow(/allocated on another GPUDevice/);
      foreign.destroy();
    } finally {
      other.destroy();
    }
    const tex = ctx.allocTexture({ size: [16, 4], format: 'rgba8unorm' });
    const s = ctx.createStream({ label: 'detach' });
    const data = bytes(256);
    s.upload(data, tex);
    const dst = new Uint8Array(256);
    s.download(tex, dst);
    structuredClone(dst.buffer, { transfer: [dst.buffer] }); // the array goes away before the op completes
    const e = await s.synchronize().then(() => null, (err: unknown) => err);
    expect(e).toBeInstanceOf(InvalidArgumentError);
    expect((e as Error).message).toMatch(/detached/);
    const back = new Uint8Array(256);
    s.download(tex, back);
    await s.synchronize();
    expect(same(back, data), `seed ${seed}`).toBe(-1);
    tex.destroy();
  });

  it('allocTexture refuses at the call what WebGPU would make an invalid texture of (whose ops would fail other streams in their submit)', async () => {
    const refused = (o: object, message: RegExp): void => {
      expect(() => ctx.allocTexture(o as never), JSON.stringify(o)).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', op: 'allocTexture', message: expect.stringMatching(message) }));
    };
    const before = ctx.memory.current;
    refused({ size: [8, 2], format: 'rgba8unorm', dimension: '1d' }, /a '1d' texture is one row/);
    refused({ size: [8, 8], format: 'rgba8unorm-srgb', usage: GPUTextureUsage.STORAGE_BINDING | GPUTextureUsage.COPY_DST }, /'rgba8unorm-srgb' cannot be a storage texture/);
    refused({ size: [8], format: 'rgba8unorm', dimension: '1d', mipLevelCount: 2 }, /Expected `mipLevelCount` to be an integer from 1 to 1/);
    refused({ size: [8], format: 'depth32float', dimension: '1d' }, /a '1d' texture cannot have format 'depth32float'/);
    refused({ size: [8, 8, 8], format: 'depth32float', dimension: '3d' }, /a '3d' texture cannot have the depth or stencil format 'depth32float'/);
    refused({ size: [8, 8], format: 'rgba9unorm' }, /to be a GPUTextureFormat such as 'rgba8unorm', got `"rgba9unorm"`/);
    if (!ctx.device.features.has('texture-compression-astc')) refused({ size: [8, 8], format: 'astc-4x4-unorm' }, /needs the device feature 'texture-compression-astc'/);
    if (ctx.device.features.has('texture-compression-bc')) refused({ size: [6, 8], format: 'bc1-rgba-unorm' }, /'bc1-rgba-unorm' is stored in 4x4 blocks: `size` \[6, 8, 1\] is not a whole number of them/);
    expect(ctx.memory.current).toBe(before);
    // What the call cannot judge (a format that cannot be rendered to, with RENDER_ATTACHMENT): the
    // texture's transfers go alone until WebGPU has judged it, so its first use fails only itself;
    // after that, its use is refused at the call.
    const bad = ctx.allocTexture({ size: [8, 8], format: 'rgb9e5ufloat', usage: GPUTextureUsage.COPY_DST | GPUTextureUsage.RENDER_ATTACHMENT, label: 'unrenderable' });
    const [sa, sb] = [ctx.createStream({ label: 'uses it' }), ctx.createStream({ label: 'beside it' })];
    const seed0 = randomSeed();
    const y = rng(seed0).u32Array(64);
    const dy = ctx.alloc(256);
    sa.upload(new Uint8Array(8 * 8 * 4), bad);
    sb.upload(y, dy);
    const backY = new Uint32Array(64);
    sb.download(dy, backY);
    await expect(sa.synchronize()).rejects.toMatchObject({ name: 'GpuValidationError', stream: 'uses it' });
    expect(ctx.memory.current - before, 'a texture WebGPU refused holds no memory').toBe(256);
    await sb.synchronize();
    expect(firstMismatch(backY, y), `seed ${seed0}`).toBeNull();
    expect(() => sa.upload(new Uint8Array(8 * 8 * 4), bad)).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', op: 'upload', message: expect.stringMatching(/texture 'unrenderable' is one WebGPU refused at ctx.allocTexture\(\)/) }));
    bad.destroy();
    // A bystander's work is not touched by any of it.
    const s = ctx.createStream({ label: 'bystander' });
    const seed = randomSeed();
    const x = rng(seed).u32Array(64);
    const d = ctx.alloc(256);
    s.upload(x, d);
    const back = new Uint32Array(64);
    s.download(d, back);
    await s.synchronize();
    expect(firstMismatch(back, x), `seed ${seed}`).toBeNull();
    expect(ctx.errors).toEqual([]);
  });

  it('checks a texture transfer and a texture binding at the call, naming the op and the stream', () => {
    const tex = ctx.allocTexture({ size: [8, 8], format: 'rgba8unorm', label: 't' });
    const s = ctx.createStream({ label: 'checks' });
    const thrown = (f: () => unknown): Error => {
      try {
        f();
      } catch (e) {
        expect(e).toBeInstanceOf(InvalidArgumentError);
        expect((e as InvalidArgumentError).stream).toBe('checks');
        return e as Error;
      }
      throw new Error('expected a throw');
    };
    expect(thrown(() => s.upload(new Uint8Array(256), tex, { origin: [4, 4], size: [5, 4] })).message).toMatch(/origin 4,4,0 \+ size 5x4x1 is outside mip level 0 \(8x8x1\)/);
    expect(thrown(() => s.download(tex, new Uint8Array(256), { origin: [8, 0] })).message, 'an origin past the edge, size left to default').toMatch(/origin 8,0,0 \+ size 0x8x1 is outside mip level 0/);
    expect(thrown(() => s.upload(new Uint8Array(100), tex)).message).toMatch(/'src' has 100 bytes; 8x8x1 texels of 't' at bytesPerRow 32 need 256/);
    expect(thrown(() => s.download(tex, new Uint8Array(256), { bytesPerRow: 30 })).message).toMatch(/bytesPerRow/);
    // Rows staged 256-byte aligned must fit one buffer (an 8x8 rgba8unorm region stages 1824 bytes; here at most 1024 may).
    expect(() => downloadTexture(tex.texture, new Uint8Array(256), {}, 1024, { op: 'download' })).toThrow(/take \d+ bytes, more than a buffer may hold \(maxBufferSize 1024\): move it in parts/);
    expect(thrown(() => s.upload(new Uint8Array(256), tex, { srcOffset: 4 } as never)).message).toMatch(/Unknown option `options.srcOffset`/);
    const noSrc = ctx.alloc(256, { usage: 0x80 | 0x8, label: 'no-src' });
    expect(thrown(() => s.copy(noSrc, tex)).message).toMatch(/src 'no-src' lacks COPY_SRC usage/);
    noSrc.destroy();
    const depth = ctx.allocTexture({ size: [8, 8], format: 'depth32float', usage: 0x1 | 0x2 | 0x10 });
    expect(thrown(() => s.upload(new Uint8Array(256), depth)).message).toMatch(/format 'depth32float', which buffer transfers do not move/);
    const noCopy = ctx.allocTexture({ size: [8, 8], format: 'rgba8unorm', usage: 0x4 });
    expect(thrown(() => s.upload(new Uint8Array(256), noCopy)).message).toMatch(/lacks COPY_DST usage/);
    const k = ctx.kernel('@group(0) @binding(0) var o: texture_storage_2d<r32float, write>;\n@compute @workgroup_size(1) fn main() { textureStore(o, vec2i(0), vec4f(1.0)); }');
    expect(thrown(() => s.launch(k, { bindings: [tex], workgroups: 1 })).message).toMatch(/texture_storage of format 'r32float'; 't' is 'rgba8unorm'/);
    expect(thrown(() => s.launch(k, { bindings: [ctx.alloc(16)], workgroups: 1 })).message).toMatch(/is a storage texture: pass a DeviceTexture, GPUTexture or GPUTextureView/);
    expect(() => ctx.allocTexture({ size: [0, 8], format: 'rgba8unorm' })).toThrow(/size\[0\]/);
    // One texture sampled and stored in one launch: WebGPU's writable aliasing, refused at the call as for buffers.
    const rw = ctx.allocTexture({ size: [8, 8], format: 'r32float', label: 'rw' });
    const both = ctx.kernel('@group(0) @binding(0) var i: texture_2d<f32>;\n@group(0) @binding(1) var o: texture_storage_2d<r32float, write>;\n@compute @workgroup_size(1) fn main() { textureStore(o, vec2i(0), textureLoad(i, vec2i(0), 0)); }');
    expect(thrown(() => s.launch(both, { bindings: [rw, rw], workgroups: 1 })).message).toMatch(/bindings 0 and 1 of kernel 'main' are the same texture and one is written \(a storage texture\)/);
    for (const t of [tex, depth, noCopy, rw]) t.destroy();
  });

  it("texture-to-texture copies WebGPU would refuse are refused at the call (depth only whole, compressed in whole blocks); another stream's work in the same submit runs", async () => {
    const [bad, good] = [ctx.createStream({ label: 'bad t2t' }), ctx.createStream({ label: 'good' })];
    const seed0 = randomSeed();
    const x = rng(seed0).u32Array(256), d = ctx.alloc(1024), back = new Uint32Array(256);
    good.upload(x, d);
    const da = ctx.allocTexture({ size: [8, 8], format: 'depth32float', label: 'da' }), db = ctx.allocTexture({ size: [8, 8], format: 'depth32float', label: 'db' });
    await Promise.all([da.allocated(), db.allocated()]);
    expect(() => bad.copy(da, db, { size: [4, 4] })).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', stream: 'bad t2t', message: expect.stringMatching(/src texture 'da' \('depth32float'\) is copied only whole: mip level 0 is 8x8 per layer, the copy names origin 0,0,0 and size 4x4x1/) }));
    expect(() => bad.copy(da, db, { origin: [1, 0] })).toThrow(/is copied only whole/);
    bad.copy(da, db); // whole: fine
    // A subresource is one layer: a layer of a depth array copies alone.
    const layers = ctx.allocTexture({ size: [8, 8, 2], format: 'depth32float', label: 'layers' });
    await layers.allocated();
    bad.copy(layers, da, { origin: [0, 0, 1], size: [8, 8, 1] });
    bad.copy(db, layers, { dstOrigin: [0, 0, 1] });
    expect(() => bad.copy(layers, da, { origin: [0, 0, 1], size: [4, 8, 1] })).toThrow(/mip level 0 is 8x8 per layer/);
    good.download(d, back);
    await Promise.all([bad.synchronize(), good.synchronize()]);
    expect(firstMismatch(back, x), `seed ${seed0}`).toBeNull();
    for (const t of [da, db, layers, d]) t.destroy();
  });

  it('a compressed mip level copies as whole blocks (a 3x3 level of bc1 as 4x4, as WebGPU wants); a part of a block is refused', async () => {
    const withBc = await contextWithFeature('texture-compression-bc', 'bc');
    if (!withBc) return;
    const { ctx: bc, device } = withBc;
    try {
      const [a, b] = ['bcA', 'bcB'].map((label) => bc.allocTexture({ size: [12, 12], format: 'bc1-rgba-unorm', mipLevelCount: 3, label }));
      const seed0 = randomSeed();
      const block = new Uint8Array(rng(seed0).u32Array(2).buffer as ArrayBuffer); // one 4x4 block: 8 bytes
      device.queue.writeTexture({ texture: a!.texture, mipLevel: 2 }, block, { bytesPerRow: 8 }, [4, 4]);
      const s = bc.createStream({ label: 'bc' });
      expect(() => s.copy(a!, b!, { origin: [1, 0], size: [4, 4] })).toThrow(/'bcA' \('bc1-rgba-unorm'\) is copied in 4x4 blocks: origin 1,0,0 and size 4x4x1 must be whole blocks/);
      expect(() => s.copy(a!, b!, { size: [2, 2] })).toThrow(/whole blocks/);
      s.copy(a!, b!, { mipLevel: 2, dstMipLevel: 2 }); // the level's 3x3 texels as one 4x4 block
      s.copy(a!, b!, { mipLevel: 2, dstMipLevel: 1, size: [4, 4], dstOrigin: [4, 0] });
      const out = bc.alloc(512, { label: 'out' });
      s.encode((enc) => {
        enc.copyTextureToBuffer({ texture: b!.texture, mipLevel: 2 }, { buffer: out.buffer, offset: 0 }, [4, 4]);
        enc.copyTextureToBuffer({ texture: b!.texture, mipLevel: 1, origin: [4, 0] }, { buffer: out.buffer, offset: 256 }, [4, 4]);
      }, { reads: [b!], writes: [out] });
      const back = new Uint8Array(512);
      s.download(out, back);
      await s.synchronize();
      expect([...back.subarray(0, 8)], `seed ${seed0}`).toEqual([...block]);
      expect([...back.subarray(256, 264)], `seed ${seed0}`).toEqual([...block]);
      expect(bc.errors).toEqual([]);
    } finally {
      withBc.close();
    }
  });

  it('dstOrigin and dstMipLevel name a texture-to-texture copy only: with a buffer or host side they are refused, not ignored', () => {
    const tex = ctx.allocTexture({ size: [8, 8], format: 'rgba8unorm', mipLevelCount: 2, label: 'dst' });
    const buf = ctx.alloc(1024, { label: 'rows' });
    const s = ctx.createStream({ label: 'dst keys' });
    const refused = /`dstOrigin` names the destination of a texture-to-texture copy; with a buffer or host memory on one side the texture's region is `origin`/;
    expect(() => s.upload(new Uint8Array(64), tex, { size: [4, 4], dstOrigin: [4, 4] })).toThrow(refused);
    expect(() => s.copy(buf, tex, { size: [4, 4], dstOrigin: [4, 4] })).toThrow(refused);
    expect(() => s.download(tex, new Uint8Array(64), { size: [4, 4], dstMipLevel: 1 })).toThrow(/`dstMipLevel` names the destination .* region is `mipLevel`/);
    tex.destroy();
    buf.destroy();
  });

  it('texture bindings: a depth-stencil texture binds its depth (as depth or unfilterable float) and its stencil (as uint); cube and device checked at the call', async () => {
    const s = ctx.createStream({ label: 'bind' });
    const seed0 = randomSeed(), g = rng(seed0);
    const depth = 0.25 + (g.u32() % 64) / 128, stencil = new Uint8Array(16).map(() => g.u32() & 255);
    const ds = ctx.allocTexture({ size: [4, 4], format: 'depth24plus-stencil8', usage: GPUTextureUsage.TEXTURE_BINDING | GPUTextureUsage.RENDER_ATTACHMENT | GPUTextureUsage.COPY_DST, label: 'ds' });
    const d32 = ctx.allocTexture({ size: [4, 4], format: 'depth32float', usage: GPUTextureUsage.TEXTURE_BINDING | GPUTextureUsage.RENDER_ATTACHMENT, label: 'd32' });
    await Promise.all([ds.allocated(), d32.allocated()]);
    ctx.device.queue.writeTexture({ texture: ds.texture, aspect: 'stencil-only' }, stencil, { bytesPerRow: 4 }, [4, 4]);
    s.encode((enc) => {
      for (const t of [ds, d32]) {
        const stencilOps = t === ds ? { stencilLoadOp: 'load' as const, stencilStoreOp: 'store' as const } : {};
        enc.beginRenderPass({ colorAttachments: [], depthStencilAttachment: { view: t.texture.createView(), depthClearValue: depth, depthLoadOp: 'clear', depthStoreOp: 'store', ...stencilOps } }).end();
      }
    }, { writes: [ds, d32] });
    const out = ctx.alloc(64, { label: 'out' });
    const read = (type: string, value: string): Float32Array => {
      const k = ctx.kernel(`@group(0) @binding(0) var t: ${type};\n@group(0) @binding(1) var<storage, read_write> o: array<f32, 16>;\n@compute @workgroup_size(1) fn main() { for (var i = 0u; i < 16u; i++) { o[i] = ${value}; } }`);
      const got = new Float32Array(16);
      return (s.launch(k, { bindings: [type.includes('u32') || type.includes('depth') ? ds : d32, out], workgroups: 1 }), s.download(out, got), got);
    };
    const asDepth = read('texture_depth_2d', 'textureLoad(t, vec2u(i % 4u, i / 4u), 0)');
    const asFloat = read('texture_2d<f32>', 'textureLoad(t, vec2u(i % 4u, i / 4u), 0).x');
    const asStencil = read('texture_2d<u32>', 'f32(textureLoad(t, vec2u(i % 4u, i / 4u), 0).x)');
    await s.synchronize();
    for (let i = 0; i < 16; i++) {
      expect(asDepth[i], `depth24plus-stencil8 depth, seed ${seed0}`).toBeCloseTo(depth, 5);
      expect(asFloat[i], `depth32float as texture_2d<f32>, seed ${seed0}`).toBe(depth);
      expect(asStencil[i], `stencil ${i}, seed ${seed0}`).toBe(stencil[i]);
    }
    // A cube needs square faces and 6 layers; a texture of another device is refused as a buffer is.
    const cube = ctx.kernel('@group(0) @binding(0) var t: texture_cube<f32>;\n@group(0) @binding(1) var<storage, read_write> o: array<f32>;\n@group(0) @binding(2) var sm: sampler;\n@compute @workgroup_size(1) fn main() { o[0] = textureSampleLevel(t, sm, vec3f(1.0, 0.0, 0.0), 0.0).x; }');
    const flat = ctx.allocTexture({ size: [4, 4], format: 'rgba8unorm', label: 'flat' });
    expect(() => s.launch(cube, { bindings: [flat, out, ctx.device.createSampler()], workgroups: 1 })).toThrow(/is a cube texture: 'flat' needs square faces and at least 6 array layers; it is 4x4 with 1/);
    const other = await gpuContext({ label: 'other' });
    try {
      const foreign = other.allocTexture({ size: [4, 4], format: 'rgba8unorm', label: 'foreign' });
      const k = ctx.kernel('@group(0) @binding(0) var t: texture_2d<f32>;\n@group(0) @binding(1) var<storage, read_write> o: array<f32>;\n@compute @workgroup_size(1) fn main() { o[0] = textureLoad(t, vec2u(0), 0).x; }');
      expect(() => s.launch(k, { bindings: [foreign, out], workgroups: 1 })).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', stream: 'bind', message: expect.stringMatching(/texture 'foreign' was allocated on another GPUDevice/) }));
    } finally {
      other.destroy();
    }
    for (const t of [ds, d32, flat, out]) t.destroy();
  });
});
