import { describe, expect, it } from 'vitest';
import { gpuContext, rng, randomSeed, firstMismatch, vectorAddRef } from './fixtures/gpu.js';
import { workgroupsFor } from '../src/index.js';

describe('smoke', () => {
  it('uploads, adds and downloads on two streams', async () => {
    const ctx = await gpuContext({ trace: { gpuTimestamps: true } });
    const seed = randomSeed();
    const r = rng(seed);
    const n = 1000;
    const a = r.f32Array(n, -100, 100), b = r.f32Array(n, -100, 100);
    const s1 = ctx.createStream({ label: 's1' }), s2 = ctx.createStream({ label: 's2' });
    const da = ctx.alloc(n * 4), db = ctx.alloc(n * 4), dout = ctx.alloc(n * 4);
    const pin = ctx.allocHost(n * 4, 'upload');
    pin.f32.set(b);
    s1.upload(a, da);
    s2.upload(pin, db);
    const e = ctx.createEvent({ timing: true });
    s2.record(e);
    s1.waitEvent(e);
    s1.launch(ctx.kernels.vectorAdd, { bindings: [da, db, dout], workgroups: workgroupsFor(n, 256) });
    const out = new Float32Array(n);
    s1.download(dout, out);
    await s1.synchronize();
    expect(firstMismatch(out, vectorAddRef(a, b)), `seed ${seed}`).toBeNull();
    await pin.ready();
    expect(pin.f32[0]).toBe(b[0]);
    // The trace: GPU spans measured by timestamps (gpuTimestamps on), host fill/read on the host lane.
    const spans = ctx.trace.spans();
    const kinds = (lane: string) => spans.filter((x) => x.lane === lane).map((x) => x.kind);
    expect(kinds('s1')).toEqual(expect.arrayContaining(['upload', 'kernel', 'wait', 'download']));
    expect(kinds('s2')).toEqual(expect.arrayContaining(['upload', 'event']));
    expect(kinds('host')).toEqual(expect.arrayContaining(['fill', 'read']));
    const kernel = spans.find((x) => x.kind === 'kernel')!;
    expect(kernel.estimated).toBeUndefined();
    expect(kernel.end).toBeGreaterThanOrEqual(kernel.start);
    const chrome = ctx.trace.toChromeTrace(spans);
    expect(chrome.traceEvents.filter((e) => (e as { ph: string }).ph === 'X')).toHaveLength(spans.length);
    expect(ctx.errors).toEqual([]);
    ctx.destroy();
  });
});
