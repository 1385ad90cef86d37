/** Type-level checks of the public API (vitest's expectTypeOf; checked by tsc and at run time). */
import { describe, expectTypeOf, it } from 'vitest';
import {
  createContext,
  type Context,
  type Stream,
  type GpuEvent,
  type DeviceBuffer,
  type PinnedBuffer,
  type Kernel,
  type TraceSpan,
  StreamError,
  InvalidArgumentError,
} from '../src/index.js';
import { createNodeContext } from '../src/node.js';

describe('public API types', () => {
  it('contexts', () => {
    expectTypeOf(createContext).returns.resolves.toEqualTypeOf<Context>();
    expectTypeOf(createNodeContext).returns.resolves.toEqualTypeOf<Context>();
    expectTypeOf(createContext).parameter(0).exclude<undefined>().toHaveProperty('powerPreference');
    expectTypeOf<Context['createStream']>().returns.toEqualTypeOf<Stream>();
    expectTypeOf<Context['createEvent']>().returns.toEqualTypeOf<GpuEvent>();
    expectTypeOf<Context['alloc']>().returns.toEqualTypeOf<DeviceBuffer>();
    expectTypeOf<Context['allocHost']>().returns.toEqualTypeOf<PinnedBuffer>();
    expectTypeOf<Context['allocHost']>().parameter(1).toEqualTypeOf<'upload' | 'download'>();
    expectTypeOf<Context['kernels']['vectorAdd']>().toEqualTypeOf<Kernel>();
    expectTypeOf<Context['memory']['peak']>().toBeNumber();
    expectTypeOf<Context['synchronize']>().returns.toEqualTypeOf<Promise<void>>();
    expectTypeOf<Context['destroy']>().returns.toBeVoid();
  });

  it('streams return op ids and promises', () => {
    expectTypeOf<Stream['launch']>().returns.toBeNumber();
    expectTypeOf<Stream['upload']>().parameter(0).toEqualTypeOf<PinnedBuffer | ArrayBufferView>();
    expectTypeOf<Stream['download']>().parameter(1).toEqualTypeOf<PinnedBuffer | ArrayBufferView>();
    expectTypeOf<Stream['hostFn']>().parameter(0).toEqualTypeOf<() => void | PromiseLike<unknown>>(); // a promise of any value, or a thenable, is awaited
    expectTypeOf<Stream['synchronize']>().returns.toEqualTypeOf<Promise<void>>();
    expectTypeOf<Stream['query']>().returns.toBeBoolean();
    expectTypeOf<Stream['priority']>().toBeNumber();
  });

  it('events, pinned views, trace, errors', () => {
    expectTypeOf<GpuEvent['elapsedTime']>().parameter(0).toEqualTypeOf<GpuEvent>();
    expectTypeOf<GpuEvent['elapsedTime']>().returns.toBeNumber();
    expectTypeOf<PinnedBuffer['f32']>().toEqualTypeOf<Float32Array>();
    expectTypeOf<PinnedBuffer['ready']>().returns.toEqualTypeOf<Promise<void>>();
    expectTypeOf<TraceSpan['kind']>().toEqualTypeOf<'upload' | 'download' | 'copy' | 'kernel' | 'host' | 'event' | 'wait' | 'fill' | 'read'>();
    expectTypeOf<InvalidArgumentError>().toMatchTypeOf<StreamError>();
    expectTypeOf<StreamError['stream']>().toEqualTypeOf<string | undefined>();
  });
});
