"""Audio feature extractors: preprocessor_config.json in, the model's inputs out, equal to
transformers' feature extractors (4.57) with no torch.

    fe = FeatureExtractor.from_config(config)    # dispatch on feature_extractor_type
    fe.sampling_rate, fe.model_input_names
    item = fe(samples)     # one mono float clip at fe.sampling_rate -> arrays, no batch axis
    batch = fe.pad([item, ...], length=None)     # -> dict of arrays with a batch axis

`fe(samples)` is transformers' call on that one clip (return_tensors="np", batch axis dropped);
`fe.pad` is what its batched call gives for the clips together (see each class for where that
cannot hold). As in preprocess/image/processor.py, a class's `setup` has the keyword arguments
and defaults of its transformers `__init__`; other config keys are ignored as transformers
ignores them (`fe.ignored` lists them), and a value we do not implement raises InputError.
"""

import inspect
import numbers

import numpy as np

from ...errors import InputError
from . import spectrogram as S

# Keys every config may carry that never change features.
_METADATA = {"feature_extractor_type", "processor_class", "auto_map", "_processor_class",
             "feature_size", "padding_side", "padding_value", "return_attention_mask",
             "sampling_rate"}

_REGISTRY = {}


def register(*names):
    """Class decorator: the feature_extractor_type names a class serves."""
    def add(cls):
        for name in names:
            _REGISTRY[name] = cls
        cls.names = names
        return cls
    return add


def supported():
    return sorted(_REGISTRY)


class FeatureExtractor:
    """Base of the extractors; `FeatureExtractor.from_config(config)` picks one."""

    names = ()
    model_input_names = ()
    time_axis = {}        # per output key: the axis pad() pads (the others must agree)
    fixed = {}            # per output key: an axis the extractor itself pads to a fixed size

    @staticmethod
    def from_config(config):
        if not isinstance(config, dict):
            raise InputError(f"A feature extractor config is a dict (preprocessor_config.json), "
                             f"got {type(config).__name__}")
        name = config.get("feature_extractor_type")
        cls = _REGISTRY.get(name)
        if cls is None:
            what = "names no feature_extractor_type" if name is None else f"has {name!r}"
            raise InputError(f"The preprocessor config {what}; supported feature extractors: "
                             f"{', '.join(supported())}")
        return cls(config)

    def __init__(self, config):
        self.config = dict(config)
        params = inspect.signature(self.setup).parameters
        known = {k for k, p in params.items() if p.kind is p.KEYWORD_ONLY}
        self.ignored = sorted(k for k in self.config if k not in known and k not in _METADATA)
        self.read_common()
        self.setup(**{k: v for k, v in self.config.items() if k in known})

    @property
    def name(self):
        return self.config.get("feature_extractor_type") or type(self).__name__

    def setup(self, **options):
        raise NotImplementedError

    # ---- options --------------------------------------------------------------------------

    defaults = {"feature_size": 1, "sampling_rate": 16000, "padding_value": 0.0,
                "return_attention_mask": True}

    def read_common(self):
        """SequenceFeatureExtractor's options, with the class's own defaults."""
        get = lambda key: self.config.get(key, self.defaults[key])  # noqa: E731
        self.feature_size = self.positive_int("feature_size", get("feature_size"))
        self.sampling_rate = self.positive_int("sampling_rate", get("sampling_rate"))
        self.padding_value = self.number("padding_value", get("padding_value"))
        self.return_attention_mask = self.flag("return_attention_mask",
                                               get("return_attention_mask"))
        self.padding_side = self.choice("padding_side", self.config.get("padding_side", "right"),
                                        ("right", "left"))

    def fail(self, key, value, expected):
        raise InputError(f"{self.name}: option {key}={value!r} is not valid: expected {expected}")

    def positive_int(self, key, value):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
            self.fail(key, value, "a positive integer")
        return int(value)

    def number(self, key, value, positive=False):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not np.isfinite(value):
            self.fail(key, value, "a number")
        if positive and value <= 0:
            self.fail(key, value, "a positive number")
        return float(value)

    def flag(self, key, value):
        if not isinstance(value, (bool, np.bool_)):
            self.fail(key, value, "true or false")
        return bool(value)

    def choice(self, key, value, allowed):
        if value not in allowed:
            self.fail(key, value, "one of " + ", ".join(repr(a) for a in allowed))
        return value

    # ---- one clip -------------------------------------------------------------------------

    def __call__(self, samples, **options):
        raise NotImplementedError

    def samples(self, samples, dtype=np.float32):
        """One mono clip as transformers sees it: float32 (float64 cast down, as its extractors
        do), 1-D, finite, not empty."""
        if isinstance(samples, (list, tuple)):
            samples = np.asarray(samples, dtype=np.float64)
        if not isinstance(samples, np.ndarray):
            raise InputError(f"{self.name} takes one clip as a 1-D NumPy float array, got "
                             f"{type(samples).__name__}")
        if samples.ndim != 1:
            hint = (" (stereo: mix it down to mono first, e.g. samples.mean(axis=-1))"
                    if samples.ndim == 2 else "")
            raise InputError(f"{self.name} takes one mono clip (a 1-D array), got shape "
                             f"{samples.shape}{hint}; for several clips call it once per clip "
                             "and pad() the results")
        if not np.issubdtype(samples.dtype, np.floating):
            raise InputError(f"{self.name} takes float samples in [-1, 1], got {samples.dtype}: "
                             "scale integer PCM first (int16: samples / 32768)")
        if samples.size == 0:
            raise InputError(f"{self.name} got an empty clip (0 samples)")
        if not np.isfinite(samples).all():
            raise InputError(f"{self.name} got a clip with NaN or infinite samples")
        return samples.astype(dtype) if dtype is not None else samples

    # ---- a batch --------------------------------------------------------------------------

    def pad(self, items, length=None):
        """Stack one-clip items; keys in `time_axis` are padded (padding_value, attention masks
        with 0) on the padding side to `length` (default: the longest item)."""
        items = self.check_items(items)
        out = {}
        for key in items[0]:
            arrays = [item[key] for item in items]
            axis = self.time_axis.get(key)
            if key in self.fixed and length is not None:
                self.check_fixed(arrays, self.fixed[key], length, key)
            if axis is not None:
                target = self.pad_length(arrays, axis, length, key)
                arrays = [self.pad_one(key, a, axis, target) for a in arrays]
            elif len({a.shape for a in arrays}) > 1:
                raise InputError(f"{self.name}.pad: the items' {key!r} differ in shape "
                                 f"({sorted({a.shape for a in arrays})}); they come from one "
                                 "extractor with the same options")
            out[key] = np.stack(arrays)
        return out

    def check_items(self, items):
        items = list(items)
        if not items or not all(isinstance(item, dict) for item in items):
            raise InputError(f"{self.name}.pad takes a non-empty list of items (the dicts "
                             "fe(samples) returns)")
        keys = set(items[0])
        if any(set(item) != keys for item in items):
            raise InputError(f"{self.name}.pad: the items have different keys; featurize "
                             "them with the same options")
        return items

    def check_fixed(self, arrays, axis, length, key):
        size = arrays[0].shape[axis]
        if length != size:
            raise InputError(f"{self.name}.pad: length={length!r}, but this extractor pads every "
                             f"clip's {key!r} to {size} itself; pass length=None or {size}")

    def pad_length(self, arrays, axis, length, key):
        longest = max(a.shape[axis] for a in arrays)
        if length is None:
            return longest
        if isinstance(length, bool) or not isinstance(length, numbers.Integral) or length < longest:
            raise InputError(f"{self.name}.pad: length={length!r} must be an integer at least the "
                             f"longest item's {key!r} ({longest})")
        return int(length)

    def pad_value(self, key, array):
        return 0 if key == "attention_mask" else self.padding_value

    def pad_one(self, key, array, axis, target):
        missing = target - array.shape[axis]
        if missing == 0:
            return array
        widths = [(0, 0)] * array.ndim
        widths[axis] = (0, missing) if self.padding_side == "right" else (missing, 0)
        return np.pad(array, widths, constant_values=array.dtype.type(self.pad_value(key, array)))


def pad_samples(fe, samples, target, mask=None):
    """Pad a clip (and its sample mask) with padding_value on the padding side, as
    SequenceFeatureExtractor._pad does."""
    missing = target - samples.shape[0]
    if missing <= 0:
        return samples, mask
    widths = (0, missing) if fe.padding_side == "right" else (missing, 0)
    samples = np.pad(samples, widths, constant_values=fe.padding_value)
    return samples, (None if mask is None else np.pad(mask, widths))


def zero_mean_unit_var(values):
    """Wav2Vec2FeatureExtractor.zero_mean_unit_var_norm of one clip over its true length: the
    float32 mean and variance NumPy takes, with transformers' 1e-7."""
    return (values - values.mean()) / np.sqrt(values.var() + 1e-7)


# ---- the extractors ------------------------------------------------------------------------


def _frames_mask(mask, hop_length):
    """WhisperFeatureExtractor's sample mask -> frame mask: every hop_length-th sample, less the
    last when the padded length is not a multiple of hop_length (the STFT's last frame is
    dropped)."""
    frames = mask[::hop_length]
    return frames[:-1] if mask.shape[0] % hop_length else frames


@register("WhisperFeatureExtractor")
class WhisperFeatureExtractor(FeatureExtractor):
    """Whisper's log-mel spectrogram: (feature_size, nb_max_frames) float32 of the clip padded /
    truncated to chunk_length seconds; transformers' NumPy path (_np_extract_fbank_features).

    Its torch path (taken when torch is installed) runs the STFT and the mel projection in
    float32, so its features differ from these by float32 rounding (see the tests' figures).
    `fe(samples, truncation=False, padding="longest", return_attention_mask=True)` is the call
    the ASR pipeline makes on a clip longer than chunk_length: the whole clip, len // hop_length
    frames, unpadded. The frame mask is returned when asked (or when the config says so; there
    transformers returns the sample mask uncut, a quirk we do not copy).
    """

    model_input_names = ["input_features"]
    defaults = {**FeatureExtractor.defaults, "feature_size": 80, "return_attention_mask": False}
    time_axis = {"input_features": 1, "attention_mask": 0}
    PADDINGS = ("max_length", "longest", "do_not_pad")

    def setup(self, *, hop_length=160, chunk_length=30, n_fft=400, dither=0.0):
        self.hop_length = self.positive_int("hop_length", hop_length)
        self.chunk_length = self.positive_int("chunk_length", chunk_length)
        self.n_fft = self.positive_int("n_fft", n_fft)
        if self.number("dither", dither) != 0.0:
            self.fail("dither", dither, "0.0 (dithering adds random noise; it is not implemented)")
        # transformers derives these two and ignores the config's n_samples / nb_max_frames
        self.n_samples = self.chunk_length * self.sampling_rate
        self.nb_max_frames = self.n_samples // self.hop_length
        self.window = S.window_function(self.n_fft, "hann")
        self.mel_filters = S.mel_filter_bank(1 + self.n_fft // 2, self.feature_size, 0.0, 8000.0,
                                             self.sampling_rate, norm="slaney", mel_scale="slaney")

    def __call__(self, samples, *, truncation=True, padding="max_length", max_length=None,
                 pad_to_multiple_of=None, return_attention_mask=None):
        samples = self.samples(samples)
        padding = "longest" if padding is True else "do_not_pad" if padding is False else padding
        self.choice("padding", padding, self.PADDINGS)
        limit = (self.n_samples if max_length is None
                 else self.positive_int("max_length", max_length))
        if pad_to_multiple_of is not None:
            limit = _round_up(limit, self.positive_int("pad_to_multiple_of", pad_to_multiple_of))
        if truncation:
            samples = samples[:limit]
        target = {"max_length": limit, "do_not_pad": 0,
                  "longest": _round_up(samples.shape[0], pad_to_multiple_of)}[padding]
        samples, mask = pad_samples(self, samples, target, np.ones(samples.shape[0], np.int32))
        item = {"input_features": self.log_mel(samples)}
        if self.return_attention_mask if return_attention_mask is None else return_attention_mask:
            item["attention_mask"] = _frames_mask(mask, self.hop_length)
        return item

    def log_mel(self, samples):
        spec = S.spectrogram(samples, self.window, frame_length=self.n_fft,
                             hop_length=self.hop_length, power=2.0, mel_filters=self.mel_filters,
                             log_mel="log10")[:, :-1]
        spec = np.maximum(spec, spec.max() - 8.0)
        return (spec + 4.0) / 4.0

    def pad_value(self, key, array):
        """Padding frames get the value transformers computes for silent samples (a zero frame's
        log10 is -10, raised to 8 below the clip's peak): frames past a shorter clip's end then
        equal its batched call, but for the two or three frames whose window reaches the end
        (transformers sees zeros there, the clip alone sees its reflection)."""
        if key == "attention_mask":
            return 0
        return max(float(array.max()) - 2.0, -1.5)


def _round_up(length, multiple):
    if multiple is None or length % multiple == 0:
        return length
    return (length // multiple + 1) * multiple


@register("ASTFeatureExtractor")
class ASTFeatureExtractor(FeatureExtractor):
    """The Audio Spectrogram Transformer's Kaldi fbank: (max_length, num_mel_bins) float32 log
    mel energies (25 ms Hann frames every 10 ms, pre-emphasis 0.97, DC removed, 512-point FFT),
    zero-padded / truncated to max_length frames, then (x - mean) / (2 std).

    This is transformers' NumPy path, taken where torchaudio is not installed; with torchaudio it
    calls torchaudio.compliance.kaldi.fbank, which computes the same in float32.
    """

    model_input_names = ["input_values", "attention_mask"]
    defaults = {**FeatureExtractor.defaults, "return_attention_mask": False}
    fixed = {"input_values": 0}
    KALDI_EPSILON = 1.192092955078125e-07   # float32 eps, Kaldi's log floor

    def setup(self, *, num_mel_bins=128, max_length=1024, do_normalize=True, mean=-4.2677393,
              std=4.5689974):
        self.num_mel_bins = self.positive_int("num_mel_bins", num_mel_bins)
        self.max_length = self.positive_int("max_length", max_length)
        self.do_normalize = self.flag("do_normalize", do_normalize)
        self.mean = self.number("mean", mean)
        self.std = self.number("std", std, positive=True)
        # transformers fixes the frame (400), hop (160) and FFT (512) sizes whatever the rate
        self.mel_filters = S.mel_filter_bank(257, self.num_mel_bins, 20, self.sampling_rate // 2,
                                             self.sampling_rate, norm=None, mel_scale="kaldi",
                                             triangularize_in_mel_space=True)
        self.window = S.window_function(400, "hann", periodic=False)

    def __call__(self, samples):
        samples = self.samples(samples)
        if samples.shape[0] < 400:
            raise InputError(f"{self.name} needs at least 400 samples (one 25 ms frame), got "
                             f"{samples.shape[0]}")
        fbank = S.spectrogram(samples, self.window, frame_length=400, hop_length=160,
                              fft_length=512, power=2.0, center=False, preemphasis=0.97,
                              mel_filters=self.mel_filters, log_mel="log",
                              mel_floor=self.KALDI_EPSILON, remove_dc_offset=True).T
        fbank = fbank[:self.max_length]
        if fbank.shape[0] < self.max_length:
            fbank = np.pad(fbank, ((0, self.max_length - fbank.shape[0]), (0, 0)))
        if self.do_normalize:
            fbank = (fbank - self.mean) / (self.std * 2)
        return {"input_values": fbank}


@register("Wav2Vec2FeatureExtractor")
class Wav2Vec2FeatureExtractor(FeatureExtractor):
    """The raw waveform, float32, zero-mean unit-variance per clip when do_normalize:
    {"input_values": (T,)} (+ "attention_mask" (T,) int32 when asked or configured).

    pad() right-pads (or left, per padding_side) with padding_value, mask 0 there: transformers'
    batched call with an attention mask, which normalizes each clip over its own samples. Its
    batched call *without* a mask (return_attention_mask false) normalizes over the padding too;
    pipelines featurize clip by clip, so they never see that.
    """

    model_input_names = ["input_values", "attention_mask"]
    defaults = {**FeatureExtractor.defaults, "return_attention_mask": False}
    time_axis = {"input_values": 0, "attention_mask": 0}

    def setup(self, *, do_normalize=True):
        self.do_normalize = self.flag("do_normalize", do_normalize)

    def __call__(self, samples, *, return_attention_mask=None):
        values = self.samples(samples)
        if self.do_normalize:
            values = zero_mean_unit_var(values)
        return self.with_mask({"input_values": values}, values.shape[0], return_attention_mask)

    def with_mask(self, item, length, return_attention_mask):
        if self.return_attention_mask if return_attention_mask is None else return_attention_mask:
            item["attention_mask"] = np.ones(length, np.int32)
        return item


@register("SpeechT5FeatureExtractor")
class SpeechT5FeatureExtractor(Wav2Vec2FeatureExtractor):
    """SpeechT5: `fe(samples)` is the waveform side (as Wav2Vec2, do_normalize off by default,
    the mask on); `fe.target(samples)` the log10 mel spectrogram of a target clip (what
    transformers' `audio_target=` gives): {"input_values": (frames, num_mel_bins)}."""

    defaults = {**FeatureExtractor.defaults, "return_attention_mask": True}

    def setup(self, *, do_normalize=False, num_mel_bins=80, hop_length=16, win_length=64,
              win_function="hann_window", frame_signal_scale=1.0, fmin=80, fmax=7600,
              mel_floor=1e-10, reduction_factor=2):
        # frame_signal_scale and reduction_factor are deprecated and unused by transformers
        self.do_normalize = self.flag("do_normalize", do_normalize)
        self.num_mel_bins = self.positive_int("num_mel_bins", num_mel_bins)
        hop_ms, win_ms = self.positive_int("hop_length", hop_length), self.positive_int(
            "win_length", win_length)
        self.sample_size = win_ms * self.sampling_rate // 1000
        self.sample_stride = hop_ms * self.sampling_rate // 1000
        self.n_fft = S.optimal_fft_length(self.sample_size)
        self.mel_floor = self.number("mel_floor", mel_floor, positive=True)
        self.window = S.window_function(self.sample_size,
                                        self.choice("win_function", win_function, S.WINDOWS))
        self.mel_filters = S.mel_filter_bank(self.n_fft // 2 + 1, self.num_mel_bins,
                                             self.number("fmin", fmin), self.number("fmax", fmax),
                                             self.sampling_rate, norm="slaney", mel_scale="slaney")

    def target(self, samples, *, return_attention_mask=None):
        spec = S.spectrogram(self.samples(samples), self.window, frame_length=self.sample_size,
                             hop_length=self.sample_stride, fft_length=self.n_fft,
                             mel_filters=self.mel_filters, mel_floor=self.mel_floor,
                             log_mel="log10").T
        return self.with_mask({"input_values": spec}, spec.shape[0], return_attention_mask)


@register("ClapFeatureExtractor")
class ClapFeatureExtractor(FeatureExtractor):
    """CLAP's dB mel spectrogram of a max_length_s window: {"input_features": (channels, frames,
    feature_size) float32, "is_longer": (1,) bool}.

    truncation "fusion" gives 4 channels (HTK filters): for a clip longer than the window, the
    whole clip's mel shrunk to the window (torch's bilinear interpolate) and three random crops
    (front, middle, back thirds); a shorter clip, repeated four times. "rand_trunc" gives one
    channel (Slaney filters) of a random crop of a longer clip. A shorter clip is padded first:
    "repeatpad" (whole repeats, then zeros), "repeat" (repeats, cut), "pad" (zeros).

    Random draws happen only for a clip longer than the window: one `randint` (rand_trunc) or three
    `choice` (fusion), plus, under fusion, the `randint(0, 1)` transformers spends to mark one clip
    of a batch as longer when none is (alone, a clip is that one, so is_longer is True). They come
    from `rng` (a np.random.RandomState), else a RandomState(`seed`), else NumPy's global
    RandomState, as transformers draws them: after `np.random.seed(s)` both draw the same crops.
    """

    model_input_names = ["input_features", "is_longer"]
    defaults = {**FeatureExtractor.defaults, "feature_size": 64, "sampling_rate": 48000,
                "return_attention_mask": False}
    fixed = {"input_features": 1}
    TRUNCATIONS, PADDINGS = ("fusion", "rand_trunc"), ("repeatpad", "repeat", "pad")

    def setup(self, *, hop_length=480, max_length_s=10, fft_window_size=1024, frequency_min=0,
              frequency_max=14000, top_db=None, truncation="fusion", padding="repeatpad"):
        # top_db is stored by transformers but never applied
        self.hop_length = self.positive_int("hop_length", hop_length)
        self.fft_window_size = self.positive_int("fft_window_size", fft_window_size)
        self.truncation = self.choice("truncation", truncation, self.TRUNCATIONS)
        self.padding = self.choice("padding", padding, self.PADDINGS)
        samples = self.number("max_length_s", max_length_s, positive=True) * self.sampling_rate
        if samples != int(samples):
            self.fail("max_length_s", max_length_s, "a whole number of samples at sampling_rate")
        self.nb_max_samples = int(samples)
        self.window = S.window_function(self.fft_window_size, "hann")
        bank = lambda **norm: S.mel_filter_bank(  # noqa: E731
            (self.fft_window_size >> 1) + 1, self.feature_size,
            self.number("frequency_min", frequency_min),
            self.number("frequency_max", frequency_max),
            self.sampling_rate, **norm)
        self.mel_filters = bank(norm=None, mel_scale="htk")
        self.mel_filters_slaney = bank(norm="slaney", mel_scale="slaney")

    def __call__(self, samples, *, truncation=None, padding=None, max_length=None, seed=None,
                 rng=None):
        samples = self.samples(samples, dtype=None)  # transformers keeps float32 / float64 as given
        truncation = self.choice("truncation", truncation or self.truncation, self.TRUNCATIONS)
        padding = self.choice("padding", padding or self.padding, self.PADDINGS)
        limit = self.nb_max_samples if max_length is None else self.positive_int("max_length",
                                                                                 max_length)
        rng = self.random_state(seed, rng)
        if samples.shape[0] > limit:
            mel, longer = self.long_mel(samples, limit, truncation, rng)
        else:
            mel, longer = self.short_mel(self.pad_clip(samples, limit, padding), truncation), False
        if truncation == "fusion" and not longer:
            longer = bool(rng.randint(0, 1) == 0)   # transformers' pick among a batch of one
        return {"input_features": mel, "is_longer": np.array([longer])}

    @staticmethod
    def random_state(seed, rng):
        if rng is not None:
            if not isinstance(rng, np.random.RandomState):
                raise InputError("rng must be a np.random.RandomState (transformers draws CLAP's "
                                 "crops with the legacy RandomState API), got "
                                 f"{type(rng).__name__}")
            return rng
        return np.random.mtrand._rand if seed is None else np.random.RandomState(seed)

    def db_mel(self, samples, filters):
        return S.spectrogram(samples, self.window, frame_length=self.fft_window_size,
                             hop_length=self.hop_length, power=2.0, mel_filters=filters,
                             log_mel="dB").T

    @staticmethod
    def pad_clip(samples, limit, padding):
        if samples.shape[0] < limit:
            repeats = int(limit / len(samples))
            if padding == "repeat":
                samples = np.tile(samples, repeats + 1)[:limit]
            elif padding == "repeatpad":
                samples = np.tile(samples, repeats)
            samples = np.pad(samples, (0, limit - samples.shape[0]), mode="constant")
        return samples

    def short_mel(self, samples, truncation):
        if truncation == "fusion":
            return np.stack([self.db_mel(samples, self.mel_filters)] * 4)
        return self.db_mel(samples, self.mel_filters_slaney)[None]

    def long_mel(self, samples, limit, truncation, rng):
        if truncation == "rand_trunc":
            start = rng.randint(0, samples.shape[0] - limit + 1)
            return self.db_mel(samples[start:start + limit], self.mel_filters_slaney)[None], True
        mel = self.db_mel(samples, self.mel_filters)
        chunk = limit // self.hop_length + 1
        if chunk == mel.shape[0]:  # longer by less than a hop: the whole clip, as transformers
            return np.stack([mel] * 4), False
        if self.feature_size != 64:
            raise InputError(f"{self.name}: fusion of a clip longer than {limit} samples shrinks "
                             "the mel to 64 bins in transformers; feature_size is "
                             f"{self.feature_size}: use truncation='rand_trunc'")
        ranges = np.array_split(np.arange(mel.shape[0] - chunk + 1), 3)
        starts = [rng.choice(r if len(r) else [0]) for r in ranges]
        crops = [mel[s:s + chunk] for s in starts]
        return np.stack([S.shrink_bilinear(mel, chunk)] + crops), True
