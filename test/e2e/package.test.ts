/**
 * The shipped package: `npm run build:lib` output (dist/lib, with declarations) is what the exports
 * map points at, and a multi-stream program runs against the built bundle, not the sources.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { beforeAll, expect, it } from 'vitest';
import { npmRun, root } from './util';
import { rng, randomSeed, firstMismatch, vectorAddRef } from '../../bench/reference';

beforeAll(() => npmRun('build:lib'), 180_000);

it('every path in the exports map exists after the build', () => {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { exports: Record<string, string | Record<string, string>> };
  for (const [entry, target] of Object.entries(pkg.exports)) {
    for (const file of typeof target === 'string' ? [target] : Object.values(target)) expect(existsSync(join(root, file)), `${entry} -> ${file}`).toBe(true);
  }
});

it('runs a two-stream program on the built bundle (webgpu-streams/node)', async () => {
  process.env.VK_ICD_FILENAMES ??= '/usr/lib/chromium/vk_swiftshader_icd.json';
  const lib = (await import(/* @vite-ignore */ pathToFileURL(join(root, 'dist/lib/node.js')).href)) as typeof import('../../src/node');
  const ctx = await lib.createNodeContext();
  try {
    const seed = randomSeed();
    const r = rng(seed);
    const n = 2048;
    const a = r.f32Array(n, -9, 9), b = r.f32Array(n, -9, 9);
    const s1 = ctx.createStream({ label: 'a' }), s2 = ctx.createStream({ label: 'b', priority: -1 });
    const da = ctx.alloc(n * 4), db = ctx.alloc(n * 4), out = ctx.alloc(n * 4);
    const ev = ctx.createEvent();
    s2.upload(b, db);
    ev.record(s2);
    s1.upload(a, da);
    s1.waitEvent(ev);
    s1.launch(ctx.kernels.vectorAdd, { bindings: [da, db, out], workgroups: lib.workgroupsFor(n, 256) });
    const host = new Float32Array(n);
    s1.download(out, host);
    await s1.synchronize();
    expect(firstMismatch(host, vectorAddRef(a, b)), `seed ${seed}`).toBeNull();
    expect(() => s1.copy(da, da)).toThrow(lib.InvalidArgumentError);
  } finally {
    ctx.destroy();
  }
});
