/**
 * A two-stream pipeline on the public API, shared by the Node and the browser entry: stream `load`
 * uploads b from pinned memory and records an event; stream `compute` uploads a, waits for the
 * event, adds, and downloads into pinned memory. Checked against the CPU on seeded random data.
 */
import { InvalidArgumentError, StreamError, workgroupsFor, type Context, type GpuEvent, type PinnedBuffer, type Stream } from 'webgpu-streams';

export interface PipelineResult {
  ok: boolean;
  seed: number;
  /** One line per check, `ok:` or `FAIL:` first. */
  checks: string[];
}

/** mulberry32: a seeded generator, so that a failure can be rerun with its seed. */
export function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = Math.imul(s ^ (s >>> 15), s | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export async function runPipeline(ctx: Context, seed: number): Promise<PipelineResult> {
  const checks: string[] = [];
  const check = (name: string, problem: string | null): void => void checks.push(problem === null ? `ok: ${name}` : `FAIL: ${name}: ${problem}`);
  const random = rng(seed);
  // Not a multiple of the workgroup size, so the kernel's bounds check matters.
  const n = 65_536 + 37;
  const bytes = n * 4;
  const a = Float32Array.from({ length: n }, () => random() * 16 - 8);
  const b = Float32Array.from({ length: n }, () => random() * 16 - 8);

  const load: Stream = ctx.createStream({ label: 'load', priority: -1 });
  const compute: Stream = ctx.createStream({ label: 'compute' });
  const da = ctx.alloc(bytes, { label: 'a' }), db = ctx.alloc(bytes, { label: 'b' }), out = ctx.alloc(bytes, { label: 'out' });
  const up: PinnedBuffer = ctx.allocHost(bytes, 'upload');
  const down: PinnedBuffer = ctx.allocHost(bytes, 'download');
  up.f32.set(b);
  const loaded: GpuEvent = ctx.createEvent({ label: 'b loaded' });
  load.upload(up, db);
  loaded.record(load);
  compute.upload(a, da);
  compute.waitEvent(loaded);
  compute.launch(ctx.kernels.vectorAdd, { bindings: [da, db, out], workgroups: workgroupsFor(n, 256) });
  compute.download(out, down);
  const done = ctx.createEvent();
  done.record(compute);
  await done.synchronize();
  await Promise.all([compute.synchronize(), load.synchronize(), ctx.synchronize()]);
  check('events', loaded.query() && done.query() ? null : `query() after synchronize: loaded ${loaded.query()}, done ${done.query()}`);

  const got = down.f32.subarray(0, n);
  let bad = -1;
  for (let i = 0; i < n && bad < 0; i++) if (got[i] !== Math.fround(a[i]! + b[i]!)) bad = i;
  check(`vectorAdd of ${n} floats on two streams`, bad < 0 ? null : `index ${bad}: got ${got[bad]}, want ${Math.fround(a[bad]! + b[bad]!)}`);

  // Errors are the package's classes: a copy of a buffer onto itself is refused at the call.
  let error: unknown = null;
  try {
    compute.copy(da, da);
  } catch (e) {
    error = e;
  }
  const refused = error instanceof InvalidArgumentError && error instanceof StreamError && error.name === 'InvalidArgumentError';
  check('InvalidArgumentError', refused ? null : `copy(da, da) threw ${String(error)}`);

  // Buffers are Disposable (the package's types bring the lib that declares it).
  const owned: Disposable[] = [da, db, out, up, down];
  for (const buffer of owned) buffer[Symbol.dispose]();
  return { ok: checks.every((c) => c.startsWith('ok:')), seed, checks };
}
