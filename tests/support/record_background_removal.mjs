// References of the rmbg / rmbg-logits / modnet fixtures (tests/test_pipelines_background_removal.py):
// transformers.js' own background-removal pipeline (BackgroundRemovalPipeline over
// ImageSegmentationPipeline, onnxruntime-node, sharp) on the fixture's ONNX file and
// references/image_*.png, written by tests/support/families_background_removal.py.
//
// Outputs, per fixture: references/cutout_<image>.png (the RGBA RawImage the pipeline returns,
// saved losslessly; its alpha channel is the mask) and references/transformers_js.json (sizes,
// channels, sums and md5 of the raw bytes, versions). And rmbg/references/sharp_resize.json:
// RawImage.resize (sharp's affine bilinear, what the pipeline resizes with in Node) on seeded
// noise images of 1 and 3 channels, up and down, for src/preprocess/image_resize_sharp.py.
//
// Setup (outside the repo; onnxruntime-node's install script fetches CUDA binaries from nuget,
// which is unreachable and not needed: the CPU binaries ship in the npm package):
//
//     mkdir -p /work/venvs/tjs && cd /work/venvs/tjs
//     npm install --ignore-scripts @huggingface/transformers@4.3.2
//
// Run (from the repository root):
//
//     TRANSFORMERS_JS=/work/venvs/tjs node tests/support/record_background_removal.mjs

import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const fixtures = path.resolve(here, '..', 'fixtures');
const install = process.env.TRANSFORMERS_JS ?? '/work/venvs/tjs';  // the folder npm installed into
const modules = path.join(install, 'node_modules');
const packageOf = (name) => JSON.parse(readFileSync(path.join(modules, name, 'package.json'), 'utf8'));
const entry = path.join(modules, '@huggingface', 'transformers', 'dist', 'transformers.node.mjs');
const { pipeline, env, RawImage } = await import(pathToFileURL(entry).href);
const version = packageOf('@huggingface/transformers').version;
const ortVersion = packageOf('onnxruntime-node').version;

env.allowRemoteModels = false;
env.localModelPath = fixtures + path.sep;

function summary(image) {
    const data = image.data;
    let sum = 0;
    for (const v of data) sum += v;
    const alpha = [];
    for (let i = image.channels - 1; i < data.length; i += image.channels) alpha.push(data[i]);
    return {
        width: image.width, height: image.height, channels: image.channels, sum,
        md5: createHash('md5').update(Buffer.from(data.buffer, data.byteOffset, data.byteLength)).digest('hex'),
        alpha_min: Math.min(...alpha), alpha_max: Math.max(...alpha), alpha_levels: new Set(alpha).size,
    };
}

for (const name of ['rmbg', 'rmbg-logits', 'modnet']) {
    const refs = path.join(fixtures, name, 'references');
    const pipe = await pipeline('background-removal', name, { dtype: 'fp32', device: 'cpu' });
    const images = readdirSync(refs).filter((f) => /^image_\d+\.png$/.test(f)).sort();
    const outputs = [];
    for (const file of images) {
        const cutout = await pipe(path.join(refs, file));  // one image in, one RawImage out
        const saved = `cutout_${file}`;
        await cutout.save(path.join(refs, saved));
        outputs.push({ input: `references/${file}`, cutout: `references/${saved}`, ...summary(cutout) });
        console.log(name, file, JSON.stringify(outputs.at(-1)));
    }
    const record = {
        task: 'background-removal',
        recorded_with: { '@huggingface/transformers': version, 'onnxruntime-node': ortVersion,
                         node: process.version, options: { dtype: 'fp32', device: 'cpu' } },
        outputs,
    };
    writeFileSync(path.join(refs, 'transformers_js.json'), JSON.stringify(record, null, 1) + '\n');
}

// RawImage.resize cases: noise from a seeded linear congruential generator (the same in any run)
let state = 12345;
const cases = [];
for (const [W, H, C] of [[17, 13, 1], [31, 23, 3]]) {
    const data = new Uint8ClampedArray(W * H * C);
    for (let i = 0; i < data.length; i++) {
        state = (state * 1103515245 + 12345) % 2147483648;
        data[i] = (state >> 8) % 256;
    }
    for (const [w, h] of [[34, 26], [40, 9], [8, 6], [W, 30], [12, 19], [W - 2, H - 2]]) {
        const out = await new RawImage(data, W, H, C).resize(w, h, { resample: 2 });
        cases.push({ source: { width: W, height: H, channels: C, data: Array.from(data) },
                     width: out.width, height: out.height, channels: out.channels, data: Array.from(out.data) });
    }
}
writeFileSync(path.join(fixtures, 'rmbg', 'references', 'sharp_resize.json'),
              JSON.stringify({ how: 'RawImage.resize(width, height, {resample: 2})', cases }) + '\n');
