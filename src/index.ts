/**
 * webgpu-streams: CUDA-style streams and events for WebGPU.
 * This file only re-exports; see docs/API.md for the tour.
 */
export { createContext, Context, PRIORITY_RANGE } from './context.js';
export type { ContextOptions, AdapterInfo, BuiltinKernels } from './context.js';
export { Stream } from './stream.js';
export type { LaunchOptions, CopyOptions, Bindable, Texture } from './stream.js';
export type { Binding } from './launch-args.js';
export { DeviceTexture, textureLayout } from './texture.js';
export type { TextureOptions, TextureCopyOptions } from './texture.js';
export type { TextureTransferOptions } from './texture-copy.js';
export type { EncodeOptions, EncodeAccess } from './encode-op.js';
export type { UploadSource, RandomAccessSource, UploadFromOptions } from './upload-from.js';
export { SafetensorsFile, safetensorsHeader, encodeSafetensors } from './safetensors.js';
export { httpSource } from './http-source.js';
export type { HttpSourceOptions } from './http-source.js';
export type { TensorInfo } from './safetensors.js';
export type { SyncOptions } from './validate.js';
export { GpuEvent } from './event.js';
export { SlotRing } from './slot-ring.js';
export type { SlotRingOptions, SlotWork } from './slot-ring.js';
export type { EventOptions, EventRecorder } from './event.js';
export { DeviceBuffer, DeviceResource } from './memory.js';
export type { MemoryStats } from './memory.js';
export { PinnedBuffer } from './pinned.js';
export { Kernel, workgroupsFor } from './kernels.js';
export type { KernelOptions } from './kernels.js';
export type { BindingInfo } from './wgsl.js';
export { Trace, toChromeTraceEvents } from './trace.js';
export type { TraceSpan, TraceLink, OpRecord, ChromeTraceEvent, ChromeTraceOptions } from './trace.js';
export {
  StreamError,
  InvalidArgumentError,
  DestroyedError,
  PinnedBufferBusyError,
  EventTimingError,
  EventNotReadyError,
  DeviceLostError,
  DeadlockError,
  AggregateStreamError,
  GpuValidationError,
  OutOfMemoryError,
  HostFnError,
  DependencyError,
  AbortError,
  WebGpuUnavailableError,
  StreamRaceError,
  UploadSourceError,
} from './errors.js';
export type { ErrorSite, RaceReport, RaceAccess } from './errors.js';
export type { SanitizeMode } from './sanitizer.js';
