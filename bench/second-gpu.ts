/**
 * The Node runners' second GPU (the "two GPUs" scenario, P8): with the device-select layer on and
 * DEVSEL_TAG=1 (docs/MULTI_GPU.md) the first context opens '[vk0]' and the second '[vk1]'; without
 * it the second is another device of the same adapter, and the results say so.
 */
import { createNodeContext } from 'webgpu-streams/node';
import type { SecondGpu } from './scenarios/common';

const tagged = (): boolean => process.env['DEVSEL_TAG'] === '1';

/** Options for the runner's first context: its adapter, where the GPUs are tagged. */
export function firstGpu(): { adapter?: string } {
  return tagged() ? { adapter: '[vk0]' } : {};
}

/** The second context: on '[vk1]' where the GPUs are tagged, else a second device of the same adapter. */
export function nodeSecondGpu(label: string, trace = false): SecondGpu {
  return tagged()
    ? { create: () => createNodeContext({ label, trace, adapter: '[vk1]' }), what: "the host's second GPU ('[vk1]', docs/MULTI_GPU.md)" }
    : { create: () => createNodeContext({ label, trace }), what: 'a second device of the same adapter (one GPU shared by both)' };
}
