/**
 * Every benchmark scenario in quick mode on Dawn (SwiftShader where there is no GPU), with the
 * stream sanitizer on (sanitize: 'throw': a race throws): it verifies
 * against the CPU reference, returns a well-formed result, and keeps the invariants that do not
 * depend on timing (memory of the weight slots, bit-identical outputs, submission order).
 * Timing numbers are printed, never asserted: they belong to the benchmark, not the tests.
 *
 * Reproduce a failure with the seed from its message: `SCENARIO_SEED=1234 npx vitest run bench/test/scenarios.test.ts`.
 */
import '../../test/fixtures/gpu'; // points the Vulkan loader at SwiftShader when there is no GPU
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { ScenarioResult, Span, SuiteResult } from '../schema';
import { scenarios, runSuite } from '../suite';
import { deviceReport, isSoftwareAdapter } from '../device';
import { measure, measureInterleaved, median, timing, type RunInfo } from '../stats';
import { chunkedPipeline } from '../scenarios/chunked-pipeline';
import { dispatchOverlap, overlapProbe } from '../scenarios/overlap-probe';
import { ms } from '../scenarios/common';
import { priorities } from '../scenarios/priorities';
import { sleepStreams } from '../scenarios/sleep-streams';
import { weightLoading } from '../scenarios/weight-loading';
import { weightsStorage } from '../scenarios/weights-storage';
import { twoGpus } from '../scenarios/two-gpus';
import { nodeWeightsStorage } from '../weights-file';
import { serveDir } from '../serve';
import { weightsUrl } from '../weights-spec';
import { httpSource } from 'webgpu-streams';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Context } from 'webgpu-streams';


const { createNodeContext } = await import('webgpu-streams/node');

const envSeed = Number(process.env.SCENARIO_SEED ?? 0);
const seed = Number.isInteger(envSeed) && envSeed > 0 ? envSeed : (Math.random() * 2 ** 32) >>> 0;

let ctx: Context | null = null;
let noAdapter = '';
try {
  // The stream sanitizer checks every scenario for races; one would throw at its call.
  ctx = await createNodeContext({ trace: true, label: 'scenarios.test', sanitize: 'throw' });
} catch (e) {
  noAdapter = e instanceof Error ? e.message : String(e);
  console.warn(`scenarios.test: no WebGPU adapter at all, skipping: ${noAdapter}`);
}
const withDevice = ctx ? describe : describe.skip;

const errors: string[] = [];
beforeAll(() => {
  if (!ctx) return;
  console.log(`scenarios.test: adapter ${JSON.stringify(ctx.adapterInfo)}; timestamp-query ${ctx.features.timestampQuery}; seed ${seed}`);
  ctx.device.addEventListener('uncapturederror', (e) => errors.push((e as GPUUncapturedErrorEvent).error.message));
});
afterAll(() => ctx?.destroy());

/** Runs a scenario inside a validation error scope; fails on any captured WebGPU error. */
async function runChecked(run: () => Promise<ScenarioResult>): Promise<ScenarioResult> {
  const c = ctx!;
  c.device.pushErrorScope('validation');
  c.device.pushErrorScope('out-of-memory');
  const result = await run();
  const oom = await c.device.popErrorScope();
  const validation = await c.device.popErrorScope();
  expect(oom?.message ?? null, 'out-of-memory error').toBeNull();
  expect(validation?.message ?? null, 'validation error').toBeNull();
  expect(errors, 'uncaptured WebGPU errors').toEqual([]);
  return result;
}

function summarize(r: ScenarioResult): string {
  const rows = r.variants.map((v) => {
    const parts = [`${v.name}: ${v.time.median.toFixed(3)} ms`];
    if (v.ideal !== null) parts.push(`ideal ${v.ideal.toFixed(3)}`);
    if (v.speedup !== undefined) parts.push(`${v.speedup.toFixed(2)}x`);
    if (v.efficiency !== undefined) parts.push(`eff ${v.efficiency.toFixed(2)}`);
    if (v.gbps !== undefined) parts.push(`${v.gbps.toFixed(2)} GB/s`);
    if (v.memoryBytes !== undefined) parts.push(`${(v.memoryBytes / 1024).toFixed(0)} KiB`);
    return `  ${parts.join(', ')}`;
  });
  return [`${r.id} (${r.wallMs.toFixed(0)} ms):`, ...rows, ...r.verdicts.map((v) => `  - ${v}`)].join('\n');
}

/** Shape checks every scenario result must pass. */
function expectWellFormed(r: ScenarioResult, id: string, idealFor: RegExp): void {
  expect(r.id).toBe(id);
  expect(r.verification.ok, `${r.verification.detail}\n${r.verification.mismatch ?? ''}`).toBe(true);
  expect(r.verification.detail).toMatch(/seed \d+/);
  expect(r.variants.length).toBeGreaterThan(0);
  expect(r.verdicts.length).toBeGreaterThan(0);
  expect(r.wallMs).toBeGreaterThan(0);
  const names = r.variants.map((v) => v.name);
  expect(new Set(names).size, 'variant names are unique').toBe(names.length);
  for (const v of r.variants) {
    const t = v.time;
    expect(t.samples.length, v.name).toBeGreaterThan(0);
    for (const s of t.samples) expect(Number.isFinite(s) && s >= 0, `${v.name} sample ${s}`).toBe(true);
    expect(t.min).toBeLessThanOrEqual(t.median);
    expect(t.median).toBeLessThanOrEqual(t.max);
    if (idealFor.test(v.name)) expect(v.ideal, `ideal of ${v.name}`).toEqual(expect.any(Number));
    if (v.baseline !== undefined) {
      expect(names, `baseline of ${v.name}`).toContain(v.baseline);
      expect(v.speedup, `speedup of ${v.name}`).toEqual(expect.any(Number));
    }
  }
  expectSpans(r.trace);
  // The result is plain JSON.
  expect(JSON.parse(JSON.stringify(r))).toEqual(r);
}

const KINDS = new Set<Span['kind']>(['upload', 'download', 'copy', 'kernel', 'host', 'event', 'wait', 'fill', 'read']);
function expectSpans(spans: Span[]): void {
  expect(spans.length, 'trace spans').toBeGreaterThan(0);
  for (const s of spans) {
    expect(typeof s.lane === 'string' && s.lane.length > 0, `lane of ${JSON.stringify(s)}`).toBe(true);
    expect(KINDS.has(s.kind), `kind of ${JSON.stringify(s)}`).toBe(true);
    expect(Number.isFinite(s.start) && Number.isFinite(s.end), `times of ${JSON.stringify(s)}`).toBe(true);
    expect(s.end, `end >= start in ${JSON.stringify(s)}`).toBeGreaterThanOrEqual(s.start);
  }
}

describe('bench/stats', () => {
  it('measure excludes warm-up runs and summarizes the rest', async () => {
    const seen: boolean[] = [];
    const t = await measure(({ warmup, index }) => (seen.push(warmup), index * 10), { warmup: 2, repeats: 3 });
    expect(seen).toEqual([true, true, false, false, false]);
    expect(t.samples).toEqual([20, 30, 40]);
    expect(t).toMatchObject({ median: 30, min: 20, max: 40 });
  });
  it('measureInterleaved runs the variants round-robin, warm-up rounds excluded', async () => {
    const order: string[] = [];
    const [a, b] = await measureInterleaved(
      [({ index, last }) => (order.push(`a${index}${last ? '!' : ''}`), 1 + index), ({ index, last }) => (order.push(`b${index}${last ? '!' : ''}`), 10 + index)],
      { warmup: 1, repeats: 2 },
    );
    expect(order).toEqual(['a0', 'b0', 'a1', 'b1', 'a2!', 'b2!']);
    expect(a!.samples).toEqual([2, 3]);
    expect(b!.samples).toEqual([11, 12]);
  });
  it('measureInterleaved with settle runs each variant untimed right before each measured run', async () => {
    const order: string[] = [];
    const [a, b] = await measureInterleaved(
      [({ index, warmup }) => (order.push(`a${index}${warmup ? 'w' : ''}`), 1 + index), ({ index, warmup }) => (order.push(`b${index}${warmup ? 'w' : ''}`), 10 + index)],
      { warmup: 1, repeats: 2, settle: 1 },
    );
    expect(order).toEqual(['a0w', 'b0w', 'a1w', 'a1', 'b1w', 'b1', 'a2w', 'a2', 'b2w', 'b2']);
    expect(a!.samples).toEqual([2, 3]);
    expect(b!.samples).toEqual([11, 12]);
    await expect(measureInterleaved([() => {}], { settle: -1 })).rejects.toThrow(/`settle`/);
  });
  it('measureInterleaved with rotate starts each measured round one variant later, samples paired by round', async () => {
    const order: string[] = [];
    const [a, b, c] = await measureInterleaved(
      ['a', 'b', 'c'].map((v, i) => ({ index, warmup }: RunInfo) => (order.push(`${v}${index}${warmup ? 'w' : ''}`), 10 * i + index)),
      { warmup: 1, repeats: 4, rotate: true },
    );
    // The warm-up round in order, then a b c / b c a / c a b / a b c.
    expect(order).toEqual(['a0w', 'b0w', 'c0w', 'a1', 'b1', 'c1', 'b2', 'c2', 'a2', 'c3', 'a3', 'b3', 'a4', 'b4', 'c4']);
    expect(a!.samples).toEqual([1, 2, 3, 4]);
    expect(b!.samples).toEqual([11, 12, 13, 14]);
    expect(c!.samples).toEqual([21, 22, 23, 24]);
    await expect(measureInterleaved([() => {}], { rotate: 1 as unknown as boolean })).rejects.toThrow(/`rotate`/);
  });
  it('median of even and odd counts; timing needs a sample', () => {
    expect(median([3, 1, 2])).toBe(2);
    expect(median([4, 1, 3, 2])).toBe(2.5);
    expect(() => timing([])).toThrow(RangeError);
  });
  it('rejects bad repeat counts with the option in the message', async () => {
    await expect(measure(() => {}, { repeats: 0 })).rejects.toThrow(/`repeats`/);
    await expect(measure(() => {}, { warmup: -1 })).rejects.toThrow(/`warmup`/);
  });
});

describe('bench/device', () => {
  it.each([
    [{ vendor: 'google', architecture: '', description: '' }, true],
    [{ vendor: '', architecture: 'swiftshader', description: '' }, true],
    [{ vendor: '', architecture: '', description: 'SwiftShader Device (Subzero)' }, true],
    [{ vendor: 'nvidia', architecture: 'hopper', description: 'NVIDIA H100' }, false],
  ])('isSoftwareAdapter(%j) = %s', (info, want) => {
    expect(isSoftwareAdapter(info)).toBe(want);
  });
});

withDevice('scenarios (quick, Dawn)', () => {
  it('the suite lists the six scenarios with unique ids', () => {
    expect(scenarios.map((s) => s.id)).toEqual(['overlap-probe', 'chunked-pipeline', 'sleep-streams', 'weight-loading', 'weights-storage', 'priorities', 'two-gpus']);
    expect(deviceReport(ctx!, 'node')).toMatchObject({ runner: 'node', timestampQuery: ctx!.features.timestampQuery });
  });

  it("the adapter's model name carries no trailing hyphen (Dawn's SwiftShader name has one)", () => {
    const name = deviceReport(ctx!, 'node').notes?.['device'] ?? '';
    expect(name).not.toMatch(/[-_\s]$/);
    if (String(ctx!.adapterInfo.device).endsWith('-')) expect(name).toBe(String(ctx!.adapterInfo.device).slice(0, -1));
  });

  it('overlap-probe: every path moves the right bytes; bandwidths and verdicts present', async () => {
    const r = await runChecked(() => overlapProbe.run(ctx!, { quick: true, params: { seed } }));
    console.log(summarize(r));
    expectWellFormed(r, 'overlap-probe', /^(copy \+ compute|fill during|\d+ dispatches)/);
    for (const name of ['upload: JS memcpy (TypedArray.set)', 'upload: queue.writeBuffer', 'upload: raw mapped staging', 'upload(ArrayBufferView) (pool)', 'upload(PinnedBuffer)', 'download(PinnedBuffer) (view)']) {
      const v = r.variants.find((x) => x.name === name);
      expect(v?.gbps, name).toBeGreaterThan(0);
    }
    for (const word of ['concurrent kernels', 'copy/compute overlap', 'host work overlaps GPU work', 'P2', 'P3', 'P5']) {
      expect(r.verdicts.join('\n')).toContain(word);
    }
    // One round trip: the table's row is what the concurrent-kernels probe subtracts, and its verdict names the rows it used.
    const rt = r.variants.find((v) => v.name === 'round trip (4-byte copy)')!.time.median;
    expect(r.params.roundTripMs).toBe(Math.round(rt * 1e4) / 1e4);
    const one = r.variants.find((v) => v.name === '1 dispatch')!.time.median;
    const kernels = r.verdicts.find((v) => v.startsWith('concurrent kernels: '))!;
    expect(kernels).toContain(`one alone ${ms(one)} (the table's rows); the round trip ${ms(rt)} (its row)`);
    // With timestamps, the GPU's clock decides (SwiftShader's queue runs one dispatch at a time).
    if (ctx!.features.timestampQuery) expect(kernels).toMatch(/^concurrent kernels: no \(GPU timestamps of the recorded \d+-stream run: .* one after another;/);
  });

  it('overlap-probe: dispatchOverlap measures the GPU time dispatches ran side by side', () => {
    const k = (lane: string, start: number, end: number, estimated = false): Span => ({ lane, kind: 'kernel', name: 'sleep', start, end, ...(estimated ? { estimated } : {}) });
    const lanes = ['d0', 'd1', 'd2'];
    // One after another: no overlap.
    expect(dispatchOverlap([k('d0', 0, 1), k('d1', 1, 2), k('d2', 2.5, 3.5)], lanes)).toEqual({ sum: 3, union: 3, overlap: 0, fraction: 0 });
    // All at once: all the overlap there could be.
    expect(dispatchOverlap([k('d0', 0, 1), k('d1', 0, 1), k('d2', 0, 1)], lanes)).toEqual({ sum: 3, union: 1, overlap: 2, fraction: 1 });
    // The last span of each lane counts (earlier runs of the same lanes are ignored).
    expect(dispatchOverlap([k('d0', 0, 1), k('d1', 0, 1), k('d2', 0, 1), k('d0', 5, 6), k('d1', 5.5, 6.5), k('d2', 7, 8)], lanes)!.overlap).toBeCloseTo(0.5, 9);
    // Estimated spans (no timestamps) or a missing lane: null, the wall clock decides.
    expect(dispatchOverlap([k('d0', 0, 1, true), k('d1', 1, 2, true), k('d2', 2, 3, true)], lanes)).toBeNull();
    expect(dispatchOverlap([k('d0', 0, 1), k('d1', 1, 2)], lanes)).toBeNull();
  });

  it('chunked-pipeline: sync and N = 1, 2, 4, 8 streams all match the reference', async () => {
    const r = await runChecked(() => chunkedPipeline.run(ctx!, { quick: true, params: { seed } }));
    console.log(summarize(r));
    expectWellFormed(r, 'chunked-pipeline', /^streams=/);
    expect(r.variants.map((v) => v.name)).toEqual(['sync', 'streams=1', 'streams=2', 'streams=4', 'streams=8']);
    // Device memory: two buffers of the whole size, in chunks or not.
    const bytes = Number(r.params.bytes);
    for (const v of r.variants) expect(v.memoryBytes, v.name).toBe(2 * bytes);
    // The trace has the host fills and read-outs and the GPU ops on the streams.
    expect(r.trace.some((s) => s.kind === 'fill')).toBe(true);
    expect(r.trace.some((s) => s.kind === 'kernel' && s.lane.startsWith('streams='))).toBe(true);
  });

  it('sleep-streams: 1 stream vs 4 streams, every task verified', async () => {
    const r = await runChecked(() => sleepStreams.run(ctx!, { quick: true, params: { seed } }));
    console.log(summarize(r));
    expectWellFormed(r, 'sleep-streams', /streams$/);
    expect(r.variants.map((v) => v.name)).toEqual(['1 stream', '4 streams']);
    const lanes = new Set(r.trace.filter((s) => s.kind === 'kernel').map((s) => s.lane));
    expect([...lanes].sort()).toEqual(['1 stream', 'stream 0', 'stream 1', 'stream 2', 'stream 3']);
  });

  it('weight-loading: two slots hold exactly 2 weights, resident L; outputs identical bit for bit', async () => {
    const r = await runChecked(() => weightLoading.run(ctx!, { quick: true, params: { seed } }));
    console.log(summarize(r));
    expectWellFormed(r, 'weight-loading', /2 slots$/);
    const bytes = Number(r.params.bytes);
    const slots = r.variants.filter((v) => v.name.endsWith(': 2 slots'));
    const resident = r.variants.filter((v) => v.name.endsWith(': resident'));
    expect(slots.length).toBeGreaterThan(0);
    expect(resident.length).toBe(slots.length);
    for (const v of slots) {
      // input + output (ping-pong) + exactly two weight slots
      expect(v.memoryBytes, v.name).toBe(4 * bytes);
      expect(v.extra?.weightsBytes).toBe(2 * bytes);
    }
    for (const v of resident) {
      const L = Number(v.extra?.layers);
      expect(v.memoryBytes, v.name).toBe((L + 2) * bytes);
    }
    // Bit-for-bit equality with the resident run is one of the verification checks.
    expect(r.verification.detail).toContain('2 slots == resident, bit for bit');
  });

  it('weights-storage: streams the file through two slots (4x the budget); outputs match the CPU chain on weights read from it', async () => {
    const r = await runChecked(() => weightsStorage.run(ctx!, { quick: true, storage: nodeWeightsStorage, params: { seed } }));
    console.log(summarize(r));
    expectWellFormed(r, 'weights-storage', /2 slots$/);
    const bytes = Number(r.params.bytes);
    expect(Number(r.params.layers) * bytes, 'the model is 4x the device budget (2 slots + 2 activations)').toBeGreaterThanOrEqual(4 * 4 * bytes);
    for (const v of r.variants.filter((x) => x.name.endsWith('2 slots'))) expect(v.memoryBytes, v.name).toBe(4 * bytes);
    expect(r.verification.detail).toContain('slot 1 == layer');
    expect(r.verification.detail).toMatch(/2 slots == CPU chain of \d+ layers/);
    expect(r.trace.some((x) => x.lane.endsWith('(uploadFrom)')), 'the copies are on the timeline').toBe(true);
  });

  it("weights-storage over HTTP byte ranges from the page's server (serveDir), as the page reads it", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'webgpu-streams-ws-'));
    const server = await serveDir(dir);
    try {
      const storage = { where: 'HTTP (test)', open: (spec: Parameters<typeof weightsUrl>[0], parallel: number) => httpSource(server.origin + weightsUrl(spec), { parallel }) };
      const r = await runChecked(() => weightsStorage.run(ctx!, { quick: true, storage, params: { seed } }));
      expectWellFormed(r, 'weights-storage', /2 slots$/);
    } finally {
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('two-gpus: copyPeer, the split and the two-stage pipelines on two contexts (two devices of one adapter here) verify; both contexts are on the timeline', async () => {
    const secondGpu = { create: () => createNodeContext({ trace: true, label: 'second', sanitize: 'throw' }), what: 'a second device (test)' };
    const r = await runChecked(() => twoGpus.run(ctx!, { quick: true, secondGpu, params: { seed } }));
    console.log(summarize(r));
    expectWellFormed(r, 'two-gpus', /^(copyPeer|1 GPU|2 GPUs|stages)$/);
    expect(r.variants.map((v) => v.name)).toEqual(['read-back on A', 'upload on B', 'copyPeer', '1 GPU', '2 GPUs', 'stages']);
    expect(r.verification.detail).toMatch(/copyPeer: .* from A to B; 1 GPU: chunk 3; 2 GPUs: chunk 0 \(on A\); 2 GPUs: chunk 3 \(on B\); stages: chunk 0; stages: chunk 3/);
    expect(r.verdicts[0]).toBe('second GPU: a second device (test)');
    expect(r.trace.some((x) => x.lane.startsWith('B ')), "B's lanes are on the timeline").toBe(true);
    expect(r.trace.some((x) => !x.lane.startsWith('B ') && x.lane !== 'host'), "A's lanes are on the timeline").toBe(true);
  });

  it('priorities: the high-priority kernel is submitted ahead of queued low-priority work', async () => {
    const r = await runChecked(() => priorities.run(ctx!, { quick: true, params: { seed } }));
    console.log(summarize(r));
    expectWellFormed(r, 'priorities', /^(urgent kernel, priority -|hostFn prefetch)/);
    const eq = r.variants.find((v) => v.name === 'urgent kernel, equal priority')!;
    const hi = r.variants.find((v) => v.name === 'urgent kernel, priority -5')!;
    // Submission order, not time: with one submit in flight, priority -5 goes next; FIFO at equal priority.
    expect(hi.extra?.lowKernelsBefore).toBe(1);
    expect(eq.extra?.lowKernelsBefore).toBe(Number(r.params.lowKernels));
    if (ctx!.features.timestampQuery) {
      expect(r.variants.some((v) => v.name.startsWith('elapsedTime'))).toBe(true);
    }
  });

  it('runSuite: picks scenarios by id, fills date, device and ok', async () => {
    const result: SuiteResult = await runSuite(ctx!, {
      quick: true,
      only: ['sleep-streams'],
      runner: 'node',
    });
    expect(result.schema).toBe('webgpu-streams/bench@1');
    expect(result.quick).toBe(true);
    expect(result.scenarios.map((s) => s.id)).toEqual(['sleep-streams']);
    expect(result.ok).toBe(true);
    expect(Number.isNaN(Date.parse(result.date))).toBe(false);
    expect(result.device.runner).toBe('node');
    await expect(runSuite(ctx!, { only: ['nope'] })).rejects.toThrow(/`only`/);
  });
});
