/**
 * A shared device: TensorFlow.js's WebGPU backend runs on the GPUDevice of a webgpu-streams context.
 * Inputs go up through a stream into GPUBuffers that become tfjs tensors with no host round trip;
 * a tfjs op runs; its output buffer (`dataToGPU`) comes back through a stream download. The result
 * is checked against tfjs's CPU backend on the same seeded random inputs: `window.__e2e`.
 */
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import { WebGPUBackend } from '@tensorflow/tfjs-backend-webgpu';
import { createContext } from '../../../src/index';
import { randomSeed, rng } from '../../../bench/reference';
import { checkRelu, report } from '../interop';

async function run(seed: number): Promise<string[]> {
  const r = rng(seed);
  const checks: string[] = [];
  const ctx = await createContext({ label: 'tfjs', sanitize: 'throw' });
  // tfjs's WebGPU kernels are registered for the backend named 'webgpu': its factory (which would
  // open a device of its own) is replaced by one that takes the context's.
  tf.removeBackend('webgpu');
  tf.registerBackend('webgpu', () => new WebGPUBackend(ctx.device));
  if (!(await tf.setBackend('webgpu'))) return ['FAIL: tfjs could not start its WebGPU backend on the context device'];
  const [m, k, n] = [48, 80, 32];
  const a = r.f32Array(m * k, -1, 1);
  const b = r.f32Array(k * n, -1, 1);
  // Up through a stream, into buffers tfjs takes as they are (GPU data, no host copy).
  const s = ctx.createStream({ label: 'io' });
  const da = ctx.alloc(a.byteLength, { label: 'a' });
  const db = ctx.alloc(b.byteLength, { label: 'b' });
  s.upload(a, da);
  s.upload(b, db);
  await s.synchronize(); // in the queue before tfjs submits anything that reads them
  const ta = tf.tensor({ buffer: da.buffer }, [m, k], 'float32');
  const tb = tf.tensor({ buffer: db.buffer }, [k, n], 'float32');
  const tc = tf.relu(tf.matMul(ta, tb));
  const gpu = tc.dataToGPU();
  // Back through a stream: tfjs's output buffer is a raw GPUBuffer to the library.
  const got = new Float32Array(m * n);
  s.download(gpu.buffer!, got, { size: got.byteLength });
  await s.synchronize();
  gpu.tensorRef.dispose();
  // tfjs's CPU backend on the same inputs.
  await tf.setBackend('cpu');
  const want = (await tf.relu(tf.matMul(tf.tensor(a, [m, k]), tf.tensor(b, [k, n]))).data()) as Float32Array;
  checks.push(...checkRelu(`relu(matMul) ${m}x${k} @ ${k}x${n} on the shared device == tfjs CPU backend`, got, want));
  ctx.destroy();
  return checks;
}

report(run, Number(new URLSearchParams(location.search).get('seed')) || randomSeed());
