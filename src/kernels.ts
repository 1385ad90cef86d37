/**
 * Compute kernels: WGSL plus what the runtime needs to check a launch before it reaches the GPU
 * (binding count, binding kinds, minimum buffer sizes, override names). Pipelines are cached per
 * device and per set of override constants; compilation errors are caught in an error scope so a
 * bad kernel fails its own launches and no other stream's work.
 */
import { calledAt, InvalidArgumentError, type ErrorSite } from './errors.js';
import { ShaderStage } from './gpu-constants.js';
import { expectInteger, expectKnownKeys, expectLabel, expectObject, expectString, showValue } from './validate.js';
import { reflectWgsl, type BindingInfo } from './wgsl.js';
import { layoutEntry } from './wgsl-resources.js';
import vectorAddWgsl from '../shaders/vector_add.wgsl?raw';

/** WGSL sources of the built-in kernels (shaders/). */
export const builtinShaders = {
  vectorAdd: vectorAddWgsl,
} as const;

export interface KernelOptions {
  /** @default 'main' */
  entryPoint?: string;
  /** @default the entry point's name */
  label?: string;
}

export interface PipelineEntry {
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
  /** One bind group layout per `@group`. */
  readonly layouts: readonly GPUBindGroupLayout[];
  readonly #device: GPUDevice;
  readonly #module: GPUShaderModule;
  readonly #pipelineLayout: GPUPipelineLayout;
  readonly #pipelines = new Map<string, PipelineEntry>();
  /** Each override by its key: its name, its WGSL type where the declaration says it, and the values that type holds. */
  readonly #overrideInfo: Map<string, { name: string; type: string | undefined; range: readonly [number, number] }>;
  /** Overrides without an initializer: every launch gives them a value. */
  readonly #required: string[];
  /** The last one-constant launch's constant and pipeline. */
  #last: { name: string; value: number; entry: PipelineEntry } | null = null;
  /** Bind groups by their resources, a level per resource: weak, so a cached group keeps no buffer alive. */
  #bindGroups = new WeakMap<object, unknown>();
  /** Where each group starts in the positional bindings, and one past the last. */
  readonly #groupStarts: number[] = [];
  #bindGroupCount = 0;
  /** Settles with the shader module's and layouts' validation error message, if any. */
  readonly #moduleError: Promise<string | undefined>;

  /** @internal use `ctx.kernel()`. `at`: the context's label, or the site of the ctx.kernel() call (its errors name the caller's line in a bundle too). */
  constructor(device: GPUDevice, readonly wgsl: string, options: KernelOptions = {}, at?: string | ErrorSite) {
    const site: ErrorSite = typeof at === 'object' ? at : at === undefined ? { op: 'kernel' } : { op: 'kernel', context: at };
    expectString('wgsl', wgsl, site);
    const o = expectObject('options', options, site);
    const proto = Object.getPrototypeOf(o) as unknown;
    if (proto !== Object.prototype && proto !== null) throw new InvalidArgumentError(`Expected \`options\` to be a plain object, got ${showValue(options)}`, site);
    expectKnownKeys('options', o, ['entryPoint', 'label'], site);
    this.entryPoint = o.entryPoint === undefined ? 'main' : expectString('entryPoint', o.entryPoint, site);
    this.label = expectLabel(o.label, () => this.entryPoint, site);
    const info = reflectWgsl(wgsl, this.entryPoint, site);
    // A missing entry point would otherwise surface only as a pipeline error on the first launch.
    if (!info.entryPoints.includes(this.entryPoint)) {
      const found = info.entryPoints.length ? `found ${info.entryPoints.map((e) => `'${e}'`).join(', ')}` : 'the source declares no @compute function at all: is it WGSL?';
      throw new InvalidArgumentError(`kernel has no @compute entry point '${this.entryPoint}'; ${found}`, site);
    }
    this.bindings = info.bindings;
    this.overrides = info.overrides.map((o) => o.key);
    this.#overrideInfo = new Map(
      info.overrides.map((o) => {
        const type = overrideType(o.rest);
        return [o.key, { name: o.name, type, range: (type && OVERRIDE_RANGE[type]) || ANY_NUMBER }];
      }),
    );
    this.#required = info.overrides.filter((o) => !o.rest.includes('=')).map((o) => o.key);
    this.workgroupSize = info.workgroupSize;
    this.#device = device;
    // Compile errors go to this kernel's own scope, reported on its launches, never to the device.
    device.pushErrorScope('validation');
    this.#module = device.createShaderModule({ code: wgsl, label: `kernel '${this.label}'` });
    const groups = this.bindings.length ? this.bindings[this.bindings.length - 1]!.group + 1 : 1;
    for (let g = 0; g <= groups; g++) this.#groupStarts.push(g === groups ? this.bindings.length : this.bindings.findIndex((b) => b.group === g));
    this.layouts = Array.from({ length: groups }, (_, g) =>
      device.createBindGroupLayout({
        label: `kernel '${this.label}' @group(${g})`,
        entries: this.bindings.filter((b) => b.group === g).map((b) => ({ binding: b.binding, visibility: ShaderStage.COMPUTE, ...layoutEntry(b) })),
      }),
    );
    this.#pipelineLayout = device.createPipelineLayout({ label: `kernel '${this.label}'`, bindGroupLayouts: this.layouts });
    this.#moduleError = device.popErrorScope().then(
      (err) => err?.message,
      (err: unknown) => String(err),
    );
  }

  /**
   * @internal The bind groups (one per `@group`) for these resources in binding order, cached: pipelines that
   * launch the same kernel on the same buffers (every chunk of a ring) skip `createBindGroup`.
   * Weak (a dropped buffer is collected, with its groups); at most about 512 made, then started over.
   */
  bindGroups(resources: readonly (GPUBuffer | GPUTextureView | GPUSampler)[]): GPUBindGroup[] {
    let level: WeakMap<object, unknown> = this.#bindGroups;
    for (let i = 0; i < resources.length - 1; i++) {
      let next = level.get(resources[i]!) as WeakMap<object, unknown> | undefined;
      if (!next) level.set(resources[i]!, (next = new WeakMap()));
      level = next;
    }
    const key: object = resources.length ? resources[resources.length - 1]! : this; // a kernel without bindings
    let groups = level.get(key) as GPUBindGroup[] | undefined;
    if (!groups) {
      if (++this.#bindGroupCount > 512) {
        this.#bindGroups = new WeakMap();
        this.#bindGroupCount = 1;
        return this.bindGroups(resources);
      }
      const starts = this.#groupStarts;
      groups = this.layouts.map((layout, g) => {
        const part = resources.slice(starts[g], starts[g + 1]);
        return this.#device.createBindGroup({
          label: `kernel '${this.label}' @group(${g}) (${part.map((r) => r.label || '?').join(', ')})`,
          layout,
          entries: part.map((r, binding) => ({ binding, resource: 'size' in r ? { buffer: r } : r })),
        });
      });
      level.set(key, groups);
    }
    return groups;
  }

  /** @internal the device it was made on: a stream of another device refuses it at the call */
  get device(): GPUDevice {
    return this.#device;
  }

  /** Number of buffers a launch must bind. */
  get bindingCount(): number {
    return this.bindings.length;
  }

  /** @internal The pipeline for a set of override constants, created on first use inside an error scope. */
  pipeline(constants: Record<string, number> | undefined): PipelineEntry {
    // A launch with one constant at the value of the last such launch (a loop) skips the key string.
    const last = this.#last;
    if (last && constants) {
      let n = 0;
      let same = true;
      for (const k in constants) if (++n > 1 || k !== last.name || constants[k] !== last.value) same = false;
      if (same && n === 1) return last.entry;
    }
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
    if (constants) {
      const names = Object.keys(constants);
      this.#last = names.length === 1 ? { name: names[0]!, value: constants[names[0]!]!, entry } : null;
    }
    return entry;
  }

  /** @internal Checks override constants against the WGSL; throws InvalidArgumentError naming the bad key. */
  checkConstants(constants: unknown, site: ErrorSite): Record<string, number> | undefined {
    for (let i = 0; i < this.#required.length; i++) {
      const k = this.#required[i]!;
      if (constants === undefined || constants === null || typeof constants !== 'object' || !Object.hasOwn(constants, k)) {
        throw new InvalidArgumentError(`override \`${k}\` of kernel '${this.label}' has no initializer in the WGSL: every launch gives it a value (\`constants: { ${k}: ... }\`)`, site);
      }
    }
    if (constants === undefined) return undefined;
    if (typeof constants !== 'object' || constants === null) throw new InvalidArgumentError(`Expected \`constants\` to be an object of override values`, site);
    let bools = false;
    for (const k in constants) {
      // WebGPU reads own properties only: an inherited value would be dropped (or, in Dawn's Node binding, read), so refuse it.
      if (!Object.hasOwn(constants, k)) throw new InvalidArgumentError(`override value \`${k}\` is inherited from the prototype of \`constants\`; WebGPU reads own properties only: pass a plain object ({ ...values })`, site);
      const v = (constants as Record<string, unknown>)[k];
      const o = this.#overrideInfo.get(k);
      if (!o) {
        const byName = [...this.#overrideInfo].find(([, x]) => x.name === k);
        if (byName) throw new InvalidArgumentError(`override \`${k}\` of kernel '${this.label}' has @id(${byName[0]}): WebGPU takes it as \`${byName[0]}\``, site);
        throw new InvalidArgumentError(`kernel '${this.label}' has no override \`${k}\`; it declares ${this.overrides.length ? this.overrides.map((x) => `\`${x}\``).join(', ') : 'none'}`, site);
      }
      // A double, as WebGPU takes it (a boolean converts), representable in the override's type.
      // Integer types truncate, after the range check (-0.5 is no u32).
      if (typeof v === 'boolean') bools = true;
      const x = typeof v === 'boolean' ? Number(v) : v;
      const t = o.type;
      const [lo, hi] = o.range;
      if (typeof x !== 'number' || !Number.isFinite(x) || x < lo || x > hi) throw new InvalidArgumentError(`Expected override \`${k}\`${t ? ` (${t})` : ''} to be a finite number${t && t !== 'bool' ? ` from ${lo} to ${hi}` : ''}, got ${showValue(v)}`, site);
    }
    // Dawn's Node binding takes numbers only: true and false go as 1 and 0.
    return bools ? Object.fromEntries(Object.entries(constants).map(([k, v]) => [k, Number(v)])) : (constants as Record<string, number>);
  }
}

/** The values an override of each numeric WGSL type holds (WebGPU converts the double it is given). */
const OVERRIDE_RANGE: Record<string, readonly [number, number]> = {
  u32: [0, 4294967295],
  i32: [-2147483648, 2147483647],
  f32: [-3.4028234663852886e38, 3.4028234663852886e38],
  f16: [-65504, 65504],
};
const ANY_NUMBER: readonly [number, number] = [-Infinity, Infinity];

/** An override's WGSL type from the tokens after its name: declared (`: u32`), or its initializer's literal (4u, 4i or 4, 1.0 or 1f, 1h, true); undefined otherwise. */
function overrideType(rest: readonly string[]): string | undefined {
  if (rest[0] === ':') return rest[1];
  const init = rest[0] === '=' ? rest.slice(rest[1] === '-' ? 2 : 1) : [];
  const t = init.length === 1 ? init[0]! : '';
  if (t === 'true' || t === 'false') return 'bool';
  if (/^(0x[\da-f]+|\d+)u$/i.test(t)) return 'u32';
  if (/^(0x[\da-f]+|\d+)i?$/i.test(t)) return 'i32';
  if (/^[\d.]+(e[+-]?\d+)?h$/i.test(t)) return 'f16';
  if (/^(\d*\.\d*(e[+-]?\d+)?|\d+e[+-]?\d+)f?$|^\d+f$/i.test(t)) return 'f32';
  return undefined;
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
  const site = WORKGROUPS_SITE;
  expectInteger('n', n, 0, Number.MAX_SAFE_INTEGER, site);
  expectInteger('workgroupSize', workgroupSize, 1, Number.MAX_SAFE_INTEGER, site);
  expectInteger('maxPerDimension', maxPerDimension, 1, Number.MAX_SAFE_INTEGER, site);
  const groups = Math.ceil(n / workgroupSize);
  if (groups <= maxPerDimension) return [groups, 1, 1];
  return [maxPerDimension, Math.ceil(groups / maxPerDimension), 1];
}
/** One site for every call (its stack is taken only when an error reads it). */
const WORKGROUPS_SITE = calledAt('workgroupsFor', workgroupsFor);
