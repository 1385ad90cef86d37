/**
 * WGSL reflection: what the runtime reads of a kernel's source to check a launch at the call: the
 * bindings (a buffer's kind and minimum size by WGSL's layout rules, consts, aliases, structs,
 * `@size` and `@align` resolved; textures and samplers in wgsl-resources.ts), the override names
 * and the workgroup size.
 * A small reader of declarations, not a WGSL compiler: anything it cannot work out marks the
 * binding inexact (`exact: false`), and the runtime then lets WebGPU judge that launch alone.
 */
import { InvalidArgumentError, type ErrorSite } from './errors.js';
import { expectString } from './validate.js';
import { resourceOf, type BindingInfo } from './wgsl-resources.js';

export type { BindingInfo } from './wgsl-resources.js';
const SCALARS: Record<string, number> = { f32: 4, u32: 4, i32: 4, f16: 2, bool: 4 };

interface Layout {
  size: number;
  align: number;
  /** False when part of the type was not understood and the size is a lower bound. */
  exact: boolean;
}

/** A type that was not understood: the smallest a host-shareable type can be (an f16). */
const UNKNOWN: Layout = { size: 2, align: 2, exact: false };

const roundUp = (n: number, a: number): number => Math.ceil(n / a) * a;

/** Removes `//` and (nested) `/* *\/` comments; a comment becomes a space, as WGSL treats it. */
function stripComments(code: string): string {
  let out = '';
  let depth = 0;
  let from = 0;
  for (let i = 0; i < code.length; i++) {
    const c = code[i];
    const d = code[i + 1];
    if (depth === 0 && c === '/' && d === '/') {
      out += code.slice(from, i) + ' ';
      const nl = code.indexOf('\n', i);
      i = nl < 0 ? code.length : nl - 1;
      from = i + 1;
    } else if (c === '/' && d === '*') {
      if (depth++ === 0) out += code.slice(from, i) + ' ';
      i++;
    } else if (depth > 0 && c === '*' && d === '/') {
      i++;
      if (--depth === 0) from = i + 1;
    }
  }
  return depth === 0 ? out + code.slice(from) : out;
}

/** Identifiers, number literals (hex, decimal, float, with suffixes) and single punctuation characters. */
const TOKEN = /0[xX][0-9a-fA-F.]+(?:[pP][+-]?\d+)?[fhiu]?|\d+\.?\d*(?:[eE][+-]?\d+)?[fhiu]?|\.\d+(?:[eE][+-]?\d+)?[fhiu]?|[\p{XID_Start}_]\p{XID_Continue}*|\S/gu;
const IDENT = /^[\p{XID_Start}_]\p{XID_Continue}*$/u;

const tokenize = (text: string): string[] => text.match(TOKEN) ?? [];

/** A position in a token list. */
class Cursor {
  constructor(
    readonly tokens: readonly string[],
    public i = 0,
  ) {}
  peek(ahead = 0): string | undefined {
    return this.tokens[this.i + ahead];
  }
  next(): string | undefined {
    return this.tokens[this.i++];
  }
  get done(): boolean {
    return this.i >= this.tokens.length;
  }
}

/**
 * Reads a template list at `<` up to its `>`, split on top-level commas. A `<` right after an
 * identifier opens a nested list; inside parentheses `<` and `>` are operators.
 */
function templateArgs(c: Cursor): string[][] | undefined {
  if (c.next() !== '<') return undefined;
  const args: string[][] = [[]];
  let parens = 0;
  let nested = 0;
  for (let prev: string | undefined; !c.done; ) {
    const t = c.next()!;
    if (t === '(' || t === '[') parens++;
    else if (t === ')' || t === ']') parens--;
    else if (parens === 0 && t === '<' && prev !== undefined && IDENT.test(prev)) nested++;
    else if (parens === 0 && t === '>') {
      if (nested === 0) return args.filter((a, i) => a.length > 0 || i < args.length - 1); // a trailing comma is allowed
      nested--;
    } else if (parens === 0 && nested === 0 && t === ',') {
      args.push([]);
      prev = t;
      continue;
    }
    args[args.length - 1]!.push(t);
    prev = t;
  }
  return undefined;
}

/** Reads `@name` or `@name(args)` attributes; an argument is a token list. */
function attributes(c: Cursor): Map<string, string[][]> {
  const attrs = new Map<string, string[][]>();
  while (c.peek() === '@') {
    c.next();
    const name = c.next() ?? '';
    const args: string[][] = [];
    if (c.peek() === '(') {
      c.next();
      let depth = 0;
      let arg: string[] = [];
      for (let t = c.next(); t !== undefined; t = c.next()) {
        if (t === '(') depth++;
        else if (t === ')' && depth-- === 0) break;
        if (t === ',' && depth === 0) {
          args.push(arg);
          arg = [];
        } else arg.push(t);
      }
      if (arg.length) args.push(arg);
    }
    attrs.set(name, args);
  }
  return attrs;
}

/** A module-scope `var` with `@group`/`@binding` attributes. */
interface BindingDecl {
  attrs: Map<string, string[][]>;
  space: string | undefined;
  access: string | undefined;
  name: string;
  type: string[];
}

/**
 * The module-scope declarations of a WGSL module that decide buffer layouts: consts, overrides,
 * aliases, structs, resource variables and functions. Function bodies are skipped, so a
 * function-scope `const` never shadows a module-scope one.
 */
class WgslModule {
  readonly consts = new Map<string, string[]>();
  readonly overrides: { name: string; id: string[] | undefined; rest: string[] }[] = [];
  readonly aliases = new Map<string, string[]>();
  readonly structs = new Map<string, string[]>();
  readonly vars: BindingDecl[] = [];
  readonly fns: { name: string; attrs: Map<string, string[][]> }[] = [];
  readonly #values = new Map<string, number | undefined>();
  readonly #layouts = new Map<string, Layout>();
  /** Consts, aliases and structs being resolved, to stop on a cycle instead of recursing forever. */
  readonly #resolving = new Set<string>();

  constructor(code: string) {
    for (const decl of topLevel(code)) {
      const brace = decl.indexOf('{');
      const c = new Cursor(tokenize(brace < 0 ? decl : decl.slice(0, brace)));
      const attrs = attributes(c);
      const keyword = c.next();
      const name = c.next() ?? '';
      if (keyword === 'const') {
        const eq = c.tokens.indexOf('=', c.i);
        if (eq >= 0) this.consts.set(name, c.tokens.slice(eq + 1));
      } else if (keyword === 'override') this.overrides.push({ name, id: attrs.get('id')?.[0], rest: c.tokens.slice(c.i) });
      else if (keyword === 'alias' && c.next() === '=') this.aliases.set(name, c.tokens.slice(c.i));
      else if (keyword === 'struct' && brace >= 0) this.structs.set(name, tokenize(decl.slice(brace + 1, decl.lastIndexOf('}'))));
      else if (keyword === 'fn') this.fns.push({ name, attrs });
      else if (keyword === 'var' && (attrs.has('group') || attrs.has('binding'))) {
        c.i--;
        const params = c.peek() === '<' ? templateArgs(c) : undefined;
        const varName = c.next() ?? '';
        const type = c.next() === ':' ? c.tokens.slice(c.i) : [];
        this.vars.push({ attrs, space: params?.[0]?.join(''), access: params?.[1]?.join(''), name: varName, type });
      }
    }
  }

  /** The integer value of a const-expression, or undefined when it is not understood. */
  evaluate(tokens: readonly string[]): number | undefined {
    const c = new Cursor(tokens);
    const v = this.#additive(c);
    return c.done && v !== undefined && Number.isSafeInteger(v) ? v : undefined;
  }

  #additive(c: Cursor): number | undefined {
    let v = this.#multiplicative(c);
    while (v !== undefined && (c.peek() === '+' || c.peek() === '-')) {
      const op = c.next();
      const r = this.#multiplicative(c);
      v = r === undefined ? undefined : op === '+' ? v + r : v - r;
    }
    return v;
  }

  #multiplicative(c: Cursor): number | undefined {
    let v = this.#unary(c);
    while (v !== undefined && (c.peek() === '*' || c.peek() === '/' || c.peek() === '%')) {
      const op = c.next();
      const r = this.#unary(c);
      // Integer division and remainder truncate toward zero, as JS's `Math.trunc` and `%` do.
      if (r === undefined || (op !== '*' && r === 0)) return undefined;
      v = op === '*' ? v * r : op === '/' ? Math.trunc(v / r) : v % r;
    }
    return v;
  }

  #unary(c: Cursor): number | undefined {
    const t = c.next();
    if (t === undefined) return undefined;
    if (t === '-') {
      const v = this.#unary(c);
      return v === undefined ? undefined : -v;
    }
    if (t === '(') {
      const v = this.#additive(c);
      return c.next() === ')' ? v : undefined;
    }
    const literal = /^(0[xX][0-9a-fA-F]+|\d+)[iu]?$/.exec(t);
    if (literal) return Number(literal[1]);
    if (!IDENT.test(t)) return undefined;
    if (c.peek() === '(') {
      c.next();
      const args: (number | undefined)[] = [];
      while (c.peek() !== ')' && !c.done) {
        args.push(this.#additive(c));
        if (c.peek() === ',') c.next();
        else break;
      }
      if (c.next() !== ')' || args.some((a) => a === undefined)) return undefined;
      const a = args as number[];
      if ((t === 'u32' || t === 'i32' || t === 'abs') && a.length === 1) return t === 'abs' ? Math.abs(a[0]!) : a[0];
      if ((t === 'min' || t === 'max') && a.length === 2) return Math[t](a[0]!, a[1]!);
      return undefined;
    }
    return this.#const(t);
  }

  /** A module-scope const's value, resolved on first use so declaration order does not matter. */
  #const(name: string): number | undefined {
    if (this.#values.has(name)) return this.#values.get(name);
    const expr = this.consts.get(name);
    if (expr === undefined || this.#resolving.has(name)) return undefined;
    this.#resolving.add(name);
    const v = this.evaluate(expr);
    this.#resolving.delete(name);
    this.#values.set(name, v);
    return v;
  }

  /** Layout of a whole type given as tokens; anything left over makes it inexact. */
  layoutOf(tokens: readonly string[]): Layout {
    const c = new Cursor(tokens);
    const l = this.#type(c);
    return c.done ? l : { ...l, exact: false };
  }

  /**
   * WGSL size and alignment of the type at the cursor (the spec's memory layout rules), for the
   * smallest buffer a binding accepts: a runtime-sized array counts one element.
   */
  #type(c: Cursor): Layout {
    const name = c.next();
    if (name === undefined || !IDENT.test(name)) return UNKNOWN;
    let args: string[][] | undefined;
    if (c.peek() === '<' && !(args = templateArgs(c))) return UNKNOWN;
    // User declarations may shadow predeclared names, so they are looked up first.
    if (this.structs.has(name)) return args ? UNKNOWN : this.#named(`struct ${name}`, () => this.#struct(this.structs.get(name)!));
    if (this.aliases.has(name)) return args ? UNKNOWN : this.#named(`alias ${name}`, () => this.layoutOf(this.aliases.get(name)!));
    const scalar = SCALARS[name];
    if (scalar) return args ? UNKNOWN : { size: scalar, align: scalar, exact: true };
    if (name === 'atomic') return args?.length === 1 ? this.layoutOf(args[0]!) : UNKNOWN;
    const vec = /^vec([234])([fiuh]?)$/.exec(name);
    if (vec) {
      const el = this.#element(vec[2]!, args);
      const n = Number(vec[1]);
      // vec3 aligns like vec4 but takes 3 elements: the next member may sit in its last slot.
      return el ? { size: n * el, align: (n === 2 ? 2 : 4) * el, exact: true } : UNKNOWN;
    }
    const mat = /^mat([234])x([234])([fh]?)$/.exec(name);
    if (mat) {
      const el = this.#element(mat[3]!, args);
      if (!el) return UNKNOWN;
      // A matCxR is laid out as an array of C column vectors vecR.
      const rows = Number(mat[2]);
      const align = (rows === 2 ? 2 : 4) * el;
      return { size: Number(mat[1]) * roundUp(rows * el, align), align, exact: true };
    }
    if (name === 'array' && args && (args.length === 1 || args.length === 2)) {
      const el = this.layoutOf(args[0]!);
      const stride = roundUp(el.size, el.align);
      // A runtime-sized array (no count) needs one element; an unknown count is at least one.
      const count = args[1] ? this.evaluate(args[1]) : 1;
      const exact = el.exact && count !== undefined && count > 0;
      return { size: stride * (exact ? count : 1), align: el.align, exact };
    }
    return UNKNOWN;
  }

  /** Byte size of a vector's or matrix's scalar: from its suffix (`vec3f`) or template (`vec3<f32>`). */
  #element(suffix: string, args: string[][] | undefined): number | undefined {
    if (suffix) return args ? undefined : suffix === 'h' ? 2 : 4;
    return args?.length === 1 ? this.#scalar(args[0]!, 0) : undefined;
  }

  /** Size of a scalar type named directly or through aliases; undefined for anything else. */
  #scalar(tokens: readonly string[], depth: number): number | undefined {
    const name = tokens.length === 1 ? tokens[0]! : '';
    if (this.structs.has(name) || depth > 64) return undefined;
    const alias = this.aliases.get(name);
    return alias ? this.#scalar(alias, depth + 1) : SCALARS[name];
  }

  /** A struct's or alias's layout, computed once; a cyclic declaration is not understood. */
  #named(key: string, compute: () => Layout): Layout {
    const known = this.#layouts.get(key);
    if (known) return known;
    if (this.#resolving.has(key)) return UNKNOWN;
    this.#resolving.add(key);
    const l = compute();
    this.#resolving.delete(key);
    this.#layouts.set(key, l);
    return l;
  }

  /**
   * Struct layout: each member at the next multiple of its alignment (`@align(n)` when given),
   * taking its size (`@size(n)` when given); the struct aligns to its largest member alignment
   * and its size rounds up to that.
   */
  #struct(body: readonly string[]): Layout {
    const c = new Cursor(body);
    let offset = 0;
    let align = 1;
    let exact = true;
    let members = 0;
    while (!c.done) {
      const attrs = attributes(c);
      const name = c.next();
      if (name === undefined || !IDENT.test(name) || c.next() !== ':') return { size: Math.max(2, roundUp(offset, align)), align: Math.max(2, align), exact: false };
      const t = this.#type(c);
      let { size, align: a } = t;
      exact &&= t.exact;
      // An unresolved @size or @align keeps the type's own, which they may only increase.
      const sizeArg = attrs.get('size');
      if (sizeArg) {
        const v = sizeArg.length === 1 ? this.evaluate(sizeArg[0]!) : undefined;
        if (v !== undefined && v >= size) size = v;
        else exact = false;
      }
      const alignArg = attrs.get('align');
      if (alignArg) {
        const v = alignArg.length === 1 ? this.evaluate(alignArg[0]!) : undefined;
        if (v !== undefined && v > 0 && (v & (v - 1)) === 0) a = v;
        else exact = false;
      }
      offset = roundUp(offset, a) + size;
      align = Math.max(align, a);
      members++;
      if (c.peek() === ',') c.next();
      else if (!c.done) return { size: roundUp(offset, align), align, exact: false };
    }
    return members ? { size: roundUp(offset, align), align, exact } : UNKNOWN;
  }
}

/** Splits WGSL (comments removed) into module-scope declarations, each with its `{...}` body if any. */
function topLevel(code: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < code.length; i++) {
    const ch = code[i];
    if (ch === '{') depth++;
    else if (ch === '}' && depth > 0 && --depth === 0) {
      out.push(code.slice(start, i + 1));
      start = i + 1;
    } else if (ch === ';' && depth === 0) {
      out.push(code.slice(start, i));
      start = i + 1;
    }
  }
  out.push(code.slice(start));
  return out.map((d) => d.trim()).filter(Boolean);
}

/** What the runtime reads from a kernel's WGSL. */
export interface WgslReflection {
  bindings: BindingInfo[];
  /** Each override: the key `constants` takes (its `@id` when it has one, else its name) and the tokens after its name. */
  overrides: { key: string; name: string; rest: string[] }[];
  /** The entry point's `@workgroup_size` (consts resolved), or null when it depends on an override. */
  workgroupSize: [number, number, number] | null;
  /** Names of the module's `@compute` functions. */
  entryPoints: string[];
}

/**
 * Reads the bindings (buffers, textures, samplers), overrides, compute entry points and the entry
 * point's workgroup size of a WGSL compute shader. Throws InvalidArgumentError (at `site`) on
 * bindings the runtime cannot bind: a group past 3, texture_external, or numbers that are not 0..n-1.
 */
export function reflectWgsl(wgsl: string, entryPoint: string, site: ErrorSite = { op: 'kernel' }): WgslReflection {
  expectString('wgsl', wgsl, site);
  expectString('entryPoint', entryPoint, site);
  const module = new WgslModule(stripComments(wgsl));
  const bindings: BindingInfo[] = [];
  const filtering = module.vars.some((v) => v.type.join('') === 'sampler');
  for (const v of module.vars) {
    const group = v.attrs.get('group')?.length === 1 ? module.evaluate(v.attrs.get('group')![0]!) : undefined;
    const binding = v.attrs.get('binding')?.length === 1 ? module.evaluate(v.attrs.get('binding')![0]!) : undefined;
    if (group === undefined || binding === undefined) throw new InvalidArgumentError(`cannot read the @group/@binding of '${v.name}'; use integer constants`, site);
    if (group > 3) throw new InvalidArgumentError(`binding '${v.name}' is in @group(${group}); WebGPU guarantees @group(0) to @group(3)`, site);
    if (v.space === 'storage' || v.space === 'uniform') {
      const kind = v.space === 'uniform' ? 'uniform' : v.access === 'read_write' || v.access === 'write' ? 'storage' : 'read-only-storage';
      const layout = module.layoutOf(v.type);
      // A guessed size stays a lower bound, and no binding takes less than 4 bytes.
      bindings.push({ group, binding, name: v.name, kind, minBytes: layout.exact ? layout.size : Math.max(4, layout.size), exact: layout.exact });
      continue;
    }
    const r = v.space === undefined ? resourceOf(v.type.join(''), filtering) : null;
    if (r === 'external') throw new InvalidArgumentError(`binding '${v.name}' is a texture_external; compute kernels here bind buffers, textures, storage textures and samplers`, site);
    if (!r) throw new InvalidArgumentError(`binding '${v.name}' is not a buffer, texture, storage texture or sampler the runtime can bind (type '${v.type.join('')}')`, site);
    bindings.push({ group, binding, name: v.name, minBytes: 0, exact: true, ...r });
  }
  // Launch bindings are positional: groups 0..g-1, each numbered 0..n-1.
  bindings.sort((a, b) => a.group - b.group || a.binding - b.binding);
  bindings.forEach((b, i) => {
    const prev = bindings[i - 1], same = prev !== undefined && b.group === prev.group;
    const [group, binding] = same ? [prev.group, prev.binding + 1] : [prev ? prev.group + 1 : 0, 0];
    if (b.group !== group || b.binding !== binding) {
      throw new InvalidArgumentError(`bindings must be numbered @group(0..g-1) @binding(0..n-1) without gaps; expected @group(${group}) @binding(${binding}), found @group(${b.group}) @binding(${b.binding}) ('${b.name}')`, site);
    }
  });
  const entryPoints = module.fns.filter((f) => f.attrs.has('compute')).map((f) => f.name);
  let workgroupSize: [number, number, number] | null = null;
  const size = module.fns.find((f) => f.name === entryPoint)?.attrs.get('workgroup_size');
  if (size && size.length >= 1 && size.length <= 3) {
    const parts = size.map((arg) => module.evaluate(arg));
    if (parts.every((n) => n !== undefined)) workgroupSize = [parts[0]!, parts[1] ?? 1, parts[2] ?? 1];
  }
  const overrides = module.overrides.map(({ name, id, rest }) => ({ key: id ? String(module.evaluate(id) ?? id.join('')) : name, name, rest }));
  return { bindings, overrides, workgroupSize, entryPoints };
}
