/**
 * Structure checks (STYLE.md): no circular imports in src/, internal files never import the barrel
 * (src/index.ts), data flows one way (src/ never imports bench/ or test/), and the shaders are
 * loaded from shaders/*.wgsl, not pasted into strings.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve, dirname } from 'node:path';
import { describe, expect, it } from 'vitest';

const src = resolve(import.meta.dirname, '../src');
const files = readdirSync(src).filter((f) => f.endsWith('.ts'));

/** Runtime imports (type-only imports cannot form a cycle at run time, but we count them too). */
function imports(file: string): string[] {
  const code = readFileSync(join(src, file), 'utf8');
  return [...code.matchAll(/^\s*(?:import|export)\s[^'"]*?from\s+'([^']+)'/gm)].map((m) => m[1]!);
}

function localTargets(file: string): string[] {
  return imports(file)
    .filter((s) => s.startsWith('.'))
    .map((s) => resolve(dirname(join(src, file)), s).replace(/\.js$/, '.ts'))
    .filter((p) => p.startsWith(src + '/'))
    .map((p) => p.slice(src.length + 1));
}

describe('src/ structure', () => {
  it('has no circular imports', () => {
    const graph = new Map(files.map((f) => [f, localTargets(f).filter((t) => t !== 'index.ts')]));
    const cycles: string[] = [];
    const state = new Map<string, 'visiting' | 'done'>();
    const visit = (f: string, path: string[]): void => {
      if (state.get(f) === 'done') return;
      if (state.get(f) === 'visiting') {
        cycles.push([...path.slice(path.indexOf(f)), f].join(' -> '));
        return;
      }
      state.set(f, 'visiting');
      for (const t of graph.get(f) ?? []) visit(t, [...path, f]);
      state.set(f, 'done');
    };
    for (const f of files) visit(f, []);
    // Type-only cycles are harmless at run time; report only cycles of value imports.
    const valueCycles = cycles.filter((c) => {
      const hops = c.split(' -> ');
      return hops.slice(0, -1).every((from, i) => {
        const to = hops[i + 1]!;
        const code = readFileSync(join(src, from), 'utf8');
        const re = new RegExp(`^\\s*import\\s+(?!type\\b)[^'"]*from\\s+'\\./${to.replace('.ts', '')}\\.js'`, 'm');
        return re.test(code);
      });
    });
    expect(valueCycles).toEqual([]);
  });

  it('internal files never import the barrel; index.ts and node.ts only re-export', () => {
    for (const f of files.filter((f) => f !== 'node.ts')) expect(localTargets(f), f).not.toContain('index.ts');
    const index = readFileSync(join(src, 'index.ts'), 'utf8').replace(/\/\*[\s\S]*?\*\//g, '');
    for (const line of index.split('\n').filter((l) => l.trim())) expect(line).toMatch(/^\s*(export|\}|[A-Za-z]+,?$|\s)/);
  });

  it('never imports bench/ or test/ (data flows scenario -> stream -> scheduler -> GPUQueue)', () => {
    for (const f of files) for (const i of imports(f)) expect(i, f).not.toMatch(/\/(bench|test)\//);
  });

  it('loads WGSL from shaders/ with ?raw imports', () => {
    const kernels = readFileSync(join(src, 'kernels.ts'), 'utf8');
    for (const s of ['vector_add', 'sleep', 'compute_intensive']) expect(kernels).toContain(`../shaders/${s}.wgsl?raw`);
    for (const f of files) expect(readFileSync(join(src, f), 'utf8'), f).not.toMatch(/@compute\s+@workgroup_size/);
  });
});

import { reflectWgsl } from '../src/kernels.js';

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
