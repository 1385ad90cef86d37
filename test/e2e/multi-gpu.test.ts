/**
 * Two GPUs of one model in one process (docs/MULTI_GPU.md), on SwiftShader: two copies of its
 * Vulkan driver stand for two identical GPUs, the device-select layer (tools/vk-devsel, built here)
 * tags them '[vk0]' and '[vk1]', and `createNodeContext({ adapter })` opens a context on each. A
 * copyPeer between them after a wait on the other's event lands byte for byte; an adapter that
 * matches nothing is a typed error naming what Dawn lists.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createNodeContext, WebGpuUnavailableError, type Context } from '../../src/node.js';
import { randomSeed, rng } from '../../bench/reference.js';
import { root } from './util.js';

const SWIFTSHADER = '/usr/lib/chromium/libvk_swiftshader.so';

describe('two identical GPUs through the device-select layer (SwiftShader twice)', () => {
  // The two driver manifests, removed after the tests (the loader reads them when an instance is made).
  let dir = '';
  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  beforeAll(() => {
    const built = spawnSync('bash', [join(root, 'tools/vk-devsel/build.sh')], { encoding: 'utf8', timeout: 120_000 });
    if (built.status !== 0) throw new Error(`tools/vk-devsel/build.sh failed:\n${built.stdout}\n${built.stderr}`);
    dir = mkdtempSync(join(tmpdir(), 'webgpu-streams-icd-'));
    const icds = ['a', 'b'].map((x) => {
      const path = join(dir, `swiftshader-${x}.json`);
      writeFileSync(path, JSON.stringify({ file_format_version: '1.0.0', ICD: { library_path: SWIFTSHADER, api_version: '1.0.5' } }));
      return path;
    });
    // Read by the Vulkan loader and the layer at each instance's creation: before this process's first.
    Object.assign(process.env, {
      VK_ICD_FILENAMES: icds.join(':'),
      VK_ADD_LAYER_PATH: join(root, 'tools/vk-devsel/out'),
      VK_INSTANCE_LAYERS: 'VK_LAYER_DEVSEL_pick',
      DEVSEL_TAG: '1',
      NODEVICE_SELECT: '1', // Mesa's own device-select layer, where installed, stays out of it
    });
  }, 150_000);

  it("opens a context on each with createNodeContext({ adapter: '[vk0]' | '[vk1]' }); copyPeer crosses after a waitEvent", async () => {
    const [a, b] = [await createNodeContext({ adapter: '[vk0]', label: 'gpu0' }), await createNodeContext({ adapter: '[vk1]', label: 'gpu1' })] as Context[];
    try {
      expect(a!.adapterInfo.device).toMatch(/vk0/);
      expect(b!.adapterInfo.device).toMatch(/vk1/);
      const seed = randomSeed();
      const data = rng(seed).u32Array((3 << 20) / 4);
      const src = a!.alloc(data.byteLength), dst = b!.alloc(data.byteLength);
      const sa = a!.createStream(), sb = b!.createStream();
      sa.upload(data, src);
      const uploaded = a!.createEvent();
      sa.record(uploaded);
      sb.waitEvent(uploaded);
      sb.copyPeer(src, dst);
      const back = new Uint32Array(data.length);
      sb.download(dst, back);
      await sb.synchronize();
      expect(back.findIndex((v, i) => v !== data[i]), `seed ${seed}`).toBe(-1);
    } finally {
      a!.destroy();
      b!.destroy();
    }
  });

  it('an adapter that matches nothing is WebGpuUnavailableError naming the adapters there are', async () => {
    const e = await createNodeContext({ adapter: '[vk2]' }).then(() => null, (err: unknown) => err);
    expect(e).toBeInstanceOf(WebGpuUnavailableError);
    expect((e as Error).message).toMatch(/no adapter named '\[vk2\]'/);
    expect((e as Error).message).toMatch(/\[vk0\]/);
  });
});
