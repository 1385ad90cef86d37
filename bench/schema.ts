/**
 * The shape every runner (page, headless Chromium, Node on Dawn) produces and every consumer (the
 * results table, the timeline, the JSON files under bench/results/) reads. One scenario run ->
 * one {@link ScenarioResult}; one suite run -> one {@link SuiteResult}.
 */

/** Summary statistics of repeated timings, warm-up excluded. All in milliseconds. */
import type { TraceLink, TraceSpan } from 'webgpu-streams';
export interface Timing {
  median: number;
  min: number;
  max: number;
  /** Every repeat, in run order. */
  samples: number[];
}

/** One measured variant of a scenario (e.g. "sync", "4 streams"). */
export interface Variant {
  /** Short name shown in the table: `sync`, `streams=4`, `resident`, `2 slots`. */
  name: string;
  time: Timing;
  /** What perfect overlap would give, from the measured parts, in ms; null where not meaningful. */
  ideal: number | null;
  /** The variant this one is compared to (its name), for speedup = base / this. */
  baseline?: string;
  speedup?: number;
  /** (t_base - t) / (t_base - t_ideal), where defined. */
  efficiency?: number;
  /** Device memory this variant held at its peak, bytes. */
  memoryBytes?: number;
  /** Throughput where the variant is a transfer, GB/s (1e9 bytes per second). */
  gbps?: number;
  /** Free-form extra figures. */
  extra?: Record<string, number | string | boolean>;
}

export interface Verification {
  ok: boolean;
  /** What was checked: "out == a + b for 4194304 floats (seed 1234)". */
  detail: string;
  /** First mismatch, when !ok. */
  mismatch?: string;
}

/** One span in a timeline: the library's `TraceSpan` (times in ms on the runner's `performance.now()` clock). */
export type Span = TraceSpan;

export interface ScenarioResult {
  /** Stable id: 'overlap-probe', 'chunked-pipeline', 'sleep-streams', 'weight-loading', 'weights-storage', 'priorities', 'two-gpus'. */
  id: string;
  title: string;
  params: Record<string, number | string | boolean>;
  variants: Variant[];
  verification: Verification;
  /** Plain-language conclusions: "concurrent kernels: no (4 dispatches took 3.9x one)". */
  verdicts: string[];
  /** Spans of one representative repeat, for the timeline. */
  trace: Span[];
  /** Races the stream sanitizer found among those spans' ops (a run with it on): links on the timeline. */
  races?: TraceLink[];
  /** Wall time of the whole scenario, ms. */
  wallMs: number;
}

export interface DeviceReport {
  runner: 'page' | 'headless' | 'node';
  /** 'nvidia', 'google' (SwiftShader), ... */
  vendor: string;
  architecture: string;
  description: string;
  /** True when the adapter is a software rasterizer (SwiftShader). */
  software: boolean;
  userAgent: string;
  timestampQuery: boolean;
  /** Driver, browser version and the like, where the runner knows them. */
  notes?: Record<string, string>;
}

export interface SuiteResult {
  schema: 'webgpu-streams/bench@1';
  date: string;
  commit?: string;
  quick: boolean;
  /** Run with the stream sanitizer on: its host costs include the sanitizer's; races in `scenarios[].races`. */
  sanitize?: boolean;
  device: DeviceReport;
  scenarios: ScenarioResult[];
  /** True when every scenario verified. */
  ok: boolean;
}

/** Progress callback shared by the runners. */
export type Progress = (message: string, fraction?: number) => void;
