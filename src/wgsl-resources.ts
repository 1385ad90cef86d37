/**
 * A kernel's bindings as reflection reads them (`BindingInfo`), and the bindings that are not buffers: sampled, depth, multisampled and storage
 * textures, and samplers, as the bind group layout entries WebGPU's default layout would make.
 */

/** One `@group(g) @binding(n)` resource of a kernel, read from its WGSL. */
export interface BindingInfo extends Partial<Omit<ResourceInfo, 'kind'>> {
  group: number;
  binding: number;
  name: string;
  kind: 'storage' | 'read-only-storage' | 'uniform' | ResourceInfo['kind'];
  /**
   * Smallest buffer size the binding accepts, bytes: the size of its type by WGSL's layout rules,
   * a runtime-sized array counting one element. A lower bound (at least 4) when `exact` is false; 0 for textures and samplers.
   */
  minBytes: number;
  /**
   * True when every part of the type was understood (consts, aliases, structs and their `@size`
   * and `@align` resolved); false when something was guessed, e.g. an override-sized array.
   */
  exact: boolean;
}

/** What a texture or sampler binding needs, read from its WGSL type. */
export interface ResourceInfo {
  kind: 'texture' | 'storage-texture' | 'sampler';
  /** Textures: 'float' when the module has a filtering sampler, else 'unfilterable-float' (binds every float format); 'uint', 'sint', 'depth'. */
  sampleType?: GPUTextureSampleType;
  viewDimension?: GPUTextureViewDimension;
  multisampled?: boolean;
  /** Storage textures. */
  format?: GPUTextureFormat;
  access?: 'read' | 'write' | 'read_write';
  /** Samplers. */
  samplerType?: GPUSamplerBindingType;
}

const DIMENSIONS: Record<string, GPUTextureViewDimension> = { '1d': '1d', '2d': '2d', '2d_array': '2d-array', cube: 'cube', cube_array: 'cube-array', '3d': '3d' };
const SAMPLED: Record<string, GPUTextureSampleType> = { f32: 'float', u32: 'uint', i32: 'sint' };

/** The binding a WGSL type names (tokens joined without spaces), or null when it is not a texture or sampler. */
export function resourceOf(type: string, filteringSampler: boolean): ResourceInfo | null | 'external' {
  if (type === 'sampler') return { kind: 'sampler', samplerType: 'filtering' };
  if (type === 'sampler_comparison') return { kind: 'sampler', samplerType: 'comparison' };
  if (type === 'texture_external') return 'external';
  let m = /^texture_storage_(1d|2d|2d_array|3d)<(\w+),(read|write|read_write)>$/.exec(type);
  if (m) return { kind: 'storage-texture', viewDimension: DIMENSIONS[m[1]!]!, format: m[2] as GPUTextureFormat, access: m[3] as ResourceInfo['access'] };
  m = /^texture_depth_(multisampled_)?(2d|2d_array|cube|cube_array)$/.exec(type);
  if (m) return { kind: 'texture', sampleType: 'depth', viewDimension: DIMENSIONS[m[2]!]!, multisampled: m[1] !== undefined };
  m = /^texture_(multisampled_)?(1d|2d|2d_array|cube|cube_array|3d)<(f32|u32|i32)>$/.exec(type);
  if (!m) return null;
  const sampled = SAMPLED[m[3]!]!;
  const multisampled = m[1] !== undefined;
  return { kind: 'texture', sampleType: sampled === 'float' && (multisampled || !filteringSampler) ? 'unfilterable-float' : sampled, viewDimension: DIMENSIONS[m[2]!]!, multisampled };
}

/** The bind group layout entry of a binding. */
export function layoutEntry(r: BindingInfo): Pick<GPUBindGroupLayoutEntry, 'buffer' | 'texture' | 'storageTexture' | 'sampler'> {
  if (r.kind === 'uniform' || r.kind === 'storage' || r.kind === 'read-only-storage') return { buffer: { type: r.kind } };
  if (r.kind === 'sampler') return { sampler: { type: r.samplerType! } };
  if (r.kind === 'storage-texture') return { storageTexture: { access: `${r.access!.replace('_', '-')}${r.access === 'read_write' ? '' : '-only'}` as GPUStorageTextureAccess, format: r.format!, viewDimension: r.viewDimension! } };
  return { texture: { sampleType: r.sampleType!, viewDimension: r.viewDimension!, multisampled: r.multisampled! } };
}
