/**
 * The context's options: checked, with their defaults (createContext checks them before it
 * requests a device; the Context constructor reads them), and WebGPU's rules for buffer usages.
 */
import { InvalidArgumentError, type ErrorSite } from './errors.js';
import { BufferUsage } from './gpu-constants.js';
import type { SanitizeMode } from './sanitizer.js';
import { expectBoolean, expectInteger, expectKnownKeys, expectObject, showValue } from './validate.js';

/** The options parseOptions reads (ContextOptions's, as values). */
export interface ContextOptionValues {
  trace?: boolean | { gpuTimestamps?: boolean; limit?: number };
  captureStacks?: boolean | 'all';
  uploadPieceBytes?: number;
  sanitize?: false | SanitizeMode;
  maxSubmitsInFlight?: number;
  maxOpsPerSubmit?: number;
  stagingPoolBytes?: number;
}

/** The options the Context constructor reads, checked and with their defaults (createContext checks them before it requests a device). */
export function parseOptions(o: ContextOptionValues, site: ErrorSite) {
  const t = o.trace as unknown;
  if (t !== undefined && typeof t !== 'boolean') {
    const to = expectObject('trace', t, site);
    expectKnownKeys('trace', to, ['gpuTimestamps', 'limit'], site);
    if (to.gpuTimestamps !== undefined) expectBoolean('trace.gpuTimestamps', to.gpuTimestamps, site);
    if (to.limit !== undefined) expectInteger('trace.limit', to.limit, 1, Number.MAX_SAFE_INTEGER, site);
  }
  const captureStacks = o.captureStacks ?? true;
  if (captureStacks !== 'all' && typeof captureStacks !== 'boolean') {
    throw new InvalidArgumentError(`Expected \`captureStacks\` to be a boolean or 'all', got ${showValue(captureStacks)}`, site);
  }
  const uploadPieceBytes = o.uploadPieceBytes === undefined ? 0 : expectInteger('uploadPieceBytes', o.uploadPieceBytes, 0, Number.MAX_SAFE_INTEGER, site);
  if (uploadPieceBytes !== 0 && (uploadPieceBytes < 4096 || uploadPieceBytes % 4 !== 0)) {
    throw new InvalidArgumentError(`Expected \`uploadPieceBytes\` to be 0 (uploads go whole) or a multiple of 4 of at least 4096, got ${uploadPieceBytes}`, site);
  }
  const traceOpt = o.trace ?? false;
  const sanitize = o.sanitize ?? sanitizeFromEnv(site);
  if (sanitize !== false && sanitize !== 'throw' && sanitize !== 'warn' && typeof sanitize !== 'function') {
    throw new InvalidArgumentError(`Expected \`sanitize\` to be false, 'throw', 'warn' or a function taking a RaceReport, got ${showValue(sanitize)}`, site);
  }
  return {
    sanitize: sanitize as false | SanitizeMode,
    maxSubmitsInFlight: o.maxSubmitsInFlight === undefined ? 16 : o.maxSubmitsInFlight === Infinity ? Infinity : expectInteger('maxSubmitsInFlight', o.maxSubmitsInFlight, 1, 1 << 20, site),
    maxOpsPerSubmit: o.maxOpsPerSubmit === undefined || o.maxOpsPerSubmit === Infinity ? Infinity : expectInteger('maxOpsPerSubmit', o.maxOpsPerSubmit, 1, Number.MAX_SAFE_INTEGER, site),
    captureStacks,
    uploadPieceBytes,
    stagingPoolBytes: o.stagingPoolBytes === undefined ? undefined : expectInteger('stagingPoolBytes', o.stagingPoolBytes, 0, Number.MAX_SAFE_INTEGER, site),
    traceOn: traceOpt !== false,
    traceGpu: typeof traceOpt === 'object' && traceOpt.gpuTimestamps === true,
    traceLimit: typeof traceOpt === 'object' ? traceOpt.limit : undefined,
  };
}

/**
 * `WEBGPU_STREAMS_SANITIZE=throw|warn` in the environment (Node) turns the sanitizer on for every
 * context that does not set `sanitize`, as `TORCH_CUDA_SANITIZER=1` does for PyTorch.
 */
function sanitizeFromEnv(site: ErrorSite): false | 'throw' | 'warn' {
  const v = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env?.WEBGPU_STREAMS_SANITIZE;
  if (v === undefined || v === '' || v === '0' || v === 'false') return false;
  if (v === 'throw' || v === 'warn') return v;
  throw new InvalidArgumentError(`WEBGPU_STREAMS_SANITIZE is '${v}'; use 'throw', 'warn' or leave it unset`, site);
}

/** WebGPU's rules for buffer usages, checked at the call instead of failing the buffer later. */
export function checkUsage(usage: number, site: ErrorSite): number {
  const mapRead = (usage & BufferUsage.MAP_READ) !== 0;
  const mapWrite = (usage & BufferUsage.MAP_WRITE) !== 0;
  if (mapRead && mapWrite) throw new InvalidArgumentError(`Expected \`usage\` to have MAP_READ or MAP_WRITE, not both (WebGPU), got 0x${usage.toString(16)}`, site);
  if (mapRead && (usage & ~(BufferUsage.MAP_READ | BufferUsage.COPY_DST)) !== 0) {
    throw new InvalidArgumentError(`Expected \`usage\` with MAP_READ to have no flag but COPY_DST (WebGPU), got 0x${usage.toString(16)}; read device data back with stream.download()`, site);
  }
  if (mapWrite && (usage & ~(BufferUsage.MAP_WRITE | BufferUsage.COPY_SRC)) !== 0) {
    throw new InvalidArgumentError(`Expected \`usage\` with MAP_WRITE to have no flag but COPY_SRC (WebGPU), got 0x${usage.toString(16)}; send host data with stream.upload()`, site);
  }
  return usage;
}
