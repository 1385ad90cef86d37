/**
 * Results tables: one section per scenario with its variants, verification and verdicts. The
 * number formatting is pure; `renderScenario` builds plain DOM.
 */
import type { DeviceReport, ScenarioResult, Variant } from '../schema';
import { formatDuration } from './timeline';
import { TABLE_FOOTER } from '../report';

const DASH = '—';

export function fmtMs(ms: number | null | undefined): string {
  return ms === null || ms === undefined || !Number.isFinite(ms) ? DASH : formatDuration(ms);
}

export function fmtSpeedup(x: number | undefined, missing = DASH): string {
  if (x === undefined || !Number.isFinite(x)) return missing;
  return `${x >= 10 ? x.toFixed(1) : x.toFixed(2)}×`;
}

export function fmtPercent(x: number | undefined, missing = DASH): string {
  if (x === undefined || !Number.isFinite(x)) return missing;
  return `${Math.round(x * 100)}%`;
}

export function fmtMiB(bytes: number | undefined): string {
  if (bytes === undefined || !Number.isFinite(bytes)) return DASH;
  const mib = bytes / (1 << 20);
  return mib >= 100 ? mib.toFixed(0) : mib >= 10 ? mib.toFixed(1) : mib.toFixed(2);
}

export function fmtGbps(x: number | undefined): string {
  if (x === undefined) return DASH;
  if (!Number.isFinite(x)) return 'n/a';
  return x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2);
}

export function fmtExtra(extra: Variant['extra']): string {
  if (!extra) return '';
  return Object.entries(extra)
    .map(([k, v]) => `${k}=${typeof v === 'number' ? +v.toPrecision(4) : String(v)}`)
    .join(', ');
}

/** A short name for the device kind: "real GPU" or "software (SwiftShader)". */
export function deviceKind(d: Pick<DeviceReport, 'software' | 'vendor' | 'description' | 'architecture'>): string {
  if (!d.software) return 'real GPU';
  const text = `${d.vendor} ${d.architecture} ${d.description}`.toLowerCase();
  return text.includes('swiftshader') || d.vendor.toLowerCase() === 'google'
    ? 'software (SwiftShader)'
    : 'software rasterizer';
}

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: { class?: string; title?: string; text?: string } = {},
  ...children: (Node | string)[]
): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (attrs.class) e.className = attrs.class;
  if (attrs.title) e.title = attrs.title;
  if (attrs.text !== undefined) e.textContent = attrs.text;
  e.append(...children);
  return e;
}

function num(text: string, cls = ''): HTMLTableCellElement {
  return el('td', { class: `num ${cls}`.trim(), text });
}

const COLUMNS: { label: string; title?: string; class?: string }[] = [
  { label: 'variant' },
  { label: 'median ms', title: 'median of the repeats (min–max), warm-up excluded' },
  { label: 'ideal', title: 'what perfect overlap would give, from the measured parts (ms)' },
  { label: 'speedup', title: 'baseline time / this time' },
  { label: 'eff.', title: 'efficiency: (t_base − t) / (t_base − t_ideal), the share of the possible gain achieved' },
  { label: 'mem MiB', title: 'peak device memory held by this variant' },
  { label: 'GB/s', title: 'throughput, 1e9 bytes per second' },
  { label: 'verified', title: 'checked against a CPU reference (hover the mark for what was checked)', class: 'center' },
];

/**
 * Text that may carry an error's stack: the first line shown, the rest folded away in a
 * `<details>` (a failed scenario's mismatch and verdict hold the full message and call site).
 */
export function longText(text: string, prefix = ''): HTMLElement {
  const nl = text.indexOf('\n');
  if (nl < 0) return el('span', { class: 'long-text', text: prefix + text });
  const details = el('details', { class: 'long-text' }, el('summary', { text: prefix + text.slice(0, nl) }));
  details.append(el('pre', { text: text.slice(nl + 1).replace(/^\s*\n/, '') }));
  return details;
}

/** First line of a possibly multi-line message. */
export function firstLine(text: string): string {
  const nl = text.indexOf('\n');
  return nl < 0 ? text : text.slice(0, nl);
}

/** One scenario's section: heading, parameters, table, verdicts. */
export function renderScenario(r: ScenarioResult, description?: string): HTMLElement {
  const section = el('section', { class: 'scenario' });
  section.id = `scenario-${r.id}`;
  section.dataset.id = r.id;

  const status = r.verification.ok
    ? el('span', { class: 'badge ok', text: 'verified' })
    : el('span', { class: 'badge bad', text: 'check failed' });
  const head = el(
    'div',
    { class: 'scenario-head' },
    el('h3', { text: r.title }),
    status,
    el('span', { class: 'wall', text: `${fmtMs(r.wallMs)} ms wall` }),
  );
  section.append(head);
  if (description) section.append(el('p', { class: 'desc', text: description }));

  const params = Object.entries(r.params);
  if (params.length) {
    const p = el('p', { class: 'params' });
    for (const [k, v] of params) p.append(el('code', { text: `${k}=${String(v)}` }), ' ');
    section.append(p);
  }

  const showExtra = r.variants.some((v) => v.extra && Object.keys(v.extra).length);
  const table = el('table', { class: 'results' });
  const headRow = el('tr');
  for (const c of COLUMNS) {
    headRow.append(el('th', { text: c.label, ...(c.title ? { title: c.title } : {}), ...(c.class ? { class: c.class } : {}) }));
  }
  if (showExtra) headRow.append(el('th', { text: 'notes', class: 'notes' }));
  table.append(el('thead', {}, headRow));

  const body = el('tbody');
  const verifyTitle = r.verification.detail + (r.verification.mismatch ? `\nfirst mismatch: ${r.verification.mismatch}` : '');
  r.variants.forEach((v, i) => {
    const tr = el('tr');
    const isBaseline = r.variants.some((o) => o.baseline === v.name) && !v.baseline;
    const name = el('td', { class: 'variant' }, el('span', { text: v.name }));
    if (isBaseline) name.append(el('span', { class: 'tag', text: 'baseline' }));
    else if (v.baseline) name.title = `compared to ${v.baseline}`;
    tr.append(name);

    const med = el('td', { class: 'num' }, el('span', { class: 'median', text: fmtMs(v.time.median) }));
    if (Number.isFinite(v.time.min) && Number.isFinite(v.time.max) && v.time.samples.length > 1) {
      med.append(el('span', { class: 'range', text: ` (${fmtMs(v.time.min)}–${fmtMs(v.time.max)})` }));
    }
    med.title = `${v.time.samples.length} samples: ${v.time.samples.map((s) => fmtMs(s)).join(', ')}`;
    tr.append(med);
    tr.append(num(fmtMs(v.ideal)));
    const sp = v.speedup;
    tr.append(num(fmtSpeedup(sp, v.baseline ? 'n/a' : DASH), sp === undefined ? '' : sp >= 1.05 ? 'good' : sp <= 0.95 ? 'worse' : ''));
    tr.append(num(fmtPercent(v.efficiency, v.baseline && v.ideal !== null ? 'n/a' : DASH)));
    tr.append(num(fmtMiB(v.memoryBytes)));
    tr.append(num(fmtGbps(v.gbps)));
    if (i === 0) {
      const cell = el('td', {
        class: `verified ${r.verification.ok ? 'ok' : 'bad'}`,
        text: r.verification.ok ? '✓' : '✗',
        title: verifyTitle,
      });
      cell.rowSpan = r.variants.length;
      tr.append(cell);
    }
    if (showExtra) tr.append(el('td', { class: 'notes', text: fmtExtra(v.extra) }));
    body.append(tr);
  });
  if (!r.variants.length) {
    const tr = el('tr');
    const td = el('td', { class: 'empty', text: 'no variants measured' });
    td.colSpan = COLUMNS.length + (showExtra ? 1 : 0);
    tr.append(td);
    body.append(tr);
  }
  table.append(body);
  section.append(el('div', { class: 'table-wrap' }, table), el('p', { class: 'footer', text: TABLE_FOOTER }));

  const check = el(
    'div',
    { class: `verification ${r.verification.ok ? 'ok' : 'bad'}` },
    el('strong', { text: r.verification.ok ? '✓ verified: ' : '✗ failed: ' }),
    r.verification.detail,
  );
  if (r.verification.mismatch) check.append(longText(r.verification.mismatch));
  section.append(check);

  if (r.verdicts.length) {
    const ul = el('ul', { class: 'verdicts' });
    for (const v of r.verdicts) ul.append(el('li', {}, longText(v)));
    section.append(ul);
  }
  return section;
}
