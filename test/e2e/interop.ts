/** What the interop fixture pages (tfjs/, ort/) share: the output check and the report as `window.__e2e`. */

/** Checks a ReLU output against its reference (tolerance 1e-4 abs + rel) and that it is not mostly zeros. */
export function checkRelu(what: string, got: Float32Array, want: ArrayLike<number>): string[] {
  let bad = -1;
  for (let i = 0; i < want.length; i++) {
    if (!(Math.abs(got[i]! - want[i]!) <= 1e-4 + 1e-4 * Math.abs(want[i]!))) {
      bad = i;
      break;
    }
  }
  const nonzero = got.filter((x) => x !== 0).length;
  return [
    bad < 0 ? `ok: ${what}` : `FAIL: ${what}: element ${bad}: ${got[bad]} != ${want[bad]}`,
    nonzero > want.length / 4 ? `ok: ${nonzero} of ${want.length} outputs nonzero` : `FAIL: only ${nonzero} of ${want.length} outputs nonzero`,
  ];
}

/** Runs the page's check and exposes its outcome (or what it threw) as `window.__e2e`. */
export function report(run: (seed: number) => Promise<string[]>, seed: number): void {
  const w = window as unknown as { __e2e?: unknown };
  run(seed).then(
    (checks) => {
      const failed = checks.filter((c) => c.startsWith('FAIL'));
      w.__e2e = { done: true, ok: failed.length === 0, detail: `${failed.length ? failed.join('; ') : `${checks.length} checks passed`} (seed ${seed})`, checks };
    },
    (e: unknown) => void (w.__e2e = { done: true, ok: false, detail: e instanceof Error ? `${e.name}: ${e.message}\n${e.stack}` : String(e), checks: [] }),
  );
}
