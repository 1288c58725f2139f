// Builds the console into dist/public/console: one script, one stylesheet, one page. Run by `npm run build`.
import { copyFileSync, mkdirSync, rmSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const here = (name) => fileURLToPath(new URL(name, import.meta.url));
const out = fileURLToPath(new URL('../dist/public/console/', import.meta.url));

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
await build({
  entryPoints: { app: here('src/main.tsx'), style: here('src/style.css') },
  outdir: out,
  bundle: true,
  minify: true,
  format: 'esm',
  target: 'es2022',
  jsx: 'automatic',
  jsxImportSource: 'preact',
  legalComments: 'none',
  logLevel: 'warning',
});
copyFileSync(here('index.html'), `${out}index.html`);
const kb = (name) => (statSync(`${out}${name}`).size / 1024).toFixed(1);
console.log(`console: app.js ${kb('app.js')} KiB, style.css ${kb('style.css')} KiB`);
