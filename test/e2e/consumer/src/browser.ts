/**
 * The pipeline in a page built by Vite: `?seed=N`; the outcome goes to `window.__consumer`.
 */
import { createContext } from 'webgpu-streams';
import { runPipeline, type PipelineResult } from './pipeline.js';

declare global {
  interface Window {
    __consumer?: PipelineResult & { adapter: string; error?: string };
  }
}

const seed = Number(new URLSearchParams(location.search).get('seed') ?? 1) >>> 0;

async function main(): Promise<PipelineResult & { adapter: string }> {
  const ctx = await createContext({ label: 'consumer' });
  try {
    return { ...(await runPipeline(ctx, seed)), adapter: ctx.adapterInfo.description };
  } finally {
    ctx.destroy();
  }
}

main().then(
  (result) => (window.__consumer = result),
  (e: unknown) => (window.__consumer = { ok: false, seed, checks: [], adapter: '', error: e instanceof Error ? (e.stack ?? e.message) : String(e) }),
).finally(() => {
  document.querySelector('#out')!.textContent = JSON.stringify(window.__consumer, null, 2);
});
