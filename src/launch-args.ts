/**
 * A launch's bindings checked against its kernel's reflection, at the call: count, kinds, usages,
 * sizes and limits of buffers; usage, format, sample type and dimension of textures; samplers.
 * Each throws InvalidArgumentError naming the binding.
 */
import { InvalidArgumentError, type ErrorSite } from './errors.js';
import { BufferUsage, TextureUsage } from './gpu-constants.js';
import type { Kernel } from './kernels.js';
import { DeviceBuffer, type DeviceResource } from './memory.js';
import { NONE } from './op.js';
import { asTexture, DeviceTexture, sampleKind } from './texture.js';
import { showValue } from './validate.js';
import type { BindingInfo } from './wgsl.js';

/** What one launch binding may be. */
export type Binding = DeviceBuffer | GPUBuffer | DeviceTexture | GPUTexture | GPUTextureView | GPUSampler;

/** A buffer argument unwrapped by its stream (a DeviceBuffer of its device, or a GPUBuffer). */
export type UnwrapBuffer = (b: unknown, what: number, site: ErrorSite, binding: string) => { buffer: GPUBuffer; label: string; size: number; usage: number };

export interface LaunchResources {
  resources: (GPUBuffer | GPUTextureView | GPUSampler)[];
  textures: (GPUTexture | null)[] | null;
  tracked: DeviceResource[];
  /** WebGPU may still reject the launch (a raw resource, an estimated size, a texture): its own submit. */
  isolated: boolean;
}

type Limits = Pick<GPUSupportedLimits, 'maxUniformBufferBindingSize' | 'maxStorageBufferBindingSize'>;

/** `bindings` checked against `kernel`'s; what the launch op binds, tracks and whether it goes alone. */
export function launchResources(kernel: Kernel, bindings: readonly Binding[], limits: Limits, unwrap: UnwrapBuffer, site: ErrorSite): LaunchResources {
  // Exact-size arrays (they live as long as the op): a push onto `[]` reserves 17 slots.
  const resources = new Array<GPUBuffer | GPUTextureView | GPUSampler>(bindings.length);
  let ours = 0;
  for (const b of bindings) if (b instanceof DeviceBuffer || b instanceof DeviceTexture) ours++;
  const tracked: DeviceResource[] = ours ? new Array<DeviceResource>(ours) : NONE;
  let textures: (GPUTexture | null)[] | null = null;
  let isolated = ours !== bindings.length;
  ours = 0;
  for (let i = 0; i < bindings.length; i++) {
    const b = bindings[i], info = kernel.bindings[i]!;
    if (b instanceof DeviceBuffer || b instanceof DeviceTexture) tracked[ours++] = b;
    if (info.kind === 'uniform' || info.kind === 'storage' || info.kind === 'read-only-storage') {
      resources[i] = checkBuffer(kernel, i, info, unwrap(b, i, site, info.name), limits, site);
      if (info.exact === false) isolated = true;
      continue;
    }
    // Textures and samplers: WebGPU judges what is not checked here (a format's capabilities).
    isolated = true;
    if (info.kind === 'sampler') {
      if (!isSampler(b)) throw new InvalidArgumentError(`binding ${i} '${info.name}' of kernel '${kernel.label}' is a sampler; got ${showValue(b)}`, site);
      resources[i] = b;
      continue;
    }
    if (b instanceof DeviceTexture) {
      b.checkAlive(site);
      if (b.device !== kernel.device) throw new InvalidArgumentError(`binding ${i} '${info.name}' of kernel '${kernel.label}': texture '${b.label}' was allocated on another GPUDevice; a stream uses its own context's device`, site);
    }
    const t = asTexture(b);
    textures ??= new Array<GPUTexture | null>(bindings.length).fill(null);
    if (t) {
      textures[i] = t;
      resources[i] = viewFor(t, info, kernel, i, site);
    } else if (isView(b)) resources[i] = b;
    else throw new InvalidArgumentError(`binding ${i} '${info.name}' of kernel '${kernel.label}' is a ${info.kind === 'texture' ? 'texture' : 'storage texture'}: pass a DeviceTexture, GPUTexture or GPUTextureView, got ${showValue(b)}`, site);
  }
  // A buffer or texture bound twice where either binding is writable is a WebGPU usage conflict.
  for (let i = 0; i < resources.length; i++) {
    for (let j = i + 1; j < resources.length; j++) {
      const texture = textures?.[i] != null && textures[i] === textures[j];
      if ((resources[i] === resources[j] || texture) && (written(kernel.bindings[i]!) || written(kernel.bindings[j]!))) {
        throw new InvalidArgumentError(`bindings ${i} and ${j} of kernel '${kernel.label}' are the same ${texture ? 'texture' : 'buffer'} and one is written (${texture ? 'a storage texture' : 'read_write'}); WebGPU forbids that aliasing: use a separate output ${texture ? 'texture' : 'buffer'}`, site);
      }
    }
  }
  return { resources, textures, tracked, isolated };
}

function checkBuffer(kernel: Kernel, i: number, info: BindingInfo, b: { buffer: GPUBuffer; label: string; size: number; usage: number }, limits: Limits, site: ErrorSite): GPUBuffer {
  const uniform = info.kind === 'uniform', label = b.label;
  if ((b.usage & (uniform ? BufferUsage.UNIFORM : BufferUsage.STORAGE)) === 0) {
    throw new InvalidArgumentError(`binding ${i} '${info.name}' of kernel '${kernel.label}' needs a ${uniform ? 'UNIFORM' : 'STORAGE'} buffer; '${label}' lacks that usage`, site);
  }
  if (b.size < info.minBytes) throw new InvalidArgumentError(`binding ${i} '${info.name}' of kernel '${kernel.label}' needs at least ${info.minBytes} bytes; '${label}' has ${b.size}`, site);
  if (b.size % 4 !== 0 && !uniform) throw new InvalidArgumentError(`binding ${i} '${info.name}': storage buffer '${label}' size ${b.size} is not a multiple of 4`, site);
  const max = uniform ? limits.maxUniformBufferBindingSize : limits.maxStorageBufferBindingSize;
  if (b.size > max) {
    throw new InvalidArgumentError(`binding ${i} '${info.name}' of kernel '${kernel.label}': '${label}' is ${b.size} bytes, above the device's ${uniform ? 'maxUniformBufferBindingSize' : 'maxStorageBufferBindingSize'} (${max})`, site);
  }
  return b.buffer;
}

/** Views made for texture bindings, per texture and binding shape (dimension, storage or not). */
const views = new WeakMap<GPUTexture, Map<string, GPUTextureView>>();

/** `t` checked against texture binding `info`; the view it binds through. */
function viewFor(t: GPUTexture, info: BindingInfo, kernel: Kernel, i: number, site: ErrorSite): GPUTextureView {
  const storage = info.kind === 'storage-texture';
  const what = `binding ${i} '${info.name}' of kernel '${kernel.label}'`, label = t.label || 'GPUTexture';
  if (!(t.usage & (storage ? TextureUsage.STORAGE_BINDING : TextureUsage.TEXTURE_BINDING))) {
    throw new InvalidArgumentError(`${what} needs a texture with ${storage ? 'STORAGE_BINDING' : 'TEXTURE_BINDING'} usage; '${label}' lacks it`, site);
  }
  if (storage && t.format !== info.format) throw new InvalidArgumentError(`${what} is a texture_storage of format '${info.format}'; '${label}' is '${t.format}'`, site);
  // A depth-stencil format binds one aspect: its depth as depth or unfilterable float, its stencil as uint.
  let aspect: GPUTextureAspect = 'all';
  if (!storage) {
    const kind = sampleKind(t.format), want = info.sampleType!;
    const stencil = t.format.includes('stencil8') && want === 'uint';
    const fits = kind === want || stencil || (want === 'unfilterable-float' && (kind === 'float' || kind === 'depth'));
    if (!fits) throw new InvalidArgumentError(`${what} samples '${want}'; '${label}' (format '${t.format}') gives '${kind}'`, site);
    if (t.format.startsWith('depth') && t.format.includes('stencil')) aspect = stencil ? 'stencil-only' : 'depth-only';
    if ((t.sampleCount > 1) !== (info.multisampled === true)) throw new InvalidArgumentError(`${what} is ${info.multisampled ? '' : 'not '}multisampled; '${label}' has sampleCount ${t.sampleCount}`, site);
  }
  const dim = info.viewDimension!;
  if (dim[0] !== t.dimension[0] && !(t.dimension === '2d' && dim.startsWith('cube'))) throw new InvalidArgumentError(`${what} is a ${dim} texture; '${label}' is ${t.dimension}`, site);
  const layers = t.depthOrArrayLayers;
  if (dim.startsWith('cube') && (t.width !== t.height || (dim === 'cube' ? layers < 6 : layers % 6 !== 0))) {
    throw new InvalidArgumentError(`${what} is a ${dim} texture: '${label}' needs square faces and ${dim === 'cube' ? 'at least 6 array layers' : 'a multiple of 6 array layers'}; it is ${t.width}x${t.height} with ${layers}`, site);
  }
  const key = `${dim}${storage ? ' storage' : ''}${aspect === 'all' ? '' : ` ${aspect}`}`;
  let byKey = views.get(t);
  if (!byKey) views.set(t, (byKey = new Map()));
  let view = byKey.get(key);
  if (!view) byKey.set(key, (view = t.createView({ dimension: dim, aspect, ...(storage ? { mipLevelCount: 1 } : {}), ...(dim === 'cube' ? { arrayLayerCount: 6 } : {}), label: `${label} (${key})` })));
  return view;
}

/** A GPUSampler: the global's instance where there is one; else an object that is no buffer, texture or view. */
function isSampler(x: unknown): x is GPUSampler {
  const type = (globalThis as { GPUSampler?: abstract new () => unknown }).GPUSampler;
  if (type) return x instanceof type;
  return typeof x === 'object' && x !== null && !('size' in x) && !('format' in x) && !(x instanceof DeviceBuffer) && !(x instanceof DeviceTexture) && !isView(x);
}

/** A GPUTextureView: the global's instance where there is one; in Node, Dawn's class name. */
function isView(x: unknown): x is GPUTextureView {
  const type = (globalThis as { GPUTextureView?: abstract new () => unknown }).GPUTextureView;
  if (type) return x instanceof type;
  return typeof x === 'object' && x !== null && (x as object).constructor?.name === 'GPUTextureView';
}

/** A binding the kernel writes: read_write storage, or a storage texture that is not read-only. */
function written(b: BindingInfo): boolean {
  return b.kind === 'storage' || (b.kind === 'storage-texture' && b.access !== 'read');
}
