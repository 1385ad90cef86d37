/**
 * Structure checks (STYLE.md): no two modules of src/ import each other, not even for types; internal
 * files never import the barrel (src/index.ts); data flows one way (src/ never imports bench/ or
 * test/; bench/ imports the library only as 'webgpu-streams'); WGSL is loaded from .wgsl files;
 * measurements and commit hashes live in bench/README.md or docs/PERFORMANCE.md, not in src/.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { reflectWgsl } from '../src/wgsl.js';

const root = resolve(import.meta.dirname, '..');
const src = join(root, 'src');

/** Every .ts file under `dir`, as paths relative to the repository root. */
function tsFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    if (statSync(p).isDirectory()) return f === 'results' || f === 'node_modules' ? [] : tsFiles(p);
    return f.endsWith('.ts') ? [relative(root, p)] : [];
  });
}

/** The specifiers a file imports or re-exports, type-only imports included. */
function imports(file: string): string[] {
  const code = readFileSync(join(root, file), 'utf8');
  return [...code.matchAll(/^\s*(?:import|export)\s[^'"]*?from\s+'([^']+)'/gm)].map((m) => m[1]!);
}

/** The src/ files `file` imports. */
function localTargets(file: string): string[] {
  return imports(file)
    .filter((s) => s.startsWith('.'))
    .map((s) => relative(root, resolve(dirname(join(root, file)), s)).replace(/\.js$/, '.ts'))
    .filter((p) => p.startsWith('src/') && p.endsWith('.ts'));
}

const srcFiles = tsFiles(src);

describe('src/ structure', () => {
  it('has no import cycle, type-only imports included', () => {
    const graph = new Map(srcFiles.map((f) => [f, localTargets(f).filter((t) => t !== 'src/index.ts')]));
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
    for (const f of srcFiles) visit(f, []);
    expect(cycles).toEqual([]);
  });

  it('internal files never import the barrel; index.ts and node.ts only re-export', () => {
    for (const f of srcFiles.filter((f) => f !== 'src/node.ts')) expect(localTargets(f), f).not.toContain('src/index.ts');
    const index = readFileSync(join(src, 'index.ts'), 'utf8').replace(/\/\*[\s\S]*?\*\//g, '');
    for (const line of index.split('\n').filter((l) => l.trim())) expect(line).toMatch(/^\s*(export|\}|[A-Za-z]+,?$|\s)/);
  });

  it('never imports bench/ or test/ (data flows scenario -> stream -> scheduler -> GPUQueue)', () => {
    for (const f of srcFiles) for (const i of imports(f)) expect(i, f).not.toMatch(/\/(bench|test)\//);
  });

  it('loads WGSL from .wgsl files with ?raw imports, never from strings', () => {
    expect(readFileSync(join(src, 'kernels.ts'), 'utf8')).toContain('../shaders/vector_add.wgsl?raw');
    for (const f of [...srcFiles, ...tsFiles(join(root, 'bench'))]) expect(readFileSync(join(root, f), 'utf8'), f).not.toMatch(/@compute\s+@workgroup_size/);
  });

  it('carries no measurements, device names or commit hashes in its comments', () => {
    for (const f of srcFiles) {
      const code = readFileSync(join(root, f), 'utf8');
      expect(code, f).not.toMatch(/\b(H100|H200|A100|RTX|GB\/s)\b|[0-9a-f]{7,12} *(commit|run)|BENCHMARKS\.md/);
    }
  });
});

describe('bench/', () => {
  it('imports the library only by its package name', () => {
    for (const f of tsFiles(join(root, 'bench'))) {
      for (const i of imports(f)) expect(i, `${f} imports ${i}`).not.toMatch(/(^|\/)src(\/|$)/);
    }
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
