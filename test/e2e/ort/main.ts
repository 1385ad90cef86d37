/**
 * A shared device: onnxruntime-web's WebGPU execution provider on the GPUDevice of a webgpu-streams
 * context, running a tiny model made here (Y = Relu(MatMul(A, B)), ONNX protobuf written by hand).
 * A and B are GPU-buffer tensors a stream filled; Y stays on the GPU (`preferredOutputLocation`) and
 * comes back through a stream download, checked on the CPU: `window.__e2e`.
 */
import * as ort from 'onnxruntime-web/webgpu';
import { createContext } from '../../../src/index';
import { randomSeed, rng } from '../../../bench/reference';
import { checkRelu, report } from '../interop';

/** Protobuf: a varint, a field key, and a length-delimited field. */
const varint = (n: number): number[] => {
  const out: number[] = [];
  for (; n > 127; n = Math.floor(n / 128)) out.push((n % 128) | 128);
  out.push(n);
  return out;
};
const field = (no: number, body: number[] | string): number[] => {
  const bytes = typeof body === 'string' ? [...new TextEncoder().encode(body)] : body;
  return [...varint((no << 3) | 2), ...varint(bytes.length), ...bytes];
};
const int = (no: number, v: number): number[] => [...varint(no << 3), ...varint(v)];

/** ModelProto for Y = Relu(MatMul(A, B)), A: m x k, B: k x n, float32, opset 17. */
function model(m: number, k: number, n: number): Uint8Array {
  const tensor = (name: string, dims: number[]): number[] =>
    field(1, name).concat(field(2, field(1, int(1, 1).concat(field(2, dims.flatMap((d) => field(1, int(1, d)))))))); // ValueInfo{name, TypeProto{tensor_type{elem_type FLOAT, shape}}}
  const nodes = field(1, [...field(1, 'A'), ...field(1, 'B'), ...field(2, 'AB'), ...field(4, 'MatMul')]).concat(field(1, [...field(1, 'AB'), ...field(2, 'Y'), ...field(4, 'Relu')]));
  const graph = [...nodes, ...field(2, 'g'), ...field(11, tensor('A', [m, k])), ...field(11, tensor('B', [k, n])), ...field(12, tensor('Y', [m, n]))];
  return new Uint8Array([...int(1, 8), ...field(7, graph), ...field(8, [...field(1, ''), ...int(2, 17)])]);
}

async function run(seed: number): Promise<string[]> {
  const r = rng(seed);
  const checks: string[] = [];
  const ctx = await createContext({ label: 'ort', sanitize: 'throw' });
  ort.env.wasm.numThreads = 1;
  const [m, k, n] = [24, 40, 16];
  const a = r.f32Array(m * k, -1, 1);
  const b = r.f32Array(k * n, -1, 1);
  const session = await ort.InferenceSession.create(model(m, k, n), { executionProviders: [{ name: 'webgpu', device: ctx.device }], preferredOutputLocation: 'gpu-buffer' }); // the context's device
  const s = ctx.createStream({ label: 'io' });
  const da = ctx.alloc(a.byteLength, { label: 'a' });
  const db = ctx.alloc(b.byteLength, { label: 'b' });
  s.upload(a, da);
  s.upload(b, db);
  await s.synchronize();
  const ta = ort.Tensor.fromGpuBuffer(da.buffer, { dataType: 'float32', dims: [m, k] });
  const tb = ort.Tensor.fromGpuBuffer(db.buffer, { dataType: 'float32', dims: [k, n] });
  const out = (await session.run({ A: ta, B: tb })).Y!;
  const got = new Float32Array(m * n);
  s.download(out.gpuBuffer as GPUBuffer, got, { size: got.byteLength });
  await s.synchronize();
  const want = new Float32Array(m * n);
  for (let i = 0; i < m; i++) for (let j = 0; j < n; j++) {
    let acc = 0;
    for (let t = 0; t < k; t++) acc += a[i * k + t]! * b[t * n + j]!;
    want[i * n + j] = Math.max(0, acc);
  }
  checks.push(...checkRelu(`Relu(MatMul) ${m}x${k} @ ${k}x${n} by onnxruntime-web (WebGPU EP) on the shared device == CPU`, got, want));
  out.dispose();
  await session.release();
  ctx.destroy();
  return checks;
}

report(run, Number(new URLSearchParams(location.search).get('seed')) || randomSeed());
