/**
 * Reading a model's weights from a safetensors file (an 8-byte little-endian header length, a JSON
 * header naming each tensor's dtype, shape and byte range, then the raw tensors) without loading
 * it: the header says where each tensor is, and `stream.uploadFrom(file, dst, range)` moves it.
 */
import { calledAt, InvalidArgumentError, UploadSourceError } from './errors.js';
import { expectInteger, expectObject, expectString, showValue } from './validate.js';
import { isRandomAccess, type RandomAccessSource } from './upload-from.js';

/** Bytes per element of each safetensors dtype. */
const DTYPE_BYTES: Readonly<Record<string, number>> = {
  BOOL: 1, U8: 1, I8: 1, F8_E4M3: 1, F8_E5M2: 1, U16: 2, I16: 2, F16: 2, BF16: 2, U32: 4, I32: 4, F32: 4, U64: 8, I64: 8, F64: 8,
};
/** Bytes per element of `dtype`, or undefined for what is no safetensors dtype (an Object.prototype key included). */
const dtypeBytes = (dtype: unknown): number | undefined => (typeof dtype === 'string' && Object.hasOwn(DTYPE_BYTES, dtype) ? DTYPE_BYTES[dtype] : undefined);
/** Larger headers are refused (the reference implementation's limit). */
const MAX_HEADER = 100 << 20;

/** Where one tensor is: `offset` and `size` in bytes from the start of the file. */
export interface TensorInfo {
  name: string;
  dtype: string;
  shape: number[];
  offset: number;
  size: number;
}

export class SafetensorsFile {
  private constructor(
    /** The source it was opened from (its uploads read it). */
    readonly source: RandomAccessSource,
    /** Tensors in file order. */
    readonly tensors: readonly TensorInfo[],
    /** The header's `__metadata__` (strings). */
    readonly metadata: Readonly<Record<string, string>>,
  ) {}

  /** Reads and checks the header; a file that is not what it says throws UploadSourceError. */
  static async open(source: RandomAccessSource): Promise<SafetensorsFile> {
    const site = calledAt('safetensors', SafetensorsFile.open);
    if (!isRandomAccess(source)) throw new InvalidArgumentError(`Expected \`source\` to be a random-access source ({ size, read(into, position) }: openFile() in 'webgpu-streams/node', httpSource()), got ${showValue(source)}`, site);
    expectInteger('source.size', source.size, 0, Number.MAX_SAFE_INTEGER, site);
    const name = source.label ? `'${source.label}'` : 'the file';
    const bad = (why: string, cause?: unknown): UploadSourceError => new UploadSourceError(`${name} is not a valid safetensors file: ${why}`, cause === undefined ? site : { ...site, cause });
    if (source.size < 8) throw bad(`${source.size} bytes, shorter than the 8-byte header length`);
    const len8 = await readExactly(source, 0, 8, bad);
    const n = new DataView(len8.buffer, len8.byteOffset, 8).getBigUint64(0, true);
    if (n > BigInt(MAX_HEADER)) throw bad(`its header length ${n} exceeds the 100 MiB limit`);
    if (n > BigInt(source.size - 8)) throw bad(`its header length ${n} exceeds the ${source.size - 8} bytes after it`);
    const headerBytes = Number(n);
    let header: unknown;
    try {
      header = JSON.parse(new TextDecoder().decode(await readExactly(source, 8, headerBytes, bad)));
    } catch (e) {
      if (e instanceof UploadSourceError) throw e;
      throw bad('its header is not JSON', e);
    }
    if (typeof header !== 'object' || header === null || Array.isArray(header)) throw bad('its header is not a JSON object');
    const base = 8 + headerBytes;
    const dataBytes = source.size - base;
    const tensors: TensorInfo[] = [];
    let metadata: Record<string, string> = {};
    for (const [key, v] of Object.entries(header as Record<string, unknown>)) {
      if (key === '__metadata__') {
        const entries = v === null ? [] : typeof v === 'object' && !Array.isArray(v) ? Object.entries(v) : null;
        if (!entries || entries.some(([, x]) => typeof x !== 'string')) throw bad(`its __metadata__ is ${JSON.stringify(v)}, not an object of strings`);
        metadata = Object.fromEntries(entries) as Record<string, string>;
        continue;
      }
      const t = v as { dtype?: unknown; shape?: unknown; data_offsets?: unknown } | null;
      const bytes = dtypeBytes(t?.dtype);
      if (!bytes) throw bad(`tensor '${key}' has dtype ${JSON.stringify(t?.dtype)}; known: ${Object.keys(DTYPE_BYTES).join(', ')}`);
      const shape = t!.shape;
      if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) throw bad(`tensor '${key}' has shape ${JSON.stringify(shape)}`);
      const off = t!.data_offsets;
      if (!Array.isArray(off) || off.length !== 2 || !off.every((x) => Number.isSafeInteger(x) && x >= 0) || off[0] > off[1]) throw bad(`tensor '${key}' has data_offsets ${JSON.stringify(off)}`);
      const [b, e] = off as [number, number];
      const want = (shape as number[]).reduce((p, d) => p * d, bytes);
      if (e - b !== want) throw bad(`tensor '${key}' (${t!.dtype} [${(shape as number[]).join(', ')}]) needs ${want} bytes, its data_offsets give ${e - b}`);
      if (e > dataBytes) throw bad(`tensor '${key}' ends at byte ${base + e}, past the end of the file (${source.size} bytes): truncated?`);
      tensors.push({ name: key, dtype: t!.dtype as string, shape: shape as number[], offset: base + b, size: e - b });
    }
    // As the reference implementation: the tensors fill the data back to back, nothing shared, no gap.
    tensors.sort(inFileOrder);
    let at = base;
    for (let k = 0; k < tensors.length; k++) {
      const t = tensors[k]!;
      if (t.offset !== at) throw bad(`tensor '${t.name}' starts at byte ${t.offset}, not at ${at}${k ? ` where '${tensors[k - 1]!.name}' ends` : ', the start of the data'}: its data_offsets ${t.offset < at ? 'overlap another tensor' : 'leave a gap'}`);
      at += t.size;
    }
    if (at !== source.size) throw bad(`its tensors end at byte ${at}, not at the end of the file (${source.size} bytes)`);
    return new SafetensorsFile(source, tensors, metadata);
  }

  /** The tensor named `name`. */
  tensor(name: string): TensorInfo {
    const t = this.tensors.find((x) => x.name === name);
    if (!t) throw new InvalidArgumentError(`no tensor ${typeof name === 'string' ? `'${name}'` : showValue(name)} in ${this.source.label ?? 'the file'}; it has ${this.tensors.length}: ${this.tensors.slice(0, 5).map((x) => x.name).join(', ')}${this.tensors.length > 5 ? ', ...' : ''}`, calledAt('safetensors', SafetensorsFile.prototype.tensor));
    return t;
  }

  /** Layer `i`'s tensors (names with `layers.<i>.`, `h.<i>.` or `blocks.<i>.`), in file order; none past the last layer. */
  layer(i: number): TensorInfo[] {
    expectInteger('i', i, 0, Number.MAX_SAFE_INTEGER, calledAt('safetensors.layer', SafetensorsFile.prototype.layer));
    const re = new RegExp(`(^|\\.)(layers|layer|h|blocks)\\.${i}\\.`);
    return this.tensors.filter((t) => re.test(t.name));
  }

  /** The bytes `tensors` span, which must lie back to back in the file: one `uploadFrom` moves them all. */
  span(tensors: readonly TensorInfo[]): { offset: number; size: number } {
    if (!Array.isArray(tensors) || !tensors.every((t) => this.tensors.includes(t as TensorInfo))) throw new InvalidArgumentError(`Expected an array of this file's tensors (its tensors, layer(i) or a part of them), got ${showValue(tensors)}`, calledAt('safetensors.span', SafetensorsFile.prototype.span));
    if (tensors.length === 0) throw new InvalidArgumentError('no tensors to span (a layer() past the last layer has none)', calledAt('safetensors', SafetensorsFile.prototype.span));
    const sorted = [...tensors].sort(inFileOrder);
    for (let k = 1; k < sorted.length; k++) {
      if (sorted[k]!.offset !== sorted[k - 1]!.offset + sorted[k - 1]!.size) throw new InvalidArgumentError(`tensors '${sorted[k - 1]!.name}' and '${sorted[k]!.name}' are not back to back in the file; upload them one by one`, calledAt('safetensors', SafetensorsFile.prototype.span));
    }
    const last = sorted[sorted.length - 1]!;
    return { offset: sorted[0]!.offset, size: last.offset + last.size - sorted[0]!.offset };
  }
}

/** By offset; at one offset an empty tensor first (it ends where it starts). */
const inFileOrder = (a: TensorInfo, b: TensorInfo): number => a.offset - b.offset || a.size - b.size;

async function readExactly(src: RandomAccessSource, at: number, n: number, bad: (why: string, cause?: unknown) => Error): Promise<Uint8Array> {
  const out = new Uint8Array(n);
  let got = 0;
  while (got < n) {
    let k: number;
    try {
      k = await src.read(out.subarray(got), at + got);
    } catch (e) {
      throw bad(`reading bytes ${at + got}.. failed`, e);
    }
    if (!(k > 0)) throw bad(`it ended at byte ${at + got}`);
    if (k > n - got || !Number.isInteger(k)) throw bad(`read() returned ${k} for ${n - got} bytes asked for`);
    got += k;
  }
  return out;
}

/**
 * A safetensors header (the 8-byte length and the JSON, padded so the data starts 8-byte aligned)
 * for tensors laid out back to back in the given order; write each tensor's bytes after it.
 */
export function safetensorsHeader(tensors: readonly { name: string; dtype: string; shape: readonly number[] }[], metadata?: Record<string, string>): Uint8Array {
  const site = calledAt('safetensors', safetensorsHeader);
  if (!Array.isArray(tensors)) throw new InvalidArgumentError(`Expected \`tensors\` to be an array of { name, dtype, shape }, got ${showValue(tensors)}`, site);
  // A null-prototype header: a tensor named '__proto__' is a key like any other.
  const header: Record<string, unknown> = Object.create(null) as Record<string, unknown>;
  if (metadata !== undefined) {
    const m = expectObject('metadata', metadata, site);
    for (const [k, v] of Object.entries(m)) if (typeof v !== 'string') throw new InvalidArgumentError(`metadata '${k}' is ${showValue(v)}; safetensors metadata values are strings`, site);
    header.__metadata__ = m;
  }
  let at = 0;
  Array.from(tensors).forEach((t, i) => {
    const o = expectObject(`tensors[${i}]`, t ?? null, site);
    const name = expectString(`tensors[${i}].name`, o.name, site);
    if (name === '__metadata__' || Object.hasOwn(header, name)) throw new InvalidArgumentError(`tensors[${i}] is named '${name}', ${name === '__metadata__' ? "the header's metadata key" : 'as an earlier tensor is'}; names are unique`, site);
    const bytes = dtypeBytes(o.dtype);
    if (!bytes) throw new InvalidArgumentError(`unknown dtype ${showValue(o.dtype)} for '${name}'; known: ${Object.keys(DTYPE_BYTES).join(', ')}`, site);
    if (!Array.isArray(o.shape)) throw new InvalidArgumentError(`Expected the shape of '${name}' to be an array of dimensions, got ${showValue(o.shape)}`, site);
    const shape = (o.shape as unknown[]).map((d, j) => expectInteger(`shape[${j}] of '${name}'`, d, 0, Number.MAX_SAFE_INTEGER, site));
    const size = shape.reduce((p, d) => p * d, bytes);
    header[name] = { dtype: o.dtype, shape, data_offsets: [at, at + size] };
    at += size;
  });
  const json = new TextEncoder().encode(JSON.stringify(header));
  const pad = (8 - ((8 + json.byteLength) % 8)) % 8;
  const out = new Uint8Array(8 + json.byteLength + pad).fill(0x20);
  new DataView(out.buffer).setBigUint64(0, BigInt(json.byteLength + pad), true);
  out.set(json, 8);
  return out;
}

/** A whole safetensors file in memory (small files, tests): the header, then each tensor's bytes. */
export function encodeSafetensors(tensors: readonly { name: string; dtype: string; shape: readonly number[]; data: Uint8Array }[], metadata?: Record<string, string>): Uint8Array {
  const head = safetensorsHeader(tensors, metadata);
  for (const t of tensors) {
    if (!(t.data instanceof Uint8Array)) throw new InvalidArgumentError(`Expected the data of '${t.name}' to be a Uint8Array, got ${showValue(t.data)}`, calledAt('safetensors', encodeSafetensors));
    const want = t.shape.reduce((p, d) => p * d, dtypeBytes(t.dtype)!);
    if (t.data.byteLength !== want) throw new InvalidArgumentError(`'${t.name}' (${t.dtype} [${t.shape.join(', ')}]) needs ${want} bytes, got ${t.data.byteLength}`, calledAt('safetensors', encodeSafetensors));
  }
  const out = new Uint8Array(head.byteLength + tensors.reduce((n, t) => n + t.data.byteLength, 0));
  out.set(head);
  let pos = head.byteLength;
  for (const t of tensors) {
    out.set(t.data, pos);
    pos += t.data.byteLength;
  }
  return out;
}
