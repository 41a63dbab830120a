"""Records transformers' Whisper ASR decoding (``WhisperTokenizerFast._decode_asr``, and
``decode``) on synthetic model outputs, for tests/test_whisper_text.py.

    /root/.cache/transmuter-tests/venv-export/bin/python tests/support/record_whisper_text.py

Cases (seeded): one chunk of plain text; timestamped segments (pairs, single endings, a last
segment left open, a repeated timestamp, long-form restarts from <|0.00|>); previous-text prompts;
the pipeline's chunking (chunk_iter's strides, in seconds as its postprocess hands them over)
with the model's disagreements in the overlaps; language switches; empty chunks; word
timestamps (token_timestamps, float32 as the DTW makes them); random token soup. Each runs under
several (return_timestamps, return_language) options. Tokenizers: the whisper fixture, and
../shared/hub-files' Xenova/whisper-tiny.en and openai/whisper-base when present.

Writes tests/fixtures/whisper/references/decode_asr.json (transformers 4.57.6).
"""

import json
import pathlib

import numpy as np
import transformers
from transformers.models.whisper.tokenization_whisper import _decode_asr

ROOT = pathlib.Path(__file__).resolve().parents[2]
HUB = ROOT.parent / "shared" / "hub-files"
TOKENIZERS = {"fixture": ROOT / "tests" / "fixtures" / "whisper",
              "Xenova/whisper-tiny.en": HUB / "Xenova" / "whisper-tiny.en",
              "openai/whisper-base": HUB / "openai" / "whisper-base"}
OUT = ROOT / "tests" / "fixtures" / "whisper" / "references" / "decode_asr.json"
TEXTS = {"en": [" Hello world, this is a test.", " The quick brown fox jumps over the lazy dog.",
                " \"Quoted\" (paren) it's ok!", " A tiny cat on the sea, and a dog.",
                " Speech to text: 3.5 seconds... done?", " Don't stop - keep going!",
                " Hello. Hello? Hello!", " (Well) - 'yes', he said."],
         "zh": [" 你好世界。", "我们今天去公园，好吗？"],
         "ja": [" こんにちは、世界", "今日は「晴れ」です。"],
         "fr": [" Bonjour, ça va? Très bien!"], "de": [" Guten Tag, wie geht's?"]}
SR = 16000
OPTIONS = [(None, None), (True, None), (None, True), (True, True), (False, None)]
WORD_OPTIONS = [("word", None), ("word", True)]


class Case:
    """Token-building helpers over one tokenizer."""

    def __init__(self, tok, rng):
        self.tok, self.rng = tok, rng
        ids = tok.convert_tokens_to_ids
        self.sot, self.eot = ids("<|startoftranscript|>"), tok.eos_token_id
        self.notimestamps, self.prev = ids("<|notimestamps|>"), ids("<|startofprev|>")
        self.transcribe, self.translate = ids("<|transcribe|>"), ids("<|translate|>")
        self.tb = self.notimestamps + 1
        self.lang = {code: ids(f"<|{code}|>") for code in TEXTS}
        self.specials = sorted(set(tok.all_special_ids) | {self.sot, self.eot, self.prev,
                                                           self.notimestamps})

    def words(self, code, n_texts=2):
        """Words (lists of token ids) of a few random texts of language ``code``."""
        texts = self.rng.choice(TEXTS[code], size=n_texts)
        out = []
        for text in texts:
            ids = self.tok.encode(str(text), add_special_tokens=False)
            # a "word": a run of tokens starting where the decoded token starts with a space
            for i in ids:
                piece = self.tok.convert_ids_to_tokens(i)
                if not out or piece.startswith("\u0120") or self.rng.random() < 0.15:
                    out.append([i])
                else:
                    out[-1].append(i)
        return out

    def ts(self, seconds, precision=0.02):
        return self.tb + int(round(max(seconds, 0.0) / precision))

    def prefix(self, code, timestamps):
        head = [self.sot, self.lang[code], self.transcribe]
        return head if timestamps else head + [self.notimestamps]

    def segments(self, words, start=0.0, style="pair", open_last=False, precision=0.02):
        """Timestamped segments over ``words``: 1-4 words each, times going up from ``start``."""
        out, t, k = [], start, 0
        while k < len(words):
            n = int(self.rng.integers(1, 5))
            body = [i for w in words[k:k + n] for i in w]
            k += n
            end = t + 0.1 + 0.3 * n + float(self.rng.integers(0, 10)) * precision
            last = k >= len(words)
            if style == "pair" or not out:
                out += [self.ts(t, precision)] + body
            else:  # single ending: the previous end is this segment's start
                out += body
            if not (last and open_last):
                out.append(self.ts(end, precision))
                if style == "pair" and not last:
                    out.append(self.ts(end, precision))  # the next segment's start
            t = end
        return out


def token_timestamps(n, rng, start=0.0, disorder=False):
    """float32 [1, n]: DTW-like times (multiples of 0.02 s, non-decreasing, from ``start``)."""
    steps = rng.integers(0, 8, n) * 0.02
    times = start + np.cumsum(steps)
    if disorder and n > 3:
        times[rng.integers(1, n - 1)] -= 0.5
    return times.astype(np.float32)[None, :]


def single_chunk_cases(c, rng):
    cases = []
    for code in ["en", "en", "zh", "ja", "fr"]:
        words = c.words(code)
        plain = c.prefix(code, False) + [i for w in words for i in w] + [c.eot]
        cases.append(("plain", [plain], OPTIONS[:4]))
        for style, open_last in (("pair", False), ("single", False), ("pair", True)):
            toks = c.prefix(code, True) + c.segments(words, style=style, open_last=open_last)
            cases.append((f"segments_{style}{'_open' if open_last else ''}",
                          [toks + ([] if open_last else [c.eot])], OPTIONS[:4]))
    # a repeated timestamp (a start taken as an end), and long-form restarts from <|0.00|>
    words = c.words("en", 3)
    body = [i for w in words[:3] for i in w]
    cases.append(("repeated_timestamp", [c.prefix("en", True) + [c.ts(1.0), c.ts(1.0)] + body
                                         + [c.ts(2.0), c.eot]], OPTIONS[:4]))
    first = c.segments(words[:4], start=0.0, precision=0.02)
    again = c.segments(words[4:8] or words[:2], start=0.0)
    cases.append(("restart_pair", [c.prefix("en", True) + first + [first[-1]] + again + [c.eot]],
                  OPTIONS[1:4]))
    cases.append(("restart_single", [c.prefix("en", True) + first + again + [c.eot]],
                  OPTIONS[1:4]))
    cases.append(("restart_segment50", [c.prefix("en", True) + first + again + [c.eot]],
                  [(True, None, {"segment_size": 50})]))
    cases.append(("precision_0.04", [c.prefix("en", True) + c.segments(words, precision=0.04)],
                  [(True, None, {"time_precision": 0.04}), (None, True, {"time_precision": 0.04})]))
    # previous-text prompts
    prompt = [c.prev] + [i for w in c.words("en", 1) for i in w]
    cases.append(("prompt", [prompt + c.prefix("en", True) + c.segments(words[:5]) + [c.eot]],
                  OPTIONS[:4]))
    cases.append(("prompt_without_start", [prompt + [c.notimestamps] + words[0]], OPTIONS[:2]))
    return cases


def chunked(c, rng, code, timestamps, noise, duration, chunk_s, stride_s, word=False):
    """chunk_iter's windows over one spoken transcript; each window hears the words inside it."""
    words = c.words(code, 4)
    gaps = rng.uniform(0.2, 0.7, len(words))
    gaps *= (duration - 0.3) / gaps.sum()
    times = [(end - 0.7 * gap, end) for end, gap in zip(np.cumsum(gaps), gaps)]
    n, chunk, stride = int(duration * SR), int(chunk_s * SR), int(stride_s * SR)
    outputs, start = [], 0
    while True:
        end = start + chunk
        left, right = (0 if start == 0 else stride), (0 if end >= n else stride)
        length = min(end, n) - start
        a, b = start / SR, (start + length) / SR
        inside = [(w, t0 - a, t1 - a) for w, (t0, t1) in zip(words, times)
                  if t0 >= a - 0.1 and t1 <= b + 0.05]
        heard = []
        for w, t0, t1 in inside:
            if noise and rng.random() < noise:
                w = [int(rng.integers(0, c.eot))] + w[1:] if rng.random() < 0.7 else []
            heard.append((w, t0, t1))
        toks = c.prefix(code, timestamps)
        if timestamps:
            k = 0
            while k < len(heard):
                group = heard[k:k + int(rng.integers(1, 4))]
                k += len(group)
                toks += [c.ts(group[0][1])] + [i for w, _, _ in group for i in w] + \
                    [c.ts(group[-1][2])]
        else:
            toks += [i for w, _, _ in heard for i in w]
        toks.append(c.eot)
        out = {"tokens": np.array([toks], np.int64), "stride": (length / SR, left / SR, right / SR)}
        if word:
            out["token_timestamps"] = token_timestamps(len(toks), rng)
        outputs.append(out)
        if end >= n:
            return outputs
        start += chunk - 2 * stride


def multi_chunk_cases(c, rng):
    cases = []
    for code, timestamps, noise, duration, chunk_s, stride_s in [
            ("en", False, 0.0, 9.3, 4.0, 0.8), ("en", False, 0.2, 12.7, 5.0, 1.0),
            ("en", True, 0.0, 9.3, 4.0, 0.8), ("en", True, 0.15, 14.1, 5.0, 1.3),
            ("zh", True, 0.1, 8.0, 3.0, 0.6), ("fr", False, 0.1, 7.7, 3.5, 0.7),
            ("en", True, 0.3, 20.0, 6.0, 1.5)]:
        outputs = chunked(c, rng, code, timestamps, noise, duration, chunk_s, stride_s)
        cases.append((f"chunked_{code}_{'ts' if timestamps else 'text'}", outputs, OPTIONS[:4]))
    # languages switching between chunks (transformers splits plain text on the switch)
    outs = [{"tokens": np.array([c.prefix(code, False) + [i for w in c.words(code, 1) for i in w]
                                 + [c.eot]])} for code in ["en", "fr", "fr", "de", "en"]]
    cases.append(("language_switch", outs, OPTIONS[:4]))
    # empty chunks: only special tokens, no tokens at all, between and around real ones
    empty = {"tokens": np.array([c.prefix("en", False) + [c.eot]])}
    none = {"tokens": np.zeros((1, 0), np.int64)}
    text = {"tokens": np.array([c.prefix("en", False) + [i for w in c.words("en", 1) for i in w]])}
    stamped = {"tokens": np.array([c.prefix("en", True) + c.segments(c.words("en", 1))])}
    cases.append(("empty_chunks", [empty, text, none, empty, text], OPTIONS[:4]))
    cases.append(("only_empty", [empty, none], OPTIONS[:4]))
    cases.append(("empty_then_stamped", [none, stamped, empty], OPTIONS[:4]))
    return cases


def word_cases(c, rng):
    cases = []
    for code in ["en", "en", "zh", "ja", "fr"]:
        words = c.words(code)
        for kind, toks in (("plain", c.prefix(code, False) + [i for w in words for i in w]),
                           ("segments", c.prefix(code, True) + c.segments(words))):
            toks = toks + [c.eot]
            out = {"tokens": np.array([toks]),
                   "token_timestamps": token_timestamps(len(toks), rng, disorder=code == "fr")}
            cases.append((f"word_{kind}_{code}", [out], WORD_OPTIONS))
    for code, timestamps, noise in [("en", False, 0.0), ("en", False, 0.2), ("en", True, 0.1),
                                    ("ja", False, 0.0)]:
        outputs = chunked(c, rng, code, timestamps, noise, 9.1, 4.0, 0.9, word=True)
        cases.append((f"word_chunked_{code}_{'ts' if timestamps else 'text'}", outputs,
                      WORD_OPTIONS))
    # a character cut after two of its three bytes: transformers' unicode split indexes past
    # the decoded text (IndexError), which the port must do too
    toks = c.prefix("ja", False) + c.tok.encode(" 世界", add_special_tokens=False)[:-1]
    cases.append(("word_cut_character", [{"tokens": np.array([toks]), "token_timestamps":
                                          token_timestamps(len(toks), rng)}], WORD_OPTIONS[:1]))
    prompt = [c.prev] + [i for w in c.words("en", 1) for i in w]
    toks = prompt + c.prefix("en", False) + [i for w in c.words("en", 1) for i in w]
    cases.append(("word_prompt", [{"tokens": np.array([toks]),
                                   "token_timestamps": token_timestamps(len(toks), rng)}],
                  WORD_OPTIONS))
    return cases


def random_cases(c, rng, n):
    """Token soup: text, timestamps (any order), special and language tokens, random strides."""
    cases = []
    for k in range(n):
        outputs = []
        for _ in range(int(rng.integers(1, 4))):
            m = int(rng.integers(0, 30))
            kind = rng.choice(4, size=m, p=[0.55, 0.25, 0.1, 0.1])
            toks = [int(rng.integers(0, c.eot)) if t == 0 else
                    c.tb + int(rng.integers(0, 200)) if t == 1 else
                    int(rng.choice(c.specials)) if t == 2 else
                    int(rng.choice(list(c.lang.values()))) for t in kind]
            out = {"tokens": np.array([toks], np.int64).reshape(1, m)}
            if rng.random() < 0.5:
                length = int(rng.integers(2, 8)) * SR + int(rng.integers(0, SR))
                left, right = (int(rng.integers(0, SR)) for _ in range(2))
                out["stride"] = (length / SR, left / SR, right / SR)
            out["token_timestamps"] = token_timestamps(m, rng)
            outputs.append(out)
        options = [OPTIONS[int(rng.integers(0, 4))], WORD_OPTIONS[int(rng.integers(0, 2))]]
        cases.append((f"random_{k}", outputs, options))
    return cases


def decode_cases(c, rng):
    """``decode`` alone: prompts, specials, timestamps, with and without skipping."""
    words = [i for w in c.words("en", 1) for i in w]
    seqs = [c.prefix("en", True) + c.segments(c.words("en", 1)) + [c.eot],
            [c.prev] + words + c.prefix("zh", False) + words + [c.eot],
            [c.prev] + words, words + [c.tb + 5, c.tb + 100, c.tb + 3] + words,
            c.prefix("en", True) + c.segments(c.words("en", 2)) + c.segments(c.words("en", 1))]
    out = []
    for ids in seqs:
        for skip in (False, True):
            for with_ts in (False, True):
                text = c.tok.decode(ids, skip_special_tokens=skip, decode_with_timestamps=with_ts)
                out.append({"ids": ids, "skip_special_tokens": skip,
                            "decode_with_timestamps": with_ts, "text": text})
    return out


def jsonable(outputs):
    out = []
    for o in outputs:
        d = {"tokens": o["tokens"].reshape(-1).tolist()}
        if "stride" in o:
            d["stride"] = list(o["stride"])
        if "token_timestamps" in o:
            # float32's shortest decimals: np.float32(value) gives back the same float32
            d["token_timestamps"] = [float(str(v)) for v in o["token_timestamps"].reshape(-1)]
        out.append(d)
    return out


def run(tok, outputs, option):
    return_timestamps, return_language, *extra = option
    extra = extra[0] if extra else {}
    kwargs = {"return_timestamps": return_timestamps, "return_language": return_language,
              "time_precision": extra.get("time_precision", 0.02)}
    record = {**kwargs, "segment_size": extra.get("segment_size", 1500)}
    try:
        if "segment_size" in extra:  # the method never passes it; the module function does
            text, optional = _decode_asr(tok, outputs, segment_size=extra["segment_size"],
                                         **kwargs)
        else:
            text, optional = tok._decode_asr(outputs, **kwargs)
    except Exception as e:  # transformers' own failures (an IndexError in the word split)
        return {**record, "error": type(e).__name__}
    return {**record, "text": text, "optional": optional}


def record(name, path, seed):
    rng = np.random.default_rng(seed)
    tok = transformers.WhisperTokenizerFast.from_pretrained(path)
    c = Case(tok, rng)
    structures = single_chunk_cases(c, rng) + multi_chunk_cases(c, rng) + word_cases(c, rng)
    structures += random_cases(c, rng, 20 if name == "fixture" else 6)
    if name != "fixture":  # the real vocabularies: every other structure keeps the file small
        structures = structures[::2]
    cases = []
    for kind, outputs, options in structures:
        outputs = [o if isinstance(o, dict) else {"tokens": np.array([o], np.int64)}
                   for o in outputs]
        runs = [run(tok, outputs, option) for option in options]
        cases.append({"kind": kind, "outputs": jsonable(outputs), "runs": runs})
    return {"all_special_ids": tok.all_special_ids, "cases": cases,
            "decode": decode_cases(c, rng)}


if __name__ == "__main__":
    transformers.logging.set_verbosity_error()  # the "no ending timestamp" warnings
    out = {"how_made": "WhisperTokenizerFast.from_pretrained(path)._decode_asr(model_outputs, "
                       "...) (module _decode_asr for segment_size), transformers "
                       + transformers.__version__, "tokenizers": {}}
    for seed, (name, path) in enumerate(TOKENIZERS.items()):
        if path.is_dir():
            out["tokenizers"][name] = record(name, path, seed)
            n = sum(len(case["runs"]) for case in out["tokenizers"][name]["cases"])
            errors = [case["kind"] for case in out["tokenizers"][name]["cases"]
                      for r in case["runs"] if "error" in r]
            print(f"{name}: {n} runs; transformers raised in {errors}")
    OUT.write_text(json.dumps(out, ensure_ascii=False, separators=(",", ":")))
    print(OUT, OUT.stat().st_size, "bytes")
