/**
 * The benchmark page: device header, run controls, results tables, the timeline, downloads.
 *
 * Self-reporting contract (bench/headless.ts and a small Python server rely on it):
 * - URL params: `?autorun` (run without a click), `quick`, `scenarios=a,b` (subset by id),
 *   `report=/path` (when done, POST the SuiteResult JSON to that same-origin path),
 *   `runner=headless` (sets `device.runner`), `trace=<id>` (which scenario the timeline shows),
 *   `gpuTimestamps` (time every GPU op for the timeline, where the adapter has timestamp-query;
 *   otherwise GPU spans are estimated per submit), `sanitize` (the stream sanitizer warns of races
 *   and the timeline draws each as an arrow between its two ops), `mock` (fake data for UI work; no
 *   GPU used, clearly labelled).
 * - `window.__bench = { state: 'idle' | 'running' | 'done' | 'error', result?, error? }`; the
 *   state turns 'done' / 'error' only after the page has rendered and the report POST settled.
 * - Progress goes to the console as `[bench] <message>` lines.
 * - On failure (no WebGPU, no adapter, a scenario throwing) the state is 'error' and, when
 *   `report` is set, `{ schema: 'webgpu-streams/bench@1', error, ... }` is POSTed, so harnesses
 *   never hang.
 */
import { createContext } from 'webgpu-streams';
import { toChromeTrace } from '../report';
import type { DeviceReport, Progress, ScenarioResult, SuiteResult } from '../schema';
import { deviceKind, firstLine, renderScenario } from './table';
import { TimelineView, formatDuration, laneOrder } from './timeline';

export interface BenchState {
  state: 'idle' | 'running' | 'done' | 'error';
  result?: SuiteResult;
  error?: string;
}

interface ScenarioInfo {
  id: string;
  title: string;
  description: string;
}

interface Backend {
  mock: boolean;
  scenarios: readonly ScenarioInfo[];
  device: DeviceReport;
  run(opts: { quick: boolean; only?: string[]; progress?: Progress }): Promise<SuiteResult>;
}

const SCHEMA = 'webgpu-streams/bench@1' as const;

/** Shown under the title: why streams here are a host-side construct. */
const SINGLE_QUEUE_NOTE =
  'WebGPU gives a device exactly one GPUQueue, so a stream here is a host-side ordered list of operations: ' +
  'the runtime merges all streams into one submission order that keeps the CPU, the GPU and read-backs busy at once.';

// ---------------------------------------------------------------------------------------------
// URL parameters and global state
// ---------------------------------------------------------------------------------------------

const params = new URLSearchParams(location.search);
const flag = (name: string) => params.has(name) && !/^(0|false|no|off)$/i.test(params.get(name) ?? '');
const opts = {
  autorun: flag('autorun'),
  quick: flag('quick'),
  mock: flag('mock'),
  only: (params.get('scenarios') ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean),
  report: params.get('report'),
  runner: params.get('runner') === 'headless' ? ('headless' as const) : ('page' as const),
  trace: params.get('trace'),
  gpuTimestamps: flag('gpuTimestamps'),
  sanitize: flag('sanitize'),
  /** Attach each scenario's timeline as a PNG data URL (`timelines`) to the report: how a harness
   * without puppeteer (serve.py on a GPU machine) gets the timeline pictures. */
  png: flag('png'),
};

const bench: BenchState = { state: 'idle' };
(window as unknown as { __bench: BenchState }).__bench = bench;

function log(message: string): void {
  console.log(`[bench] ${message}`);
}

// ---------------------------------------------------------------------------------------------
// DOM
// ---------------------------------------------------------------------------------------------

function $(id: string): HTMLElement {
  const e = document.getElementById(id);
  if (!e) throw new Error(`page is missing #${id}`);
  return e;
}

const ui = {
  singleQueue: $('single-queue'),
  device: $('device'),
  deviceNote: $('device-note'),
  caps: $('capabilities'),
  notice: $('notice'),
  runAll: $('run-all') as HTMLButtonElement,
  stop: $('stop') as HTMLButtonElement,
  scenarioButtons: $('scenario-buttons'),
  quick: $('quick') as HTMLInputElement,
  progress: $('progress'),
  progressFill: $('progress-fill'),
  progressMsg: $('progress-msg'),
  traceSelect: $('trace-select') as HTMLSelectElement,
  dlTrace: $('dl-trace') as HTMLButtonElement,
  dlTraceAll: $('dl-trace-all') as HTMLButtonElement,
  dlJson: $('dl-json') as HTMLButtonElement,
  results: $('results'),
  footer: $('footer-info'),
  mockBanner: $('mock-banner'),
};

const timeline = new TimelineView($('timeline-box'), $('timeline') as HTMLCanvasElement, $('timeline-tip'));

ui.singleQueue.textContent = SINGLE_QUEUE_NOTE;
ui.quick.checked = opts.quick;
ui.mockBanner.hidden = !opts.mock;
timeline.show(undefined);

function setProgress(message: string, fraction?: number): void {
  ui.progressMsg.textContent = message;
  if (fraction === undefined || !Number.isFinite(fraction)) {
    ui.progress.classList.add('indeterminate');
    ui.progress.removeAttribute('aria-valuenow');
  } else {
    const pct = Math.round(Math.min(1, Math.max(0, fraction)) * 100);
    ui.progress.classList.remove('indeterminate');
    ui.progressFill.style.width = `${pct}%`;
    ui.progress.setAttribute('aria-valuenow', String(pct));
  }
}

function showNotice(kind: 'error' | 'info', title: string, lines: string[] = []): void {
  const n = ui.notice;
  n.className = `notice ${kind}`;
  n.replaceChildren();
  const strong = document.createElement('strong');
  strong.textContent = title;
  n.append(strong);
  if (lines.length) {
    const ul = document.createElement('ul');
    for (const line of lines) {
      const li = document.createElement('li');
      // Backticked parts render as code.
      line.split('`').forEach((part, i) => {
        if (i % 2) {
          const code = document.createElement('code');
          code.textContent = part;
          li.append(code);
        } else li.append(part);
      });
      ul.append(li);
    }
    n.append(ul);
  }
  n.hidden = false;
}

function browserName(ua: string): string {
  const m = /(Edg|Chrome|Chromium|Firefox|Version)\/([\d.]+)/.exec(ua);
  if (!m) return ua.slice(0, 60);
  const name = m[1] === 'Edg' ? 'Edge' : m[1] === 'Version' ? 'Safari' : m[1];
  return `${name} ${m[2]}${/Headless/.test(ua) ? ' (headless)' : ''}`;
}

/** The adapter's description; Chrome often reports none: then vendor and architecture. */
function adapterText(d: Pick<DeviceReport, 'vendor' | 'architecture' | 'description'>): string {
  return d.description || [d.vendor, d.architecture].filter(Boolean).join(' ') || 'unknown adapter';
}

function renderDevice(d: DeviceReport, mock: boolean): void {
  const rows: [string, string, string?][] = [
    ['adapter', [d.vendor, d.architecture].filter(Boolean).join(' / ') || 'unknown'],
    ['description', adapterText(d)],
    ['kind', mock ? 'mock (no GPU used)' : deviceKind(d), d.software ? 'soft' : 'real'],
    ['timestamp queries', d.timestampQuery ? 'yes' : 'no (GPU spans are estimated)', d.timestampQuery ? 'yes' : 'no'],
    ['runner', d.runner],
    window.crossOriginIsolated
      ? ['timer', 'fine (cross-origin isolated)']
      : ['timer', 'coarse, ~0.1 ms (serve with COOP/COEP headers for finer timing)', 'no'],
    ['browser', browserName(d.userAgent)],
  ];
  for (const [k, v] of Object.entries(d.notes ?? {})) rows.push([k.replace(/([a-z])([A-Z])/g, '$1 $2').toLowerCase(), v]);
  ui.device.replaceChildren();
  for (const [k, v, cls] of rows) {
    const dt = document.createElement('dt');
    dt.textContent = k;
    const dd = document.createElement('dd');
    dd.textContent = v;
    if (cls) dd.className = cls;
    if (k === 'browser') dd.title = d.userAgent;
    ui.device.append(dt, dd);
  }
  if (d.software && !mock) {
    ui.deviceNote.textContent =
      'A software rasterizer runs WebGPU on the CPU: the runs show the library working, not what a GPU overlaps.';
    ui.deviceNote.hidden = false;
  } else ui.deviceNote.hidden = true;
}

function renderCapabilities(probe: ScenarioResult | undefined): void {
  if (!probe) return;
  ui.caps.replaceChildren();
  if (!probe.verification.ok && !probe.variants.length) {
    const li = document.createElement('li');
    li.className = 'failed';
    li.textContent = `The overlap probe failed: ${firstLine(probe.verification.mismatch ?? probe.verification.detail)}`;
    li.title = probe.verification.mismatch ?? probe.verification.detail;
    ui.caps.append(li);
    return;
  }
  for (const v of probe.verdicts) {
    const li = document.createElement('li');
    const m = /^[^:(]*:\s*(yes|no|partly|partial)\b/i.exec(v);
    li.className = m ? (m[1]!.toLowerCase().startsWith('part') ? 'partly' : m[1]!.toLowerCase()) : 'info';
    li.textContent = v;
    ui.caps.append(li);
  }
  if (!probe.verdicts.length) {
    const li = document.createElement('li');
    li.className = 'pending';
    li.textContent = 'The overlap probe ran but reported no verdicts.';
    ui.caps.append(li);
  }
}

// ---------------------------------------------------------------------------------------------
// Results, timeline, downloads
// ---------------------------------------------------------------------------------------------

let backend: Backend | undefined;
let current: SuiteResult | undefined;
let selectedTrace: string | undefined = opts.trace ?? undefined;

function describe(id: string): string | undefined {
  return backend?.scenarios.find((s) => s.id === id)?.description;
}

function renderResults(result: SuiteResult): void {
  ui.results.replaceChildren();
  const head = document.createElement('div');
  head.className = 'results-head';
  const h2 = document.createElement('h2');
  h2.textContent = 'Results';
  const summary = document.createElement('span');
  summary.className = `badge ${result.ok ? 'ok' : 'bad'}`;
  const failed = result.scenarios.filter((s) => !s.verification.ok).length;
  summary.textContent = result.ok ? 'all verified' : `${failed} check${failed === 1 ? '' : 's'} failed`;
  const meta = document.createElement('span');
  meta.className = 'results-meta';
  meta.textContent = `${result.quick ? 'quick · ' : ''}${new Date(result.date).toLocaleString()}${result.commit ? ` · ${result.commit.slice(0, 10)}` : ''}`;
  head.append(h2, summary, meta);
  ui.results.append(head);
  for (const s of result.scenarios) ui.results.append(renderScenario(s, describe(s.id)));
  renderCapabilities(result.scenarios.find((s) => s.id === 'overlap-probe'));
  renderTraceSelect(result);
  for (const b of [ui.dlJson, ui.dlTraceAll]) b.disabled = false;
}

/** The default trace: the one with the most lanes (the most to see), first on ties. */
function defaultTrace(result: SuiteResult): string | undefined {
  let best: ScenarioResult | undefined;
  let bestLanes = 0;
  for (const s of result.scenarios) {
    const lanes = laneOrder(s.trace).length;
    if (lanes > bestLanes) {
      best = s;
      bestLanes = lanes;
    }
  }
  return best?.id;
}

function renderTraceSelect(result: SuiteResult): void {
  const withTrace = result.scenarios.filter((s) => s.trace.length);
  const sel = ui.traceSelect;
  sel.replaceChildren();
  for (const s of result.scenarios) {
    const o = document.createElement('option');
    o.value = s.id;
    o.textContent = s.trace.length ? s.title : `${s.title} (no trace)`;
    sel.append(o);
  }
  sel.disabled = !result.scenarios.length;
  if (!selectedTrace || !withTrace.some((s) => s.id === selectedTrace)) selectedTrace = defaultTrace(result);
  if (selectedTrace) sel.value = selectedTrace;
  showTrace();
}

/** Each scenario's timeline rendered and read back as a PNG data URL; the selection is restored. */
function timelinePngs(result: SuiteResult): Record<string, string> {
  const canvas = $('timeline') as HTMLCanvasElement;
  const keep = selectedTrace;
  const out: Record<string, string> = {};
  for (const s of result.scenarios) {
    if (!s.trace.length) continue;
    selectedTrace = s.id;
    showTrace();
    out[s.id] = canvas.toDataURL('image/png');
  }
  selectedTrace = keep;
  showTrace();
  return out;
}

function showTrace(): void {
  const s = current?.scenarios.find((x) => x.id === selectedTrace);
  ui.dlTrace.disabled = !s?.trace.length;
  if (!s) {
    timeline.show(undefined);
    return;
  }
  const valid = s.trace.filter((x) => Number.isFinite(x.start) && Number.isFinite(x.end));
  const invalid = s.trace.length - valid.length;
  const lanes = laneOrder(valid).length;
  const t0 = Math.min(...valid.map((x) => x.start));
  const t1 = Math.max(...valid.map((x) => x.end));
  const estimated = valid.some((x) => x.estimated);
  const parts = [
    `${lanes} lane${lanes === 1 ? '' : 's'}`,
    `${valid.length} spans`,
    ...(valid.length ? [`${formatDuration(t1 - t0)} ms`] : []),
    ...(invalid ? [`${invalid} span${invalid === 1 ? '' : 's'} without times`] : []),
    ...(estimated ? ['GPU times estimated'] : []),
    ...(current ? [adapterText(current.device)] : []),
  ];
  const subtitle = s.trace.length ? parts.join(' · ') : undefined;
  timeline.show({ title: s.title, ...(subtitle ? { subtitle } : {}), spans: s.trace, ...(s.races ? { links: s.races } : {}) });
}

ui.traceSelect.addEventListener('change', () => {
  selectedTrace = ui.traceSelect.value;
  showTrace();
});

function download(filename: string, data: unknown): void {
  const blob = new Blob([JSON.stringify(data, null, 1)], { type: 'application/json' });
  const url = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = url;
  a.download = filename;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

function fileStem(r: SuiteResult): string {
  const dev = (r.device.vendor || 'unknown').toLowerCase().replace(/[^a-z0-9]+/g, '-');
  return `webgpu-streams-${dev}-${r.date.replace(/[:.]/g, '-').slice(0, 19)}`;
}

/** Chrome Trace Event JSON via bench/report.ts (shared with the Node runners). */
async function chromeTrace(result: SuiteResult): Promise<unknown> {
  return toChromeTrace(result);
}

function onDownload(button: HTMLButtonElement, make: () => Promise<[string, unknown] | undefined>): void {
  button.addEventListener('click', () => {
    make().then(
      (file) => file && download(file[0], file[1]),
      (e: unknown) => showNotice('error', `download failed: ${errorMessage(e)}`),
    );
  });
}

onDownload(ui.dlJson, async () => current && [`${fileStem(current)}.json`, current]);
onDownload(ui.dlTraceAll, async () => current && [`${fileStem(current)}-trace.json`, await chromeTrace(current)]);
onDownload(ui.dlTrace, async () => {
  const s = current?.scenarios.find((x) => x.id === selectedTrace);
  if (!current || !s) return undefined;
  return [`${fileStem(current)}-${s.id}-trace.json`, await chromeTrace({ ...current, scenarios: [s], ok: s.verification.ok })];
});

// ---------------------------------------------------------------------------------------------
// Reporting
// ---------------------------------------------------------------------------------------------

async function report(body: unknown): Promise<void> {
  if (!opts.report) return;
  let url: URL;
  try {
    url = new URL(opts.report, location.href);
  } catch {
    log(`report: invalid path ${opts.report}`);
    return;
  }
  if (url.origin !== location.origin) {
    log(`report: refusing to POST to another origin (${url.origin}); give a same-origin path such as /result`);
    return;
  }
  try {
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(15_000),
    });
    log(`report: POST ${url.pathname} -> ${res.status}`);
  } catch (e) {
    log(`report: POST ${url.pathname} failed: ${e instanceof Error ? e.message : String(e)}`);
  }
}

function errorMessage(e: unknown): string {
  if (e instanceof WebGpuUnavailable) return e.message;
  if (e instanceof Error) return e.name && e.name !== 'Error' ? `${e.name}: ${e.message}` : e.message;
  return String(e);
}

async function fail(e: unknown, stage: string): Promise<void> {
  const message = errorMessage(e);
  console.error(`[bench] error (${stage}): ${message}`, e);
  bench.error = message;
  setProgress(`error: ${message}`, 0);
  if (!(e instanceof WebGpuUnavailable)) {
    showNotice('error', `${stage} failed: ${message}`, e instanceof Error && e.stack ? [e.stack.split('\n').slice(0, 4).join(' · ')] : []);
  }
  await report({
    schema: SCHEMA,
    error: message,
    stage,
    date: new Date().toISOString(),
    quick: ui.quick.checked,
    device: backend?.device ?? {
      runner: opts.runner,
      vendor: '',
      architecture: '',
      description: '',
      software: false,
      userAgent: navigator.userAgent,
      timestampQuery: false,
    },
    scenarios: current?.scenarios ?? [],
    ok: false,
  });
  bench.state = 'error';
}

// ---------------------------------------------------------------------------------------------
// Backend: the real suite on a WebGPU context, or the mock
// ---------------------------------------------------------------------------------------------

class WebGpuUnavailable extends Error {
  override name = 'WebGpuUnavailable';
}

function webGpuHelp(reason: 'no-api' | 'no-adapter'): void {
  const secure = window.isSecureContext;
  const lines =
    reason === 'no-api'
      ? [
          'Use Chrome or Edge 113 or newer (or another browser with WebGPU turned on).',
          secure
            ? 'Serve the page from `http://localhost` (or https): WebGPU needs a secure context, so `file://` and `about:blank` have no `navigator.gpu`.'
            : `This page is not a secure context (${location.origin}): serve it from \`http://localhost\` or https instead of a LAN address or \`file://\`.`,
          'On Linux, start Chrome with `--enable-unsafe-webgpu` (often also `--enable-features=Vulkan`); with no GPU at all add `--enable-unsafe-swiftshader`.',
        ]
      : [
          'The browser has WebGPU but `requestAdapter()` returned no adapter: the GPU is blocklisted or WebGPU is disabled for it.',
          'Check `chrome://gpu` (WebGPU status) and update the GPU driver.',
          'On Linux, start Chrome with `--enable-unsafe-webgpu --enable-features=Vulkan`; with no GPU at all add `--enable-unsafe-swiftshader`.',
        ];
  showNotice('error', reason === 'no-api' ? 'WebGPU is not available in this browser.' : 'No WebGPU adapter found.', lines);
  ui.device.replaceChildren();
  const dt = document.createElement('dt');
  dt.textContent = 'status';
  const dd = document.createElement('dd');
  dd.className = 'no';
  dd.textContent = reason === 'no-api' ? 'no navigator.gpu' : 'no adapter';
  const dt2 = document.createElement('dt');
  dt2.textContent = 'browser';
  const dd2 = document.createElement('dd');
  dd2.textContent = browserName(navigator.userAgent);
  dd2.title = navigator.userAgent;
  ui.device.append(dt, dd, dt2, dd2);
}

async function loadBackend(): Promise<Backend> {
  if (opts.mock) {
    const m = await import('./mock');
    return {
      mock: true,
      scenarios: m.mockScenarios,
      device: { ...m.mockDevice, runner: opts.runner },
      run: (o) => m.mockRunSuite(o),
    };
  }
  const gpu = (navigator as Navigator & { gpu?: GPU }).gpu;
  if (!gpu) {
    webGpuHelp('no-api');
    throw new WebGpuUnavailable('WebGPU is not available (navigator.gpu is missing): use Chrome 113+, serve from http://localhost, on Linux pass --enable-unsafe-webgpu');
  }
  const adapter = await gpu.requestAdapter();
  if (!adapter) {
    webGpuHelp('no-adapter');
    throw new WebGpuUnavailable('no WebGPU adapter (requestAdapter() returned null): check chrome://gpu; on Linux pass --enable-unsafe-webgpu');
  }
  // The suite is loaded lazily so a browser without WebGPU still gets this page's explanation.
  const [suite, dev] = await Promise.all([import('../suite'), import('../device')]);
  // `sanitize`: the stream sanitizer warns of races, and the timeline draws each as an arrow.
  const ctx = await createContext({ trace: opts.gpuTimestamps ? { gpuTimestamps: true } : true, ...(opts.sanitize ? { sanitize: 'warn' as const } : {}) });
  return {
    mock: false,
    scenarios: suite.scenarios,
    device: dev.deviceReport(ctx, opts.runner),
    run: (o) => suite.runSuite(ctx, { ...o, runner: opts.runner, sanitize: opts.sanitize }),
  };
}

// ---------------------------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------------------------

/** Set by the Stop button: the next progress step of the running scenario throws it. */
let stopRequested = false;
/** What a Stop throws through the run: not a failure (the results shown before stay). */
class Stopped extends Error {}

function setBusy(busy: boolean): void {
  stopRequested = false;
  ui.stop.disabled = !busy;
  ui.runAll.disabled = busy || !backend;
  for (const b of ui.scenarioButtons.querySelectorAll('button')) b.disabled = busy || !backend;
  ui.quick.disabled = busy;
  document.body.classList.toggle('running', busy);
}

function merge(prev: SuiteResult | undefined, next: SuiteResult): SuiteResult {
  if (!prev) return next;
  const byId = new Map(prev.scenarios.map((s) => [s.id, s]));
  for (const s of next.scenarios) byId.set(s.id, s);
  // Keep the suite's scenario order.
  const order = backend?.scenarios.map((s) => s.id) ?? [];
  const scenarios = [...byId.values()].sort((a, b) => {
    const ia = order.indexOf(a.id);
    const ib = order.indexOf(b.id);
    return (ia < 0 ? 1e9 : ia) - (ib < 0 ? 1e9 : ib);
  });
  return { ...next, quick: prev.quick && next.quick, scenarios, ok: scenarios.every((s) => s.verification.ok) };
}

async function run(only?: string[]): Promise<void> {
  if (!backend || bench.state === 'running') return;
  const quick = ui.quick.checked;
  bench.state = 'running';
  delete bench.error;
  ui.notice.hidden = true;
  setBusy(true);
  const what = only?.length ? only.join(',') : 'all scenarios';
  log(`start: ${what}${quick ? ' (quick)' : ''}${backend.mock ? ' [mock]' : ''}`);
  setProgress(`starting ${what}…`, 0);
  try {
    const result = await backend.run({
      quick,
      ...(only?.length ? { only } : {}),
      progress: (message, fraction) => {
        if (stopRequested) throw new Stopped('stopped by the Stop button');
        log(message);
        setProgress(message, fraction);
      },
    });
    result.device = { ...(result.device ?? backend.device), runner: opts.runner };
    // A single-scenario run adds to what is shown, unless the quick setting changed.
    current = only?.length && current && current.quick === result.quick ? merge(current, result) : result;
    renderResults(current);
    bench.result = current;
    for (const s of result.scenarios) {
      const bad = s.trace.filter((x) => !Number.isFinite(x.start) || !Number.isFinite(x.end)).length;
      if (bad) log(`warning: ${s.id}: ${bad} of ${s.trace.length} trace spans have no finite start/end; the timeline leaves them out`);
    }
    const failed = result.scenarios.filter((s) => !s.verification.ok).map((s) => s.id);
    const msg = `done: ${result.scenarios.length} scenario${result.scenarios.length === 1 ? '' : 's'}, ${failed.length ? `FAILED ${failed.join(', ')}` : 'all verified'}`;
    setProgress(msg, 1);
    log(msg);
    await report(opts.png ? { ...current, timelines: timelinePngs(current) } : current);
    bench.state = 'done';
  } catch (e) {
    if (e instanceof Stopped) {
      // A user's Stop: the run is left as idle (no result posted); what was shown before stays.
      log(`stopped: ${what} (the scenario running was dropped)`);
      setProgress('stopped', 0);
      bench.state = current ? 'done' : 'idle';
    } else await fail(e, 'run');
  } finally {
    setBusy(false);
  }
}

async function init(): Promise<void> {
  try {
    backend = await loadBackend();
  } catch (e) {
    await fail(e, 'WebGPU setup');
    return;
  }
  renderDevice(backend.device, backend.mock);
  ui.footer.textContent = backend.mock ? 'mock data' : `runner: ${backend.device.runner}`;
  for (const s of backend.scenarios) {
    const b = document.createElement('button');
    b.type = 'button';
    b.textContent = s.title;
    b.title = s.description;
    b.dataset.id = s.id;
    b.addEventListener('click', () => void run([s.id]));
    ui.scenarioButtons.append(b);
  }
  ui.runAll.addEventListener('click', () => void run());
  ui.stop.addEventListener('click', () => {
    stopRequested = true;
    ui.stop.disabled = true;
    log('stopping at the next step…');
  });
  setBusy(false);
  const unknown = opts.only.filter((id) => !backend!.scenarios.some((s) => s.id === id));
  if (unknown.length) {
    const why = `?scenarios= names no scenario ${unknown.map((id) => `'${id}'`).join(', ')}; the scenarios are ${backend.scenarios.map((s) => s.id).join(', ')}`;
    if (opts.autorun) return fail(new Error(why), 'URL');
    showNotice('info', why);
  }
  setProgress(opts.autorun ? 'autorun…' : 'ready', 0);
  log(`ready: ${backend.mock ? 'mock' : adapterText(backend.device)}`);
  if (opts.autorun) await run(opts.only.length ? opts.only : undefined);
}

void init();
