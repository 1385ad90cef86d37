/**
 * `stream.encode` (src/encode-op.ts) on real WebGPU (Dawn): the app's own commands (a copy, a
 * compute pass of its own pipeline) run at their place in the stream, checked against a CPU
 * reference on seeded random data; a throw or commands WebGPU rejects fail that op alone, typed;
 * declared buffers stay alive until the op completed; the sanitizer sees what is declared; the call
 * checks its arguments.
 */
import { describe, expect, it } from 'vitest';
import { gpuContext, useGpuContext, rng, randomSeed, firstMismatch, vectorAddRef } from './fixtures/gpu.js';
import { GpuValidationError, HostFnError, InvalidArgumentError, StreamRaceError, workgroupsFor, type Context } from '../src/index.js';

type GpuCtx = Context & { errors: string[] };
let ctx: GpuCtx;
useGpuContext((c) => (ctx = c), { trace: { gpuTimestamps: true } });

const seed = randomSeed();
const r = rng(seed);

/** The app's own pipeline: out[i] = 2 * in[i]. */
function doubler(device: GPUDevice): { pipeline: GPUComputePipeline; bind: (a: GPUBuffer, b: GPUBuffer) => GPUBindGroup } {
  const module = device.createShaderModule({
    code: `@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> b: array<f32>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) id: vec3u) { if (id.x < arrayLength(&a)) { b[id.x] = 2.0 * a[id.x]; } }`,
  });
  const pipeline = device.createComputePipeline({ layout: 'auto', compute: { module, entryPoint: 'main' } });
  return { pipeline, bind: (a, b) => device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: [{ binding: 0, resource: { buffer: a } }, { binding: 1, resource: { buffer: b } }] }) };
}

describe(`stream.encode (seed ${seed})`, () => {
  it("runs the app's own copy and compute pass at their place in the stream, between the library's ops", async () => {
    const n = 1000 + (r.u32() % 1000);
    const a = r.f32Array(n, -10, 10);
    const b = r.f32Array(n, -10, 10);
    const [da, db, t, u, out] = [0, 1, 2, 3, 4].map((i) => ctx.alloc(n * 4, { label: `b${i}` })) as [ReturnType<Context['alloc']>, ReturnType<Context['alloc']>, ReturnType<Context['alloc']>, ReturnType<Context['alloc']>, ReturnType<Context['alloc']>];
    const { pipeline, bind } = doubler(ctx.device);
    const s = ctx.createStream({ label: 'app' });
    s.upload(a, da);
    s.upload(b, db);
    s.launch(ctx.kernels.vectorAdd, { bindings: [da, db, t], workgroups: workgroupsFor(n, 256) }); // t = a + b
    s.encode(
      (enc) => {
        const pass = enc.beginComputePass();
        pass.setPipeline(pipeline);
        pass.setBindGroup(0, bind(t.buffer, u.buffer));
        pass.dispatchWorkgroups(Math.ceil(n / 64));
        pass.end(); // u = 2(a + b)
        enc.copyBufferToBuffer(u.buffer, 0, da.buffer, 0, n * 4); // da = u
      },
      { reads: [t, u], writes: [u, da], label: 'double' },
    );
    s.launch(ctx.kernels.vectorAdd, { bindings: [da, db, out], workgroups: workgroupsFor(n, 256) }); // out = 2(a + b) + b
    const got = new Float32Array(n);
    s.download(out, got);
    await s.synchronize();
    const twice = vectorAddRef(a, b).map((x) => Math.fround(2 * x));
    expect(firstMismatch(got, vectorAddRef(twice, b)), `seed ${seed}`).toBeNull();
    const span = ctx.trace.spans().find((x) => x.name === 'encode double');
    expect(span, 'the op is on the timeline').toBeDefined();
    if (ctx.features.timestampQuery) expect(span!.estimated, 'timed on the GPU').toBeFalsy();
  });

  it('a throw fails that op (HostFnError, with the cause); another stream is untouched, and its own goes on after the report', async () => {
    const n = 256;
    const x = r.f32Array(n);
    const bad = ctx.createStream({ label: 'bad' });
    const good = ctx.createStream({ label: 'good' });
    const buf = ctx.alloc(n * 4);
    const other = ctx.alloc(n * 4);
    const boom = new Error('app bug');
    bad.encode(() => {
      throw boom;
    });
    const after = new Float32Array(n);
    bad.download(buf, after);
    good.upload(x, other);
    const back = new Float32Array(n);
    good.download(other, back);
    const err = await bad.synchronize().then(() => null, (e: unknown) => e);
    expect(err).toBeInstanceOf(HostFnError);
    expect((err as HostFnError).cause).toBe(boom);
    expect((err as Error).message).toMatch(/encode callback threw: .*app bug/);
    await good.synchronize();
    expect(firstMismatch(back, x), `seed ${seed}`).toBeNull();
    // The stream goes on after the report.
    bad.upload(x, buf);
    bad.download(buf, after);
    await bad.synchronize();
    expect(firstMismatch(after, x), `seed ${seed}`).toBeNull();
    // `throw undefined` is a throw too: the op fails and its commands recorded before it are not submitted.
    bad.encode((enc) => {
      enc.clearBuffer(buf.buffer);
      throw undefined; // eslint-disable-line no-throw-literal
    });
    await expect(bad.synchronize()).rejects.toMatchObject({ name: 'HostFnError', message: expect.stringMatching(/encode callback threw: undefined/) });
    bad.download(buf, after);
    await bad.synchronize();
    expect(firstMismatch(after, x), `seed ${seed}: not cleared`).toBeNull();
  });

  it('an async recorder is refused at the call; a function returning a promise fails its op (nothing recorded after its await is lost silently)', async () => {
    const n = 256;
    const x = r.f32Array(n, -5, 5);
    const buf = ctx.alloc(n * 4, { label: 'kept' });
    const s = ctx.createStream({ label: 'async encode' });
    expect(() => s.encode(async (enc) => enc.clearBuffer(buf.buffer))).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', op: 'encode', stream: 'async encode', message: expect.stringMatching(/is an async function/) }));
    s.upload(x, buf);
    s.encode((enc) => {
      enc.clearBuffer(buf.buffer);
      return new Promise<void>((done) => setTimeout(done, 1));
    });
    const err = await s.synchronize().then(() => null, (e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(err).toMatchObject({ op: 'encode', stream: 'async encode', message: expect.stringMatching(/returned a promise: it must record synchronously/) });
    // The op's batch was not submitted: the clear it recorded never ran.
    const back = new Float32Array(n);
    s.download(buf, back);
    await s.synchronize();
    expect(firstMismatch(back, x), `seed ${seed}`).toBeNull();
  });

  it('commands WebGPU rejects fail that op with GpuValidationError; other streams and their data are intact', async () => {
    const n = 128;
    const x = r.f32Array(n);
    const small = ctx.alloc(64, { label: 'small' });
    const bad = ctx.createStream({ label: 'rejected' });
    const good = ctx.createStream({ label: 'fine' });
    bad.encode((enc) => enc.copyBufferToBuffer(small.buffer, 0, small.buffer, 32, 64), { reads: [small], writes: [small] }); // out of range, overlapping
    const keep = ctx.alloc(n * 4);
    good.upload(x, keep);
    const back = new Float32Array(n);
    good.download(keep, back);
    await expect(bad.synchronize()).rejects.toBeInstanceOf(GpuValidationError);
    await good.synchronize();
    expect(firstMismatch(back, x), `seed ${seed}`).toBeNull();
    expect(ctx.errors, 'no uncaptured error: the op caught it').toEqual([]);
  });

  it('a declared buffer destroyed after the call stays alive until the op completed', async () => {
    const n = 512;
    const x = r.f32Array(n);
    const src = ctx.alloc(n * 4, { label: 'src' });
    const dst = ctx.alloc(n * 4, { label: 'dst' });
    const s = ctx.createStream({ label: 'lifetime' });
    s.upload(x, src);
    s.encode((enc) => enc.copyBufferToBuffer(src.buffer, 0, dst.buffer, 0, n * 4), { reads: [src], writes: [dst] });
    src.destroy(); // deferred: the encode op still uses it
    const back = new Float32Array(n);
    s.download(dst, back);
    await s.synchronize();
    expect(firstMismatch(back, x), `seed ${seed}`).toBeNull();
  });

  it('the stream sanitizer checks what is declared: an unordered read of a buffer another stream writes throws at the call', async () => {
    const san = await gpuContext({ sanitize: 'throw' });
    try {
      const buf = san.alloc(1024, { label: 'shared' });
      const out = san.alloc(1024, { label: 'out' });
      const load = san.createStream({ label: 'load' });
      const app = san.createStream({ label: 'app' });
      load.upload(new Float32Array(256).fill(1), buf);
      const copy = (enc: GPUCommandEncoder): void => enc.copyBufferToBuffer(buf.buffer, 256, out.buffer, 0, 256);
      expect(() => app.encode(copy, { reads: [{ buffer: buf, offset: 256, size: 256 }], writes: [out] })).toThrow(StreamRaceError);
      const ev = san.createEvent();
      ev.record(load);
      app.waitEvent(ev);
      app.encode(copy, { reads: [{ buffer: buf, offset: 256, size: 256 }], writes: [out] }); // ordered: no race
      await app.synchronize();
    } finally {
      san.destroy();
    }
  });

  it('submits command buffers finished elsewhere at their place; one submitted twice fails that op alone', async () => {
    const n = 700;
    const x = r.f32Array(n, -5, 5);
    const a = ctx.alloc(n * 4, { label: 'a' });
    const b = ctx.alloc(n * 4, { label: 'b' });
    const sum = ctx.alloc(n * 4, { label: 'sum' });
    const s = ctx.createStream({ label: 'elsewhere' });
    const enc = ctx.device.createCommandEncoder();
    enc.copyBufferToBuffer(a.buffer, 0, b.buffer, 0, n * 4); // recorded now, runs at its place below
    const cb = enc.finish();
    s.upload(x, a);
    s.encode([cb], { reads: [a], writes: [b] });
    s.launch(ctx.kernels.vectorAdd, { bindings: [a, b, sum], workgroups: workgroupsFor(n, 256) });
    const got = new Float32Array(n);
    s.download(sum, got);
    await s.synchronize();
    expect(firstMismatch(got, vectorAddRef(x, x)), `seed ${seed}`).toBeNull();
    // A command buffer is submitted once: given to encode() again, refused at the call; submitted by the app first, that op fails.
    expect(() => s.encode([cb])).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', op: 'encode', message: expect.stringMatching(/`commands\[0\]` was given to stream.encode\(\) before/) }));
    const fresh = ctx.device.createCommandEncoder().finish();
    expect(() => s.encode([fresh, fresh])).toThrow(/`commands\[1\]` was given to stream.encode\(\) before/);
    const own = ctx.device.createCommandEncoder().finish();
    ctx.device.queue.submit([own]);
    s.encode([own]);
    await expect(s.synchronize()).rejects.toBeInstanceOf(GpuValidationError);
    expect(() => s.encode([ctx.device.createCommandEncoder() as never])).toThrow(/commands\[0\]/);
    expect(ctx.errors).toEqual([]);
  });

  it("the app's own queue.submit follows what streams enqueued once ctx.flush() ran; before it, it goes first (the documented rule)", async () => {
    const n = 300;
    const [d0, d1, d2] = [r.f32Array(n), r.f32Array(n), r.f32Array(n)];
    const x = ctx.alloc(n * 4, { label: 'x' });
    const y = ctx.alloc(n * 4, { label: 'y' });
    const s = ctx.createStream({ label: 'lib' });
    const appCopy = (): void => {
      const enc = ctx.device.createCommandEncoder();
      enc.copyBufferToBuffer(x.buffer, 0, y.buffer, 0, n * 4);
      ctx.device.queue.submit([enc.finish()]);
    };
    const yNow = async (): Promise<Float32Array> => {
      await ctx.device.queue.onSubmittedWorkDone();
      const out = new Float32Array(n);
      s.download(y, out);
      await s.synchronize();
      return out;
    };
    s.upload(d0, x);
    await s.synchronize();
    s.upload(d1, x); // enqueued, submitted on a microtask
    appCopy(); // the app's submit, in the same task: before the library's
    expect(firstMismatch(await yNow(), d0), `seed ${seed}: the app's copy went first`).toBeNull();
    s.upload(d2, x);
    ctx.flush(); // the rule: flush, then your own submit
    appCopy();
    expect(firstMismatch(await yNow(), d2), `seed ${seed}: after ctx.flush() the app's copy follows`).toBeNull();
  });

  it("the other direction: stream work enqueued after the app's own submit runs after it; a stream waits on an outside promise through hostFn", async () => {
    const n = 256;
    const d = r.f32Array(n);
    const x = ctx.alloc(n * 4, { label: 'x' }), y = ctx.alloc(n * 4, { label: 'y' });
    const s = ctx.createStream({ label: 'after-app' });
    s.upload(d, x);
    await s.synchronize();
    const enc = ctx.device.createCommandEncoder();
    enc.copyBufferToBuffer(x.buffer, 0, y.buffer, 0, n * 4);
    ctx.device.queue.submit([enc.finish()]); // the app's own work: y = x
    const out = new Float32Array(n);
    s.download(y, out); // enqueued after the app's submit: one queue puts it after
    await s.synchronize();
    expect(firstMismatch(out, d), `seed ${seed}`).toBeNull();
    // An outside promise (another library's result, queue.onSubmittedWorkDone()): later work waits for it.
    let resolveOutside!: () => void;
    const outside = new Promise<void>((res) => (resolveOutside = res));
    const order: string[] = [];
    s.hostFn(() => outside.then(() => void order.push('outside settled')));
    s.hostFn(() => void order.push('later work'));
    await new Promise((res) => setTimeout(res, 20));
    expect(order, 'later work waits for the outside promise').toEqual([]);
    resolveOutside();
    await s.synchronize();
    expect(order).toEqual(['outside settled', 'later work']);
  });

  it('a declared texture: the sanitizer orders its writer and its reader across streams; the texels come back as written', async () => {
    const san = await gpuContext({ sanitize: 'throw' });
    try {
      const [w, h] = [64, 8]; // 256 bytes a row: copies need no padding
      const texels = r.u32Array(w * h);
      const tex = san.device.createTexture({ label: 'frame', size: [w, h], format: 'rgba8unorm', usage: GPUTextureUsage.COPY_DST | GPUTextureUsage.COPY_SRC | GPUTextureUsage.TEXTURE_BINDING });
      const src = san.alloc(w * h * 4, { label: 'src' });
      const dst = san.alloc(w * h * 4, { label: 'dst' });
      const producer = san.createStream({ label: 'producer' });
      const consumer = san.createStream({ label: 'consumer' });
      producer.upload(texels, src);
      producer.encode((enc) => enc.copyBufferToTexture({ buffer: src.buffer, bytesPerRow: w * 4 }, { texture: tex }, [w, h]), { reads: [src], writes: [tex] });
      const read = (enc: GPUCommandEncoder): void => enc.copyTextureToBuffer({ texture: tex }, { buffer: dst.buffer, bytesPerRow: w * 4 }, [w, h]);
      let race: unknown = null;
      try {
        consumer.encode(read, { reads: [tex], writes: [dst] });
      } catch (e) {
        race = e;
      }
      expect(race, 'an unordered read of the texture').toBeInstanceOf(StreamRaceError);
      expect((race as StreamRaceError).report.texture).toBe(true);
      expect((race as Error).message).toMatch(/race on texture 'frame': op #\d+ 'encode' on stream 'consumer' reads it while op #\d+ 'encode' on stream 'producer' writes it/);
      const ev = san.createEvent();
      ev.record(producer);
      consumer.waitEvent(ev);
      consumer.encode(read, { reads: [tex], writes: [dst] });
      const back = new Uint32Array(w * h);
      consumer.download(dst, back);
      await consumer.synchronize();
      expect(firstMismatch(back, texels), `seed ${seed}`).toBeNull();
      tex.destroy();
    } finally {
      san.destroy();
    }
  });

  it('checks the call: the callback, the declarations and their ranges, unknown options', () => {
    const s = ctx.createStream({ label: 'checks' });
    const b = ctx.alloc(256, { label: 'b' });
    expect(() => s.encode(42 as never)).toThrow(InvalidArgumentError);
    expect(() => s.encode(() => {}, { reads: b as never })).toThrow(/Expected `reads` to be an array/);
    expect(() => s.encode(() => {}, { writes: [{ buffer: b, offset: 128, size: 256 }] })).toThrow(/writes\[0\]\.size/);
    expect(() => s.encode(() => {}, { reads: [new Float32Array(4) as never] })).toThrow(/reads\[0\]\.buffer/);
    expect(() => s.encode(() => {}, { bogus: 1 } as never)).toThrow(/bogus/);
    expect(s.pendingOps).toBe(0);
  });
});
