/**
 * Where the synthetic weights file of the "weights from storage" scenario is served, and which
 * file: no Node or DOM imports, so the page, the servers and the runners share it.
 */

/** The synthetic weights: `layers` f32 tensors of `elements` each (bench/weights-file.ts makes the bytes). */
export interface WeightsSpec {
  layers: number;
  elements: number;
  seed: number;
}

/** Its path on every server that runs the page. */
export const WEIGHTS_PATH = '/weights/synthetic.safetensors';

/** At most this many bytes (servers write the file to their temp directory). */
const MAX_BYTES = 2 ** 31;

/** `/weights/synthetic.safetensors?layers=16&elements=4194304&seed=7` */
export function weightsUrl(spec: WeightsSpec): string {
  return `${WEIGHTS_PATH}?layers=${spec.layers}&elements=${spec.elements}&seed=${spec.seed}`;
}

/** The spec a request asks for, or null when it is not a valid one (the server answers 400). */
export function parseWeightsSpec(query: URLSearchParams): WeightsSpec | null {
  const int = (k: string): number => (/^\d{1,10}$/.test(query.get(k) ?? '') ? Number(query.get(k)) : -1);
  const spec = { layers: int('layers'), elements: int('elements'), seed: int('seed') };
  if (spec.layers < 1 || spec.layers > 256 || spec.elements < 1 || spec.seed < 0 || spec.seed > 0xffffffff) return null;
  return spec.layers * spec.elements * 4 <= MAX_BYTES ? spec : null;
}
