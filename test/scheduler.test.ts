/**
 * The scheduler at its edges, on Dawn: dependency chains of 100,000 ops, host functions that
 * re-enqueue themselves, waits that would deadlock, thenables that throw, ops WebGPU rejects after
 * the call accepted them (isolated: they fail alone), and how failures reach every waiter.
 * Order is asserted through data, events and counters, never wall-clock windows.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { useGpuContext, randomSeed, rng, firstMismatch, sleepRef, vectorAddRef } from './fixtures/gpu.js';
import { workgroupsFor, type Context, type GpuEvent, type Stream } from '../src/index.js';
import { benchKernels } from '../bench/kernels/index';

type GpuCtx = Context & { errors: string[] };
let ctx: GpuCtx;
useGpuContext((c) => (ctx = c));
// Tests that fail streams on purpose report them; whatever is left is drained here so the next
// test's ctx.synchronize() starts clean.
afterEach(async () => {
  await ctx.synchronize().catch(() => {});
});

const delay = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const N = 100_000;

describe('long dependency chains complete without recursion', () => {
  it(`${N} event records behind one kernel`, async () => {
    const seed = randomSeed();
    const x = rng(seed).u32Array(256);
    const s = ctx.createStream({ label: 'records' });
    const buf = ctx.alloc(1024);
    s.upload(x, buf);
    s.launch(benchKernels(ctx).sleep, { bindings: [buf], workgroups: 4, constants: { iterations: 256 } });
    const events = Array.from({ length: 16 }, (_, i) => ctx.createEvent({ label: `r${i}` }));
    for (let i = 0; i < N; i++) s.record(events[i & 15]!);
    const out = new Uint32Array(256);
    s.download(buf, out);
    await s.synchronize();
    expect(events.every((e) => e.query())).toBe(true);
    expect(firstMismatch(out, sleepRef(x, 256)), `seed ${seed}`).toBeNull();
  });

  it(`${N} streams chained by events`, async () => {
    const seed = randomSeed();
    const x = rng(seed).u32Array(256);
    const buf = ctx.alloc(1024);
    const first = ctx.createStream({ label: 'chain0', nonBlocking: true });
    first.upload(x, buf);
    first.launch(benchKernels(ctx).sleep, { bindings: [buf], workgroups: 4, constants: { iterations: 17 } });
    let e: GpuEvent = ctx.createEvent();
    first.record(e);
    let last: Stream = first;
    for (let i = 1; i < N; i++) {
      const s = ctx.createStream({ label: `chain${i}`, nonBlocking: true });
      s.waitEvent(e);
      e = ctx.createEvent();
      s.record(e);
      last.destroy();
      last = s;
    }
    const out = new Uint32Array(256);
    last.download(buf, out); // ordered after the kernel only through the 100,000 events
    await last.synchronize();
    last.destroy();
    expect(firstMismatch(out, sleepRef(x, 17)), `seed ${seed}`).toBeNull();
  });

  it(`${N} waitStream calls between two streams, and ${N / 10} host functions in a chain`, async () => {
    const seed = randomSeed();
    const x = rng(seed).u32Array(256);
    const buf = ctx.alloc(1024);
    const a = ctx.createStream({ label: 'ping', nonBlocking: true });
    const b = ctx.createStream({ label: 'pong', nonBlocking: true });
    a.upload(x, buf);
    a.launch(benchKernels(ctx).sleep, { bindings: [buf], workgroups: 4, constants: { iterations: 17 } });
    for (let i = 0; i < N; i++) (i & 1 ? a : b).waitStream(i & 1 ? b : a);
    let count = 0;
    for (let i = 0; i < N / 10; i++) (i & 1 ? a : b).hostFn(() => void count++);
    const out = new Uint32Array(256);
    b.waitStream(a);
    b.download(buf, out);
    await b.synchronize();
    expect(count).toBe(N / 10);
    expect(firstMismatch(out, sleepRef(x, 17)), `seed ${seed}`).toBeNull();
  });
});

describe('host functions let the event loop breathe', () => {
  it('a host function that re-enqueues itself until a timer fires ends (timers get their turn)', async () => {
    const s = ctx.createStream({ label: 'poller' });
    let fired = false;
    let polls = 0;
    const timer = setTimeout(() => (fired = true), 5);
    await new Promise<void>((done) => {
      const poll = (): void => {
        polls++;
        if (fired) done();
        else s.hostFn(poll);
      };
      s.hostFn(poll);
    });
    clearTimeout(timer);
    expect(fired).toBe(true);
    expect(polls).toBeGreaterThan(1);
    await s.synchronize();
  });

  it('a timer set before 5,000 chained host functions fires before the last of them runs', async () => {
    const s = ctx.createStream({ label: 'burst' });
    let ran = 0;
    let ranWhenTimerFired = -1;
    const timer = new Promise<void>((r) =>
      setTimeout(() => {
        ranWhenTimerFired = ran;
        r();
      }, 0),
    );
    for (let i = 0; i < 5000; i++) s.hostFn(() => void ran++);
    await s.synchronize();
    await timer;
    expect(ran).toBe(5000);
    expect(ranWhenTimerFired).toBeGreaterThanOrEqual(0);
    expect(ranWhenTimerFired).toBeLessThan(5000);
  });
});

describe('a host function that waits on itself gets DeadlockError', () => {
  async function innerError(s: Stream, wait: () => Promise<unknown>, before?: () => Promise<unknown>): Promise<unknown> {
    let inner: unknown = 'no error';
    s.hostFn(async () => {
      if (before) await before();
      try {
        await wait();
      } catch (e) {
        inner = e;
      }
    });
    await s.synchronize();
    return inner;
  }

  it.each([
    ['its own stream\'s synchronize()', (s: Stream) => () => s.synchronize(), undefined],
    ['the context\'s synchronize()', () => () => ctx.synchronize(), undefined],
    ['its own stream\'s synchronize() after an await', (s: Stream) => () => s.synchronize(), () => delay(2)],
    ['the context\'s synchronize() after an await', () => () => ctx.synchronize(), () => delay(2)],
  ] as const)('awaiting %s', async (_name, make, before) => {
    const s = ctx.createStream({ label: 'self-waiter' });
    const err = await innerError(s, make(s), before);
    expect(err).toMatchObject({ name: 'DeadlockError', stream: 'self-waiter', op: 'hostFn', message: expect.stringMatching(/waits for .*synchronize\(\).*can never resolve/) });
  });

  it('left uncaught, it fails the host function with HostFnError naming the DeadlockError once (cause: the DeadlockError)', async () => {
    const s = ctx.createStream({ label: 'uncaught' });
    s.hostFn(() => s.synchronize());
    const err = (await s.synchronize().catch((e: unknown) => e)) as Error;
    expect(err).toMatchObject({ name: 'HostFnError', stream: 'uncaught', cause: expect.objectContaining({ name: 'DeadlockError' }) });
    expect(err.message).toMatch(/^op 'hostFn' on stream 'uncaught' in context '[^']+': host function threw DeadlockError: host function #\d+ waits for stream 'uncaught'.synchronize\(\)/);
    expect(err.message.match(/op 'hostFn' on stream/g)).toHaveLength(1);
    expect(err.message.match(/\n  enqueued /g) ?? []).toHaveLength(err.message.includes('enqueued') ? 1 : 0);
  });

  it('an event recorded behind it, and a pinned buffer claimed behind it, are deadlocks too', async () => {
    const s = ctx.createStream({ label: 'self-waiter-2' });
    const e = ctx.createEvent({ label: 'behind' });
    const pin = ctx.allocHost(64, 'upload', { label: 'behind-pin' });
    const buf = ctx.alloc(64);
    let eventErr: unknown = 'no error';
    let readyErr: unknown = 'no error';
    s.hostFn(async () => {
      await e.synchronize().catch((x: unknown) => (eventErr = x));
      await pin.ready().catch((x: unknown) => (readyErr = x));
    });
    s.record(e);
    s.upload(pin, buf);
    await s.synchronize();
    expect(eventErr).toMatchObject({ name: 'DeadlockError', stream: 'self-waiter-2' });
    expect(readyErr).toMatchObject({ name: 'DeadlockError', stream: 'self-waiter-2' });
    pin.destroy();
  });

  it('is not raised for waits that can resolve: another stream\'s work, or top-level code waiting while it runs', async () => {
    const s = ctx.createStream({ label: 'waiter' });
    const other = ctx.createStream({ label: 'independent', nonBlocking: true });
    other.hostFn(() => delay(2));
    let inner: unknown = 'not waited';
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    s.hostFn(async () => {
      await other.synchronize();
      inner = 'ok';
      await gate;
    });
    const topLevel = s.synchronize(); // waits while the host function runs: fine
    await delay(5);
    release();
    await topLevel;
    expect(inner).toBe('ok');
  });
});

describe('host functions that return strange things fail their own op only', () => {
  it.each([
    ['a thenable whose then throws', () => ({ then() { throw new Error('bad then'); } }), /bad then/],
    ['a thenable whose then getter throws', () => ({ get then(): never { throw new Error('bad getter'); } }), /bad getter/],
    ['a thrown Symbol', () => { throw Symbol('sym'); }, /Symbol\(sym\)/],
    ['a thrown object whose toString throws', () => { throw { toString() { throw new Error('x'); } }; }, /host function threw/],
    ['a rejection with undefined', () => Promise.reject(undefined), /host function threw undefined(\n|$)/],
    ['a thrown undefined', () => { throw undefined; }, /host function threw undefined(\n|$)/],
    ['a thrown null', () => { throw null; }, /host function threw null(\n|$)/],
  ] as const)('%s: HostFnError on that stream, other streams\' host functions still run', async (_name, fn, message) => {
    const bad = ctx.createStream({ label: 'strange' });
    const good = ctx.createStream({ label: 'fine', nonBlocking: true });
    const ran: string[] = [];
    good.hostFn(() => void ran.push('before'));
    bad.hostFn(fn as () => void);
    good.hostFn(() => void ran.push('after'));
    bad.hostFn(() => void ran.push('skipped'));
    await good.synchronize();
    await expect(bad.synchronize()).rejects.toMatchObject({ name: 'HostFnError', stream: 'strange', message: expect.stringMatching(message) });
    expect(ran).toEqual(['before', 'after']);
  });

  it('a thenable that resolves later holds its stream until then', async () => {
    const s = ctx.createStream();
    const log: string[] = [];
    let resolveIt!: () => void;
    s.hostFn(() => ({ then(ok: () => void) { resolveIt = () => { log.push('resolved'); ok(); }; } }) as unknown as void);
    s.hostFn(() => void log.push('next'));
    await delay(5);
    expect(log).toEqual([]);
    resolveIt();
    await s.synchronize();
    expect(log).toEqual(['resolved', 'next']);
  });
});

describe('ops WebGPU rejects after the call accepted them fail alone', () => {
  it('a launch on a raw GPUBuffer destroyed before the flush: that stream fails, a bystander in the same flush lands', async () => {
    const seed = randomSeed();
    const r = rng(seed);
    const n = 1024;
    const a = r.f32Array(n, -10, 10), b = r.f32Array(n, -10, 10);
    const bad = ctx.createStream({ label: 'bad' });
    const bystander = ctx.createStream({ label: 'bystander', nonBlocking: true });
    const waiter = ctx.createStream({ label: 'waiter', nonBlocking: true });
    const raw = ctx.device.createBuffer({ size: n * 4, usage: 0x80 | 0x8 | 0x4, label: 'raw' });
    const da = ctx.alloc(n * 4), db = ctx.alloc(n * 4), dout = ctx.alloc(n * 4);
    bad.launch(ctx.kernels.vectorAdd, { bindings: [da, db, raw], workgroups: workgroupsFor(n, 256) });
    const after = new Float32Array(n).fill(7);
    bad.download(da, after);
    const e = ctx.createEvent({ label: 'after-bad' });
    bad.record(e);
    waiter.waitEvent(e);
    let waiterRan = false;
    waiter.hostFn(() => void (waiterRan = true));
    raw.destroy(); // WebGPU now rejects any submit that uses it
    bystander.upload(a, da);
    bystander.upload(b, db);
    bystander.launch(ctx.kernels.vectorAdd, { bindings: [da, db, dout], workgroups: workgroupsFor(n, 256) });
    const out = new Float32Array(n);
    bystander.download(dout, out);
    await bystander.synchronize();
    expect(firstMismatch(out, vectorAddRef(a, b)), `seed ${seed}`).toBeNull();
    await expect(bad.synchronize()).rejects.toMatchObject({ name: 'GpuValidationError', stream: 'bad', op: 'launch' });
    expect(after.every((v) => v === 7), 'nothing was written into the failed stream\'s later download').toBe(true);
    await expect(waiter.synchronize()).rejects.toMatchObject({ name: 'DependencyError', stream: 'waiter' });
    expect(waiterRan).toBe(false);
    expect(ctx.errors).toEqual([]);
  });

  it('a launch whose binding size the reflection could only estimate runs alone; too small, it fails alone', async () => {
    // `N << 2` is a valid WGSL const-expression the reflection does not evaluate: minBytes is an estimate.
    const k = ctx.kernel('const N = 16u;\n@group(0) @binding(0) var<storage, read_write> d: array<u32, N << 2>;\n@compute @workgroup_size(1) fn main() { d[63] = 5u; }', { label: 'estimated' });
    expect(k.bindings[0]!.exact).toBe(false);
    const seed = randomSeed();
    const x = rng(seed).u32Array(64);
    const bad = ctx.createStream({ label: 'too-small' });
    const good = ctx.createStream({ label: 'right-size', nonBlocking: true });
    const bystander = ctx.createStream({ label: 'bystander2', nonBlocking: true });
    const small = ctx.alloc(16), right = ctx.alloc(256), other = ctx.alloc(256);
    bad.launch(k, { bindings: [small], workgroups: 1 });
    good.upload(x, right);
    good.launch(k, { bindings: [right], workgroups: 1 });
    const got = new Uint32Array(64);
    good.download(right, got);
    bystander.upload(x, other);
    const got2 = new Uint32Array(64);
    bystander.download(other, got2);
    await Promise.all([good.synchronize(), bystander.synchronize()]);
    const want = x.slice();
    want[63] = 5;
    expect(firstMismatch(got, want), `seed ${seed}`).toBeNull();
    expect(firstMismatch(got2, x), `seed ${seed}`).toBeNull();
    await expect(bad.synchronize()).rejects.toMatchObject({ name: 'GpuValidationError', stream: 'too-small' });
    expect(ctx.errors).toEqual([]);
  });
});

describe('failures reach every waiter that covers them', () => {
  it('ctx.synchronize() reports every failed stream (AggregateStreamError); each stream keeps its own', async () => {
    const s1 = ctx.createStream({ label: 'fail-1' });
    const s2 = ctx.createStream({ label: 'fail-2' });
    s1.hostFn(() => {
      throw new Error('one');
    });
    s2.hostFn(() => {
      throw new Error('two');
    });
    const err = await ctx.synchronize().then(() => null, (e: unknown) => e as { name: string; errors: { stream: string }[] });
    expect(err).toMatchObject({ name: 'AggregateStreamError', message: expect.stringMatching(/2 streams failed/) });
    expect(err!.errors.map((e) => e.stream).sort()).toEqual(['fail-1', 'fail-2']);
    await ctx.synchronize(); // reported once to the context
    await expect(s2.synchronize()).rejects.toMatchObject({ name: 'HostFnError', stream: 'fail-2', message: expect.stringMatching(/two/) });
    await expect(s1.synchronize()).rejects.toMatchObject({ name: 'HostFnError', stream: 'fail-1', message: expect.stringMatching(/one/) });
    await s1.synchronize();
    await s2.synchronize();
  });

  it('two synchronize() calls waiting on one stream both see its failure; event.synchronize() too', async () => {
    const s = ctx.createStream({ label: 'watched' });
    let fail!: (e: Error) => void;
    s.hostFn(() => new Promise<void>((_, rej) => (fail = rej)));
    const e = ctx.createEvent({ label: 'after' });
    s.record(e);
    const w1 = s.synchronize();
    const w2 = s.synchronize();
    const w3 = e.synchronize();
    await delay(2);
    fail(new Error('late'));
    await expect(w1).rejects.toMatchObject({ name: 'HostFnError' });
    await expect(w2).rejects.toMatchObject({ name: 'HostFnError' });
    await expect(w3).rejects.toMatchObject({ name: 'DependencyError', message: expect.stringMatching(/late/) });
    await s.synchronize(); // reported: later waits resolve
  });

  it('an event recorded after a failed op fails the streams that wait on it, with the cause', async () => {
    const a = ctx.createStream({ label: 'a', nonBlocking: true });
    const b = ctx.createStream({ label: 'b', nonBlocking: true });
    const ev = ctx.createEvent();
    a.hostFn(() => {
      throw new Error('producer broke');
    });
    ev.record(a);
    b.waitEvent(ev);
    let ran = false;
    b.hostFn(() => {
      ran = true;
    });
    await expect(b.synchronize()).rejects.toMatchObject({ name: 'DependencyError', stream: 'b' });
    await expect(a.synchronize()).rejects.toMatchObject({ name: 'HostFnError' });
    expect(ran).toBe(false);
  });
});
