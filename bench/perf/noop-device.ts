/**
 * A GPUDevice whose calls do nothing and cost next to nothing, recording what was encoded: the
 * library's own host cost, without any driver's, and a check that it encoded what it should.
 *
 * Not a WebGPU implementation: no validation, no execution, maps resolve on the next microtask.
 * Methods the library may call that are not listed return inert objects, so a new call in the
 * library does not break the measurement (it only goes unrecorded).
 */

/** One encoded command, as the library handed it to the encoder. */
export type NoopCommand =
  | { kind: 'copy'; src: NoopBuffer; dst: NoopBuffer; size: number }
  | { kind: 'dispatch'; bindGroup: object | null; x: number }
  | { kind: 'submit' };

export class NoopBuffer {
  readonly size: number;
  readonly usage: number;
  readonly label: string;
  mapState: GPUBufferMapState;
  constructor(d: GPUBufferDescriptor) {
    this.size = d.size;
    this.usage = d.usage;
    this.label = d.label ?? '';
    this.mapState = d.mappedAtCreation ? 'mapped' : 'unmapped';
  }
  mapAsync(): Promise<undefined> {
    this.mapState = 'mapped';
    return Promise.resolve(undefined);
  }
  getMappedRange(offset = 0, size?: number): ArrayBuffer {
    return new ArrayBuffer(size ?? this.size - offset);
  }
  unmap(): void {
    this.mapState = 'unmapped';
  }
  destroy(): void {}
}

function inert(): object {
  return new Proxy({}, { get: (_t, k) => (k === 'then' ? undefined : () => inert()) });
}

/** A no-op device and the commands encoded on it (cleared by `log.length = 0`). */
export function createNoopDevice(): { device: GPUDevice; log: NoopCommand[] } {
  const log: NoopCommand[] = [];
  let bindGroup: object | null = null;
  const pass = {
    setPipeline(): void {},
    setBindGroup(_i: number, g: object): void {
      bindGroup = g;
    },
    dispatchWorkgroups(x: number): void {
      log.push({ kind: 'dispatch', bindGroup, x });
    },
    end(): void {},
  };
  const encoder = {
    copyBufferToBuffer(src: NoopBuffer, _so: number, dst: NoopBuffer, _do: number, size: number): void {
      log.push({ kind: 'copy', src, dst, size });
    },
    beginComputePass: () => pass,
    finish: () => ({}),
    resolveQuerySet(): void {},
    clearBuffer(): void {},
  };
  const limits = {
    maxBufferSize: 2 ** 30,
    maxStorageBufferBindingSize: 2 ** 30,
    maxComputeWorkgroupsPerDimension: 65535,
    maxComputeWorkgroupSizeX: 256,
    minStorageBufferOffsetAlignment: 256,
    minUniformBufferOffsetAlignment: 256,
  };
  const device = {
    label: 'no-op device',
    features: new Set<string>(),
    limits,
    lost: new Promise<never>(() => {}),
    queue: {
      submit(): void {
        log.push({ kind: 'submit' });
      },
      onSubmittedWorkDone: () => Promise.resolve(undefined),
      writeBuffer(): void {},
    },
    createBuffer: (d: GPUBufferDescriptor) => new NoopBuffer(d),
    createCommandEncoder: () => encoder,
    pushErrorScope(): void {},
    popErrorScope: () => Promise.resolve(null),
    createShaderModule: () => ({ getCompilationInfo: () => Promise.resolve({ messages: [] }) }),
    createComputePipeline: () => inert(),
    createComputePipelineAsync: () => Promise.resolve(inert()),
    createBindGroupLayout: () => inert(),
    createPipelineLayout: () => inert(),
    createBindGroup: () => ({}),
    createQuerySet: () => inert(),
    addEventListener(): void {},
    removeEventListener(): void {},
    destroy(): void {},
  };
  return { device: device as unknown as GPUDevice, log };
}
