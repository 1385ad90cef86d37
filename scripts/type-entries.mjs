// After `tsc -p tsconfig.build.json`: TypeScript 6+ ships WebGPU's types in its DOM lib, where
// @webgpu/types would clash; TypeScript 5 needs them. So dist/lib gets TS 5 entries that reference
// @webgpu/types (package.json sends TS < 6 to them), and index.d.ts references the Disposable lib
// so `Symbol.dispose` needs nothing from the consumer.
import { readFileSync, writeFileSync } from 'node:fs';

const gpu = "/// <reference types='@webgpu/types' />\n";
const disposable = "/// <reference lib='esnext.disposable' />\n";
for (const entry of ['index', 'node']) writeFileSync(`dist/lib/${entry}-ts5.d.ts`, `${gpu}export * from './${entry}.js';\n`);
const index = 'dist/lib/index.d.ts';
const text = readFileSync(index, 'utf8');
if (!text.startsWith(disposable)) writeFileSync(index, disposable + text);
