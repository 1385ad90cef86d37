/**
 * The benchmark suite: every scenario, in order, on one context. The page, the headless Chromium
 * runner and the Node runner all call {@link runSuite}; none of them copies a scenario.
 */
import type { Progress, ScenarioResult, SuiteResult } from './schema';
import type { Context } from 'webgpu-streams';
import { deviceReport } from './device';
import type { Scenario, ScenarioOptions, SecondGpu, WeightsStorage } from './scenarios/common';
import { overlapProbe } from './scenarios/overlap-probe';
import { chunkedPipeline } from './scenarios/chunked-pipeline';
import { sleepStreams } from './scenarios/sleep-streams';
import { weightLoading } from './scenarios/weight-loading';
import { priorities } from './scenarios/priorities';
import { weightsStorage } from './scenarios/weights-storage';
import { twoGpus } from './scenarios/two-gpus';

export type { Scenario, ScenarioOptions, SecondGpu, WeightsStorage } from './scenarios/common';

/** Every scenario, in the order the suite runs them. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export const scenarios: readonly Scenario<any>[] = [overlapProbe, chunkedPipeline, sleepStreams, weightLoading, weightsStorage, priorities, twoGpus];

/** Ids of every scenario, in suite order. */
export const scenarioIds: readonly string[] = scenarios.map((s) => s.id);

export interface SuiteOptions {
  /** Tiny sizes and few repeats (CI on SwiftShader). @default false */
  quick?: boolean;
  /** Scenario ids to run; @default all */
  only?: readonly string[];
  progress?: Progress;
  /** Which runner is calling, for the device report. @default 'node' when `process.versions.node` exists, else 'page' */
  runner?: SuiteResult['device']['runner'];
  /** Commit hash to put in the result, where the runner knows it. */
  commit?: string;
  /** Where "weights from storage" reads its file. @default the page's server */
  storage?: WeightsStorage;
  /** A context on a second GPU for "two GPUs". @default a second device of the same adapter */
  secondGpu?: SecondGpu;
  /** `ctx` has the stream sanitizer on (the result says so). @default false */
  sanitize?: boolean;
}

/**
 * Runs the scenarios one after another on `ctx` and collects a {@link SuiteResult}. A scenario
 * that throws becomes a failed result (verification not ok, the error in `mismatch`) and the suite
 * goes on; `ok` is true only when every scenario verified.
 *
 * @example
 * const result = await runSuite(ctx, { quick: true, progress: (m) => console.log(m) });
 * if (!result.ok) process.exitCode = 1;
 */
export async function runSuite(ctx: Context, options: SuiteOptions = {}): Promise<SuiteResult> {
  const quick = options.quick ?? false;
  const only = options.only;
  if (only) {
    const unknown = only.filter((id) => !scenarioIds.includes(id));
    if (unknown.length) {
      throw new TypeError(`Expected \`only\` to name scenarios among ${scenarioIds.join(', ')}, got \`${unknown.join(', ')}\``);
    }
  }
  const selected = only ? scenarios.filter((s) => only.includes(s.id)) : scenarios;
  const progress = options.progress;
  const results: ScenarioResult[] = [];
  for (const [i, s] of selected.entries()) {
    const scoped: Progress | undefined = progress
      ? (message, fraction) => progress(message, (i + Math.min(1, Math.max(0, fraction ?? 0))) / selected.length)
      : undefined;
    scoped?.(`${s.id}: start`, 0);
    const opts: ScenarioOptions = { quick, ...(scoped ? { progress: scoped } : {}), ...(options.storage ? { storage: options.storage } : {}), ...(options.secondGpu ? { secondGpu: options.secondGpu } : {}) };
    const r = await runScenario(ctx, s, opts);
    // Races the sanitizer found (a run with it on), between ops on this scenario's timeline.
    const ops = new Set(r.trace.map((x) => x.op));
    const races = ctx.trace.raceLinks().filter((l) => ops.has(l.from) && ops.has(l.to));
    results.push(races.length ? { ...r, races } : r);
    scoped?.(`${s.id}: done`, 1);
  }
  const g = globalThis as { process?: { versions?: { node?: string } } };
  const runner = options.runner ?? (g.process?.versions?.node ? 'node' : 'page');
  return {
    schema: 'webgpu-streams/bench@1',
    date: new Date().toISOString(),
    ...(options.commit ? { commit: options.commit } : {}),
    quick,
    ...(options.sanitize ? { sanitize: true } : {}),
    device: deviceReport(ctx, runner),
    scenarios: results,
    ok: results.every((r) => r.verification.ok),
  };
}

/** Runs one scenario; a throw becomes a failed result instead of ending the suite. */
export async function runScenario(ctx: Context, scenario: Scenario<object>, opts: ScenarioOptions): Promise<ScenarioResult> {
  const t0 = performance.now();
  try {
    return await scenario.run(ctx, opts);
  } catch (e) {
    const err = e instanceof Error ? e : new Error(String(e));
    // Leave the context usable for the next scenario.
    await ctx.synchronize().catch(() => undefined);
    return {
      id: scenario.id,
      title: scenario.title,
      params: { quick: opts.quick },
      variants: [],
      verification: { ok: false, detail: `${scenario.id} threw ${err.name}`, mismatch: `${err.name}: ${err.message}` },
      verdicts: [`failed: ${err.name}: ${err.message}`],
      trace: [],
      wallMs: performance.now() - t0,
    };
  }
}
