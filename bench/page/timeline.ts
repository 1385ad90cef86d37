/**
 * The timeline: one lane per stream plus a 'host' lane, ops coloured by kind, a time axis in ms,
 * hatching for estimated spans, races as red arrows between two ops, a legend and a hover tooltip
 * (Nsight Systems' view of the classic CUDA overlap write-ups). Layout, axis, hit testing and links
 * are pure functions (tested in
 * test/page-timeline.test.ts); {@link TimelineView} only draws them on a canvas. The Chrome Trace
 * Event export is bench/report.ts's `toChromeTrace`, shared with the Node runners.
 */
import type { TraceLink } from 'webgpu-streams';
import type { Span } from '../schema';

export type SpanKind = Span['kind'];

/** Colour and legend label per kind, in legend order. Upload/download follow Nsight's HtoD green, DtoH pink. */
export const KIND_STYLE: Readonly<Record<SpanKind, { color: string; label: string }>> = {
  upload: { color: '#2f9e44', label: 'upload (H2D)' },
  kernel: { color: '#3b6fd9', label: 'kernel' },
  download: { color: '#c2407d', label: 'download (D2H)' },
  copy: { color: '#e8890c', label: 'copy (D2D)' },
  fill: { color: '#12a3a3', label: 'host fill' },
  read: { color: '#9b6bc9', label: 'host read' },
  host: { color: '#7b828c', label: 'host fn' },
  event: { color: '#d4a500', label: 'event' },
  wait: { color: '#d9480f', label: 'wait' },
};

export const KIND_ORDER = Object.keys(KIND_STYLE) as SpanKind[];

/** Name of the lane that holds host-side spans. */
export const HOST_LANE = 'host';

// ---------------------------------------------------------------------------------------------
// Pure layout
// ---------------------------------------------------------------------------------------------

const collator = new Intl.Collator('en', { numeric: true, sensitivity: 'base' });

/**
 * Lane order: 'host' first (as Nsight puts the CPU thread on top), then the streams in order of
 * their first span, ties broken by natural name order ('s2' before 's10').
 */
export function laneOrder(spans: readonly Span[]): string[] {
  const first = new Map<string, number>();
  for (const s of spans) {
    const t = first.get(s.lane);
    if (t === undefined || s.start < t) first.set(s.lane, s.start);
  }
  const streams = [...first.keys()].filter((l) => l !== HOST_LANE);
  streams.sort((a, b) => first.get(a)! - first.get(b)! || collator.compare(a, b));
  return first.has(HOST_LANE) ? [HOST_LANE, ...streams] : streams;
}

export interface PlacedSpan {
  /** The first span of {@link group}. */
  span: Span;
  /**
   * Every span of the lane with exactly this start and end, in trace order (usually one). Without
   * GPU timestamps all ops of one submit get the submit's window; they are drawn as one box in
   * horizontal bands rather than as a made-up sequence.
   */
  group: Span[];
  /** Index into {@link TimelineLayout.lanes}. */
  lane: number;
  /** Sub-row inside the lane (overlapping spans of one lane stack). */
  row: number;
  /** Zero-length span (an event record): drawn as a marker, takes no row of its own. */
  instant: boolean;
}

export interface LaneLayout {
  name: string;
  rows: number;
  /** Number of spans in the lane. */
  count: number;
  /** Time the lane was busy (union of its spans), ms. */
  busy: number;
}

export interface TimelineLayout {
  lanes: LaneLayout[];
  placed: PlacedSpan[];
  /** Earliest start and latest end over all spans (ms, runner clock). */
  t0: number;
  t1: number;
}

/**
 * Assigns every span a lane and a sub-row. Spans of one lane that overlap in time go to separate
 * rows (greedy interval packing, at most `maxRows` rows; beyond that they share the row that frees
 * first and are drawn over each other). Spans with a non-finite time are dropped; `end < start`
 * is treated as an instant.
 */
export function layoutLanes(spans: readonly Span[], maxRows = 4): TimelineLayout {
  const valid = spans.filter((s) => Number.isFinite(s.start) && Number.isFinite(s.end));
  const order = laneOrder(valid);
  const index = new Map(order.map((name, i) => [name, i]));
  const byLane: Span[][] = order.map(() => []);
  for (const s of valid) byLane[index.get(s.lane)!]!.push(s);

  const lanes: LaneLayout[] = [];
  const placed: PlacedSpan[] = [];
  let t0 = Infinity;
  let t1 = -Infinity;
  byLane.forEach((laneSpans, lane) => {
    const sorted = [...laneSpans].sort((a, b) => a.start - b.start || b.end - a.end);
    const rowEnd: number[] = [];
    let busy = 0;
    let coveredTo = -Infinity;
    let prev: PlacedSpan | undefined;
    for (const span of sorted) {
      t0 = Math.min(t0, span.start);
      t1 = Math.max(t1, span.end, span.start);
      if (span.end > coveredTo) {
        busy += span.end - Math.max(span.start, coveredTo);
        coveredTo = span.end;
      }
      if (!(span.end > span.start)) {
        placed.push({ span, group: [span], lane, row: 0, instant: true });
        continue;
      }
      if (prev && prev.span.start === span.start && prev.span.end === span.end) {
        prev.group.push(span);
        continue;
      }
      let row = rowEnd.findIndex((end) => end <= span.start);
      if (row < 0) {
        if (rowEnd.length < maxRows) {
          row = rowEnd.length;
          rowEnd.push(span.end);
        } else {
          row = rowEnd.indexOf(Math.min(...rowEnd));
          rowEnd[row] = Math.max(rowEnd[row]!, span.end);
        }
      } else {
        rowEnd[row] = span.end;
      }
      prev = { span, group: [span], lane, row, instant: false };
      placed.push(prev);
    }
    lanes.push({ name: order[lane]!, rows: Math.max(1, rowEnd.length), count: laneSpans.length, busy });
  });
  if (!Number.isFinite(t0)) {
    t0 = 0;
    t1 = 0;
  }
  return { lanes, placed, t0, t1 };
}

/** A 1-2-5 step that splits `range` into about `target` intervals. */
export function niceStep(range: number, target: number): number {
  const r = range > 0 && Number.isFinite(range) ? range : 1;
  const raw = r / Math.max(1, target);
  const mag = 10 ** Math.floor(Math.log10(raw));
  const norm = raw / mag;
  const step = norm < 1.5 ? 1 : norm < 3.5 ? 2 : norm < 7.5 ? 5 : 10;
  return step * mag;
}

/** Tick positions (ms, same origin as `from`/`to`) and their labels. */
export function axisTicks(from: number, to: number, target: number): { value: number; label: string }[] {
  const step = niceStep(to - from, target);
  const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
  const ticks: { value: number; label: string }[] = [];
  const first = Math.ceil(from / step - 1e-9) * step;
  for (let v = first, i = 0; v <= to + step * 1e-9 && i < 1000; i++, v = first + i * step) {
    ticks.push({ value: v, label: (Math.abs(v) < step * 1e-9 ? 0 : v).toFixed(decimals) });
  }
  return ticks;
}

/** Duration in ms, at a precision that suits it: 0.0123, 0.123, 1.23, 12.3, 123. */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms)) return '—';
  const a = Math.abs(ms);
  if (a === 0) return '0';
  if (a < 0.01) return `${(ms * 1000).toFixed(2)} µs`.replace(/\.?0+ µs$/, ' µs');
  if (a < 1) return ms.toFixed(3);
  if (a < 10) return ms.toFixed(2);
  if (a < 100) return ms.toFixed(1);
  return ms.toFixed(0);
}

// ---------------------------------------------------------------------------------------------
// Geometry (pure) and hit testing
// ---------------------------------------------------------------------------------------------

export const GEOMETRY = {
  pad: 14,
  titleH: 26,
  legendH: 24,
  axisH: 26,
  rowH: 20,
  rowGap: 3,
  lanePad: 6,
  bottomPad: 10,
} as const;

export interface LaneBox {
  y: number;
  h: number;
}

export interface Geometry {
  width: number;
  height: number;
  /** Plot area, CSS px. */
  plotX: number;
  plotW: number;
  lanesTop: number;
  lanes: LaneBox[];
}

export function computeGeometry(layout: TimelineLayout, width: number, gutter: number): Geometry {
  const g = GEOMETRY;
  const lanesTop = g.pad + g.titleH + g.legendH + g.axisH;
  let y = lanesTop;
  const lanes = layout.lanes.map((l) => {
    const h = g.lanePad * 2 + l.rows * g.rowH + (l.rows - 1) * g.rowGap;
    const box = { y, h };
    y += h;
    return box;
  });
  const plotX = g.pad + gutter;
  return { width, height: y + g.bottomPad, plotX, plotW: Math.max(10, width - plotX - g.pad), lanesTop, lanes };
}

/** The visible window, ms relative to the layout's t0. */
export interface ViewRange {
  from: number;
  to: number;
}

/**
 * A piece of the time axis: `[from, to]` ms (relative to the layout's t0) drawn over `[x, x + w]`
 * px. A `gap` segment is a stretch where every lane was idle, squeezed to a fixed width.
 */
export interface ScaleSegment {
  from: number;
  to: number;
  x: number;
  w: number;
  gap: boolean;
}

/** Piecewise-linear time -> x mapping: one segment when zoomed, idle gaps squeezed otherwise. */
export interface TimeScale {
  segments: ScaleSegment[];
}

export function linearScale(from: number, to: number, plotX: number, plotW: number): TimeScale {
  return { segments: [{ from, to: to > from ? to : from + 1, x: plotX, w: plotW, gap: false }] };
}

export interface CompressOptions {
  /** Width of a squeezed gap, px. @default 52 */
  gapPx?: number;
  /** Squeeze idle stretches longer than this share of the whole trace. @default 0.08 */
  minGapFraction?: number;
  /** At most this share of the plot goes to squeezed gaps. @default 0.3 */
  maxGapShare?: number;
}

/**
 * The default scale of a trace: time runs linearly, except that stretches where no lane has any
 * span (between the variants of a scenario, typically) are squeezed to `gapPx`, so the screenshot
 * shows the work instead of an empty plot. Each squeezed gap keeps a little idle margin both sides.
 */
export function compressedScale(layout: TimelineLayout, plotX: number, plotW: number, opts: CompressOptions = {}): TimeScale {
  const gapPx = opts.gapPx ?? 52;
  const minFrac = opts.minGapFraction ?? 0.08;
  const maxShare = opts.maxGapShare ?? 0.3;
  const total = layout.t1 - layout.t0;
  if (!(total > 0)) return linearScale(0, 1, plotX, plotW);
  const iv = layout.placed.map((p) => [p.span.start - layout.t0, p.span.end - layout.t0] as const).sort((a, b) => a[0] - b[0]);
  const merged: [number, number][] = [];
  for (const [a, b] of iv) {
    const last = merged[merged.length - 1];
    if (last && a <= last[1]) last[1] = Math.max(last[1], b);
    else merged.push([a, b]);
  }
  let gaps: [number, number][] = [];
  for (let i = 1; i < merged.length; i++) {
    const a = merged[i - 1]![1];
    const b = merged[i]![0];
    const g = b - a;
    if (g > minFrac * total) {
      const m = Math.min(0.015 * total, 0.15 * g);
      gaps.push([a + m, b - m]);
    }
  }
  const maxGaps = Math.max(0, Math.floor((maxShare * plotW) / gapPx));
  if (gaps.length > maxGaps) {
    gaps = [...gaps].sort((x, y) => y[1] - y[0] - (x[1] - x[0])).slice(0, maxGaps).sort((x, y) => x[0] - y[0]);
  }
  if (!gaps.length) return linearScale(0, total * 1.02, plotX, plotW);
  const squeezed = gaps.reduce((acc, [a, b]) => acc + (b - a), 0);
  const end = total + 0.02 * (total - squeezed);
  const active = end - squeezed;
  const rate = (plotW - gaps.length * gapPx) / active;
  const segments: ScaleSegment[] = [];
  let t = 0;
  let x = plotX;
  for (const [a, b] of gaps) {
    segments.push({ from: t, to: a, x, w: (a - t) * rate, gap: false });
    x += (a - t) * rate;
    segments.push({ from: a, to: b, x, w: gapPx, gap: true });
    x += gapPx;
    t = b;
  }
  segments.push({ from: t, to: end, x, w: (end - t) * rate, gap: false });
  return { segments };
}

/** x (px) of time `t` (ms relative to t0); extrapolates linearly outside the scale. */
export function timeToX(scale: TimeScale, t: number): number {
  const segs = scale.segments;
  const first = segs[0]!;
  const last = segs[segs.length - 1]!;
  const at = (s: ScaleSegment) => s.x + ((t - s.from) / Math.max(1e-12, s.to - s.from)) * s.w;
  if (t <= first.from) return at(first);
  for (const s of segs) if (t <= s.to) return at(s);
  return at(last);
}

/** Inverse of {@link timeToX}. */
export function xToTime(scale: TimeScale, x: number): number {
  const segs = scale.segments;
  const at = (s: ScaleSegment) => s.from + ((x - s.x) / Math.max(1e-12, s.w)) * (s.to - s.from);
  if (x <= segs[0]!.x) return at(segs[0]!);
  for (const s of segs) if (x <= s.x + s.w) return at(s);
  return at(segs[segs.length - 1]!);
}

/** Axis ticks of a scale: a 1-2-5 step over the unsqueezed time, none within `clearPx` of a gap. */
export function scaleTicks(scale: TimeScale, pxPerTick = 90, clearPx = 22): { value: number; x: number; label: string }[] {
  const live = scale.segments.filter((s) => !s.gap);
  const ms = live.reduce((a, s) => a + (s.to - s.from), 0);
  const px = live.reduce((a, s) => a + s.w, 0);
  const step = niceStep(ms, Math.max(2, Math.floor(px / pxPerTick)));
  const gaps = scale.segments.filter((s) => s.gap);
  const out: { value: number; x: number; label: string }[] = [];
  for (const s of live) {
    for (const t of axisTicks(s.from, s.to, Math.max(1, (s.to - s.from) / step))) {
      if (Math.abs(t.value - Math.round(t.value / step) * step) > step * 1e-6) continue;
      const x = timeToX(scale, t.value);
      if (gaps.some((g) => x > g.x - clearPx && x < g.x + g.w + clearPx)) continue;
      out.push({ value: t.value, x, label: t.label });
    }
  }
  // The same decimals everywhere.
  const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
  return out.map((t) => ({ ...t, label: t.value.toFixed(decimals) }));
}

export function spanRect(
  p: PlacedSpan,
  geom: Geometry,
  scale: TimeScale,
  t0: number,
): { x: number; y: number; w: number; h: number } {
  const g = GEOMETRY;
  const x0 = timeToX(scale, p.span.start - t0);
  const x1 = timeToX(scale, p.span.end - t0);
  const lane = geom.lanes[p.lane]!;
  const y = lane.y + g.lanePad + p.row * (g.rowH + g.rowGap);
  return { x: x0, y, w: Math.max(0, x1 - x0), h: g.rowH };
}

/** The span under (x, y) in CSS px, preferring the narrowest when several are close. */
export function hitTest(
  layout: TimelineLayout,
  geom: Geometry,
  scale: TimeScale,
  x: number,
  y: number,
): PlacedSpan | undefined {
  let best: PlacedSpan | undefined;
  let bestW = Infinity;
  for (const p of layout.placed) {
    const r = spanRect(p, geom, scale, layout.t0);
    const slack = p.instant || r.w < 4 ? 4 : 0;
    if (y < r.y || y > r.y + r.h) continue;
    if (x < r.x - slack || x > r.x + r.w + slack) continue;
    if (r.w < bestW) {
      best = p;
      bestW = r.w;
    }
  }
  return best;
}

// ---------------------------------------------------------------------------------------------
// Canvas view (DOM)
// ---------------------------------------------------------------------------------------------

const FONT = 'system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif';

function withAlpha(hex: string, alpha: number): string {
  const n = Number.parseInt(hex.slice(1), 16);
  return `rgba(${(n >> 16) & 255}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
}

function isLight(hex: string): boolean {
  const n = Number.parseInt(hex.slice(1), 16);
  const [r, g, b] = [(n >> 16) & 255, (n >> 8) & 255, n & 255];
  return 0.299 * r + 0.587 * g + 0.114 * b > 170;
}

function fitText(ctx: CanvasRenderingContext2D, text: string, maxW: number): string {
  if (maxW <= 8) return '';
  if (ctx.measureText(text).width <= maxW) return text;
  let lo = 0;
  let hi = text.length;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (ctx.measureText(`${text.slice(0, mid)}…`).width <= maxW) lo = mid;
    else hi = mid - 1;
  }
  return lo === 0 ? '' : `${text.slice(0, lo)}…`;
}

export interface TimelineContent {
  title: string;
  subtitle?: string;
  spans: readonly Span[];
  /** Races the stream sanitizer found: a red arrow from the first op's span to the second's. */
  links?: readonly TraceLink[];
}

/** Where to draw each link: from the start of the first op's box to the start of the second's (CSS px); links whose ops are not on the timeline are left out. */
export function linkSegments(layout: TimelineLayout, geom: Geometry, scale: TimeScale, links: readonly TraceLink[]): { x0: number; y0: number; x1: number; y1: number; name: string }[] {
  const byOp = new Map<number, PlacedSpan>();
  for (const p of layout.placed) for (const s of p.group) if (s.op !== undefined && s.lane !== HOST_LANE && !byOp.has(s.op)) byOp.set(s.op, p);
  const out: { x0: number; y0: number; x1: number; y1: number; name: string }[] = [];
  for (const l of links) {
    const a = byOp.get(l.from);
    const b = byOp.get(l.to);
    if (!a || !b) continue;
    const ra = spanRect(a, geom, scale, layout.t0);
    const rb = spanRect(b, geom, scale, layout.t0);
    out.push({ x0: ra.x, y0: ra.y + ra.h / 2, x1: rb.x, y1: rb.y + rb.h / 2, name: l.name });
  }
  return out;
}

/**
 * Draws a trace on `canvas` (sized to its container's width, at devicePixelRatio resolution),
 * with a hover tooltip in `tooltip`, drag-to-zoom and double-click to reset.
 */
export class TimelineView {
  private content: TimelineContent | undefined;
  private layout: TimelineLayout = layoutLanes([]);
  private geom: Geometry | undefined;
  /** Zoomed window, or undefined for the whole trace with idle gaps squeezed. */
  private zoom: ViewRange | undefined;
  private scale: TimeScale = linearScale(0, 1, 0, 1);
  private drag: { x0: number; x1: number } | undefined;
  private hover: PlacedSpan | undefined;
  private readonly hatch = new Map<string, CanvasPattern | null>();
  private lastWidth = 0;

  constructor(
    private readonly box: HTMLElement,
    private readonly canvas: HTMLCanvasElement,
    private readonly tooltip: HTMLElement,
  ) {
    new ResizeObserver(() => {
      const w = this.box.clientWidth;
      if (w !== this.lastWidth) this.render();
    }).observe(box);
    canvas.addEventListener('mousemove', (e) => this.onMove(e));
    canvas.addEventListener('mouseleave', () => this.setHover(undefined));
    canvas.addEventListener('mousedown', (e) => this.onDown(e));
    window.addEventListener('mouseup', (e) => this.onUp(e));
    canvas.addEventListener('dblclick', () => {
      this.resetView();
      this.render();
    });
  }

  show(content: TimelineContent | undefined): void {
    this.content = content;
    this.layout = layoutLanes(content?.spans ?? []);
    this.hover = undefined;
    this.tooltip.hidden = true;
    this.resetView();
    this.render();
  }

  private resetView(): void {
    this.zoom = undefined;
  }

  private local(e: MouseEvent): { x: number; y: number } {
    const r = this.canvas.getBoundingClientRect();
    return { x: e.clientX - r.left, y: e.clientY - r.top };
  }


  private onDown(e: MouseEvent): void {
    if (!this.geom || !this.layout.placed.length || e.button !== 0) return;
    const { x, y } = this.local(e);
    if (x < this.geom.plotX || y < this.geom.lanesTop - GEOMETRY.axisH) return;
    this.drag = { x0: x, x1: x };
    e.preventDefault();
  }

  private onUp(e: MouseEvent): void {
    if (!this.drag) return;
    const { x } = this.local(e);
    const g = this.geom!;
    const clamp = (v: number) => Math.min(g.plotX + g.plotW, Math.max(g.plotX, v));
    const a = clamp(Math.min(this.drag.x0, x));
    const b = clamp(Math.max(this.drag.x0, x));
    this.drag = undefined;
    if (b - a >= 6) this.zoom = { from: xToTime(this.scale, a), to: xToTime(this.scale, b) };
    this.render();
  }

  private onMove(e: MouseEvent): void {
    if (!this.geom) return;
    const { x, y } = this.local(e);
    if (this.drag) {
      this.drag.x1 = x;
      this.render();
      return;
    }
    this.setHover(hitTest(this.layout, this.geom, this.scale, x, y), x, y);
  }

  private setHover(p: PlacedSpan | undefined, x = 0, y = 0): void {
    const changed = p !== this.hover;
    this.hover = p;
    const tip = this.tooltip;
    if (!p) {
      tip.hidden = true;
      if (changed) this.render();
      return;
    }
    if (changed) {
      const s = p.span;
      tip.replaceChildren();
      for (const g of p.group) {
        const style = KIND_STYLE[g.kind];
        const head = document.createElement('div');
        head.className = 'tt-name';
        head.textContent = g.name;
        const meta = document.createElement('div');
        meta.className = 'tt-meta';
        const swatch = document.createElement('span');
        swatch.className = 'swatch';
        swatch.style.background = style?.color ?? '#888';
        meta.append(swatch, `${style?.label ?? g.kind} · lane ${g.lane}`);
        tip.append(head, meta);
      }
      const time = document.createElement('div');
      time.className = 'tt-time';
      const dur = s.end - s.start;
      time.textContent =
        (p.instant ? `at ${formatDuration(s.start - this.layout.t0)} ms` : `${formatDuration(dur)} ms`) +
        (p.instant ? '' : `  (${formatDuration(s.start - this.layout.t0)} → ${formatDuration(s.end - this.layout.t0)} ms)`);
      tip.append(time);
      if (p.group.some((g) => g.estimated)) {
        const est = document.createElement('div');
        est.className = 'tt-est';
        est.textContent =
          p.group.length > 1
            ? `estimated: these ${p.group.length} ops ran somewhere in their submit's window (no GPU timestamps)`
            : 'estimated from submit and completion times (no GPU timestamps)';
        tip.append(est);
      }
      this.render();
    }
    tip.hidden = false;
    const boxW = this.box.clientWidth;
    const tw = tip.offsetWidth;
    const left = x + 14 + tw > boxW ? Math.max(0, x - 14 - tw) : x + 14;
    tip.style.left = `${left}px`;
    tip.style.top = `${y + 16}px`;
  }

  private pattern(ctx: CanvasRenderingContext2D, color: string): CanvasPattern | null {
    if (this.hatch.has(color)) return this.hatch.get(color)!;
    const c = document.createElement('canvas');
    c.width = 8;
    c.height = 8;
    const p = c.getContext('2d')!;
    p.strokeStyle = color;
    p.lineWidth = 2;
    p.beginPath();
    p.moveTo(-2, 10);
    p.lineTo(10, -2);
    p.moveTo(-2, 2);
    p.lineTo(2, -2);
    p.moveTo(6, 10);
    p.lineTo(10, 6);
    p.stroke();
    const pat = ctx.createPattern(c, 'repeat');
    this.hatch.set(color, pat);
    return pat;
  }

  render(): void {
    const width = Math.max(480, this.box.clientWidth);
    this.lastWidth = this.box.clientWidth;
    const dpr = window.devicePixelRatio || 1;
    const canvas = this.canvas;
    const measure = canvas.getContext('2d')!;
    measure.font = `600 12px ${FONT}`;
    const gutter =
      Math.min(180, Math.max(70, ...this.layout.lanes.map((l) => measure.measureText(l.name).width + 18))) + 8;
    const empty = !this.layout.placed.length;
    const geom = computeGeometry(this.layout, width, gutter);
    const height = empty ? 150 : geom.height;
    this.geom = empty ? undefined : geom;

    canvas.style.width = `${width}px`;
    canvas.style.height = `${height}px`;
    const pw = Math.round(width * dpr);
    const ph = Math.round(height * dpr);
    if (canvas.width !== pw) canvas.width = pw;
    if (canvas.height !== ph) canvas.height = ph;
    const ctx = canvas.getContext('2d')!;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.fillStyle = '#ffffff';
    ctx.fillRect(0, 0, width, height);
    ctx.textBaseline = 'middle';

    const g = GEOMETRY;
    // Title
    ctx.fillStyle = '#1b1f24';
    ctx.font = `600 14px ${FONT}`;
    ctx.textAlign = 'left';
    const title = this.content?.title ?? 'Timeline';
    ctx.fillText(title, g.pad, g.pad + g.titleH / 2 - 2);
    // What a screen reader says of the canvas (the spans themselves are in the Trace JSON download).
    this.canvas.setAttribute('role', 'img');
    this.canvas.setAttribute('aria-label', `timeline: ${title}${this.content?.subtitle ? `, ${this.content.subtitle}` : ''}`);
    if (this.content?.subtitle) {
      const tw = ctx.measureText(title).width;
      ctx.font = `12px ${FONT}`;
      ctx.fillStyle = '#6a737d';
      ctx.fillText(fitText(ctx, this.content.subtitle, width - tw - g.pad * 3), g.pad + tw + 10, g.pad + g.titleH / 2 - 2);
    }

    if (empty) {
      ctx.fillStyle = '#6a737d';
      ctx.font = `13px ${FONT}`;
      ctx.textAlign = 'center';
      ctx.fillText(
        !this.content
          ? 'No trace yet: run a scenario to see its streams here.'
          : this.content.spans.length
            ? `None of this scenario's ${this.content.spans.length} spans has finite start and end times.`
            : 'This scenario recorded no spans.',
        width / 2,
        height / 2 + 10,
      );
      return;
    }

    // Legend: only the kinds present, in legend order, plus "estimated" when any span is.
    const present = new Set(this.layout.placed.flatMap((p) => p.group.map((g) => g.kind)));
    const anyEstimated = this.layout.placed.some((p) => p.span.estimated);
    let lx = g.pad;
    const ly = g.pad + g.titleH + g.legendH / 2 - 2;
    ctx.font = `12px ${FONT}`;
    for (const kind of KIND_ORDER) {
      if (!present.has(kind)) continue;
      const st = KIND_STYLE[kind];
      this.swatch(ctx, kind, lx, ly - 6, 12, 12, false);
      ctx.fillStyle = '#3d444d';
      ctx.textAlign = 'left';
      ctx.fillText(st.label, lx + 17, ly);
      lx += 17 + ctx.measureText(st.label).width + 16;
    }
    if (anyEstimated) {
      this.swatch(ctx, 'kernel', lx, ly - 6, 12, 12, true);
      ctx.fillStyle = '#3d444d';
      ctx.fillText('estimated (hatched)', lx + 17, ly);
      lx += 17 + ctx.measureText('estimated (hatched)').width + 16;
    }
    const squeezed = !this.zoom && compressedScale(this.layout, geom.plotX, geom.plotW).segments.some((x) => x.gap);
    if (squeezed) {
      ctx.fillStyle = '#3d444d';
      ctx.fillText('+N: N ms idle, squeezed', lx, ly);
    }
    if (this.zoom) {
      ctx.textAlign = 'right';
      ctx.fillStyle = '#3b6fd9';
      ctx.font = `600 12px ${FONT}`;
      ctx.fillText(
        `zoomed to ${formatDuration(this.zoom.to - this.zoom.from)} ms · double-click to reset`,
        width - g.pad,
        g.pad + g.titleH / 2 - 2,
      );
    }

    const t0 = this.layout.t0;
    const scale = this.zoom
      ? linearScale(this.zoom.from, this.zoom.to, geom.plotX, geom.plotW)
      : compressedScale(this.layout, geom.plotX, geom.plotW);
    this.scale = scale;
    const lanesBottom = geom.height - g.bottomPad;

    // Lane backgrounds and labels
    this.layout.lanes.forEach((lane, i) => {
      const box = geom.lanes[i]!;
      ctx.fillStyle = lane.name === HOST_LANE ? '#f3f1ea' : i % 2 ? '#f6f8fa' : '#fbfcfd';
      ctx.fillRect(g.pad, box.y, width - g.pad * 2, box.h);
      ctx.fillStyle = '#e1e4e8';
      ctx.fillRect(g.pad, box.y + box.h - 1, width - g.pad * 2, 1);
      ctx.textAlign = 'left';
      ctx.font = `600 12px ${FONT}`;
      ctx.fillStyle = '#24292f';
      const label = fitText(ctx, lane.name, gutter - 18);
      const labelY = box.y + g.lanePad + g.rowH / 2 - (lane.rows > 1 ? 0 : 0);
      ctx.fillText(label, g.pad + 8, labelY);
      if (box.h >= 2 * g.rowH) {
        ctx.font = `11px ${FONT}`;
        ctx.fillStyle = '#6a737d';
        ctx.fillText(lane.name === HOST_LANE ? 'CPU' : 'stream', g.pad + 8, labelY + 15);
      }
    });
    ctx.fillStyle = '#d0d7de';
    ctx.fillRect(geom.plotX - 1, geom.lanesTop, 1, lanesBottom - geom.lanesTop);

    // Axis and grid
    const ticks = scaleTicks(scale);
    const axisY = geom.lanesTop - 8;
    ctx.font = `11px ${FONT}`;
    ctx.textAlign = 'center';
    for (const t of ticks) {
      const x = Math.round(t.x) + 0.5;
      if (x < geom.plotX - 0.5 || x > geom.plotX + geom.plotW + 0.5) continue;
      ctx.fillStyle = 'rgba(27, 31, 36, 0.07)';
      ctx.fillRect(x - 0.5, geom.lanesTop, 1, lanesBottom - geom.lanesTop);
      ctx.fillStyle = '#8c959f';
      ctx.fillRect(x - 0.5, axisY, 1, 5);
      ctx.fillStyle = '#57606a';
      const half = ctx.measureText(t.label).width / 2;
      ctx.fillText(t.label, Math.min(x, width - g.pad - half), axisY - 8);
    }
    ctx.fillStyle = '#8c959f';
    ctx.fillRect(geom.plotX, axisY + 5, geom.plotW, 1);
    // Squeezed idle gaps: a hatched band across the lanes, the skipped time on the axis.
    for (const seg of scale.segments) {
      if (!seg.gap) continue;
      const pat = this.pattern(ctx, 'rgba(140, 149, 159, 0.35)');
      ctx.fillStyle = '#ffffff';
      ctx.fillRect(seg.x + 4, axisY - 2, seg.w - 8, 12);
      if (pat) {
        ctx.fillStyle = pat;
        ctx.fillRect(seg.x + 4, geom.lanesTop, seg.w - 8, lanesBottom - geom.lanesTop);
      }
      ctx.fillStyle = '#8c959f';
      ctx.fillRect(seg.x + 4, geom.lanesTop, 1, lanesBottom - geom.lanesTop);
      ctx.fillRect(seg.x + seg.w - 5, geom.lanesTop, 1, lanesBottom - geom.lanesTop);
      ctx.strokeStyle = '#8c959f';
      ctx.lineWidth = 1;
      ctx.beginPath();
      for (const dx of [seg.w / 2 - 3, seg.w / 2 + 3]) {
        ctx.moveTo(seg.x + dx - 3, axisY + 10);
        ctx.lineTo(seg.x + dx + 3, axisY);
      }
      ctx.stroke();
      ctx.fillStyle = '#6a737d';
      ctx.font = `10px ${FONT}`;
      ctx.textAlign = 'center';
      ctx.fillText(`+${formatDuration(seg.to - seg.from)}`, seg.x + seg.w / 2, axisY - 8);
    }
    ctx.textAlign = 'left';
    ctx.fillStyle = '#57606a';
    ctx.font = `600 11px ${FONT}`;
    ctx.fillText('time (ms)', g.pad + 8, axisY - 8);

    // Spans, clipped to the plot area
    ctx.save();
    ctx.beginPath();
    ctx.rect(geom.plotX, geom.lanesTop, geom.plotW, lanesBottom - geom.lanesTop);
    ctx.clip();
    const markers: PlacedSpan[] = [];
    for (const p of this.layout.placed) {
      if (p.instant) {
        markers.push(p);
        continue;
      }
      const r = spanRect(p, geom, scale, t0);
      if (r.x + r.w < geom.plotX || r.x > geom.plotX + geom.plotW) continue;
      const w = Math.max(1, r.w);
      if (p.group.length === 1) this.swatch(ctx, p.span.kind, r.x, r.y, w, r.h, !!p.span.estimated);
      else this.bands(ctx, p.group, r.x, r.y, w, r.h);
      if (p === this.hover) {
        ctx.strokeStyle = '#1b1f24';
        ctx.lineWidth = 1.5;
        ctx.strokeRect(r.x + 0.75, r.y + 0.75, Math.max(0, w - 1.5), r.h - 1.5);
      }
      const visX = Math.max(r.x, geom.plotX);
      const visW = Math.min(r.x + w, geom.plotX + geom.plotW) - visX;
      if (visW > 26) {
        ctx.font = `11px ${FONT}`;
        const color = KIND_STYLE[p.span.kind]?.color ?? '#888888';
        const light = p.span.estimated || p.group.length > 1 || isLight(color);
        ctx.fillStyle = light ? '#1b1f24' : '#ffffff';
        ctx.textAlign = 'left';
        const name = p.group.length > 1 ? p.group.map((g) => g.name).join(' · ') : p.span.name;
        const text = fitText(ctx, name, visW - 8);
        if (text && light && (p.span.estimated || p.group.length > 1)) {
          // A light halo keeps the name readable over the hatching.
          ctx.strokeStyle = 'rgba(255, 255, 255, 0.85)';
          ctx.lineWidth = 3;
          ctx.lineJoin = 'round';
          ctx.strokeText(text, visX + 4, r.y + r.h / 2 + 0.5);
        }
        if (text) ctx.fillText(text, visX + 4, r.y + r.h / 2 + 0.5);
      }
    }
    for (const p of markers) {
      const r = spanRect(p, geom, scale, t0);
      const cx = r.x;
      const cy = r.y + r.h / 2;
      const color = KIND_STYLE[p.span.kind]?.color ?? '#888888';
      ctx.fillStyle = color;
      ctx.strokeStyle = p === this.hover ? '#1b1f24' : '#ffffff';
      ctx.lineWidth = 1;
      ctx.beginPath();
      ctx.moveTo(cx, cy - 7);
      ctx.lineTo(cx + 5, cy);
      ctx.lineTo(cx, cy + 7);
      ctx.lineTo(cx - 5, cy);
      ctx.closePath();
      ctx.fill();
      ctx.stroke();
    }
    // Races: a red arrow from the first access's op to the second's, named at its middle.
    for (const k of linkSegments(this.layout, geom, scale, this.content?.links ?? [])) {
      ctx.strokeStyle = '#cf222e';
      ctx.fillStyle = '#cf222e';
      ctx.lineWidth = 2;
      ctx.beginPath();
      ctx.moveTo(k.x0, k.y0);
      ctx.lineTo(k.x1, k.y1);
      ctx.stroke();
      const a = Math.atan2(k.y1 - k.y0, k.x1 - k.x0);
      ctx.beginPath();
      ctx.moveTo(k.x1, k.y1);
      ctx.lineTo(k.x1 - 9 * Math.cos(a - 0.4), k.y1 - 9 * Math.sin(a - 0.4));
      ctx.lineTo(k.x1 - 9 * Math.cos(a + 0.4), k.y1 - 9 * Math.sin(a + 0.4));
      ctx.closePath();
      ctx.fill();
      ctx.font = `600 11px ${FONT}`;
      ctx.textAlign = 'center';
      const mx = (k.x0 + k.x1) / 2;
      const my = (k.y0 + k.y1) / 2 - 9;
      const w = ctx.measureText(k.name).width + 8;
      ctx.fillStyle = 'rgba(255, 255, 255, 0.9)';
      ctx.fillRect(mx - w / 2, my - 7, w, 14);
      ctx.fillStyle = '#cf222e';
      ctx.fillText(k.name, mx, my);
    }
    ctx.restore();

    if (this.drag) {
      const a = Math.min(this.drag.x0, this.drag.x1);
      const b = Math.max(this.drag.x0, this.drag.x1);
      ctx.fillStyle = 'rgba(59, 111, 217, 0.12)';
      ctx.fillRect(a, geom.lanesTop, b - a, lanesBottom - geom.lanesTop);
      ctx.fillStyle = 'rgba(59, 111, 217, 0.6)';
      ctx.fillRect(a, geom.lanesTop, 1, lanesBottom - geom.lanesTop);
      ctx.fillRect(b, geom.lanesTop, 1, lanesBottom - geom.lanesTop);
    }
  }

  /** Ops that share one time window: one box, a horizontal band per op, in trace order. */
  private bands(ctx: CanvasRenderingContext2D, group: readonly Span[], x: number, y: number, w: number, h: number): void {
    const bh = h / group.length;
    ctx.save();
    ctx.beginPath();
    if (w >= 4) ctx.roundRect(x, y, w, h, Math.min(3, w / 2));
    else ctx.rect(x, y, w, h);
    ctx.clip();
    group.forEach((g, i) => {
      const color = KIND_STYLE[g.kind]?.color ?? '#888888';
      const by = y + i * bh;
      ctx.fillStyle = withAlpha(color, g.estimated ? 0.38 : 0.9);
      ctx.fillRect(x, by, w, bh);
      if (g.estimated) {
        const pat = this.pattern(ctx, withAlpha(color, 0.7));
        if (pat) {
          ctx.fillStyle = pat;
          ctx.fillRect(x, by, w, bh);
        }
      }
    });
    ctx.restore();
    if (w >= 3) {
      ctx.strokeStyle = 'rgba(27, 31, 36, 0.35)';
      ctx.lineWidth = 1;
      ctx.beginPath();
      if (w >= 4) ctx.roundRect(x + 0.5, y + 0.5, w - 1, h - 1, Math.min(3, w / 2));
      else ctx.rect(x + 0.5, y + 0.5, w - 1, h - 1);
      ctx.stroke();
    }
  }

  private swatch(
    ctx: CanvasRenderingContext2D,
    kind: SpanKind,
    x: number,
    y: number,
    w: number,
    h: number,
    estimated: boolean,
  ): void {
    const color = KIND_STYLE[kind]?.color ?? '#888888';
    const radius = Math.min(3, w / 2, h / 2);
    ctx.beginPath();
    if (w >= 4) ctx.roundRect(x, y, w, h, radius);
    else ctx.rect(x, y, w, h);
    if (estimated) {
      ctx.fillStyle = withAlpha(color, 0.28);
      ctx.fill();
      const pat = this.pattern(ctx, withAlpha(color, 0.75));
      if (pat) {
        ctx.fillStyle = pat;
        ctx.fill();
      }
      ctx.strokeStyle = color;
      ctx.lineWidth = 1;
      if (w >= 3) ctx.stroke();
    } else {
      ctx.fillStyle = color;
      ctx.fill();
    }
  }
}
