/**
 * Structure checks (STYLE.md): no two modules of src/ import each other, not even for types; internal
 * files never import the barrel (src/index.ts); data flows one way (src/ never imports bench/ or
 * test/; bench/, its tests in bench/test/ included, imports the library only as 'webgpu-streams');
 * WGSL is loaded from .wgsl files (tests, in test/ and bench/test/, may write it inline);
 * measurements and commit hashes live in bench/README.md or docs/PERFORMANCE.md, not in src/.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

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

/** The specifiers a file imports or re-exports, type-only and dynamic imports included. */
function imports(file: string): string[] {
  const code = readFileSync(join(root, file), 'utf8');
  const statics = [...code.matchAll(/^\s*(?:import|export)\s[^'"]*?from\s+'([^']+)'/gm)].map((m) => m[1]!);
  const dynamics = [...code.matchAll(/\bimport\(\s*'([^']+)'\s*\)/g)].map((m) => m[1]!);
  return [...statics, ...dynamics];
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

  it('has one concept per file: no file over 450 lines', () => {
    const long = tsFiles(src)
      .map((f) => [f, readFileSync(join(root, f), 'utf8').split('\n').length - 1] as const)
      .filter(([, n]) => n > 450);
    expect(long).toEqual([]);
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
    const benchFiles = tsFiles(join(root, 'bench')).filter((f) => !f.startsWith('bench/test/'));
    for (const f of [...srcFiles, ...benchFiles]) expect(readFileSync(join(root, f), 'utf8'), f).not.toMatch(/@compute\s+@workgroup_size/);
  });

  it('carries no measurements, device names or commit hashes in its comments', () => {
    for (const f of srcFiles) {
      const code = readFileSync(join(root, f), 'utf8');
      expect(code, f).not.toMatch(/\b(H100|H200|A100|RTX|GB\/s)\b|[0-9a-f]{7,12} *(commit|run)|BENCHMARKS\.md/);
    }
  });
  it('keeps devices, commit hashes and old file names out of the comments of bench/, test/ and examples/', () => {
    const files = ['bench', 'test', 'examples'].flatMap((d) => tsFiles(join(root, d)));
    for (const f of files) {
      const comments = (readFileSync(join(root, f), 'utf8').match(/\/\/.*|\/\*[\s\S]*?\*\//g) ?? []).join('\n');
      expect(comments, f).not.toMatch(/\b(H100|H200|A100|L20|RTX)\b|\bat [0-9a-f]{7,12}\b|[0-9a-f]{7,12} *(commit|run)|BENCHMARKS\.md/);
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

describe('vite.config.ts', () => {
  it('imports its local modules with their file extension (else every vite, vitest and npm run command warns of the native config loader)', () => {
    const code = readFileSync(join(root, 'vite.config.ts'), 'utf8');
    const local = [...code.matchAll(/^import\s[^'"]*?from\s+'(\.[^']+)'/gm)].map((m) => m[1]!);
    expect(local.length).toBeGreaterThan(0);
    for (const s of local) expect(s, `vite.config.ts imports ${s}`).toMatch(/\.(ts|js|mjs)$/);
  });
});
