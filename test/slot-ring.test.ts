/**
 * SlotRing (src/slot-ring.ts) on real WebGPU (Dawn): layers streamed through 2 and 3 reused slots
 * give the CPU reference's result; a fill waits for the slot's last reader (asserted through
 * events while that reader is held, and through the sanitizer); misuse throws at the call.
 */
import { describe, expect, it } from 'vitest';
import { useGpuContext, rng, randomSeed, firstMismatch, vectorAddRef } from './fixtures/gpu.js';
import { gate } from './fixtures/gate.js';
import { InvalidArgumentError, SlotRing, workgroupsFor, type Context, type DeviceBuffer, type RaceReport, type Stream } from '../src/index.js';

type GpuCtx = Context & { errors: string[] };
let ctx: GpuCtx;
const races: RaceReport[] = [];
useGpuContext((c) => (ctx = c), { sanitize: (r) => void races.push(r) });

const seed = randomSeed();
const r = rng(seed);

/** act[(i + 1) % 2] = act[i % 2] + slot: one layer. */
const layer = (n: number, act: DeviceBuffer[]) => (slot: DeviceBuffer, s: Stream, i: number): void =>
  void s.launch(ctx.kernels.vectorAdd, { bindings: [act[i % 2]!, slot, act[(i + 1) % 2]!], workgroups: workgroupsFor(n, 256) });

describe(`SlotRing (seed ${seed})`, () => {
  for (const count of [2, 3]) {
    it(`streams 9 layers through ${count} slots, loading ahead, to the CPU reference's result`, async () => {
      races.length = 0;
      const n = 1000 + (r.u32() % 3000);
      const weights = Array.from({ length: 9 }, () => r.f32Array(n));
      const input = r.f32Array(n);
      const load = ctx.createStream({ label: 'load' }), compute = ctx.createStream({ label: 'compute' });
      const ring = new SlotRing(ctx, { bytes: n * 4, count, producer: load, consumer: compute, label: 'w' });
      const act = [ctx.alloc(n * 4, { label: 'act0' }), ctx.alloc(n * 4, { label: 'act1' })];
      compute.upload(input, act[0]!);
      // Fill as far ahead as the ring allows, then one use per fill.
      for (let k = 0; k < count; k++) ring.fill((slot, s, i) => void s.upload(weights[i]!, slot));
      for (let i = 0; i < 9; i++) {
        ring.use(layer(n, act));
        if (ring.filled < 9) ring.fill((slot, s, j) => void s.upload(weights[j]!, slot));
      }
      const out = new Float32Array(n);
      compute.download(act[1]!, out);
      await compute.synchronize();
      await load.synchronize();
      expect(firstMismatch(out, weights.reduce((x, w) => vectorAddRef(x, w), input)), `seed ${seed}`).toBeNull();
      expect(ring.buffers.map((b) => b.label)).toEqual(Array.from({ length: count }, (_, k) => `w[${k}]`));
      expect(races).toEqual([]);
      ring.destroy();
    });
  }

  it("a fill waits for the slot's last reader: with that use held, its fill is not done; the others are", async () => {
    races.length = 0;
    const n = 512;
    const weights = Array.from({ length: 3 }, () => r.f32Array(n));
    const load = ctx.createStream({ label: 'load' }), compute = ctx.createStream({ label: 'compute' });
    const ring = new SlotRing(ctx, { bytes: n * 4, producer: load, consumer: compute });
    const act = [ctx.alloc(n * 4), ctx.alloc(n * 4)];
    const g = gate();
    const filled = [ctx.createEvent(), ctx.createEvent(), ctx.createEvent()];
    const fill = (): number => ring.fill((slot, s, i) => (s.upload(weights[i]!, slot), filled[i]!.record(s)));
    fill();
    fill();
    ring.use((slot, s, i) => (s.hostFn(() => g.wait), layer(n, act)(slot, s, i))); // use 0 held
    ring.use(layer(n, act));
    fill(); // slot 0 again: waits for use 0
    await filled[1]!.synchronize();
    expect([filled[0]!.query(), filled[1]!.query(), filled[2]!.query()]).toEqual([true, true, false]);
    g.open();
    ring.use(layer(n, act));
    await filled[2]!.synchronize();
    await compute.synchronize();
    const out = new Float32Array(n);
    compute.download(act[1]!, out);
    await compute.synchronize();
    expect(firstMismatch(out, weights.reduce((x, w) => vectorAddRef(x, w), new Float32Array(n))), `seed ${seed}`).toBeNull();
    expect(races).toEqual([]);
    ring.destroy();
  });

  it('takes buffers of yours and leaves them alive; misuse throws InvalidArgumentError at the call, naming the op', () => {
    const load = ctx.createStream({ label: 'load' }), compute = ctx.createStream({ label: 'compute' });
    const mine = [ctx.alloc(64, { label: 'mine0' }), ctx.alloc(64, { label: 'mine1' })];
    const ring = new SlotRing(ctx, { buffers: mine, producer: load, consumer: compute });
    expect(ring.count).toBe(2);
    expect(() => ring.use(() => undefined)).toThrow(/op 'SlotRing.use' on stream 'compute'.*use 0 of slot\[0\] has no fill enqueued/s);
    ring.fill(() => undefined);
    ring.fill(() => undefined);
    expect(() => ring.fill(() => undefined)).toThrow(/fill of use 2 needs slot\[0\], whose use 0 is not enqueued yet/);
    expect(() => ring.fill('x' as never)).toThrow(InvalidArgumentError);
    ring.destroy();
    expect(mine.every((b) => !b.destroyed)).toBe(true);
    // A fill or use from inside a fill's or use's work is refused (it took the same index: use 1 read a slot never filled).
    const nested = new SlotRing(ctx, { bytes: 64, producer: load, consumer: compute, label: 'nested' });
    expect(() => nested.fill(() => void nested.fill(() => undefined))).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', op: 'SlotRing.fill', message: expect.stringMatching(/called from inside a fill\(\) or use\(\) callback/) }));
    expect(nested.fill(() => undefined), 'the refused fill took no index').toBe(0);
    expect(() => nested.use(() => void nested.fill(() => undefined))).toThrow(/called from inside/);
    nested.destroy();
    const own = new SlotRing(ctx, { bytes: 64, producer: load, consumer: compute });
    own[Symbol.dispose](); // `using` a ring destroys the slots it allocated
    expect(own.buffers.every((b) => b.destroyed)).toBe(true);
    const gone = ctx.alloc(64, { label: 'gone' });
    gone.destroy();
    const bad: [string, unknown, RegExp][] = [
      ['same stream', { bytes: 64, producer: load, consumer: load }, /the same stream/],
      ['not a stream', { bytes: 64, producer: {}, consumer: compute }, /Expected `producer` to be a Stream/],
      ['bytes and buffers', { bytes: 64, buffers: mine, producer: load, consumer: compute }, /not both/],
      ['no bytes', { producer: load, consumer: compute }, /bytes/],
      ['unknown key', { bytes: 64, slots: 2, producer: load, consumer: compute }, /slots/],
      ['count 0', { bytes: 64, count: 0, producer: load, consumer: compute }, /count/],
      ['one buffer twice', { buffers: [mine[0], mine[0]], producer: load, consumer: compute }, /holds one buffer twice/],
      ['a destroyed buffer', { buffers: [mine[0], gone], producer: load, consumer: compute }, /buffer 'gone' was destroyed/],
    ];
    for (const [what, o, re] of bad) expect(() => new SlotRing(ctx, o as never), what).toThrow(re);
    expect(() => new SlotRing(null as never, { bytes: 64, producer: load, consumer: compute })).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', message: expect.stringMatching(/Expected `ctx` to be a Context/) }));
  });

  it('a fill or use whose work throws leaves the ring where it was: the next call is that use again', async () => {
    const n = 256;
    const weights = [r.f32Array(n), r.f32Array(n)];
    const load = ctx.createStream({ label: 'load' }), compute = ctx.createStream({ label: 'compute' });
    const ring = new SlotRing(ctx, { bytes: n * 4, producer: load, consumer: compute });
    const act = [ctx.alloc(n * 4), ctx.alloc(n * 4)];
    expect(() => ring.fill(() => { throw new Error('no weights'); })).toThrow('no weights');
    expect([ring.filled, ring.used]).toEqual([0, 0]);
    for (let i = 0; i < 2; i++) {
      expect(ring.fill((slot, s) => void s.upload(weights[i]!, slot))).toBe(i);
      expect(() => ring.use(() => { throw new Error('bad layer'); })).toThrow('bad layer');
      expect(ring.use(layer(n, act))).toBe(i);
    }
    const out = new Float32Array(n);
    compute.download(act[0]!, out);
    await compute.synchronize();
    expect(firstMismatch(out, vectorAddRef(vectorAddRef(new Float32Array(n), weights[0]!), weights[1]!)), `seed ${seed}`).toBeNull();
    ring.destroy();
  });

  it('refuses a stream or buffer of another context; after its context is destroyed, fill() says so, named SlotRing.fill', async () => {
    const { gpuContext } = await import('./fixtures/gpu.js');
    const other = await gpuContext();
    try {
      expect(() => new SlotRing(ctx, { bytes: 64, producer: other.createStream(), consumer: ctx.createStream() })).toThrow(/Stream of context/);
      expect(() => new SlotRing(ctx, { buffers: [ctx.alloc(64), other.alloc(64, { label: 'theirs' })], producer: ctx.createStream(), consumer: ctx.createStream() })).toThrow(/buffer 'theirs' was allocated on another GPUDevice/);
      const ring = new SlotRing(other, { bytes: 64, producer: other.createStream({ label: 'p' }), consumer: other.createStream() });
      other.destroy();
      expect(() => ring.fill(() => undefined)).toThrow(expect.objectContaining({ name: 'DestroyedError', op: 'SlotRing.fill' }));
    } finally {
      other.destroy();
    }
  });
});
