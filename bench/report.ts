/**
 * What every runner shares about a {@link SuiteResult}: the results table and verdicts as text,
 * Chrome Trace Event export of the spans, result file names, and a structural check against
 * bench/schema.ts.
 *
 * No imports at runtime (no DOM, no node: builtins), so the page, the headless runner and the Node
 * runner all bundle it. Writing files and parsing flags live in bench/cli.ts (Node only).
 */
import type { DeviceReport, ScenarioResult, Span, SuiteResult, Variant } from './schema';
import { toChromeTraceEvents, type ChromeTraceEvent } from 'webgpu-streams';

// ---------------------------------------------------------------------------------------------
// Table
// ---------------------------------------------------------------------------------------------

/** A number for a table cell with about 3 significant digits; '-' for null/undefined/NaN. */
export function fmtNum(x: number | null | undefined): string {
  if (x === null || x === undefined || !Number.isFinite(x)) return '-';
  const a = Math.abs(x);
  if (a >= 1000) return x.toFixed(0);
  if (a >= 100) return x.toFixed(1);
  if (a >= 10) return x.toFixed(2);
  if (a >= 0.001 || a === 0) return x.toFixed(3);
  return x.toExponential(1);
}

const fmtOr = (x: number | null | undefined, f: (x: number) => string, missing = '-') =>
  x === null || x === undefined || !Number.isFinite(x) ? missing : f(x);

/** One row of the results table for a variant. */
export function variantRow(s: ScenarioResult, v: Variant, first: boolean): string[] {
  return [
    first ? s.id : '',
    v.name,
    fmtNum(v.time.median),
    fmtNum(v.ideal),
    fmtOr(v.speedup, (x) => `${x.toFixed(2)}x`, v.baseline ? 'n/a' : '-'),
    fmtOr(v.efficiency, (x) => `${Math.round(x * 100)}%`, v.baseline && v.ideal !== null ? 'n/a' : '-'),
    fmtOr(v.memoryBytes, (x) => (x / 2 ** 20).toFixed(x < 2 ** 20 ? 3 : 1)), // below 1 MiB, KiB still tell apart
    fmtOr(v.gbps, (x) => x.toFixed(2), v.gbps === undefined ? '-' : 'n/a'),
    first ? (s.verification.ok ? 'yes' : 'NO') : '',
  ];
}

const HEADER = ['scenario', 'variant', 'median ms', 'ideal', 'speedup', 'eff.', 'mem MiB', 'GB/s', 'verified'];
const NUMERIC = [false, false, true, true, true, true, true, true, false];

/** Align rows of cells into a plain-text table (numbers right-aligned). */
export function renderTable(header: string[], rows: string[][], numeric: boolean[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (numeric[i] ? c.padStart(widths[i]!) : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

/** The results table: one row per variant, scenario id and verification on its first row. */
export function formatTable(result: SuiteResult): string {
  const rows: string[][] = [];
  for (const s of result.scenarios) {
    if (s.variants.length === 0) {
      rows.push([s.id, '(no variants)', '', '', '', '', '', '', s.verification.ok ? 'yes' : 'NO']);
    }
    s.variants.forEach((v, i) => rows.push(variantRow(s, v, i === 0)));
  }
  return `${renderTable(HEADER, rows, NUMERIC)}\n${TABLE_FOOTER}`;
}

/** What the columns mean (the page shows the same under its tables). */
export const TABLE_FOOTER =
  'ideal: what perfect overlap would give, from the measured parts. speedup: the baseline variant\'s time / this time. ' +
  'eff.: (baseline - this) / (baseline - ideal), the share of the possible gain achieved (100%: the ideal; 0%: no gain; ' +
  'n/a: the possible gain is within the run\'s noise, or this took longer than the baseline: speedup below 1x). GB/s: 1e9 bytes per second (n/a: too short to time).';

/** Verdicts per scenario, then the failed verifications with their first mismatch. */
export function formatVerdicts(result: SuiteResult): string {
  const lines: string[] = [];
  for (const s of result.scenarios) {
    lines.push(`${s.title || s.id} (${s.id}, ${fmtNum(s.wallMs / 1000)} s):`);
    for (const v of s.verdicts) lines.push(`  - ${v}`);
    const check = s.verification;
    lines.push(`  ${check.ok ? 'verified' : 'FAILED'}: ${check.detail}${check.mismatch ? `: ${check.mismatch}` : ''}`);
  }
  return lines.join('\n');
}

/** One line naming the device, e.g. `google swiftshader (SwiftShader Device (Subzero)) [software]`. */
export function describeDevice(d: DeviceReport): string {
  const name = [d.vendor, d.architecture, deviceName(d)].filter(Boolean).join(' ') || 'unknown adapter';
  return `${name}${d.description ? ` (${d.description})` : ''}${d.software ? ' [software]' : ''}, ` +
    `timestamp-query ${d.timestampQuery ? 'yes' : 'no'}`;
}

/** True when the device is a software rasterizer (the flag, or SwiftShader/llvmpipe in its names). */
export function isSoftwareDevice(d: Pick<DeviceReport, 'software' | 'vendor' | 'architecture' | 'description'>): boolean {
  return d.software || /swiftshader|llvmpipe|lavapipe/i.test(`${d.vendor} ${d.architecture} ${d.description}`);
}

/** The warning printed when a run measured a software adapter. */
export const SOFTWARE_WARNING =
  'WARNING: this ran on a software adapter (SwiftShader or the like): the figures say nothing about GPU ' +
  'overlap, only that the code works. For a GPU, see bench/README.md, "Running it".';

// ---------------------------------------------------------------------------------------------
// Chrome Trace Event export
// ---------------------------------------------------------------------------------------------

/**
 * Chrome Trace Event JSON (opens in Perfetto and chrome://tracing) from the scenarios' spans: one
 * process per scenario (the library's exporter), times from the earliest span of the suite.
 */
export function toChromeTrace(result: SuiteResult): { traceEvents: ChromeTraceEvent[]; displayTimeUnit: 'ms' } {
  let origin = Infinity;
  for (const s of result.scenarios) for (const span of s.trace) if (Number.isFinite(span.start)) origin = Math.min(origin, span.start);
  if (!Number.isFinite(origin)) origin = 0;
  const traceEvents = result.scenarios.flatMap((s, si) => toChromeTraceEvents(s.trace, { pid: si + 1, process: `${s.id}: ${s.title}`, origin, args: { scenario: s.id }, links: s.races ?? [] }));
  return { traceEvents, displayTimeUnit: 'ms' };
}


// ---------------------------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------------------------

/**
 * The adapter's model name where the runner knows one: `notes.device` (Dawn reports e.g.
 * `nvidia-h200` there, while its description is the driver version), unless that is only a PCI id.
 */
export function deviceName(d: Pick<DeviceReport, 'notes'>): string {
  const name = d.notes?.['device'] ?? '';
  return /[a-z]/i.test(name) && !/^(0x)?[0-9a-f]+$/i.test(name) ? name : '';
}

/**
 * `nvidia-h200`, `nvidia-hopper-h200`, `google-swiftshader-device-subzero`: vendor, architecture and
 * model name (else the description), lower case, words deduplicated, bare numbers (driver versions)
 * dropped when at least two other words remain.
 */
export function adapterSlug(d: Pick<DeviceReport, 'vendor' | 'architecture' | 'description' | 'notes'>): string {
  const words: string[] = [];
  for (const part of [d.vendor, d.architecture, deviceName(d) || d.description]) {
    for (const w of (part ?? '').toLowerCase().split(/[^a-z0-9]+/)) if (w && !words.includes(w)) words.push(w);
  }
  const named = words.filter((w) => !/^\d+$/.test(w));
  const slug = (named.length >= 2 ? named : words).join('-').slice(0, 60).replace(/-+$/, '');
  return slug || 'unknown-adapter';
}

/** `YYYY-MM-DD` of the result's date (UTC), or of now when it has none. */
export function resultDay(result: Pick<SuiteResult, 'date'>): string {
  const m = /^\d{4}-\d{2}-\d{2}/.exec(result.date ?? '');
  return m ? m[0] : new Date().toISOString().slice(0, 10);
}

/**
 * The file stem for a result: `<YYYY-MM-DD>T<HHMMSS>-<adapter-slug>-<runner>[-quick]`, so each run
 * writes new files (a quick run says so in its name). Files: `<stem>.json`, `<stem>-trace.json`,
 * `<stem>-timeline.png`. bench/results keeps curated copies under shorter names (its INDEX.md).
 */
export function resultStem(result: Pick<SuiteResult, 'date' | 'device'> & { quick?: boolean }): string {
  return `${runStamp(result)}-${adapterSlug(result.device)}-${result.device.runner}${result.quick ? '-quick' : ''}`;
}

/** `YYYY-MM-DDTHHMMSS` of the result's date (UTC; the day alone when it has no time): each run a file of its own. */
export function runStamp(result: Pick<SuiteResult, 'date'>): string {
  const time = /T(\d{2}):(\d{2}):(\d{2})/.exec(result.date ?? '');
  return time ? `${resultDay(result)}T${time[1]}${time[2]}${time[3]}` : resultDay(result);
}

// ---------------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------------

const RUNNERS = ['page', 'headless', 'node'];
const SPAN_KINDS = ['upload', 'download', 'copy', 'kernel', 'host', 'event', 'wait', 'fill', 'read'];

/**
 * Structural check of a {@link SuiteResult} (bench/schema.ts): every required field with its type,
 * enums, finite numbers, and `ok` agreeing with the scenarios' verifications. Returns the problems
 * found, as `path: what` strings; empty when the value is valid.
 */
export function validateSuiteResult(x: unknown): string[] {
  const p: string[] = [];
  const v = new Checker(p);
  if (!v.object(x, '$')) return p;
  v.literal(x['schema'], 'webgpu-streams/bench@1', '$.schema');
  if (v.string(x['date'], '$.date') && Number.isNaN(Date.parse(x['date'] as string))) p.push(`$.date: not a date: ${JSON.stringify(x['date'])}`);
  v.optional(x['commit'], '$.commit', (y, at) => v.string(y, at));
  v.boolean(x['quick'], '$.quick');
  v.optional(x['sanitize'], '$.sanitize', (y, at) => v.boolean(y, at));
  v.boolean(x['ok'], '$.ok');

  const d = x['device'];
  if (v.object(d, '$.device')) {
    if (v.string(d['runner'], '$.device.runner') && !RUNNERS.includes(d['runner'] as string)) {
      p.push(`$.device.runner: expected one of ${RUNNERS.join(', ')}, got ${JSON.stringify(d['runner'])}`);
    }
    for (const k of ['vendor', 'architecture', 'description', 'userAgent']) v.string(d[k], `$.device.${k}`);
    v.boolean(d['software'], '$.device.software');
    v.boolean(d['timestampQuery'], '$.device.timestampQuery');
    v.optional(d['notes'], '$.device.notes', (y, at) => v.record(y, at, (z, at2) => v.string(z, at2)));
  }

  const scenarios = x['scenarios'];
  if (v.array(scenarios, '$.scenarios')) {
    const ids = new Set<string>();
    scenarios.forEach((s, i) => {
      const at = `$.scenarios[${i}]`;
      if (!v.object(s, at)) return;
      if (v.string(s['id'], `${at}.id`)) {
        if (ids.has(s['id'] as string)) p.push(`${at}.id: duplicate id ${JSON.stringify(s['id'])}`);
        ids.add(s['id'] as string);
      }
      v.string(s['title'], `${at}.title`);
      v.record(s['params'], `${at}.params`, (y, at2) => v.scalar(y, at2));
      v.finite(s['wallMs'], `${at}.wallMs`);
      if (v.array(s['verdicts'], `${at}.verdicts`)) (s['verdicts'] as unknown[]).forEach((y, j) => v.string(y, `${at}.verdicts[${j}]`));
      const ver = s['verification'];
      if (v.object(ver, `${at}.verification`)) {
        v.boolean(ver['ok'], `${at}.verification.ok`);
        v.string(ver['detail'], `${at}.verification.detail`);
        v.optional(ver['mismatch'], `${at}.verification.mismatch`, (y, at2) => v.string(y, at2));
      }
      if (v.array(s['variants'], `${at}.variants`)) {
        const names = (s['variants'] as unknown[]).map((vv) => (isObject(vv) ? vv['name'] : undefined));
        (s['variants'] as unknown[]).forEach((vv, j) => validateVariant(v, vv, `${at}.variants[${j}]`, names));
      }
      if (v.array(s['trace'], `${at}.trace`)) {
        (s['trace'] as unknown[]).forEach((sp, j) => {
          const at2 = `${at}.trace[${j}]`;
          if (!v.object(sp, at2)) return;
          v.string(sp['lane'], `${at2}.lane`);
          v.string(sp['name'], `${at2}.name`);
          if (v.string(sp['kind'], `${at2}.kind`) && !SPAN_KINDS.includes(sp['kind'] as string)) {
            p.push(`${at2}.kind: expected one of ${SPAN_KINDS.join(', ')}, got ${JSON.stringify(sp['kind'])}`);
          }
          const okStart = v.finite(sp['start'], `${at2}.start`);
          const okEnd = v.finite(sp['end'], `${at2}.end`);
          if (okStart && okEnd && (sp['end'] as number) < (sp['start'] as number)) p.push(`${at2}: end ${sp['end']} < start ${sp['start']}`);
          v.optional(sp['estimated'], `${at2}.estimated`, (y, at3) => v.boolean(y, at3));
        });
      }
    });
    if (typeof x['ok'] === 'boolean') {
      const allVerified = scenarios.every((s) => isObject(s) && isObject(s['verification']) && s['verification']['ok'] === true);
      if (x['ok'] !== allVerified) p.push(`$.ok: is ${x['ok']} but ${allVerified ? 'every' : 'not every'} scenario verified`);
    }
  }
  return p;
}

function validateVariant(v: Checker, x: unknown, at: string, names: unknown[]): void {
  const p = v.problems;
  if (!v.object(x, at)) return;
  v.string(x['name'], `${at}.name`);
  const t = x['time'];
  if (v.object(t, `${at}.time`)) {
    for (const k of ['median', 'min', 'max']) v.finite(t[k], `${at}.time.${k}`);
    if (v.array(t['samples'], `${at}.time.samples`)) (t['samples'] as unknown[]).forEach((y, i) => v.finite(y, `${at}.time.samples[${i}]`));
    if (typeof t['min'] === 'number' && typeof t['max'] === 'number' && typeof t['median'] === 'number') {
      if (!(t['min'] <= t['median'] && t['median'] <= t['max'])) p.push(`${at}.time: expected min <= median <= max, got ${t['min']}, ${t['median']}, ${t['max']}`);
    }
  }
  if (x['ideal'] !== null) v.finite(x['ideal'], `${at}.ideal`, 'a finite number or null');
  v.optional(x['baseline'], `${at}.baseline`, (y, at2) => {
    if (v.string(y, at2) && !names.includes(y)) p.push(`${at2}: names no variant of this scenario: ${JSON.stringify(y)}`);
  });
  for (const k of ['speedup', 'efficiency', 'memoryBytes', 'gbps']) v.optional(x[k], `${at}.${k}`, (y, at2) => v.finite(y, at2));
  v.optional(x['extra'], `${at}.extra`, (y, at2) => v.record(y, at2, (z, at3) => v.scalar(z, at3)));
}

type Obj = Record<string, unknown>;
const isObject = (x: unknown): x is Obj => typeof x === 'object' && x !== null && !Array.isArray(x);
const show = (x: unknown) => (x === undefined ? 'undefined' : Array.isArray(x) ? 'an array' : x === null ? 'null' : `${JSON.stringify(x)?.slice(0, 60)} (${typeof x})`);

class Checker {
  constructor(readonly problems: string[]) {}
  private fail(at: string, want: string, x: unknown): false {
    this.problems.push(`${at}: expected ${want}, got ${show(x)}`);
    return false;
  }
  object(x: unknown, at: string): x is Obj {
    return isObject(x) || this.fail(at, 'an object', x);
  }
  array(x: unknown, at: string): x is unknown[] {
    return Array.isArray(x) || this.fail(at, 'an array', x);
  }
  string(x: unknown, at: string): boolean {
    return typeof x === 'string' || this.fail(at, 'a string', x);
  }
  boolean(x: unknown, at: string): boolean {
    return typeof x === 'boolean' || this.fail(at, 'a boolean', x);
  }
  finite(x: unknown, at: string, want = 'a finite number'): boolean {
    return (typeof x === 'number' && Number.isFinite(x)) || this.fail(at, want, x);
  }
  scalar(x: unknown, at: string): boolean {
    return ['number', 'string', 'boolean'].includes(typeof x) || this.fail(at, 'a number, string or boolean', x);
  }
  literal(x: unknown, value: string, at: string): boolean {
    return x === value || this.fail(at, JSON.stringify(value), x);
  }
  record(x: unknown, at: string, each: (y: unknown, at: string) => unknown): boolean {
    if (!this.object(x, at)) return false;
    for (const [k, y] of Object.entries(x)) each(y, `${at}.${k}`);
    return true;
  }
  optional(x: unknown, at: string, check: (y: unknown, at: string) => unknown): void {
    if (x !== undefined) check(x, at);
  }
}

// ---------------------------------------------------------------------------------------------
// Final report
// ---------------------------------------------------------------------------------------------

/**
 * What a runner prints at the end: the table, the verdicts, the adapter (with the SwiftShader
 * warning where it applies), the files written, and the overall outcome.
 */
export function formatReport(result: SuiteResult, files: string[], problems: string[] = []): string {
  const failed = result.scenarios.filter((s) => !s.verification.ok).map((s) => s.id);
  const lines = [
    '',
    formatTable(result),
    '',
    formatVerdicts(result),
    '',
    `adapter: ${describeDevice(result.device)} (runner: ${result.device.runner}${result.quick ? ', quick' : ''})`,
  ];
  if (result.sanitize) {
    const races = result.scenarios.reduce((n, s) => n + (s.races?.length ?? 0), 0);
    lines.push(`stream sanitizer on: ${races} race${races === 1 ? '' : 's'}${races ? ` (${result.scenarios.filter((s) => s.races?.length).map((s) => `${s.id} ${s.races!.length}`).join(', ')}; arrows on the timeline)` : ''}; host costs include the sanitizer's`);
  }
  if (result.device.vendor === 'mock') lines.push('MOCK DATA: nothing was measured; this checks the runner and the page only.');
  else if (isSoftwareDevice(result.device)) lines.push(SOFTWARE_WARNING);
  if (problems.length > 0) {
    lines.push(`the result does not match bench/schema.ts (${problems.length} problem${problems.length === 1 ? '' : 's'}):`);
    lines.push(...problems.slice(0, 20).map((p) => `  ${p}`));
    if (problems.length > 20) lines.push(`  ... and ${problems.length - 20} more`);
  }
  lines.push(...files.map((f) => `wrote ${f}`));
  if (runPassed(result, problems)) {
    lines.push(`OK: ${result.scenarios.length} scenario${result.scenarios.length === 1 ? '' : 's'} verified`);
  } else {
    const why = [
      ...(failed.length ? [`not verified: ${failed.join(', ')}`] : []),
      ...(!result.ok && failed.length === 0 ? ['the result says ok: false'] : []),
      ...(problems.length ? ['malformed result'] : []),
      ...(result.scenarios.length === 0 ? ['no scenario ran'] : []),
    ];
    lines.push(`FAILED: ${why.join('; ')}`);
  }
  return lines.join('\n');
}

/** True when the run passed: `ok`, every scenario verified, no schema problems. */
export function runPassed(result: SuiteResult, problems: string[]): boolean {
  return (
    result.ok &&
    result.scenarios.length > 0 &&
    result.scenarios.every((s) => s.verification.ok) &&
    problems.length === 0
  );
}
