"""What audio tasks share: a feature extractor, audio inputs, batches of clips of one shape."""

import itertools

from ...preprocess.audio.load import is_audio, load_audio
from ..base import Pipeline
from ..featurizers import AudioFeaturizer


class AudioPipeline(Pipeline):
    """A pipeline over a feature extractor (preprocessor_config.json). An input is a NumPy array
    of samples at the model's rate, a dict ``{"raw" | "array": samples, "sampling_rate": sr}``,
    a path or the bytes of an audio file; each becomes one chunk holding its features, or several
    (windows of a long recording, see speech_recognition.py)."""

    featurizers = ("feature_extractor",)
    # A clip's features are small next to an image's (Whisper's 30 s: 0.96 MB), but long
    # recordings make many windows: read a few batches ahead, enough to group equal shapes.
    lookahead_batches = list_lookahead_batches = 4
    prefetch = True  # files decode in background threads while the model runs
    # a (channels, samples) array is refused, as transformers' classification pipelines refuse
    # it; speech recognition averages the channels, as transformers' ASR pipeline does
    mix_channels = False

    def __init__(self, model, config=None, *, feature_extractor, **kwargs):
        self.feature_extractor = feature_extractor
        self.featurizer = AudioFeaturizer(feature_extractor, {v.name for v in model.inputs})
        super().__init__(model, config, **kwargs)

    @property
    def sampling_rate(self):
        return self.feature_extractor.sampling_rate

    def _is_single(self, inputs):
        return is_audio(inputs)

    def _input_kind(self):
        return ("audio (a NumPy array of samples, a dict {'raw': samples, 'sampling_rate': sr}, "
                "a file path or the file's bytes)")

    def samples(self, inputs):
        """float32 mono samples of one input at the feature extractor's rate."""
        return load_audio(inputs, self.sampling_rate, mix_channels=self.mix_channels)

    def preprocess(self, inputs):
        yield {"audio": self.feature_extractor(self.samples(inputs))}

    def _forward(self, chunks, **params):
        """Clips of one compiled shape run together (chunks come sorted by size): a graph that
        takes no attention mask sees each clip unpadded, so a batch gives what each clip gives
        alone."""
        out = []
        for _, group in itertools.groupby(chunks, key=lambda c: self.featurizer.shape(c["audio"])):
            out += self._forward_group(list(group), **params)
        return out

    def _forward_group(self, chunks):
        return super()._forward(chunks)

