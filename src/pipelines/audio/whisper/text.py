"""Whisper's tokens to text: transformers' ``WhisperTokenizer._decode_asr`` and the decode rules it
relies on, over our ``Tokenizer`` (tokenizer.json + tokenizer_config.json).

    text, optional = decode_asr(tokenizer, model_outputs, return_timestamps=True,
                                return_language=None, time_precision=0.02)

``model_outputs`` holds one dict per chunk of the recording: "tokens" (int [1, n] or [n]),
optionally "stride" (chunk_len, stride_left, stride_right) in seconds and, for word timestamps,
"token_timestamps" (float [1, n]). ``optional`` is ``{}`` or ``{"chunks": [...]}``, transformers'
pipeline output. The state machine, the overlap merge (``_find_longest_common_sequence``) and the
word grouping follow transformers 4.57 line by line, so texts and times are the same floats.
"""

import logging
import re

import numpy as np

from ....errors import InputError

log = logging.getLogger(__name__)

# tokenization_whisper.py's tables (data): language codes to names, names (and aliases) to codes
LANGUAGES = {
    "en": "english", "zh": "chinese", "de": "german", "es": "spanish", "ru": "russian",
    "ko": "korean", "fr": "french", "ja": "japanese", "pt": "portuguese", "tr": "turkish",
    "pl": "polish", "ca": "catalan", "nl": "dutch", "ar": "arabic", "sv": "swedish",
    "it": "italian", "id": "indonesian", "hi": "hindi", "fi": "finnish", "vi": "vietnamese",
    "he": "hebrew", "uk": "ukrainian", "el": "greek", "ms": "malay", "cs": "czech",
    "ro": "romanian", "da": "danish", "hu": "hungarian", "ta": "tamil", "no": "norwegian",
    "th": "thai", "ur": "urdu", "hr": "croatian", "bg": "bulgarian", "lt": "lithuanian",
    "la": "latin", "mi": "maori", "ml": "malayalam", "cy": "welsh", "sk": "slovak", "te": "telugu",
    "fa": "persian", "lv": "latvian", "bn": "bengali", "sr": "serbian", "az": "azerbaijani",
    "sl": "slovenian", "kn": "kannada", "et": "estonian", "mk": "macedonian", "br": "breton",
    "eu": "basque", "is": "icelandic", "hy": "armenian", "ne": "nepali", "mn": "mongolian",
    "bs": "bosnian", "kk": "kazakh", "sq": "albanian", "sw": "swahili", "gl": "galician",
    "mr": "marathi", "pa": "punjabi", "si": "sinhala", "km": "khmer", "sn": "shona",
    "yo": "yoruba", "so": "somali", "af": "afrikaans", "oc": "occitan", "ka": "georgian",
    "be": "belarusian", "tg": "tajik", "sd": "sindhi", "gu": "gujarati", "am": "amharic",
    "yi": "yiddish", "lo": "lao", "uz": "uzbek", "fo": "faroese", "ht": "haitian creole",
    "ps": "pashto", "tk": "turkmen", "nn": "nynorsk", "mt": "maltese", "sa": "sanskrit",
    "lb": "luxembourgish", "my": "myanmar", "bo": "tibetan", "tl": "tagalog", "mg": "malagasy",
    "as": "assamese", "tt": "tatar", "haw": "hawaiian", "ln": "lingala", "ha": "hausa",
    "ba": "bashkir", "jw": "javanese", "su": "sundanese", "yue": "cantonese",
}
TO_LANGUAGE_CODE = {
    **{language: code for code, language in LANGUAGES.items()},
    "burmese": "my", "valencian": "ca", "flemish": "nl", "haitian": "ht", "letzeburgesch": "lb",
    "pushto": "ps", "panjabi": "pa", "moldavian": "ro", "moldovan": "ro", "sinhalese": "si",
    "castilian": "es", "mandarin": "zh",
}

TIMESTAMP_PATTERN = re.compile(r"<\|(\d+\.\d+)\|>")
_NAMED_SPECIALS = ("bos", "eos", "unk", "sep", "pad", "cls", "mask")
# Languages written without spaces: words are split where the bytes make whole characters.
_UNSPACED = {"chinese", "japanese", "thai", "lao", "myanmar", "cantonese"}
_PREPENDED = "\"'“¡¿([{-"
_APPENDED = "\"'.。,，!！?？:：”)]}、"
_PUNCTUATION = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"


def special_ids(tokenizer):
    """transformers' ``all_special_ids``: the named special tokens (bos, eos, unk, sep, pad, cls,
    mask) then ``additional_special_tokens``, each once, in that order. The order matters: the
    legacy timestamp decoding starts timestamps right after the last one."""
    tokens = [getattr(tokenizer, f"{name}_token", None) for name in _NAMED_SPECIALS]
    tokens += [t.get("content") if isinstance(t, dict) else t
               for t in tokenizer.config.get("additional_special_tokens") or []]
    seen, ids = set(), []
    for token in tokens:
        if token is None or token in seen:
            continue
        seen.add(token)
        ids.append(token_id(tokenizer, token))
    return ids


def token_id(tokenizer, token):
    """``convert_tokens_to_ids``: a token missing from the vocab reads as unk."""
    i = tokenizer.token_to_id(token)
    return tokenizer.unk_token_id if i is None else i


def strip_prompt(tokenizer, ids):
    """``_strip_prompt``: a previous-text prompt (``<|startofprev|> ...``) is dropped up to
    ``<|startoftranscript|>`` (everything, when that never comes)."""
    ids = [int(i) for i in ids]
    if ids and ids[0] == token_id(tokenizer, "<|startofprev|>"):
        start = token_id(tokenizer, "<|startoftranscript|>")
        return ids[ids.index(start):] if start in ids else []
    return ids


def decode(tokenizer, ids, skip_special_tokens=False, decode_with_timestamps=False,
           time_precision=0.02, clean_up_tokenization_spaces=None):
    """``WhisperTokenizer.decode``: ``skip_special_tokens`` also strips the prompt; timestamp
    tokens are filtered out of the text, or written as ``<|1.08|>`` (``decode_with_timestamps``)."""
    ids = strip_prompt(tokenizer, ids) if skip_special_tokens else [int(i) for i in ids]
    if decode_with_timestamps:
        return _decode_with_timestamps(tokenizer, ids, skip_special_tokens, time_precision)
    text = tokenizer.decode(ids, skip_special_tokens=skip_special_tokens,
                            clean_up_tokenization_spaces=clean_up_tokenization_spaces)
    return TIMESTAMP_PATTERN.sub("", text)


def _decode_with_timestamps(tokenizer, ids, skip_special_tokens, time_precision,
                            segment_size=1500):
    # transformers starts timestamps after the last special id here (not after <|notimestamps|>)
    timestamp_begin = special_ids(tokenizer)[-1] + 1
    outputs = [[]]
    cur_max_timestamp = prev_segments_len = penultimate_timestamp = 0.0
    for i, token in enumerate(ids):
        if token < timestamp_begin:
            outputs[-1].append(token)
            continue
        timestamp = float((token - timestamp_begin) * time_precision)
        if timestamp < cur_max_timestamp:  # the next segment has started
            if i >= 2 and not (ids[i - 1] >= timestamp_begin and ids[i - 2] >= timestamp_begin):
                prev_segments_len += time_precision * segment_size
            else:
                cur_max_timestamp = penultimate_timestamp
                prev_segments_len += penultimate_timestamp
                outputs = outputs[:-2]
        penultimate_timestamp, cur_max_timestamp = cur_max_timestamp, timestamp
        outputs += [f"<|{(timestamp + prev_segments_len):.2f}|>", []]
    return "".join(s if isinstance(s, str) else decode(tokenizer, s, skip_special_tokens)
                   for s in outputs)


def decode_asr(tokenizer, model_outputs, *, return_timestamps=None, return_language=None,
               time_precision=0.02, segment_size=1500):
    """``(text, optional)`` of the ASR pipeline's Whisper outputs, as transformers'
    ``tokenizer._decode_asr`` returns them (see the module docstring)."""
    if return_timestamps not in (None, False, True, "word"):
        raise InputError(f"return_timestamps={return_timestamps!r}: Whisper gives segment "
                         "(True) or word ('word') timestamps, or none (None / False)")
    if isinstance(model_outputs, dict) or not hasattr(model_outputs, "__iter__"):
        raise InputError("model_outputs must be a list of dicts (one per chunk), got "
                         f"{type(model_outputs).__name__}")
    state = _ASRState(tokenizer, return_timestamps, return_language, time_precision, segment_size)
    for n, output in enumerate(model_outputs):
        state.add(output, n)
    return state.finish()


class _ASRState:
    """``_decode_asr``'s state machine: text tokens accumulate, an end timestamp closes a chunk,
    tokens of overlapping strides merge by their longest common sequence."""

    def __init__(self, tokenizer, return_timestamps, return_language, time_precision,
                 segment_size):
        self.tok, self.timestamps, self.language = tokenizer, return_timestamps, return_language
        self.words = return_timestamps == "word"
        self.time_precision, self.segment_size = time_precision, segment_size
        self.timestamp_begin = token_id(tokenizer, "<|notimestamps|>") + 1
        self.special = set(special_ids(tokenizer))
        self.last_language, self.chunks = None, []
        self.chunk = self._new_chunk()
        self.time_offset, self.skip = 0.0, False
        self.previous_tokens, self.previous_token_timestamps = [], []

    def _new_chunk(self):
        return {"language": self.last_language, "timestamp": [None, None], "text": ""}

    def add(self, output, n):
        """One chunk's tokens through the four kinds: language, other special, timestamp, text."""
        ids = strip_prompt(self.tok, _tokens(output, n))
        self.token_timestamps = _token_timestamps(output, n) if self.words else None
        # timestamps inside the strides are not split on; they are resolved by the merge
        self.last_timestamp, self.first_timestamp = None, self.timestamp_begin
        self.cur_max_timestamp = self.prev_segments_len = self.penultimate_timestamp = 0.0
        stride = output.get("stride")
        if stride is not None:
            chunk_len, stride_left, stride_right = stride
            self.time_offset -= stride_left
            right_stride_start = chunk_len - stride_right
            if stride_left:
                self.first_timestamp = stride_left / self.time_precision + self.timestamp_begin
            if stride_right:
                for token in reversed(ids):
                    if token >= self.timestamp_begin:
                        # the last timestamp in the right stride is always skipped
                        if (self.last_timestamp is not None and (token - self.timestamp_begin)
                                * self.time_precision < right_stride_start):
                            break
                        self.last_timestamp = token
        self.current_tokens, self.current_token_timestamps = [], []
        for i, token in enumerate(ids):
            if token in self.special:
                self._special(token)
            elif token >= self.timestamp_begin:
                self._timestamp(i, token, ids)
            else:
                self._text(i, token, n)
        if stride is not None:
            self.time_offset += chunk_len - stride_right
        if self.current_tokens:  # leftovers wait for the next chunk (or the end)
            self.previous_tokens.append(self.current_tokens)
            if self.words:
                self.previous_token_timestamps.append(self.current_token_timestamps)
        elif not any(p for p in self.previous_tokens):
            self.chunk = self._new_chunk()
            self.previous_tokens, self.current_tokens = [], []
            self.previous_token_timestamps, self.current_token_timestamps = [], []

    def _special(self, token):
        language = LANGUAGES.get(decode(self.tok, [token])[2:-2])  # "<|en|>" -> "en"
        if language is None:
            return  # another special token: ignored
        if self.last_language and language != self.last_language and not self.timestamps:
            self.previous_tokens.append(self.current_tokens)
            self.chunk["text"] = decode(self.tok, _find_longest_common_sequence(
                self.previous_tokens))
            self.chunks.append(self.chunk)
            self.previous_tokens, self.current_tokens = [], []
            self.chunk = self._new_chunk()
        self.chunk["language"] = self.last_language = language

    def _timestamp(self, i, token, ids):
        begin, precision = self.timestamp_begin, self.time_precision
        timestamp = float((token - begin) * precision)
        if timestamp < self.cur_max_timestamp:  # long-form: the next segment has started
            if i >= 2 and not (ids[i - 1] >= begin and ids[i - 2] >= begin):  # single ending
                self.prev_segments_len += precision * self.segment_size
            else:
                self.cur_max_timestamp = self.penultimate_timestamp
                self.prev_segments_len += self.penultimate_timestamp
        self.penultimate_timestamp, self.cur_max_timestamp = self.cur_max_timestamp, timestamp
        time = round((token - begin) * precision + self.time_offset + self.prev_segments_len, 2)
        if self.last_timestamp and token >= self.last_timestamp:
            self.skip = True  # in the right stride: skip it and the pair's next one
        elif self.skip or (self.previous_tokens and token < self.first_timestamp):
            self.skip = False
        elif self.chunk["timestamp"][0] is None:
            self.chunk["timestamp"][0] = time
        elif time != self.chunk["timestamp"][0]:  # an end (a repeated start stays a start)
            self.chunk["timestamp"][1] = time
            self.previous_tokens.append(self.current_tokens)
            if self.words:
                self.previous_token_timestamps.append(self.current_token_timestamps)
            self._close()
            self.previous_tokens, self.current_tokens = [], []
            self.previous_token_timestamps, self.current_token_timestamps = [], []
            self.chunk = self._new_chunk()

    def _text(self, i, token, n):
        self.current_tokens.append(token)
        if self.words:
            stamps, offset = self.token_timestamps, self.time_offset
            if i >= len(stamps):
                raise InputError(f"model_outputs[{n}]: token_timestamps has {len(stamps)} values "
                                 f"but token {i} is text; give one timestamp per token")
            start = round(0.0 + offset, 2) if i == 0 else round(stamps[i - 1] + offset, 2)
            self.current_token_timestamps.append((start, round(stamps[i] + offset, 2)))

    def _close(self):
        tokens, stamps = _find_longest_common_sequence(self.previous_tokens,
                                                       self.previous_token_timestamps)
        self.chunk["text"] = decode(self.tok, tokens)
        if self.words:
            self.chunk["words"] = _collate_word_timestamps(self.tok, tokens, stamps,
                                                           self.last_language, self.language)
        self.chunks.append(self.chunk)

    def finish(self):
        """Close the last chunk (no end timestamp came) and shape transformers' output."""
        return_timestamps, return_language = self.timestamps, self.language
        if self.previous_tokens:
            if return_timestamps:
                log.warning("Whisper did not predict an ending timestamp, which can happen if "
                            "audio is cut off in the middle of a word.")
            self._close()
        text = "".join(chunk["text"] for chunk in self.chunks)
        if not (return_timestamps or return_language):
            return text, {}
        for chunk in self.chunks:
            if not return_timestamps:
                chunk.pop("timestamp")
            else:
                chunk["timestamp"] = tuple(chunk["timestamp"])
            if not return_language:
                chunk.pop("language")
        if return_timestamps == "word":
            return text, {"chunks": [word for chunk in self.chunks for word in chunk["words"]]}
        return text, {"chunks": self.chunks}


def _tokens(output, n):
    if not isinstance(output, dict) or "tokens" not in output:
        raise InputError(f"model_outputs[{n}] must be a dict with 'tokens' (int [1, n]), got "
                         f"{type(output).__name__}")
    tokens = np.asarray(output["tokens"])
    if tokens.ndim not in (1, 2) or (tokens.ndim == 2 and tokens.shape[0] != 1) or (
            tokens.size and not np.issubdtype(tokens.dtype, np.integer)):
        raise InputError(f"model_outputs[{n}]['tokens'] must be ints of shape [1, n] or [n], got "
                         f"{tokens.dtype} {tokens.shape}")
    return tokens.reshape(-1).tolist()


def _token_timestamps(output, n):
    if output.get("token_timestamps") is None:
        raise InputError(f"model_outputs[{n}] has no 'token_timestamps'; return_timestamps='word' "
                         "needs them (the cross-attention alignment of each token)")
    return np.asarray(output["token_timestamps"]).reshape(-1).tolist()


def _find_longest_common_sequence(sequences, token_timestamp_sequences=None):
    """Chunks' tokens merged where they overlap: the best-matching alignment of each pair
    (matches / overlap + a small bonus for long overlaps), the left chunk trusted for the left
    half of the overlap and the right chunk for the rest. Timestamps split the same way."""
    left_sequence = sequences[0]
    left_length = len(left_sequence)
    total_sequence = []
    if token_timestamp_sequences:
        left_token_timestamp_sequence = token_timestamp_sequences[0]
        total_token_timestamp_sequence = []
    for seq_idx, right_sequence in enumerate(sequences[1:]):
        max_ = 0.0
        max_indices = (left_length, left_length, 0, 0)
        right_length = len(right_sequence)
        for i in range(1, left_length + right_length):
            eps = i / 10000.0  # favours long perfect matches
            left_start = max(0, left_length - i)
            left_stop = min(left_length, left_length + right_length - i)
            left = np.array(left_sequence[left_start:left_stop])
            right_start = max(0, i - left_length)
            right_stop = min(right_length, i)
            right = np.array(right_sequence[right_start:right_stop])
            if token_timestamp_sequences:
                # matching tokens count only where their times are in order
                right_times = token_timestamp_sequences[seq_idx + 1]
                matches = sum(1 for idx, elem in enumerate(left) if elem == right[idx] and (
                    left_token_timestamp_sequence[left_start + idx]
                    <= right_times[right_start + idx]))
            else:
                matches = np.sum(left == right)
            matching = matches / i + eps
            if matches > 1 and matching > max_:
                max_ = matching
                max_indices = (left_start, left_stop, right_start, right_stop)
        left_start, left_stop, right_start, right_stop = max_indices
        left_mid = (left_stop + left_start) // 2
        right_mid = (right_stop + right_start) // 2
        total_sequence.extend(left_sequence[:left_mid])
        left_sequence = right_sequence[right_mid:]
        left_length = len(left_sequence)
        if token_timestamp_sequences:
            total_token_timestamp_sequence.extend(left_token_timestamp_sequence[:left_mid])
            left_token_timestamp_sequence = token_timestamp_sequences[seq_idx + 1][right_mid:]
    total_sequence.extend(left_sequence)
    if token_timestamp_sequences is None:
        return total_sequence
    if len(token_timestamp_sequences) > 0:
        total_token_timestamp_sequence.extend(left_token_timestamp_sequence)
        return total_sequence, total_token_timestamp_sequence
    return total_sequence, []


def _collate_word_timestamps(tokenizer, tokens, token_timestamps, language, return_language):
    words, _, token_indices = _combine_tokens_into_words(tokenizer, tokens, language)
    extra = {"language": language} if return_language else {}
    return [{"text": word, "timestamp": (token_timestamps[indices[0]][0],
                                         token_timestamps[indices[-1]][1]), **extra}
            for word, indices in zip(words, token_indices)]


def _combine_tokens_into_words(tokenizer, tokens, language=None):
    """Words (strings), their tokens and their token indices."""
    if language is None:
        language = tokenizer.config.get("language")  # transformers' tokenizer.language
    if language is None:
        language = "english"
    split = _split_tokens_on_unicode if language in _UNSPACED else _split_tokens_on_spaces
    words, word_tokens, token_indices = split(tokenizer, tokens)
    _merge_punctuations(words, word_tokens, token_indices, _PREPENDED, _APPENDED)
    return words, word_tokens, token_indices


def _split_tokens_on_unicode(tokenizer, tokens):
    """Split wherever the tokens so far decode to whole characters (no U+FFFD of their own)."""
    decoded_full = decode(tokenizer, tokens, decode_with_timestamps=True)
    words, word_tokens, token_indices, current_tokens, current_indices = [], [], [], [], []
    unicode_offset = 0
    for token_idx, token in enumerate(tokens):
        current_tokens.append(token)
        current_indices.append(token_idx)
        decoded = decode(tokenizer, current_tokens, decode_with_timestamps=True)
        if "\ufffd" not in decoded or \
                decoded_full[unicode_offset + decoded.index("\ufffd")] == "\ufffd":
            words.append(decoded)
            word_tokens.append(current_tokens)
            token_indices.append(current_indices)
            current_tokens, current_indices = [], []
            unicode_offset += len(decoded)
    return words, word_tokens, token_indices


def _split_tokens_on_spaces(tokenizer, tokens):
    """Subwords joined into words; a space, a punctuation mark or a special token starts one."""
    words, word_tokens, token_indices = [], [], []
    for subword, subword_tokens, subword_indices in zip(*_split_tokens_on_unicode(tokenizer,
                                                                                  tokens)):
        special = subword_tokens[0] >= tokenizer.eos_token_id
        if special or subword.startswith(" ") or subword.strip() in _PUNCTUATION or not words:
            words.append(subword)
            word_tokens.append(subword_tokens)
            token_indices.append(subword_indices)
        else:
            words[-1] = words[-1] + subword
            word_tokens[-1].extend(subword_tokens)
            token_indices[-1].extend(subword_indices)
    return words, word_tokens, token_indices


def _merge_punctuations(words, tokens, indices, prepended, appended):
    """Opening punctuation joins the next word, closing punctuation the previous (in place)."""
    i, j = len(words) - 2, len(words) - 1
    while i >= 0:
        if words[i].startswith(" ") and words[i].strip() in prepended:
            words[j] = words[i] + words[j]
            tokens[j] = tokens[i] + tokens[j]
            indices[j] = indices[i] + indices[j]
            words[i], tokens[i], indices[i] = "", [], []
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(words):
        if not words[i].endswith(" ") and words[j] in appended:
            words[i] += words[j]
            tokens[i] += tokens[j]
            indices[i] += indices[j]
            words[j], tokens[j], indices[j] = "", [], []
        else:
            i = j
        j += 1
    words[:] = [word for word in words if word]
    tokens[:] = [token for token in tokens if token]
    indices[:] = [idx for idx in indices if idx]
