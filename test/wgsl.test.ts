/**
 * WGSL reflection (src/wgsl.ts): the minimum buffer size of each binding, with consts, const-expressions,
 * aliases, `@size`/`@align` and nested types resolved, checked against Dawn's own computation;
 * bindings whose size was guessed are marked inexact; reflection errors name op 'kernel'.
 */
import { describe, expect, it } from 'vitest';
import { useGpuContext } from './fixtures/gpu.js';
import { InvalidArgumentError, type Context } from '../src/index.js';
import { reflectWgsl } from '../src/wgsl.js';

const STORAGE = 0x80;
const UNIFORM = 0x40;

/** [what, module-scope declarations, binding type, address space, minBytes] for a valid kernel. */
type Case = [string, string, string, 'storage' | 'uniform', number];

const exactCases: Case[] = [
  // Scalars, vectors, matrices
  ['f32', '', 'f32', 'storage', 4],
  ['atomic', '', 'array<atomic<u32>, 4>', 'storage', 16],
  ['vec3f alone is 12 bytes', '', 'vec3f', 'storage', 12],
  ['vec3<f32> alone', '', 'vec3<f32>', 'storage', 12],
  ['vec2<i32>', '', 'vec2<i32>', 'storage', 8],
  ['mat4x4f', '', 'mat4x4f', 'storage', 64],
  ['mat4x4<f32>', '', 'mat4x4<f32>', 'storage', 64],
  ['mat3x3f: columns padded to 16', '', 'mat3x3f', 'storage', 48],
  ['mat2x3f: 2 columns of vec3', '', 'mat2x3f', 'storage', 32],
  ['mat3x2<f32>: 3 columns of vec2', '', 'mat3x2<f32>', 'storage', 24],
  ['mat2x2f', '', 'mat2x2f', 'storage', 16],
  ['array of matrices', '', 'array<mat3x3f, 2>', 'storage', 96],
  ['nested arrays (>> closes two lists)', '', 'array<array<f32, 4>, 2>', 'storage', 32],
  // Runtime-sized arrays count one element
  ['runtime array<f32>', '', 'array<f32>', 'storage', 4],
  ['runtime array<vec3f>: stride 16', '', 'array<vec3f>', 'storage', 16],
  ['runtime array of a 12-byte struct', 'struct S3 { a: f32, b: f32, c: f32 }', 'array<S3>', 'storage', 12],
  // Consts and const-expressions
  ['const N = 64u', 'const N = 64u;', 'array<f32, N>', 'storage', 256],
  ['typed const expression', 'const N: u32 = 4 * 16;', 'array<f32, N>', 'storage', 256],
  ['consts declared after use', 'const N = M * 2u;\nconst M: u32 = 4 * 8;', 'array<f32, N>', 'storage', 256],
  ['hex literal with suffix', 'const H = 0x10i;', 'array<u32, H>', 'storage', 64],
  ['+ - * / % and parentheses', 'const B = (A + 1) * 2 - 10 / 3 % 2;\nconst A = 3;', 'array<vec4f, B>', 'storage', 112],
  ['unary minus, min, max', 'const C = -(-5) + max(2, min(7, 3));', 'array<f32, C>', 'storage', 32],
  ['literal expression in the type', '', 'array<f32, 2 * (3 + 1)>', 'storage', 32],
  ['function-scope const does not shadow', 'const N = 8;\nfn helper() -> u32 { const N = 2; return N; }', 'array<f32, N>', 'storage', 32],
  // Aliases
  ['alias of an array', 'alias Block = array<vec4f, 8>;', 'Block', 'storage', 128],
  ['alias of a vector, used in an array', 'alias V = vec3<f32>;', 'array<V, 3>', 'storage', 48],
  ['alias of a vector alone', 'alias V = vec3<f32>;', 'V', 'storage', 12],
  ['chained aliases in any order', 'alias C2 = B2;\nalias B2 = array<A2, 2>;\nalias A2 = vec2f;', 'array<C2, 3>', 'storage', 48],
  ['alias of a scalar as vector element', 'alias F = f32;', 'vec4<F>', 'storage', 16],
  ['alias of a matrix', 'alias M = mat4x4f;', 'array<M, 2>', 'storage', 128],
  ['alias of a struct, array of it', 'struct P { x: f32, y: vec3f }\nalias PA = P;\nalias Ps = array<PA, 4>;', 'Ps', 'storage', 128],
  // Structs: vec3, nesting, arrays of structs, trailing runtime arrays
  ['vec3 then f32 share 16 bytes', 'struct V3 { a: vec3f, b: f32 }', 'V3', 'storage', 16],
  ['two vec3', 'struct V3 { a: vec3f, b: vec3f }', 'V3', 'storage', 32],
  ['f32 then vec3', 'struct V3 { a: f32, b: vec3f }', 'V3', 'storage', 32],
  ['struct size rounds to its alignment', 'struct S { a: vec3f, b: f32, c: vec2<f32> }', 'S', 'storage', 32],
  ['matrix member', 'struct SM { a: f32, m: mat2x2f }', 'SM', 'storage', 24],
  ['nested struct', 'struct In { a: vec3f, b: f32 }\nstruct Out { x: u32, i: In, y: u32 }', 'Out', 'storage', 48],
  ['array of structs', 'struct In { a: vec3f, b: f32 }', 'array<In, 5>', 'storage', 80],
  ['array of padded structs', 'struct Odd { a: vec3f }', 'array<Odd, 3>', 'storage', 48],
  ['array of 12-byte structs', 'struct S3 { a: f32, b: f32, c: f32 }', 'array<S3, 3>', 'storage', 36],
  ['struct declared after the struct using it', 'struct Out { x: u32, i: In }\nstruct In { a: vec4f }', 'Out', 'storage', 32],
  ['trailing runtime array', 'struct R { n: u32, tail: array<f32> }', 'R', 'storage', 8],
  ['trailing runtime array after a vec4', 'struct R { a: vec4f, tail: array<f32> }', 'R', 'storage', 32],
  ['trailing runtime array of vec3', 'struct R { n: u32, tail: array<vec3f> }', 'R', 'storage', 32],
  ['const-sized array member', 'const K = 6;\nstruct T { n: u32, data: array<f32, K> }', 'T', 'storage', 28],
  // @size and @align
  ['@size and @align', 'struct A { @size(16) a: f32, @align(16) b: u32, c: vec2f }', 'A', 'storage', 32],
  ['@align raises the struct alignment', 'struct A { a: u32, @align(32) b: f32 }', 'A', 'storage', 64],
  ['@size on the last member', 'struct A { a: f32, @size(20) b: f32 }', 'A', 'storage', 24],
  ['@size and @align from consts', 'const W = 8;\nstruct A { @align(W * 2) a: u32, @size(W + 4) b: u32 }', 'A', 'storage', 16],
  ['@size on a nested struct member', 'struct E { a: f32 }\nstruct A { @size(32) e: E, b: f32 }', 'A', 'storage', 36],
  // Uniform buffers: the same layout (the uniform rules constrain offsets, they add no padding)
  ['uniform struct of two f32', 'struct P { a: f32, b: f32 }', 'P', 'uniform', 8],
  ['uniform f32', '', 'f32', 'uniform', 4],
  ['uniform vec3f', '', 'vec3f', 'uniform', 12],
  ['uniform array of vec4', '', 'array<vec4f, 4>', 'uniform', 64],
  ['uniform struct with matrix', 'struct U { m: mat4x4f, v: vec3f, s: f32 }', 'U', 'uniform', 80],
  ['uniform @align/@size', 'struct UA { @align(16) a: f32, @size(16) b: f32 }', 'UA', 'uniform', 32],
  ['uniform nested struct aligned to 16', 'struct E { a: f32 }\nstruct UN { x: f32, @align(16) e: E, @align(16) y: f32 }', 'UN', 'uniform', 48],
  ['uniform array of structs', 'struct E4 { a: vec4f }\nconst N = 3;', 'array<E4, N>', 'uniform', 48],
];

function kernelWgsl(decls: string, type: string, space: 'storage' | 'uniform'): string {
  const v = space === 'uniform' ? 'var<uniform>' : 'var<storage, read_write>';
  return `${decls}\n@group(0) @binding(0) ${v} v: ${type};\n@compute @workgroup_size(1) fn main() { _ = &v; }`;
}

describe('reflection (minBytes and exact)', () => {
  it.each(exactCases)('%s: %s / %s in %s is %i bytes, exact', (_what, decls, type, space, bytes) => {
    const [b] = reflectWgsl(kernelWgsl(decls, type, space), 'main').bindings;
    expect(b).toMatchObject({ binding: 0, name: 'v', kind: space === 'uniform' ? 'uniform' : 'storage', minBytes: bytes, exact: true });
  });

  it.each([
    ['override-sized array in a struct', 'override K: u32 = 4;\nstruct S { n: u32, data: array<f32, K> }', 'S', 8],
    ['override-sized array', 'override K: u32 = 4;', 'array<vec4f, K>', 16],
    ['unknown identifier as count', '', 'array<f32, NOPE>', 4],
    ['unknown identifier in a const', 'const N = NOPE * 2;', 'array<f32, N>', 4],
    ['cyclic consts', 'const A = B;\nconst B = A + 1;', 'array<f32, A>', 4],
    ['float count', '', 'array<f32, 2.5>', 4],
    ['unsupported operator', '', 'array<f32, (1 << 3)>', 4],
    ['unknown type', '', 'Mystery', 4],
    ['unknown member type', 'struct S { a: vec4f, b: Mystery }', 'S', 32],
    ['@size from an override', 'override K = 16;\nstruct S { @size(K) a: f32, b: f32 }', 'S', 8],
    ['cyclic aliases', 'alias A = B;\nalias B = A;', 'A', 4],
  ])('%s is inexact: a lower bound of %s', (_what, decls, type, bytes) => {
    const [b] = reflectWgsl(kernelWgsl(decls, type, 'storage'), 'main').bindings;
    expect(b).toMatchObject({ minBytes: bytes, exact: false });
  });

  it('f16 types use 2-byte elements', () => {
    const cases: [string, string, number][] = [
      ['', 'vec3h', 6],
      ['', 'array<vec3<f16>, 2>', 16],
      ['', 'mat2x2h', 8],
      ['', 'mat3x3h', 24],
      ['struct H { a: f16, b: f16, c: vec2h }', 'H', 8],
      ['alias V = vec2h;', 'array<V, 3>', 12],
    ];
    for (const [decls, type, bytes] of cases) {
      const [b] = reflectWgsl(`enable f16;\n${kernelWgsl(decls, type, 'storage')}`, 'main').bindings;
      expect(b, type).toMatchObject({ minBytes: bytes, exact: true });
    }
  });

  it('reads bindings in any attribute order, past comments, in binding order', () => {
    const wgsl = `
      /* a block comment /* nested */ @group(1) @binding(9) var<storage> ghost: array<f32>; */
      // @group(2) @binding(0) var<storage> gone: f32;
      const B = 1;
      @binding(B + 1) @group(0) var<storage, read> c: array<vec4f>;
      @group(0) @binding(0) var<uniform> a: vec4f;
      @group(0) @binding(B) var<storage, read_write> b: array<u32, 8>;
      override WG_Y: u32 = 2;
      const WG = 32;
      @compute @workgroup_size(WG * 2) fn main() { _ = a; _ = &b; _ = &c; }
      @workgroup_size(8, WG_Y) @compute fn other() {}
      fn notEntry() {}`;
    const r = reflectWgsl(wgsl, 'main');
    expect(r.bindings.map((b) => [b.name, b.kind, b.minBytes, b.exact])).toEqual([
      ['a', 'uniform', 16, true],
      ['b', 'storage', 32, true],
      ['c', 'read-only-storage', 16, true],
    ]);
    expect(r.overrides.map((o) => o.key)).toEqual(['WG_Y']);
    expect(r.entryPoints).toEqual(['main', 'other']);
    expect(r.workgroupSize).toEqual([64, 1, 1]);
    expect(reflectWgsl(wgsl, 'other').workgroupSize).toBeNull(); // depends on an override
  });
});

describe('WGSL reflection', () => {
  it.each([
    ['array<f32>', 4],
    ['array<vec4<f32>>', 16],
    ['array<vec3f>', 16],
    ['array<u32, 8>', 32],
    ['S', 32], // struct S { a: vec3f, b: f32, c: vec2<f32> } -> 12 + 4, then 8 at offset 16 -> 24, aligned to 16 -> 32
    ['T', 20], // struct T { n: u32, data: array<f32, 4> }: 4 + 16
    ['mat4x4<f32>', 64],
    ['R', 8], // struct R { n: u32, tail: array<f32> }: a runtime-sized tail counts one element
  ])('min binding size of %s is %i bytes', (type, bytes) => {
    const wgsl = `struct S { a: vec3f, b: f32, c: vec2<f32> }\nstruct T { n: u32, data: array<f32, 4> }\nstruct R { n: u32, tail: array<f32> }\n@group(0) @binding(0) var<storage, read_write> v: ${type};\n@compute @workgroup_size(1) fn main() {}`;
    expect(reflectWgsl(wgsl, 'main').bindings[0]!.minBytes).toBe(bytes);
  });
});

let ctx: Context & { errors: string[] };
useGpuContext((c) => (ctx = c));

/** Binds a buffer of `bytes` to the kernel's own layout and dispatches; the validation error, if any. */
async function dispatchError(k: ReturnType<Context['kernel']>, bytes: number, usage: number): Promise<string | undefined> {
  const { device } = ctx;
  const buffer = device.createBuffer({ size: bytes, usage, label: `reflect ${bytes}` });
  device.pushErrorScope('validation');
  const bindGroup = device.createBindGroup({ layout: k.layouts[0]!, entries: [{ binding: 0, resource: { buffer } }] });
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  pass.setPipeline(k.pipeline(undefined).pipeline);
  pass.setBindGroup(0, bindGroup);
  pass.dispatchWorkgroups(1);
  pass.end();
  device.queue.submit([encoder.finish()]);
  const err = await device.popErrorScope();
  buffer.destroy();
  return err?.message;
}

describe('minBytes matches Dawn (layout minBindingSize 0, checked at dispatch)', () => {
  it.each(exactCases)('%s: %s / %s in %s', async (_what, decls, type, space, bytes) => {
    const k = ctx.kernel(kernelWgsl(decls, type, space), { label: 'reflect' });
    expect(k.bindings[0]).toMatchObject({ minBytes: bytes, exact: true });
    expect(await k.pipeline(undefined).validated).toBeUndefined();
    const usage = space === 'uniform' ? UNIFORM : STORAGE;
    expect(await dispatchError(k, bytes, usage)).toBeUndefined();
    if (bytes > 4) expect(await dispatchError(k, bytes - 4, usage)).toMatch(/./);
  });
});

describe('kernel errors name op "kernel"', () => {
  const ok = '@group(0) @binding(0) var<storage, read_write> d: array<u32>;\n@compute @workgroup_size(1) fn main() { d[0] = 1u; }';

  function thrown(fn: () => unknown): InvalidArgumentError {
    let err: unknown;
    try {
      fn();
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(err).toMatchObject({ op: 'kernel' });
    return err as InvalidArgumentError;
  }

  it('a binding in @group(1) with nothing in @group(0), or in @group(4)', () => {
    const e = thrown(() => ctx.kernel('@group(1) @binding(0) var<storage, read_write> d: array<u32>;\n@compute @workgroup_size(1) fn main() { d[0] = 1u; }'));
    expect(e.message).toMatch(/expected @group\(0\) @binding\(0\), found @group\(1\) @binding\(0\) \('d'\)/);
    const four = thrown(() => ctx.kernel('@group(4) @binding(0) var<storage, read_write> d: array<u32>;\n@compute @workgroup_size(1) fn main() { d[0] = 1u; }'));
    expect(four.message).toMatch(/'d' is in @group\(4\); WebGPU guarantees @group\(0\) to @group\(3\)/);
  });

  it('gapped binding numbers', () => {
    const e = thrown(() => ctx.kernel('@group(0) @binding(0) var<storage, read_write> a: array<u32>;\n@group(0) @binding(2) var<storage, read_write> b: array<u32>;\n@compute @workgroup_size(1) fn main() { a[0] = b[0]; }'));
    expect(e.message).toMatch(/without gaps; expected @group\(0\) @binding\(1\), found @group\(0\) @binding\(2\) \('b'\)/);
  });

  it('reflectWgsl called directly names op "kernel" too', () => {
    thrown(() => reflectWgsl('@group(4) @binding(0) var<storage> d: f32;', 'main'));
  });

  it('a texture_external binding, or a type that is no resource', () => {
    const e = thrown(() => ctx.kernel('@group(0) @binding(0) var t: texture_external;\n@compute @workgroup_size(1) fn main() { _ = t; }'));
    expect(e.message).toMatch(/'t' is a texture_external/);
    const f = thrown(() => ctx.kernel('@group(0) @binding(0) var<private> t: f32;\n@compute @workgroup_size(1) fn main() { _ = t; }'));
    expect(f.message).toMatch(/'t' is not a buffer, texture, storage texture or sampler/);
  });

  it.each([
    ['texture_2d<f32>', { kind: 'texture', sampleType: 'unfilterable-float', viewDimension: '2d', multisampled: false }],
    ['texture_2d_array<u32>', { kind: 'texture', sampleType: 'uint', viewDimension: '2d-array' }],
    ['texture_3d<i32>', { kind: 'texture', sampleType: 'sint', viewDimension: '3d' }],
    ['texture_multisampled_2d<f32>', { kind: 'texture', sampleType: 'unfilterable-float', multisampled: true }],
    ['texture_depth_cube', { kind: 'texture', sampleType: 'depth', viewDimension: 'cube' }],
    ['texture_storage_2d<rgba16float, read_write>', { kind: 'storage-texture', format: 'rgba16float', access: 'read_write', viewDimension: '2d' }],
    ['texture_storage_1d<r32uint, read>', { kind: 'storage-texture', format: 'r32uint', access: 'read', viewDimension: '1d' }],
    ['sampler_comparison', { kind: 'sampler', samplerType: 'comparison' }],
  ])('reflects %s', (type, want) => {
    const r = reflectWgsl(`@group(0) @binding(0) var v: ${type};\n@compute @workgroup_size(1) fn main() {}`, 'main');
    expect(r.bindings[0]).toMatchObject({ group: 0, binding: 0, name: 'v', minBytes: 0, ...want });
  });

  it('a texture_2d<f32> reflects as float when the module has a filtering sampler; bindings sort by group, then binding', () => {
    const r = reflectWgsl('@group(1) @binding(0) var<uniform> u: vec4f;\n@group(0) @binding(1) var s: sampler;\n@group(0) @binding(0) var t: texture_2d<f32>;\n@compute @workgroup_size(1) fn main() {}', 'main');
    expect(r.bindings.map((b) => [b.group, b.binding, b.name, b.sampleType ?? b.samplerType ?? b.kind])).toEqual([
      [0, 0, 't', 'float'],
      [0, 1, 's', 'filtering'],
      [1, 0, 'u', 'uniform'],
    ]);
  });

  it('an unknown option', () => {
    const e = thrown(() => ctx.kernel(ok, { entrypoint: 'main' } as never));
    expect(e.message).toMatch(/Unknown option `options.entrypoint`/);
  });

  it('a label that is not a string', () => {
    const e = thrown(() => ctx.kernel(ok, { label: 5 } as never));
    expect(e.message).toMatch(/`label` to be a string, got `5` \(number\)/);
  });

  it('an entryPoint that is not a string', () => {
    const e = thrown(() => ctx.kernel(ok, { entryPoint: null } as never));
    expect(e.message).toMatch(/`entryPoint` to be a string, got `null` \(null\)/);
  });

  it('options that are not a plain object', () => {
    expect(thrown(() => ctx.kernel(ok, 'main' as never)).message).toMatch(/`options` to be an options object, got `"main"` \(string\)/);
    expect(thrown(() => ctx.kernel(ok, new Map() as never)).message).toMatch(/`options` to be a plain object/);
  });

  it('a missing entry point lists the compute entry points', () => {
    const two = `${ok}\n@compute @workgroup_size(1) fn other() {}\nfn helper() {}`;
    const e = thrown(() => ctx.kernel(two, { entryPoint: 'helper' }));
    expect(e.message).toMatch(/no @compute entry point 'helper'; found 'main', 'other'/);
    expect(e).toMatchObject({ op: 'kernel', context: ctx.label });
    expect(thrown(() => ctx.kernel('// @compute @workgroup_size(1) fn main() {}\nfn main() {}')).message).toMatch(/'main'; the source declares no @compute function at all: is it WGSL\?/);
  });

  it('valid options still work', () => {
    const k = ctx.kernel(`${ok}\n@compute @workgroup_size(4) fn second() { d[1] = 2u; }`, { entryPoint: 'second' });
    expect([k.entryPoint, k.label, k.workgroupSize]).toEqual(['second', 'second', [4, 1, 1]]);
    expect(ctx.kernel(ok, undefined).label).toBe('main');
  });
});
