/**
 * Compute kernels: WGSL plus what the runtime needs to check a launch before it reaches the GPU
 * (binding count, binding kinds, minimum buffer sizes, override names). Pipelines are cached per
 * device and per set of override constants; compilation errors are caught in an error scope so a
 * bad kernel fails its own launches and no other stream's work.
 */
import { KernelBindingError, InvalidArgumentError, type ErrorSite } from './errors.js';
import { ShaderStage } from './gpu-constants.js';
import vectorAddWgsl from '../shaders/vector_add.wgsl?raw';
import sleepWgsl from '../shaders/sleep.wgsl?raw';
import computeIntensiveWgsl from '../shaders/compute_intensive.wgsl?raw';

/** WGSL sources of the built-in kernels (shaders/). */
export const builtinShaders = {
  vectorAdd: vectorAddWgsl,
  sleep: sleepWgsl,
  computeIntensive: computeIntensiveWgsl,
} as const;

/** One `@group(0) @binding(n)` resource of a kernel, read from its WGSL. */
export interface BindingInfo {
  binding: number;
  name: string;
  kind: 'storage' | 'read-only-storage' | 'uniform';
  /** Smallest buffer size the binding accepts, bytes (element size of a runtime array, or 4). */
  minBytes: number;
}

export interface KernelOptions {
  /** @default 'main' */
  entryPoint?: string;
  /** @default the entry point's name */
  label?: string;
}

const SCALARS: Record<string, number> = { f32: 4, u32: 4, i32: 4, f16: 2, bool: 4, atomic: 4 };

interface Layout {
  size: number;
  align: number;
}

const roundUp = (n: number, a: number): number => Math.ceil(n / a) * a;

/** Splits struct members on commas outside `<...>`. */
function splitTopLevel(body: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let cur = '';
  for (const ch of body) {
    if (ch === '<') depth++;
    else if (ch === '>') depth--;
    if (ch === ',' && depth === 0) {
      out.push(cur.trim());
      cur = '';
    } else cur += ch;
  }
  out.push(cur.trim());
  return out.filter(Boolean);
}

/**
 * WGSL size and alignment of a type (the host-shareable layout rules), for the smallest buffer a
 * binding accepts: a runtime-sized array counts one element. Unknown types count as 4 bytes.
 */
function layoutOf(type: string, structs: Map<string, string>): Layout {
  const t = type.replace(/\s+/g, '');
  const scalar = SCALARS[t.replace(/^atomic<(\w+)>$/, '$1')];
  if (scalar) return { size: scalar, align: scalar };
  const vec = /^vec([234])(?:<(\w+)>|([fiuh]))$/.exec(t);
  if (vec) {
    const n = Number(vec[1]);
    const el = vec[3] === 'h' || vec[2] === 'f16' ? 2 : 4;
    const align = (n === 2 ? 2 : 4) * el;
    return { size: n * el, align };
  }
  const mat = /^mat([234])x([234])(?:<(\w+)>|([fh]))$/.exec(t);
  if (mat) {
    const col = layoutOf(`vec${mat[2]}<${mat[3] ?? (mat[4] === 'h' ? 'f16' : 'f32')}>`, structs);
    return { size: Number(mat[1]) * roundUp(col.size, col.align), align: col.align };
  }
  const arr = /^array<(.+?)(?:,(\d+)u?)?>$/.exec(t);
  if (arr) {
    const el = layoutOf(arr[1]!, structs);
    const stride = roundUp(el.size, el.align);
    return { size: stride * (arr[2] ? Number(arr[2]) : 1), align: el.align };
  }
  const body = structs.get(t);
  if (body !== undefined) {
    let offset = 0;
    let align = 1;
    for (const field of splitTopLevel(body)) {
      const m = /^(?:@\w+(?:\([^)]*\))?\s*)*\w+\s*:\s*(.+)$/.exec(field);
      if (!m) continue;
      const f = layoutOf(m[1]!, structs);
      offset = roundUp(offset, f.align) + f.size;
      align = Math.max(align, f.align);
    }
    return { size: roundUp(offset, align), align };
  }
  return { size: 4, align: 4 };
}

/** Reads the group-0 bindings, overrides and workgroup size of a WGSL compute shader. */
export function reflectWgsl(wgsl: string, entryPoint: string): { bindings: BindingInfo[]; overrides: string[]; workgroupSize: [number, number, number] | null } {
  const code = wgsl.replace(/\/\/[^\n]*/g, '').replace(/\/\*[\s\S]*?\*\//g, '');
  const structs = new Map([...code.matchAll(/struct\s+(\w+)\s*\{([^}]*)\}/g)].map((m) => [m[1]!, m[2]!]));
  const bindings: BindingInfo[] = [];
  const re = /@group\(\s*(\d+)\s*\)\s*@binding\(\s*(\d+)\s*\)\s*var\s*<\s*(\w+)\s*(?:,\s*(\w+)\s*)?>\s*(\w+)\s*:\s*([^;]+);/g;
  const re2 = /@binding\(\s*(\d+)\s*\)\s*@group\(\s*(\d+)\s*\)\s*var\s*<\s*(\w+)\s*(?:,\s*(\w+)\s*)?>\s*(\w+)\s*:\s*([^;]+);/g;
  const found: { group: number; binding: number; space: string; access: string | undefined; name: string; type: string }[] = [];
  for (const m of code.matchAll(re)) found.push({ group: Number(m[1]), binding: Number(m[2]), space: m[3]!, access: m[4], name: m[5]!, type: m[6]! });
  for (const m of code.matchAll(re2)) found.push({ group: Number(m[2]), binding: Number(m[1]), space: m[3]!, access: m[4], name: m[5]!, type: m[6]! });
  for (const f of found) {
    if (f.group !== 0) throw new InvalidArgumentError(`binding '${f.name}' is in @group(${f.group}); kernels may only use @group(0)`);
    const kind = f.space === 'uniform' ? 'uniform' : f.access === 'read_write' || f.access === 'write' ? 'storage' : 'read-only-storage';
    bindings.push({ binding: f.binding, name: f.name, kind, minBytes: layoutOf(f.type.trim(), structs).size });
  }
  bindings.sort((a, b) => a.binding - b.binding);
  bindings.forEach((b, i) => {
    if (b.binding !== i) throw new InvalidArgumentError(`bindings must be numbered 0..n-1 without gaps; found @binding(${b.binding}) at position ${i}`);
  });
  const overrides = [...code.matchAll(/(?:@id\(\s*\d+\s*\)\s*)?override\s+(\w+)/g)].map((m) => m[1]!);
  let workgroupSize: [number, number, number] | null = null;
  const ep = new RegExp(`@workgroup_size\\(([^)]*)\\)[^{]*fn\\s+${entryPoint}\\s*\\(`).exec(code);
  if (ep) {
    const parts = ep[1]!.split(',').map((s) => Number(s.trim()));
    if (parts.every((n) => Number.isInteger(n))) workgroupSize = [parts[0] ?? 1, parts[1] ?? 1, parts[2] ?? 1];
  }
  return { bindings, overrides, workgroupSize };
}

interface PipelineEntry {
  pipeline: GPUComputePipeline;
  /** Settles once the error scope around creation popped: undefined when fine, else the message. */
  validated: Promise<string | undefined>;
  error: string | undefined;
  ok: boolean;
}

/**
 * A compute kernel bound to one device. Create with `ctx.kernel(wgsl)`; launch with
 * `stream.launch(kernel, { bindings, workgroups })`.
 */
export class Kernel {
  readonly label: string;
  readonly entryPoint: string;
  readonly bindings: readonly BindingInfo[];
  readonly overrides: readonly string[];
  /** The entry point's `@workgroup_size`, or null when it is not a literal. */
  readonly workgroupSize: readonly [number, number, number] | null;
  readonly layout: GPUBindGroupLayout;
  readonly #device: GPUDevice;
  readonly #module: GPUShaderModule;
  readonly #pipelineLayout: GPUPipelineLayout;
  readonly #pipelines = new Map<string, PipelineEntry>();
  readonly #bindGroups = new Map<GPUBuffer, unknown>();
  #bindGroupCount = 0;
  /** Settles with the shader module's and layouts' validation error message, if any. */
  readonly #moduleError: Promise<string | undefined>;

  constructor(device: GPUDevice, readonly wgsl: string, options: KernelOptions = {}) {
    this.entryPoint = options.entryPoint ?? 'main';
    this.label = options.label ?? this.entryPoint;
    const info = reflectWgsl(wgsl, this.entryPoint);
    this.bindings = info.bindings;
    this.overrides = info.overrides;
    this.workgroupSize = info.workgroupSize;
    this.#device = device;
    // Compile errors go to this kernel's own scope, reported on its launches, never to the device.
    device.pushErrorScope('validation');
    this.#module = device.createShaderModule({ code: wgsl, label: `kernel '${this.label}'` });
    this.layout = device.createBindGroupLayout({
      label: `kernel '${this.label}' bindings`,
      entries: this.bindings.map((b) => ({ binding: b.binding, visibility: ShaderStage.COMPUTE, buffer: { type: b.kind } })),
    });
    this.#pipelineLayout = device.createPipelineLayout({ label: `kernel '${this.label}'`, bindGroupLayouts: [this.layout] });
    this.#moduleError = device.popErrorScope().then(
      (err) => err?.message,
      (err: unknown) => String(err),
    );
  }

  /**
   * A bind group for these buffers, cached: pipelines that launch the same kernel on the same
   * buffers (every chunk of a ring) skip `createBindGroup`. Bounded; cleared when full.
   */
  bindGroup(buffers: readonly GPUBuffer[]): GPUBindGroup {
    let level: Map<GPUBuffer, unknown> = this.#bindGroups;
    for (let i = 0; i < buffers.length - 1; i++) {
      let next = level.get(buffers[i]!) as Map<GPUBuffer, unknown> | undefined;
      if (!next) level.set(buffers[i]!, (next = new Map()));
      level = next;
    }
    const last = buffers[buffers.length - 1];
    const key = last ?? (this as unknown as GPUBuffer); // a kernel without bindings
    let group = level.get(key) as GPUBindGroup | undefined;
    if (!group) {
      if (++this.#bindGroupCount > 512) {
        this.#bindGroups.clear();
        this.#bindGroupCount = 1;
        return this.bindGroup(buffers);
      }
      group = this.#device.createBindGroup({
        label: `kernel '${this.label}' bindings (${buffers.map((b) => b.label || '?').join(', ')})`,
        layout: this.layout,
        entries: buffers.map((buffer, binding) => ({ binding, resource: { buffer } })),
      });
      level.set(key, group);
    }
    return group;
  }

  /** Number of buffers a launch must bind. */
  get bindingCount(): number {
    return this.bindings.length;
  }

  /** The pipeline for a set of override constants, created on first use inside an error scope. */
  pipeline(constants: Record<string, number> | undefined): PipelineEntry {
    const key = constantsKey(constants);
    let entry = this.#pipelines.get(key);
    if (!entry) {
      const device = this.#device;
      device.pushErrorScope('validation');
      const pipeline = device.createComputePipeline({
        label: `kernel '${this.label}'${key ? ` ${key}` : ''}`,
        layout: this.#pipelineLayout,
        compute: { module: this.#module, entryPoint: this.entryPoint, ...(constants ? { constants } : {}) },
      });
      const created: PipelineEntry = { pipeline, validated: Promise.resolve(undefined), error: undefined, ok: false };
      created.validated = Promise.all([this.#moduleError, device.popErrorScope()]).then(
        ([moduleError, err]) => {
          created.error = moduleError ?? err?.message;
          created.ok = created.error === undefined;
          return created.error;
        },
        (err: unknown) => {
          created.error = String(err);
          return created.error;
        },
      );
      entry = created;
      this.#pipelines.set(key, entry);
    }
    return entry;
  }

  /** Checks override constants against the WGSL; throws InvalidArgumentError naming the bad key. */
  checkConstants(constants: unknown, site: ErrorSite): Record<string, number> | undefined {
    if (constants === undefined) return undefined;
    if (typeof constants !== 'object' || constants === null) throw new InvalidArgumentError(`Expected \`constants\` to be an object of override values`, site);
    for (const k in constants) {
      if (!Object.hasOwn(constants, k)) continue;
      const v = (constants as Record<string, unknown>)[k];
      if (!this.overrides.includes(k)) {
        throw new KernelBindingError(`kernel '${this.label}' has no override \`${k}\`; it declares ${this.overrides.length ? this.overrides.map((o) => `\`${o}\``).join(', ') : 'none'}`, site);
      }
      if (typeof v !== 'number' || !Number.isFinite(v)) throw new InvalidArgumentError(`Expected override \`${k}\` to be a finite number, got \`${String(v)}\``, site);
    }
    return constants as Record<string, number>;
  }
}

/** A stable key for a set of override constants (sorted by name). */
function constantsKey(constants: Record<string, number> | undefined): string {
  if (!constants) return '';
  const names = Object.keys(constants);
  if (names.length === 1) return `${names[0]}=${constants[names[0]!]};`;
  let key = '';
  for (const name of names.sort()) key += `${name}=${constants[name]};`;
  return key;
}

/** Workgroup counts for a 1-D problem of `n` items, spilling into y past the per-dimension limit. */
export function workgroupsFor(n: number, workgroupSize: number, maxPerDimension = 65535): [number, number, number] {
  const groups = Math.ceil(n / workgroupSize);
  if (groups <= maxPerDimension) return [groups, 1, 1];
  return [maxPerDimension, Math.ceil(groups / maxPerDimension), 1];
}
