/**
 * Safetensors (src/safetensors.ts): a file written by the encoder reads back with every tensor's
 * dtype, shape and byte range, a layer's tensors move to the GPU with one uploadFrom and land byte
 * for byte (fresh seeded random data); files that are not what they say fail with UploadSourceError.
 */
import { mkdtempSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { useGpuContext, rng, randomSeed } from './fixtures/gpu.js';
import { openFile } from '../src/node.js';
import { encodeSafetensors, SafetensorsFile, safetensorsHeader, UploadSourceError, type Context } from '../src/index.js';

let ctx: Context & { errors: string[] };
useGpuContext((c) => (ctx = c), { sanitize: 'throw' });
const dir = mkdtempSync(join(tmpdir(), 'webgpu-streams-safetensors-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const seed = randomSeed();
const r = rng(seed);
const bytes = (n: number): Uint8Array => new Uint8Array(r.u32Array(Math.ceil(n / 4)).buffer, 0, n);
let files = 0;
const write = (data: Uint8Array): string => {
  const p = join(dir, `f${files++}.safetensors`);
  writeFileSync(p, data);
  return p;
};
const header = (json: string, extra = 0): Uint8Array => {
  const j = new TextEncoder().encode(json);
  const out = new Uint8Array(8 + j.byteLength + extra);
  new DataView(out.buffer).setBigUint64(0, BigInt(j.byteLength), true);
  out.set(j, 8);
  return out;
};

describe(`safetensors (seed ${seed})`, () => {
  const tensors = [
    { name: 'embed.weight', dtype: 'F32', shape: [16, 8], data: bytes(16 * 8 * 4) },
    { name: 'layers.0.w', dtype: 'F32', shape: [64], data: bytes(256) },
    { name: 'layers.0.b', dtype: 'F16', shape: [2, 6], data: bytes(24) },
    { name: 'layers.1.w', dtype: 'F32', shape: [64], data: bytes(256) },
    { name: 'layers.1.b', dtype: 'U8', shape: [4], data: bytes(4) },
  ];

  it('reads back every tensor, and a layer moves to the GPU with one uploadFrom', async () => {
    const file = await openFile(write(encodeSafetensors(tensors, { format: 'pt' })));
    try {
      const st = await SafetensorsFile.open(file);
      expect(st.metadata).toEqual({ format: 'pt' });
      expect(st.tensors.map((t) => [t.name, t.dtype, t.shape, t.size])).toEqual(tensors.map((t) => [t.name, t.dtype, t.shape, t.data.byteLength]));
      expect(st.tensors[0]!.offset % 8).toBe(0); // data 8-byte aligned after the padded header
      const layer1 = st.layer(1);
      expect(layer1.map((t) => t.name)).toEqual(['layers.1.w', 'layers.1.b']);
      const span = st.span(layer1);
      expect(span.size).toBe(260);
      // Past the last layer: none (the loop's end); an index that is not one is refused, not made a pattern.
      expect(st.layer(2)).toEqual([]);
      expect(() => st.span(st.layer(2))).toThrow(/no tensors to span \(a layer\(\) past the last layer has none\)/);
      for (const bad of [-1, 1.5, '1|0' as unknown as number]) expect(() => st.layer(bad), String(bad)).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', op: 'safetensors.layer' }));
      const dst = ctx.alloc(260, { label: 'layer1' });
      const s = ctx.createStream({ label: 'load' });
      s.uploadFrom(file, dst, span);
      const got = new Uint8Array(260);
      s.download(dst, got);
      await s.synchronize();
      expect(got).toEqual(new Uint8Array([...tensors[3]!.data, ...tensors[4]!.data]));
      expect(() => st.tensor('layers.9.w')).toThrow(/no tensor 'layers.9.w'.*it has 5: embed.weight/);
      expect(() => st.span([st.tensor('layers.0.w'), st.tensor('layers.1.w')])).toThrow(/not back to back/);
    } finally {
      await file.close();
    }
  });

  it('refuses files that are not what they say, typed', async () => {
    const ok = encodeSafetensors(tensors.slice(0, 2));
    const truncated = write(ok);
    truncateSync(truncated, ok.byteLength - 10);
    const cases: [string, string | Uint8Array, RegExp][] = [
      ['shorter than 8 bytes', new Uint8Array(5), /5 bytes, shorter than the 8-byte header length/],
      ['a header length past the end', header('{}').map((b, i) => (i === 0 ? 200 : b)), /header length 200 exceeds/],
      ['a header that is not JSON', header('{"a": '), /header is not JSON/],
      ['an unknown dtype', header('{"w":{"dtype":"F12","shape":[1],"data_offsets":[0,4]}}', 4), /dtype "F12"/],
      ['a header that lies about sizes', header('{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}}', 8), /needs 16 bytes, its data_offsets give 8/],
      ['a truncated file', truncated, /past the end of the file .*truncated\?/],
      // As the reference implementation: tensors fill the data back to back.
      ['overlapping tensors', header('{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}', 6), /tensor 'b' starts at byte \d+, not at \d+ where 'a' ends: its data_offsets overlap another tensor/],
      ['one range twice', header('{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}', 4), /overlap another tensor/],
      ['a gap between tensors', header('{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}}', 12), /tensor 'b' starts .*: its data_offsets leave a gap/],
      ['bytes after the last tensor', header('{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}', 12), /its tensors end at byte \d+, not at the end of the file/],
      ['__metadata__ not of strings', header('{"__metadata__":{"n":3}}'), /its __metadata__ is \{"n":3\}, not an object of strings/],
      ['a header length past the 100 MiB limit', header('{}').map((b, i) => [1, 0, 0x40, 6][i] ?? b), /header length 104857601 exceeds the 100 MiB limit/],
    ];
    for (const [what, data, message] of cases) {
      const file = await openFile(typeof data === 'string' ? data : write(data));
      try {
        const err = await SafetensorsFile.open(file).then(() => null, (e: unknown) => e);
        expect(err, what).toBeInstanceOf(UploadSourceError);
        expect((err as Error).message, what).toMatch(message);
      } finally {
        await file.close();
      }
    }
  });

  it('refuses what is no random-access source at the call, and a read() that returns more than asked for', async () => {
    for (const source of [null, { size: NaN, read: async () => 0 }, { size: 16 }]) {
      await expect(SafetensorsFile.open(source as never), JSON.stringify(source)).rejects.toMatchObject({ name: 'InvalidArgumentError', op: 'safetensors' });
    }
    const file = encodeSafetensors(tensors.slice(1, 2));
    const greedy = { size: file.byteLength, read: async (into: Uint8Array, at: number) => (into.set(file.subarray(at, at + into.byteLength)), into.byteLength + 8) };
    await expect(SafetensorsFile.open(greedy)).rejects.toMatchObject({ name: 'UploadSourceError', message: expect.stringMatching(/read\(\) returned 16 for 8 bytes asked for/) });
    // An empty tensor at the offset of another spans with it, whatever the header's order.
    const empty = header('{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"z":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}', 4);
    const st = await SafetensorsFile.open({ size: empty.byteLength, read: async (into, at) => (into.set(empty.subarray(at, at + into.byteLength)), Math.min(into.byteLength, empty.byteLength - at)) });
    expect(st.span([st.tensor('a'), st.tensor('z')])).toEqual({ offset: empty.byteLength - 4, size: 4 });
  });

  it('a file cut short after its header was read fails the upload, that op alone', async () => {
    const data = encodeSafetensors([{ name: 'layers.0.w', dtype: 'F32', shape: [1 << 18], data: bytes(1 << 20) }]);
    const path = write(data);
    const file = await openFile(path);
    try {
      const st = await SafetensorsFile.open(file);
      truncateSync(path, data.byteLength - 4096);
      const dst = ctx.alloc(1 << 20, { label: 'w' });
      const s = ctx.createStream({ label: 'load' });
      s.uploadFrom(file, dst, st.span(st.layer(0)));
      const err = await s.synchronize().then(() => null, (e: unknown) => e);
      expect(err).toBeInstanceOf(UploadSourceError);
      expect((err as Error).message).toMatch(/ended at byte \d+, before the 1048576 bytes/);
    } finally {
      await file.close();
    }
  });

  it('writes a header for data written separately', () => {
    const h = safetensorsHeader([{ name: 'a', dtype: 'BF16', shape: [3] }]);
    expect(h.byteLength % 8).toBe(0);
    expect(JSON.parse(new TextDecoder().decode(h.subarray(8)))).toEqual({ a: { dtype: 'BF16', shape: [3], data_offsets: [0, 6] } });
    expect(() => encodeSafetensors([{ name: 'a', dtype: 'F32', shape: [2], data: new Uint8Array(4) }])).toThrow(/needs 8 bytes, got 4/);
  });

  it('writes only what its reader accepts: duplicate or reserved names, non-integer shapes, metadata that is no strings are refused at the call', async () => {
    const t = (name: string, shape: unknown = [1]): never => ({ name, dtype: 'F32', shape, data: new Uint8Array(4) }) as never;
    const refused = (f: () => unknown, message: RegExp): void => {
      expect(f).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', op: 'safetensors', message: expect.stringMatching(message) }));
    };
    refused(() => encodeSafetensors([t('a'), t('a')]), /tensors\[1\] is named 'a', as an earlier tensor is; names are unique/);
    refused(() => encodeSafetensors([t('__metadata__')]), /tensors\[0\] is named '__metadata__', the header's metadata key/);
    refused(() => encodeSafetensors([t('a')], { a: 1 } as never), /metadata 'a' is `1` \(number\); safetensors metadata values are strings/);
    refused(() => safetensorsHeader([{ name: 'a', dtype: 'F32', shape: [1.5] }]), /shape\[0\] of 'a'/);
    refused(() => encodeSafetensors([t('a', 'x')]), /the shape of 'a' to be an array/);
    refused(() => encodeSafetensors([null as never]), /tensors\[0\]/);
    refused(() => encodeSafetensors(null as never), /`tensors` to be an array/);
    for (const dtype of ['constructor', '__proto__', ['F32']]) refused(() => safetensorsHeader([{ name: 'a', dtype: dtype as never, shape: [1] }]), /unknown dtype/);
    // A tensor named like an Object.prototype key is a tensor like any other, and reads back.
    const seed0 = randomSeed();
    const data = new Uint8Array(rng(seed0).u32Array(2).buffer as ArrayBuffer);
    const bytes = encodeSafetensors([{ name: '__proto__', dtype: 'F32', shape: [1], data: data.subarray(0, 4) }, { name: 'b', dtype: 'F32', shape: [1], data: data.subarray(4) }], { format: 'pt' });
    const st = await SafetensorsFile.open({ size: bytes.byteLength, read: async (into, at) => (into.set(bytes.subarray(at, at + into.byteLength)), Math.min(into.byteLength, bytes.byteLength - at)) });
    expect(st.tensors.map((x) => x.name)).toEqual(['__proto__', 'b']);
    expect(st.metadata).toEqual({ format: 'pt' });
    expect(() => st.span(null as never)).toThrow(expect.objectContaining({ name: 'InvalidArgumentError', op: 'safetensors.span' }));
  });
});
