/**
 * webgpu-streams: CUDA-style streams and events for WebGPU.
 * This file only re-exports; see docs/API.md for the tour.
 */
export { createContext, Context, PRIORITY_RANGE } from './context.js';
export type { ContextOptions, AdapterInfo, BuiltinKernels } from './context.js';
export { Stream } from './stream.js';
export type { LaunchOptions, CopyOptions, SyncOptions, Bindable } from './stream.js';
export { GpuEvent } from './event.js';
export type { EventOptions } from './event.js';
export { DeviceBuffer, MemoryStats } from './memory.js';
export { bucketSize } from './transfer.js';
export { PinnedBuffer } from './pinned.js';
export { Kernel, reflectWgsl, workgroupsFor, builtinShaders } from './kernels.js';
export type { BindingInfo, KernelOptions, WgslReflection } from './kernels.js';
export { Trace } from './trace.js';
export type { TraceSpan, OpRecord } from './trace.js';
export { calibrateSleep } from './calibrate.js';
export type { SleepCalibration } from './calibrate.js';
export {
  StreamError,
  InvalidArgumentError,
  KernelBindingError,
  DestroyedError,
  PinnedBufferBusyError,
  EventTimingError,
  EventNotReadyError,
  DeviceLostError,
  DeadlockError,
  AggregateStreamError,
  GpuValidationError,
  HostFnError,
  DependencyError,
  AbortError,
  WebGpuUnavailableError,
} from './errors.js';
export type { ErrorSite } from './errors.js';
export { BufferUsage, MapMode } from './gpu-constants.js';
