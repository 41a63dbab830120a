"""Generation settings: generation_config.json, then the caller's options, validated once.

Names and defaults follow transformers' ``GenerationConfig``; a setting the loop does not
implement is refused here rather than silently ignored."""

import dataclasses
import math

from ..errors import InputError
from ..options import positive_int

# transformers' default max_length when neither max_length nor max_new_tokens is set.
DEFAULT_MAX_LENGTH = 20


@dataclasses.dataclass
class GenerationConfig:
    max_length: int = DEFAULT_MAX_LENGTH
    max_new_tokens: int | None = None
    min_length: int = 0
    min_new_tokens: int | None = None
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 50
    top_p: float = 1.0
    min_p: float | None = None
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    bad_words_ids: list | None = None
    suppress_tokens: list | None = None
    begin_suppress_tokens: list | None = None
    forced_bos_token_id: int | None = None
    forced_eos_token_id: int | list | None = None
    eos_token_id: list = dataclasses.field(default_factory=list)
    bos_token_id: int | None = None
    pad_token_id: int | None = None
    decoder_start_token_id: int | None = None
    num_beams: int = 1
    num_return_sequences: int = 1
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    stop_strings: list | None = None
    seed: int | None = None

    @classmethod
    def from_dicts(cls, generation_config=None, model_config=None, *, pipeline_defaults=None,
                   task_options=None, **options):
        """transformers' order of precedence: ``pipeline_defaults`` (a pipeline's
        ``_default_generation_config``), then the model's values (generation_config.json, with
        config.json filling the token ids it lacks) where they differ from the global defaults,
        then ``task_options`` (config.json ``task_specific_params``), then ``options``. Unknown
        option names are an error, unknown file keys are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - names)
        if unknown:
            raise InputError(f"Unknown generation option(s) {unknown}; known: {sorted(names)}")
        model = {}
        for key in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"):
            if (model_config or {}).get(key) is not None:
                model[key] = model_config[key]
        model.update({k: v for k, v in (generation_config or {}).items()
                      if k in names and v is not None})
        defaults = cls()
        values = dict(pipeline_defaults or {})
        values.update({k: v for k, v in model.items() if v != getattr(defaults, k)})
        # a pipeline's default max_new_tokens yields to a max_length the model sets
        # (transformers' Pipeline.__init__: Whisper's max_length=448 wins over 256)
        if pipeline_defaults and pipeline_defaults.get("max_new_tokens") is not None and \
                values.get("max_new_tokens") == pipeline_defaults["max_new_tokens"] and \
                values.get("max_length", DEFAULT_MAX_LENGTH) != DEFAULT_MAX_LENGTH:
            values.pop("max_new_tokens")
        values.update({k: v for k, v in (task_options or {}).items() if k in names})
        values.update({k: v for k, v in options.items() if v is not None or k == "seed"})
        # max_new_tokens given by the caller wins over a max_length from the file, as in
        # transformers (the file's max_length only applies when max_new_tokens is unset)
        config = cls(**values)
        config.validate()
        return config

    def validate(self):
        self.eos_token_id = _id_list(self.eos_token_id, "eos_token_id")
        for name in ("bos_token_id", "pad_token_id", "decoder_start_token_id",
                     "forced_bos_token_id"):
            if getattr(self, name) is not None:
                _id_list(getattr(self, name), name, one=True)
        if self.forced_eos_token_id is not None:
            _id_list(self.forced_eos_token_id, "forced_eos_token_id")
        positive_int(self.max_length, "max_length", InputError)
        if self.max_new_tokens is not None:
            positive_int(self.max_new_tokens, "max_new_tokens", InputError)
        _nonneg_int(self.min_length, "min_length")
        if self.min_new_tokens is not None:
            _nonneg_int(self.min_new_tokens, "min_new_tokens")
        _nonneg_int(self.no_repeat_ngram_size, "no_repeat_ngram_size")
        _nonneg_int(self.top_k, "top_k")
        positive_int(self.num_beams, "num_beams", InputError)
        positive_int(self.num_return_sequences, "num_return_sequences", InputError)
        if self.num_return_sequences > max(self.num_beams, 1) and not self.do_sample:
            raise InputError(f"num_return_sequences={self.num_return_sequences} needs "
                             f"num_beams >= it (got {self.num_beams}) or do_sample=True")
        if self.early_stopping not in (True, False, "never"):
            raise InputError(f"early_stopping must be True, False or 'never', got "
                             f"{self.early_stopping!r}")
        if not _number(self.length_penalty):
            raise InputError(f"length_penalty must be a number, got {self.length_penalty!r}")
        if self.num_beams > 1 and self.do_sample:
            raise InputError("num_beams > 1 with do_sample=True (beam sampling) is not "
                             "implemented; use do_sample=False or num_beams=1")
        if self.num_beams > 1 and self.stop_strings:
            raise InputError("stop_strings are not supported with num_beams > 1 (beam search); "
                             "use eos_token_id or num_beams=1")
        for name in ("temperature", "repetition_penalty"):
            if not _number(getattr(self, name)) or getattr(self, name) <= 0:
                raise InputError(f"{name} must be a positive number, got "
                                 f"{getattr(self, name)!r}")
        if not _number(self.top_p) or not 0 < self.top_p <= 1:
            raise InputError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.min_p is not None and (not _number(self.min_p) or not 0 <= self.min_p <= 1):
            raise InputError(f"min_p must be in [0, 1], got {self.min_p!r}")
        if self.stop_strings is not None:
            if isinstance(self.stop_strings, str):
                self.stop_strings = [self.stop_strings]
            if not all(isinstance(s, str) and s for s in self.stop_strings):
                raise InputError(f"stop_strings must be non-empty strings, got "
                                 f"{self.stop_strings!r}")
        for name in ("suppress_tokens", "begin_suppress_tokens"):
            if getattr(self, name) is not None:
                setattr(self, name, _id_list(getattr(self, name), name))
        if self.bad_words_ids is not None:
            if not all(isinstance(w, (list, tuple)) and w for w in self.bad_words_ids):
                raise InputError(f"bad_words_ids must be a list of non-empty id lists, got "
                                 f"{self.bad_words_ids!r}")
            self.bad_words_ids = [_id_list(w, "bad_words_ids") for w in self.bad_words_ids]
        if self.seed is not None and not isinstance(self.seed, int):
            raise InputError(f"seed must be an int, got {self.seed!r}")
        return self

    def new_tokens(self, prompt_length):
        """How many tokens to generate after a prompt of ``prompt_length`` tokens."""
        if self.max_new_tokens is not None:
            return self.max_new_tokens
        return max(self.max_length - prompt_length, 0)


# The option names a caller may pass (GenerationConfig's fields).
OPTIONS = frozenset(f.name for f in dataclasses.fields(GenerationConfig))


def check_options(task, options):
    """A clear error for options that are not generation settings (typos, another task's)."""
    unknown = sorted(set(options) - OPTIONS)
    if unknown:
        raise InputError(f"{task} takes no option(s) {unknown}; generation options are: "
                         f"{', '.join(sorted(OPTIONS))}")


def _number(x):
    """A finite int or float (nan and inf are no temperature, penalty or probability)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)



def _nonneg_int(x, name):
    if not isinstance(x, int) or isinstance(x, bool) or x < 0:
        raise InputError(f"{name} must be an int >= 0, got {x!r}")


# Past it an id is no row of any vocabulary and overflows the int32 / int64 arrays it goes in
MAX_TOKEN_ID = 2**31 - 1


def _id_list(ids, name, one=False):
    """``ids`` (an id or a list of ids) as a list; InputError naming ``name`` unless each is
    an int in [0, MAX_TOKEN_ID] (``one``: a single id, no list)."""
    if ids is None:
        return []
    given = ids
    ids = list(ids) if isinstance(ids, (list, tuple)) and not one else [ids]
    if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i <= MAX_TOKEN_ID
               for i in ids):
        what = "a token id" if one else "token ids"
        raise InputError(f"{name} must be {what} (ints in [0, {MAX_TOKEN_ID}]), got {given!r}: "
                         "fix generation_config.json (or config.json), or pass it as an option")
    return ids
