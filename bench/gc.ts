/**
 * Garbage collections seen by the runtime, for diagnostics: Node reports each one as a `gc`
 * performance entry; browsers do not (there {@link GcLog.available} is false and counts are null).
 *
 * Why it matters here: V8 counts every mapped range (`getMappedRange`) as external memory while it
 * is attached, and starts a major GC when external memory grows 64 MiB above its low point since
 * the last one. A pipeline that holds many large mapped ranges at once pays for it in GCs.
 */
export interface GcCounts {
  /** Mark-compact (full) collections. */
  major: number;
  /** Scavenges. */
  minor: number;
  /** Total pause, ms. */
  ms: number;
}

export class GcLog {
  readonly available: boolean;
  readonly #entries: { start: number; duration: number; major: boolean }[] = [];
  #observer: PerformanceObserver | null = null;

  constructor() {
    const PO = (globalThis as { PerformanceObserver?: typeof PerformanceObserver }).PerformanceObserver;
    this.available = !!PO && (PO.supportedEntryTypes ?? []).includes('gc');
    if (!this.available) return;
    this.#observer = new PO!((list) => {
      for (const e of list.getEntries()) {
        // Node's perf_hooks constants: kind 1 minor (scavenge), 4 major (mark-compact), 8 incremental marking, 16 weak callbacks.
        const kind = (e as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind ?? 0;
        if (kind !== 1 && kind !== 4) continue;
        this.#entries.push({ start: e.startTime, duration: e.duration, major: kind === 4 });
      }
    });
    this.#observer.observe({ entryTypes: ['gc'] });
  }

  /** Collections that started in [t0, t1] (performance.now() ms); null where not reported. Entries arrive a task late: await a macrotask before asking. */
  between(t0: number, t1: number): GcCounts | null {
    if (!this.available) return null;
    const c: GcCounts = { major: 0, minor: 0, ms: 0 };
    for (const e of this.#entries) {
      if (e.start < t0 || e.start > t1) continue;
      if (e.major) c.major++;
      else c.minor++;
      c.ms += e.duration;
    }
    return c;
  }

  /**
   * The collections of each span, in words: `1/0/2 major + 0/0/0 minor (1.6/0.0/3.1 ms)` (one
   * figure per span); null where not reported. Await {@link GcLog.settle} first.
   */
  describe(spans: readonly (readonly [number, number])[]): string | null {
    const per = spans.map(([a, b]) => this.between(a, b)).filter((x): x is GcCounts => x !== null);
    if (!per.length) return null;
    const list = (f: (c: GcCounts) => string): string => per.map(f).join('/');
    return `${list((c) => String(c.major))} major + ${list((c) => String(c.minor))} minor (${list((c) => c.ms.toFixed(1))} ms)`;
  }

  /** Lets pending entries arrive (they are delivered on a later task). */
  static settle(): Promise<void> {
    return new Promise((r) => setTimeout(r, 0));
  }

  stop(): void {
    this.#observer?.disconnect();
    this.#observer = null;
  }
}
