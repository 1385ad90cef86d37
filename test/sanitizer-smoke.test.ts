import { expect, it } from 'vitest';
import { gpuContext } from './fixtures/gpu.js';
import { StreamRaceError, workgroupsFor, type RaceReport } from '../src/index.js';

it('smoke', async () => {
  const reports: RaceReport[] = [];
  const ctx = await gpuContext({ sanitize: (r) => reports.push(r) });
  const a = ctx.createStream({ label: 'load' }), b = ctx.createStream({ label: 'compute' });
  const n = 256;
  const x = ctx.alloc(n * 4, { label: 'x' }), y = ctx.alloc(n * 4, { label: 'y' }), out = ctx.alloc(n * 4, { label: 'out' });
  a.upload(new Float32Array(n).fill(1), x);
  a.upload(new Float32Array(n).fill(2), y);
  b.launch(ctx.kernels.vectorAdd, { bindings: [x, y, out], workgroups: workgroupsFor(n, 256) });
  await ctx.synchronize();
  console.log(reports.map((r) => r.message).join('\n---\n'));
  expect(reports.length).toBe(1);
  const t = await gpuContext({ sanitize: 'throw' });
  const s1 = t.createStream({ label: 'p' }), s2 = t.createStream({ label: 'q' });
  const z = t.alloc(64, { label: 'z' });
  s1.upload(new Float32Array(16), z);
  let err: unknown;
  try { s2.upload(new Float32Array(16), z); } catch (e) { err = e; }
  expect(err).toBeInstanceOf(StreamRaceError);
  console.log(String((err as Error).message));
  const ev = t.createEvent();
  ev.record(s1); s2.waitEvent(ev); s2.upload(new Float32Array(16), z);
  await t.synchronize();
  ctx.destroy(); t.destroy();
});
