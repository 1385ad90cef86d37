/**
 * The pipeline in Node on Dawn (`webgpu`, SwiftShader without a GPU). Seed from argv; prints the
 * result as JSON on its last line and exits 1 when a check failed.
 */
import { createNodeContext } from 'webgpu-streams/node';
import { runPipeline } from './pipeline.js';

const seed = Number(process.argv[2] ?? 1) >>> 0;
const ctx = await createNodeContext({ label: 'consumer' });
try {
  const result = await runPipeline(ctx, seed);
  console.log(JSON.stringify({ ...result, adapter: ctx.adapterInfo.description }));
  if (!result.ok) process.exitCode = 1;
} finally {
  ctx.destroy();
}
