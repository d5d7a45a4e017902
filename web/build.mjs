// Builds the viewer into dist/: one esbuild bundle of src/main.js, the DICOM decode worker beside it (the loader
// starts it with new URL('./decodeImageFrameWorker.js', import.meta.url)), the codecs' wasm under dist/wasm/
// (the loader's wasmBasePath) and the static page. Writes dist/build-info.json with the sizes and the time.
import * as esbuild from 'esbuild';
import { copyFileSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const out = process.argv[2] || 'dist';
const t0 = Date.now();
rmSync(out, { recursive: true, force: true });
mkdirSync(join(out, 'assets'), { recursive: true });
mkdirSync(join(out, 'wasm'), { recursive: true });
const result = await esbuild.build({
  entryPoints: {
    app: 'src/main.js',
    decodeImageFrameWorker: 'node_modules/@cornerstonejs/dicom-image-loader/dist/esm/decodeImageFrameWorker.js',
  },
  outdir: join(out, 'assets'), bundle: true, format: 'esm', splitting: false, minify: true, sourcemap: false,
  target: 'chrome120', external: ['fs', 'path', 'crypto'], loader: { '.wasm': 'file', '.json': 'json' },
  metafile: true, logLevel: 'warning', legalComments: 'none',
});
const codecs = 'node_modules/@cornerstonejs';
for (const pkg of readdirSync(codecs).filter((p) => p.startsWith('codec-'))) {
  for (const f of readdirSync(join(codecs, pkg, 'dist')).filter((f) => f.endsWith('.wasm') && !f.includes('encode'))) {
    copyFileSync(join(codecs, pkg, 'dist', f), join(out, 'wasm', f));
  }
}
copyFileSync('src/index.html', join(out, 'index.html'));
copyFileSync('src/app.css', join(out, 'assets', 'app.css'));
const sizes = Object.fromEntries(Object.entries(result.metafile.outputs).map(([k, v]) => [k, v.bytes]));
const total = (dir) => readdirSync(dir).reduce((s, f) => s + (statSync(join(dir, f)).isDirectory() ? total(join(dir, f)) : statSync(join(dir, f)).size), 0);
writeFileSync(join(out, 'build-info.json'), JSON.stringify({ seconds: (Date.now() - t0) / 1000, bytes: total(out), outputs: sizes }, null, 1));
console.log(`umind viewer: built ${out} in ${((Date.now() - t0) / 1000).toFixed(1)} s, ${(total(out) / 1e6).toFixed(1)} MB`);
