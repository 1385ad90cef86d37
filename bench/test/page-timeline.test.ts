/**
 * The benchmark page's pure helpers, without a browser: the timeline's lane order and layout, time
 * scales and axis ticks, span geometry, hit testing and race links (bench/page/timeline.ts), and the table's
 * number formatting (bench/page/table.ts).
 */
import { describe, expect, it } from 'vitest';
import type { Span } from '../schema';
import {
  axisTicks,
  compressedScale,
  computeGeometry,
  formatDuration,
  hitTest,
  laneOrder,
  layoutLanes,
  linearScale,
  linkSegments,
  niceStep,
  scaleTicks,
  spanRect,
  timeToX,
  xToTime,
} from '../page/timeline';
import { fmtMiB, fmtPercent, fmtSpeedup } from '../page/table';

const span = (lane: string, start: number, end: number, kind: Span['kind'] = 'kernel', name = `${lane}@${start}`): Span => ({
  lane,
  kind,
  name,
  start,
  end,
});

describe('laneOrder', () => {
  it('puts host first, then streams by first start', () => {
    const spans = [span('s1', 5, 6), span('host', 9, 10), span('s0', 1, 2), span('s1', 0.5, 0.7)];
    expect(laneOrder(spans)).toEqual(['host', 's1', 's0']);
  });

  it('breaks ties by natural name order', () => {
    const spans = [span('s10', 0, 1), span('s2', 0, 1), span('s1', 0, 1)];
    expect(laneOrder(spans)).toEqual(['s1', 's2', 's10']);
  });

  it('has no host lane when no span is on the host', () => {
    expect(laneOrder([span('a', 0, 1)])).toEqual(['a']);
    expect(laneOrder([])).toEqual([]);
  });
});

describe('layoutLanes', () => {
  it('keeps sequential spans of a lane in one row', () => {
    const l = layoutLanes([span('s0', 0, 1), span('s0', 1, 2), span('s0', 3, 4)]);
    expect(l.lanes).toEqual([{ name: 's0', rows: 1, count: 3, busy: 3 }]);
    expect(l.placed.map((p) => p.row)).toEqual([0, 0, 0]);
    expect([l.t0, l.t1]).toEqual([0, 4]);
  });

  it('stacks overlapping spans into rows and reuses freed rows', () => {
    const l = layoutLanes([span('h', 0, 4), span('h', 1, 2), span('h', 2.5, 3), span('h', 1.5, 5)]);
    const rows = new Map(l.placed.map((p) => [p.span.start, p.row]));
    expect(rows.get(0)).toBe(0);
    expect(rows.get(1)).toBe(1);
    expect(rows.get(1.5)).toBe(2);
    expect(rows.get(2.5)).toBe(1); // row 1 is free again after 2
    expect(l.lanes[0]!.rows).toBe(3);
    expect(l.lanes[0]!.busy).toBe(5);
  });

  it('caps the rows of a lane at maxRows', () => {
    const spans = [0, 0.1, 0.2, 0.3, 0.4, 0.5].map((t) => span('x', t, 10));
    const l = layoutLanes(spans, 3);
    expect(l.lanes[0]!.rows).toBe(3);
    expect(Math.max(...l.placed.map((p) => p.row))).toBe(2);
  });

  it('places zero-length spans as instant markers that take no row', () => {
    const l = layoutLanes([span('s', 0, 2), span('s', 1, 1, 'event')]);
    expect(l.lanes[0]!.rows).toBe(1);
    const ev = l.placed.find((p) => p.span.kind === 'event')!;
    expect(ev.instant).toBe(true);
    expect(ev.row).toBe(0);
  });

  it('draws ops that share one window (estimated per submit) as one group in one row', () => {
    const est = (kind: Span['kind'], name: string): Span => ({ lane: 's0', kind, name, start: 1, end: 3, estimated: true });
    const l = layoutLanes([est('upload', 'up'), est('kernel', 'k'), est('download', 'down'), span('s0', 3, 4)]);
    expect(l.lanes[0]!.rows).toBe(1);
    expect(l.lanes[0]!.count).toBe(4);
    expect(l.placed).toHaveLength(2);
    expect(l.placed[0]!.group.map((g) => g.name)).toEqual(['up', 'k', 'down']);
    expect(l.placed[1]!.group).toHaveLength(1);
  });

  it('drops spans with non-finite times', () => {
    const l = layoutLanes([span('s', 0, 1), span('s', Number.NaN, 2), span('t', 1, Number.POSITIVE_INFINITY)]);
    expect(l.placed).toHaveLength(1);
    expect(l.lanes.map((x) => x.name)).toEqual(['s']);
  });

  it('is empty for no spans', () => {
    expect(layoutLanes([])).toEqual({ lanes: [], placed: [], t0: 0, t1: 0 });
  });
});

describe('axis', () => {
  it.each([
    [10, 5, 2],
    [1, 5, 0.2],
    [0.03, 3, 0.01],
    [700, 7, 100],
    [35, 10, 5],
  ])('niceStep(%d, %d) = %d', (range, target, step) => {
    expect(niceStep(range, target)).toBeCloseTo(step, 12);
  });

  it('labels ticks with the decimals the step needs', () => {
    expect(axisTicks(0, 1, 5).map((t) => t.label)).toEqual(['0.0', '0.2', '0.4', '0.6', '0.8', '1.0']);
    expect(axisTicks(0, 10, 5).map((t) => t.label)).toEqual(['0', '2', '4', '6', '8', '10']);
    expect(axisTicks(3.3, 7.9, 4).map((t) => t.value)).toEqual([4, 5, 6, 7]);
    expect(axisTicks(3.3, 7.9, 2).map((t) => t.value)).toEqual([4, 6]);
  });

  it('survives an empty range', () => {
    expect(axisTicks(0, 0, 5).length).toBe(1);
  });

  it('formats durations at a sensible precision', () => {
    expect(formatDuration(123.456)).toBe('123');
    expect(formatDuration(12.345)).toBe('12.3');
    expect(formatDuration(1.2345)).toBe('1.23');
    expect(formatDuration(0.12345)).toBe('0.123');
    expect(formatDuration(0)).toBe('0');
    expect(formatDuration(Number.NaN)).toBe('—');
  });
});

describe('geometry and hit testing', () => {
  const spans = [span('host', 0, 10, 'fill', 'fill 0'), span('s0', 2, 4, 'upload', 'up'), span('s0', 4, 8, 'kernel', 'k')];
  const layout = layoutLanes(spans);
  const geom = computeGeometry(layout, 1100, 100);
  const view = linearScale(0, 10, geom.plotX, geom.plotW);

  it('stacks lanes without gaps', () => {
    expect(geom.lanes).toHaveLength(2);
    expect(geom.lanes[1]!.y).toBe(geom.lanes[0]!.y + geom.lanes[0]!.h);
    expect(geom.height).toBeGreaterThan(geom.lanes[1]!.y + geom.lanes[1]!.h);
  });

  it('maps times linearly onto the plot', () => {
    const k = layout.placed.find((p) => p.span.name === 'k')!;
    const r = spanRect(k, geom, view, layout.t0);
    expect(r.x).toBeCloseTo(geom.plotX + 0.4 * geom.plotW);
    expect(r.w).toBeCloseTo(0.4 * geom.plotW);
  });

  it('finds the span under the pointer, and nothing between lanes', () => {
    const k = layout.placed.find((p) => p.span.name === 'k')!;
    const r = spanRect(k, geom, view, layout.t0);
    expect(hitTest(layout, geom, view, r.x + r.w / 2, r.y + r.h / 2)?.span.name).toBe('k');
    expect(hitTest(layout, geom, view, geom.plotX + 0.1 * geom.plotW, r.y + r.h / 2)).toBeUndefined();
    expect(hitTest(layout, geom, view, r.x + 2, 2)).toBeUndefined();
  });
});

describe('race links', () => {
  const spans = [
    { ...span('load', 1, 3, 'upload', 'upload ->w'), op: 7 },
    { ...span('host', 1, 2, 'fill', 'fill'), op: 7 },
    { ...span('compute', 2, 6, 'kernel', 'k'), op: 9 },
    { ...span('compute', 6, 7, 'download', 'd'), op: 11 },
  ];
  const layout = layoutLanes(spans);
  const geom = computeGeometry(layout, 1100, 100);
  const view = linearScale(0, 7, geom.plotX, geom.plotW);

  it("runs from the start of the first op's box to the start of the second's, on the stream lanes", () => {
    const [k] = linkSegments(layout, geom, view, [{ from: 7, to: 9, name: 'race on w [0, 64)' }]);
    const rect = (name: string) => spanRect(layout.placed.find((p) => p.span.name === name)!, geom, view, layout.t0);
    const up = rect('upload ->w'), kern = rect('k');
    expect(k).toEqual({ x0: up.x, y0: up.y + up.h / 2, x1: kern.x, y1: kern.y + kern.h / 2, name: 'race on w [0, 64)' });
    expect(k!.y0).toBeLessThan(k!.y1); // 'load' lane above 'compute'
  });

  it('leaves out links whose ops are not on the timeline', () => {
    expect(linkSegments(layout, geom, view, [{ from: 7, to: 42, name: 'x' }, { from: 1, to: 9, name: 'y' }])).toEqual([]);
  });
});

describe('compressedScale', () => {
  // Work at 0-10 ms and 200-210 ms, nothing in between.
  const layout = layoutLanes([span('s0', 0, 10), span('s1', 200, 205), span('host', 205, 210, 'host')]);

  it('squeezes a long idle stretch to a fixed width and keeps the work linear', () => {
    const sc = compressedScale(layout, 100, 1000, { gapPx: 50 });
    const gaps = sc.segments.filter((s) => s.gap);
    expect(gaps).toHaveLength(1);
    expect(gaps[0]!.w).toBe(50);
    expect(gaps[0]!.from).toBeGreaterThan(10);
    expect(gaps[0]!.to).toBeLessThan(200);
    // The two busy stretches get the same px per ms.
    const live = sc.segments.filter((s) => !s.gap);
    const rates = live.map((s) => s.w / (s.to - s.from));
    expect(rates[0]).toBeCloseTo(rates[1]!, 9);
    // Segments tile the plot.
    const last = sc.segments[sc.segments.length - 1]!;
    expect(sc.segments[0]!.x).toBe(100);
    expect(last.x + last.w).toBeCloseTo(1100, 6);
  });

  it('round-trips time and x', () => {
    const sc = compressedScale(layout, 100, 1000);
    for (const t of [0, 5, 10, 150, 200, 207.5, 210]) expect(xToTime(sc, timeToX(sc, t))).toBeCloseTo(t, 6);
    expect(timeToX(sc, 5)).toBeLessThan(timeToX(sc, 150));
    expect(timeToX(sc, 150)).toBeLessThan(timeToX(sc, 201));
  });

  it('is linear when there is no long idle stretch', () => {
    const dense = layoutLanes([span('s0', 0, 10), span('s0', 11, 20)]);
    expect(compressedScale(dense, 0, 500).segments).toHaveLength(1);
  });

  it('keeps ticks off the squeezed gaps', () => {
    const sc = compressedScale(layout, 100, 1000, { gapPx: 50 });
    const gap = sc.segments.find((s) => s.gap)!;
    const ticks = scaleTicks(sc);
    expect(ticks.length).toBeGreaterThan(3);
    expect(ticks.some((t) => t.value >= 200)).toBe(true);
    for (const t of ticks) expect(t.x < gap.x - 20 || t.x > gap.x + gap.w + 20).toBe(true);
  });
});

describe('table formatting', () => {
  it('formats speedup, percent and MiB', () => {
    expect(fmtSpeedup(1.234)).toBe('1.23×');
    expect(fmtSpeedup(undefined)).toBe('—');
    expect(fmtPercent(0.734)).toBe('73%');
    expect(fmtMiB(256 * 1024 * 1024)).toBe('256');
    expect(fmtMiB(1.5 * 1024 * 1024)).toBe('1.50');
  });
});
