/**
 * The performance suite of issue 4: metrics P1..P8 with their targets, and the growth tables
 * (pipeline time vs data size, scheduler cost vs streams and queued ops). Every figure comes from
 * a run whose output was checked against a CPU reference on seeded random data.
 *
 * No DOM and no node: imports: the Node runner (bench/perf-node.ts) and, later, the page call
 * {@link runPerf} alike.
 *
 * @example
 * const result = await runPerf(ctx, { quick: true, createContext: (o) => createNodeContext(o) });
 * for (const m of result.metrics) console.log(m.id, m.value, m.target, m.pass ? 'PASS' : 'FALL SHORT');
 */
import type { Context } from 'webgpu-streams';
import { deviceReport } from './device';
import { adapterSlug, isSoftwareDevice, runStamp, SOFTWARE_WARNING } from './report';
import type { DeviceReport, Progress } from './schema';
import { BOUND_FRACTION, RAW_SLACK, deviceLine, intervalWords, num, ratioText, seedOf, type BoundedReport, type ContextFactory, type FileProbe, type HeapProbe, type SecondGpu, type PerfGroup, type PerfMetric, type PerfTable } from './perf/common';
import { overlapGroup } from './perf/p1-overlap';
import { readbackGroup, uploadGroup } from './perf/p2-p3-transfer';
import { weightsGroup } from './perf/p4-weights';
import { libraryCostGroup } from './perf/p5-library-cost';
import { eventTimingGroup } from './perf/p6-event-timing';
import { schedulerGrowthGroup } from './perf/growth-scheduler';
import { storageGroup } from './perf/p7-storage';
import { twoGpusGroup } from './perf/p8-two-gpus';

export type { BoundedReport, BoundedRow, ContextFactory, PerfGroup, PerfMetric, PerfTable, PerfOptions, PerfGroupResult } from './perf/common';

/** Every metric group, in the order the suite runs them. */
export const perfGroups: readonly PerfGroup[] = [overlapGroup, uploadGroup, readbackGroup, weightsGroup, libraryCostGroup, eventTimingGroup, storageGroup, twoGpusGroup, schedulerGrowthGroup];

/** Names `only` accepts: group ids, metric ids (P1..P8, also P2.writeBuffer, P8.split etc.) and 'growth'. */
export function perfSelectors(): string[] {
  return [...perfGroups.map((g) => g.id), ...perfGroups.flatMap((g) => g.metrics), 'growth'];
}

export interface PerfSuiteOptions {
  /** Tiny sizes, few repeats. @default false */
  quick?: boolean;
  /**
   * What to run: metric ids ('P1', 'P5', ...; a prefix like 'P2' selects its group), group ids
   * ('overlap', 'scheduler-growth'), or 'growth' (P1's size sweep and the scheduler tables).
   * @default everything
   */
  only?: readonly string[];
  progress?: Progress;
  /** Makes a second context (P5 compares `captureStacks` on and off). Without it, that part is skipped. */
  createContext?: ContextFactory;
  /** Seed of every random input. @default a fresh one, recorded in the result */
  seed?: number;
  /** Which runner is calling, for the device report. @default 'node' when `process.versions.node` exists, else 'page' */
  runner?: DeviceReport['runner'];
  /** Commit, where the runner knows it. */
  commit?: string;
  /** A forced GC and heap reading (Node): adds retained bytes per queued op to the growth table. */
  heap?: HeapProbe;
  /** Scratch files and the process's memory (Node): P7. */
  files?: FileProbe;
  /** A context on a second GPU (Node): P8. */
  secondGpu?: SecondGpu;
}

export interface PerfGroupError {
  group: string;
  error: string;
}

export interface PerfResult {
  schema: 'webgpu-streams/perf@1';
  date: string;
  commit?: string;
  quick: boolean;
  /** The groups run, where `--only` chose some (absent: every group). */
  only?: string[];
  seed: number;
  device: DeviceReport;
  /** The adapter as one line (also in every metric). */
  card: string;
  /** Driver version where the runner knows it (NVIDIA: from /proc or nvidia-smi). */
  driver?: string;
  metrics: PerfMetric[];
  tables: PerfTable[];
  /** Groups that threw: their metrics are missing (and `ok` is false). */
  errors: PerfGroupError[];
  /** Every metric that ran was verified, and no group threw. Targets missed do not make it false. */
  ok: boolean;
  /** Wall time of the whole suite, ms. */
  wallMs: number;
}

/** Groups selected by `only` (throws a TypeError naming unknown selectors). */
export function selectGroups(only?: readonly string[]): PerfGroup[] {
  if (!only || only.length === 0) return [...perfGroups];
  const known = perfSelectors();
  const unknown = only.filter((s) => !known.includes(s));
  if (unknown.length) throw new TypeError(`Expected \`only\` to name metrics or groups among ${known.join(', ')}; got \`${unknown.join(', ')}\``);
  return perfGroups.filter((g) => only.some((s) => s === g.id || g.metrics.includes(s) || (s === 'growth' && (g.id === 'overlap' || g.id === 'scheduler-growth'))));
}

/**
 * Runs the selected metric groups one after another on `ctx`. A group that throws is recorded
 * in `errors` and the suite goes on with a usable context.
 */
export async function runPerf(ctx: Context, options: PerfSuiteOptions = {}): Promise<PerfResult> {
  const t0 = performance.now();
  const quick = options.quick ?? false;
  const groups = selectGroups(options.only);
  const seed = options.seed ?? seedOf({ quick });
  const metrics: PerfMetric[] = [];
  const tables: PerfTable[] = [];
  const errors: PerfGroupError[] = [];
  for (const [i, g] of groups.entries()) {
    const progress: Progress | undefined = options.progress
      ? (message, fraction) => options.progress!(message, (i + Math.min(1, Math.max(0, fraction ?? 0))) / groups.length)
      : undefined;
    progress?.(`${g.id}: start`, 0);
    const tg = performance.now();
    try {
      const r = await g.run(ctx, { quick, seed: (seed + i * 0x9e3779b9) >>> 0 || 1, ...(progress ? { progress } : {}), ...(options.createContext ? { createContext: options.createContext } : {}), ...(options.heap ? { heap: options.heap } : {}), ...(options.files ? { files: options.files } : {}), ...(options.secondGpu ? { secondGpu: options.secondGpu } : {}) });
      metrics.push(...r.metrics);
      tables.push(...r.tables);
    } catch (e) {
      const err = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
      errors.push({ group: g.id, error: err });
      await ctx.synchronize().catch(() => undefined);
    }
    progress?.(`${g.id}: done in ${num((performance.now() - tg) / 1000)} s`, 1);
  }
  const g = globalThis as { process?: { versions?: { node?: string } } };
  const runner = options.runner ?? (g.process?.versions?.node ? 'node' : 'page');
  return {
    schema: 'webgpu-streams/perf@1',
    date: new Date().toISOString(),
    ...(options.commit ? { commit: options.commit } : {}),
    quick,
    ...(options.only ? { only: groups.map((x) => x.id) } : {}),
    seed,
    device: deviceReport(ctx, runner),
    card: deviceLine(ctx),
    metrics,
    tables,
    errors,
    ok: errors.length === 0 && metrics.every((m) => m.verified || m.skipped !== undefined) && tables.every((t) => t.verified),
    wallMs: performance.now() - t0,
  };
}

/** `num(x)`, with 4 decimals where that would print the target's own threshold (1.0501 against `<= 1.05`, not "1.05 FALL SHORT"). */
function nearTarget(x: number, target: string): string {
  const shown = num(x);
  const t = /[<>]=\s*(-?[\d.]+)/.exec(target);
  return t && Number(shown) === Number(t[1]) && x !== Number(t[1]) ? x.toFixed(4) : shown;
}

/** One line per metric: `P1  0.93 ratio  target >= 0.90  PASS  (detail)`. */
export function formatMetricLine(m: PerfMetric): string {
  const status = m.skipped ? 'N/A' : !m.verified ? 'UNVERIFIED' : m.pass ? 'PASS' : 'FALL SHORT';
  // JSON has no NaN: a value read back from a result file is null there.
  const value = m.value !== null && Number.isFinite(m.value) ? (m.bounded ? ratioText(m.value) : nearTarget(m.value, m.target)) : m.skipped ? '-' : 'n/a';
  // Below zero of an efficiency's bound (P1): the overlapped run was slower than the synchronous one.
  const unit = m.bounded && m.value !== null && m.value < 0 ? `${m.unit} (slower than sync)` : m.unit;
  return `${m.id.padEnd(14)} ${`${value} ${unit}`.padEnd(18)} target ${m.target.padEnd(40)} ${status}`;
}

/**
 * A bounded metric's rows (P1: one per size): measured, its bound from this run, the ratio to the
 * bound, raw WebGPU and library / raw, and the verdict by the rule.
 */
export function formatBounded(b: BoundedReport): string[] {
  const lines = [`    rule: ${b.rule}`];
  for (const r of b.rows) {
    const at = r.label ? `${r.label}: ` : '';
    // A row without a bound says why in `bound` ('no bound: ...').
    const bound = r.ofBound === null ? r.bound : `bound ${r.bound}; ${ratioText(r.ofBound, BOUND_FRACTION)} of bound${r.ofBound < 0 ? ' (slower than sync)' : ''}`;
    const lr = r.libOverRaw === null ? 'n/a' : `${ratioText(r.libOverRaw, RAW_SLACK)}x`;
    // The interval once per line: in the verdict where it judges the library, else here.
    const ci = r.libOverRawInterval && !r.verdict.includes('95% interval') ? `, ${intervalWords(r.libOverRawInterval)}` : '';
    lines.push(`    ${at}measured ${r.measured}; ${bound}; ${r.raw}, library / raw ${lr} (paired${ci}); ${r.verdict}`);
  }
  return lines;
}

/** The metrics, the tables and the errors as plain text. */
export function formatPerf(result: PerfResult): string {
  const lines: string[] = [];
  lines.push(`perf: ${result.card}${result.driver ? `, driver ${result.driver}` : ''}; ${result.quick ? 'QUICK (tiny sizes: the numbers say little)' : 'full'}${result.only ? ` (only ${result.only.join(', ')})` : ''}; seed ${result.seed}; ${result.date}${result.commit ? `; commit ${result.commit.slice(0, 12)}` : ''}`);
  if (isSoftwareDevice(result.device)) lines.push(SOFTWARE_WARNING);
  lines.push('');
  for (const m of result.metrics) {
    lines.push(formatMetricLine(m));
    if (m.bounded) lines.push(...formatBounded(m.bounded));
    lines.push(`    ${m.name}: ${m.detail}`);
    lines.push(`    verified: ${m.verification}`);
  }
  for (const t of result.tables) {
    lines.push('');
    lines.push(`${t.title}${t.verified ? '' : ' (UNVERIFIED)'}`);
    lines.push(renderRows(t.columns, t.rows));
    lines.push(`  -> ${t.verdict}`);
  }
  for (const e of result.errors) lines.push(`\nERROR in ${e.group}: ${e.error}`);
  const pass = result.metrics.filter((m) => m.pass).length;
  const short = result.metrics.filter((m) => !m.pass && !m.skipped).length;
  const na = result.metrics.filter((m) => m.skipped).length;
  lines.push('');
  lines.push(`perf: ${pass} PASS, ${short} FALL SHORT${na ? `, ${na} N/A` : ''}${result.errors.length ? `, ${result.errors.length} group error(s)` : ''}; ${result.ok ? 'every figure verified' : 'NOT ALL FIGURES VERIFIED'}; ${num(result.wallMs / 1000)} s`);
  return lines.join('\n');
}

/** A bounded metric's report: rows with text, ratios that are numbers or null, and a pass that agrees with them. */
function validateBounded(b: BoundedReport, at: string, metricPass: boolean): string[] {
  const p: string[] = [];
  if (!b || typeof b !== 'object' || typeof b.rule !== 'string' || !Array.isArray(b.rows)) return [`${at}: want { rule, rows }`];
  if (b.rows.length === 0) p.push(`${at}.rows: empty`);
  b.rows.forEach((r, j) => {
    const rat = `${at}.rows[${j}]`;
    for (const k of ['label', 'measured', 'bound', 'raw', 'verdict'] as const) if (typeof r[k] !== 'string') p.push(`${rat}.${k}: not a string`);
    for (const k of ['ofBound', 'libOverRaw'] as const) if (r[k] !== null && !(typeof r[k] === 'number' && Number.isFinite(r[k]))) p.push(`${rat}.${k}: not a finite number or null`);
    if (typeof r.pass !== 'boolean') p.push(`${rat}.pass: not a boolean`);
    else if (r.pass !== r.verdict.startsWith('PASS')) p.push(`${rat}: pass ${r.pass} but verdict '${r.verdict}'`);
    if (/\b(NaN|Infinity)\b/.test(`${r.measured} ${r.bound} ${r.raw} ${r.verdict}`)) p.push(`${rat}: unreadable figure (NaN or Infinity)`);
  });
  if (metricPass && b.rows.some((r) => !r.pass)) p.push(`${at}: the metric passes but a row falls short`);
  return p;
}

function renderRows(columns: string[], rows: (number | string)[][]): string {
  const cells = [columns, ...rows.map((r) => r.map((c) => (typeof c === 'number' ? (Number.isFinite(c) ? String(c) : '-') : c)))];
  const widths = columns.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  return cells.map((r, ri) => '  ' + r.map((c, i) => (i === 0 || ri === 0 ? (c ?? '').padEnd(widths[i]!) : (c ?? '').padStart(widths[i]!))).join('  ')).join('\n');
}

/** `YYYY-MM-DDTHHMMSS-<adapter-slug>-perf[-quick]`: the result file's stem, named as the scenario runners name theirs. */
export function perfStem(result: Pick<PerfResult, 'date' | 'device' | 'quick'>): string {
  return `${runStamp(result)}-${adapterSlug(result.device)}-perf${result.quick ? '-quick' : ''}`;
}

/** Structural check of a {@link PerfResult}; returns problems as `path: what`. */
export function validatePerfResult(x: unknown): string[] {
  const p: string[] = [];
  const r = x as Partial<PerfResult> | null;
  if (!r || typeof r !== 'object') return ['$: not an object'];
  if (r.schema !== 'webgpu-streams/perf@1') p.push('$.schema: want webgpu-streams/perf@1');
  if (typeof r.date !== 'string' || Number.isNaN(Date.parse(r.date))) p.push('$.date: not a date');
  if (typeof r.quick !== 'boolean') p.push('$.quick: not a boolean');
  if (typeof r.ok !== 'boolean') p.push('$.ok: not a boolean');
  if (typeof r.card !== 'string' || !r.card) p.push('$.card: missing');
  if (!Array.isArray(r.metrics)) p.push('$.metrics: not an array');
  else
    r.metrics.forEach((m, i) => {
      const at = `$.metrics[${i}]`;
      for (const k of ['id', 'name', 'unit', 'target', 'detail', 'device', 'verification'] as const) if (typeof m[k] !== 'string') p.push(`${at}.${k}: not a string`);
      for (const k of ['pass', 'verified'] as const) if (typeof m[k] !== 'boolean') p.push(`${at}.${k}: not a boolean`);
      // JSON has no NaN: a value that could not be measured is null there.
      if (typeof m.value !== 'number' && m.value !== null) p.push(`${at}.value: not a number`);
      else if ((m.value === null || !Number.isFinite(m.value)) && m.pass) p.push(`${at}: pass with no value`);
      if (m.pass && !m.verified) p.push(`${at}: pass without verification`);
      if (!m.figures || typeof m.figures !== 'object') p.push(`${at}.figures: missing`);
      if (m.bounded !== undefined) p.push(...validateBounded(m.bounded, `${at}.bounded`, m.pass));
    });
  if (!Array.isArray(r.tables)) p.push('$.tables: not an array');
  else
    r.tables.forEach((t, i) => {
      const at = `$.tables[${i}]`;
      if (!Array.isArray(t.columns) || !Array.isArray(t.rows)) p.push(`${at}: columns/rows missing`);
      else t.rows.forEach((row, j) => row.length !== t.columns.length && p.push(`${at}.rows[${j}]: ${row.length} cells for ${t.columns.length} columns`));
      if (typeof t.verdict !== 'string') p.push(`${at}.verdict: not a string`);
    });
  if (!Array.isArray(r.errors)) p.push('$.errors: not an array');
  return p;
}
