/**
 * MOCK DATA for developing the page without a GPU (`?mock`). Nothing here is measured: the numbers
 * and traces are made up to look like the real suite's output. The page labels mock runs clearly;
 * it is loaded only behind `?mock`, as its own chunk.
 */
import type { DeviceReport, Progress, ScenarioResult, Span, SuiteResult, Variant } from '../schema';

export const mockScenarios = [
  { id: 'overlap-probe', title: 'Overlap probe', description: 'Copy-only, compute-only and interleaved; concurrent dispatches; upload and read-back bandwidth per path.' },
  { id: 'chunked-pipeline', title: 'Chunked pipeline', description: 'Sync vs H2D/kernel/D2H chunks over N streams.' },
  { id: 'sleep-streams', title: 'Sleep kernels', description: '1 stream vs N streams, each task H2D + sleep + D2H.' },
  { id: 'weight-loading', title: 'Weight loading', description: 'All weights resident vs double-buffered on-demand loading with events.' },
  { id: 'weights-storage', title: 'Weights from storage', description: 'A model 4x the device budget streamed from a file or the server through two slots.' },
  { id: 'priorities', title: 'Priorities, host callbacks, events', description: 'A high-priority stream overtakes queued low-priority work.' },
];

export const mockDevice: DeviceReport = {
  runner: 'page',
  vendor: 'mock',
  architecture: 'mock',
  description: 'MOCK DATA: no GPU was used',
  software: true,
  userAgent: typeof navigator === 'undefined' ? 'node' : navigator.userAgent,
  timestampQuery: false,
};

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function timing(rand: () => number, median: number): Variant['time'] {
  const samples = Array.from({ length: 5 }, () => median * (0.95 + rand() * 0.1));
  samples.sort((a, b) => a - b);
  return { median: samples[2]!, min: samples[0]!, max: samples[4]!, samples };
}

/** A chunked H2D/kernel/D2H pipeline over `streams` streams: one GPU engine, one host thread. */
function pipelineTrace(chunks: number, streams: number, t: number): Span[] {
  const spans: Span[] = [];
  let host = t;
  let gpu = t;
  const dl: number[] = [];
  for (let i = 0; i < chunks; i++) {
    const lane = `s${i % streams}`;
    const fill = { lane: 'host', kind: 'fill' as const, name: `fill chunk ${i}`, start: host, end: host + 1.4 };
    spans.push(fill);
    host = fill.end;
    let g = Math.max(gpu, fill.end);
    for (const [j, [kind, name, d]] of ([
      ['upload', `H2D ${i}`, 0.5],
      ['kernel', `vectorAdd ${i}`, 0.9],
      ['download', `D2H ${i}`, 0.5],
    ] as const).entries()) {
      spans.push({ lane, kind, name, start: g, end: g + d, op: 100 + 3 * i + j });
      g += d;
    }
    gpu = g;
    dl.push(g);
    // Read back the chunk that finished two chunks ago while the GPU runs this one.
    const ready = dl[i - 1];
    if (ready !== undefined && i >= 1) {
      const start = Math.max(host, ready + 0.3);
      spans.push({ lane: 'host', kind: 'read', name: `read chunk ${i - 1}`, start, end: start + 0.9 });
      host = start + 0.9;
    }
  }
  const start = Math.max(host, gpu + 0.3);
  spans.push({ lane: 'host', kind: 'read', name: `read chunk ${chunks - 1}`, start, end: start + 0.9 });
  return spans;
}

function sleepTrace(streams: number, t: number): Span[] {
  const spans: Span[] = [];
  let gpu = t;
  for (let i = 0; i < streams * 2; i++) {
    const lane = `stream ${i % streams}`;
    for (const [kind, name, d] of [
      ['upload', `H2D task ${i}`, 0.3],
      ['kernel', `sleep 2 ms #${i}`, 2],
      ['download', `D2H task ${i}`, 0.3],
    ] as const) {
      spans.push({ lane, kind, name, start: gpu, end: gpu + d, estimated: true });
      gpu += d;
    }
  }
  spans.push({ lane: 'host', kind: 'wait', name: 'synchronize', start: t, end: gpu + 0.2 });
  return spans;
}

function weightTrace(layers: number, t: number): Span[] {
  const spans: Span[] = [];
  let load = t;
  let compute = t;
  const loaded: number[] = [];
  for (let i = 0; i < layers; i++) {
    const start = Math.max(load, i >= 2 ? (loaded[i - 2] ?? 0) + 0.1 : load);
    spans.push({ lane: 'load', kind: 'upload', name: `weights[${i % 2}] ← layer ${i}`, start, end: start + 1.1 });
    spans.push({ lane: 'load', kind: 'event', name: `loaded[${i}]`, start: start + 1.1, end: start + 1.1 });
    load = start + 1.1;
    const cstart = Math.max(compute, load);
    if (cstart > compute + 0.01) spans.push({ lane: 'compute', kind: 'wait', name: `wait loaded[${i}]`, start: compute, end: cstart });
    spans.push({ lane: 'compute', kind: 'kernel', name: `layer ${i}`, start: cstart, end: cstart + 1.6 });
    compute = cstart + 1.6;
    loaded.push(compute);
    spans.push({ lane: 'host', kind: 'fill', name: `stage layer ${i + 1}`, start: t + i * 1.2, end: t + i * 1.2 + 0.8 });
  }
  return spans;
}

function priorityTrace(t: number): Span[] {
  const spans: Span[] = [];
  let g = t;
  for (let i = 0; i < 6; i++) {
    spans.push({ lane: 'low (0)', kind: 'kernel', name: `bulk ${i}`, start: g, end: g + 1.2 });
    g += 1.2;
    if (i === 2) {
      spans.push({ lane: 'high (-5)', kind: 'kernel', name: 'urgent', start: g, end: g + 0.6 });
      spans.push({ lane: 'high (-5)', kind: 'event', name: 'done', start: g + 0.6, end: g + 0.6 });
      g += 0.6;
      spans.push({ lane: 'host', kind: 'host', name: 'hostFn: notify', start: g + 0.15, end: g + 0.5 });
    }
  }
  spans.push({ lane: 'low (0)', kind: 'copy', name: 'copy result', start: g, end: g + 0.4 });
  return spans;
}

function probeTrace(t: number): Span[] {
  return [
    { lane: 'probe', kind: 'copy', name: 'copy 256 MiB', start: t, end: t + 0.7 },
    { lane: 'probe', kind: 'kernel', name: 'compute 1.9 ms', start: t + 1, end: t + 2.9 },
    { lane: 'probe', kind: 'kernel', name: 'compute', start: t + 3.2, end: t + 5.1 },
    { lane: 'probe', kind: 'copy', name: 'copy (same CB)', start: t + 5.1, end: t + 5.8 },
    { lane: 'host', kind: 'fill', name: 'map + fill 64 MiB', start: t + 6, end: t + 14 },
    { lane: 'probe', kind: 'upload', name: 'staging → storage', start: t + 14, end: t + 14.2 },
    { lane: 'probe', kind: 'download', name: 'storage → read-back', start: t + 14.4, end: t + 15.6 },
    { lane: 'host', kind: 'read', name: 'mapAsync + read', start: t + 15.6, end: t + 21 },
  ];
}

function scenario(id: string, quick: boolean, rand: () => number): ScenarioResult {
  const info = mockScenarios.find((s) => s.id === id)!;
  const t = 1000 + rand() * 100;
  const base = { id, title: info.title, params: { quick, mock: true } as ScenarioResult['params'], wallMs: 500 + rand() * 800 };
  switch (id) {
    case 'overlap-probe':
      return {
        ...base,
        variants: [
          { name: 'copy only', time: timing(rand, 0.68), ideal: null, gbps: 395 },
          { name: 'compute only', time: timing(rand, 1.9), ideal: null },
          { name: 'serial', time: timing(rand, 2.58), ideal: null },
          { name: 'copy + compute', time: timing(rand, 2.53), ideal: 1.9, baseline: 'serial', speedup: 1.02, efficiency: 0.07 },
          { name: '4 dispatches', time: timing(rand, 7.3), ideal: 1.9, speedup: 1.04, extra: { ratio: 3.84 } },
          { name: 'upload: writeBuffer', time: timing(rand, 23), ideal: null, gbps: 2.8 },
          { name: 'upload: mapped staging', time: timing(rand, 8.5), ideal: null, gbps: 7.9 },
          { name: 'read-back: mapAsync', time: timing(rand, 12.2), ideal: null, gbps: 5.5 },
        ],
        verification: { ok: true, detail: 'copies and kernels checked against CPU reference (seed 1234)' },
        verdicts: [
          'concurrent kernels: no (4 dispatches took 3.8x one)',
          'copy/compute overlap: no (2.53 ms vs 0.68 + 1.9 ms serial)',
          'host/GPU overlap: yes (staging fill during kernels: 35.8 ms vs 41.3 ms serial)',
          'fastest upload path: mapped staging, 7.9 GB/s',
        ],
        trace: probeTrace(t),
      };
    case 'chunked-pipeline': {
      const variants: Variant[] = [{ name: 'sync', time: timing(rand, 58), ideal: 41, memoryBytes: 768 << 20, gbps: 4.6 }];
      for (const n of [1, 2, 4, 8]) {
        const med = 58 / (1 + 0.12 * Math.log2(n + 1));
        variants.push({
          name: `streams=${n}`,
          time: timing(rand, med),
          ideal: 41,
          baseline: 'sync',
          speedup: 58 / med,
          efficiency: (58 - med) / (58 - 41),
          memoryBytes: (768 + n * 48) << 20,
          gbps: 268 / med,
        });
      }
      return {
        ...base,
        params: { ...base.params, bytes: 256 << 20, chunks: 16 },
        variants,
        verification: { ok: true, detail: 'out == a + b for 67108864 floats (seed 1234)' },
        verdicts: [`best: streams=8 at ${variants[4]!.speedup!.toFixed(2)}x sync, ${Math.round(variants[4]!.efficiency! * 100)}% of the possible gain`, 'GPU idle 62% of the time: host fill/read is the bottleneck'],
        trace: pipelineTrace(12, 4, t),
        // What a race looks like on the timeline (made up, as all mock data): chunk 5's upload
        // overwrites what chunk 4's kernel reads, on another stream, with no wait between.
        races: [{ from: 100 + 3 * 4 + 1, to: 100 + 3 * 5, name: 'race on in [0, 4096) (mock)' }],
      };
    }
    case 'sleep-streams':
      return {
        ...base,
        params: { ...base.params, tasks: 8, sleepMs: 2 },
        variants: [
          { name: '1 stream', time: timing(rand, 20.9), ideal: 16.4 },
          { name: '4 streams', time: timing(rand, 20.6), ideal: 16.4, baseline: '1 stream', speedup: 1.01, efficiency: 0.07 },
        ],
        verification: { ok: true, detail: 'sleep results match CPU reference for 8 tasks' },
        verdicts: ['kernels from different streams ran one after another (no concurrent kernels on this GPU)'],
        trace: sleepTrace(4, t),
      };
    case 'weight-loading':
      return {
        ...base,
        params: { ...base.params, layers: 8, layerMiB: 64 },
        variants: [
          { name: 'resident', time: timing(rand, 12.8), ideal: null, memoryBytes: 640 << 20 },
          { name: '2 slots', time: timing(rand, 15.1), ideal: 12.8, baseline: 'resident', speedup: 0.85, memoryBytes: 256 << 20 },
        ],
        verification: { ok: true, detail: 'out == layers(x) for 1048576 floats (seed 99)' },
        verdicts: ['2 slots use 40% of the memory for 1.18x the time', 'loading hides behind compute above 1.4 ms per layer'],
        trace: weightTrace(8, t),
      };
    case 'weights-storage':
      return {
        ...base,
        params: { ...base.params, layers: 16, layerMiB: 16 },
        variants: [
          { name: 'loads alone', time: timing(rand, 14.2), ideal: null, gbps: 18.9 },
          { name: 'cost 1x: 1 stream', time: timing(rand, 29.5), ideal: null, memoryBytes: 64 << 20 },
          { name: 'cost 1x: 2 slots', time: timing(rand, 17.9), ideal: 14.6, baseline: 'cost 1x: 1 stream', speedup: 1.65, memoryBytes: 64 << 20 },
        ],
        verification: { ok: true, detail: '2 slots == CPU chain of 16 layers (64 elements, weights read from the source)' },
        verdicts: ['16 layers x 16 MiB from HTTP byte ranges, 4x the device budget', 'cost 1x: 1.23x max(loads, compute)'],
        trace: weightTrace(8, t),
      };
    default:
      return {
        ...base,
        variants: [
          { name: 'same priority', time: timing(rand, 8.1), ideal: null },
          { name: 'high = -5', time: timing(rand, 4.2), ideal: 3.6, baseline: 'same priority', speedup: 1.93, efficiency: 0.87 },
        ],
        verification: { ok: true, detail: 'host callbacks ran in stream order; events recorded after their work' },
        verdicts: ['high-priority work overtook 3 queued low-priority submits', 'event elapsedTime agrees with host timing within 0.2 ms'],
        trace: priorityTrace(t),
      };
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The mock twin of `runSuite`: same options, fake results, real progress messages. */
export async function mockRunSuite(opts: { quick: boolean; only?: string[]; progress?: Progress }): Promise<SuiteResult> {
  const rand = rng(1234);
  const ids = mockScenarios.map((s) => s.id).filter((id) => !opts.only?.length || opts.only.includes(id));
  const scenarios: ScenarioResult[] = [];
  for (const [i, id] of ids.entries()) {
    opts.progress?.(`${id}: running (mock)`, i / ids.length);
    await sleep(150);
    scenarios.push(scenario(id, opts.quick, rand));
    opts.progress?.(`${id}: done (mock)`, (i + 1) / ids.length);
  }
  return {
    schema: 'webgpu-streams/bench@1',
    date: new Date().toISOString(),
    quick: opts.quick,
    device: { ...mockDevice },
    scenarios,
    ok: scenarios.every((s) => s.verification.ok),
  };
}
