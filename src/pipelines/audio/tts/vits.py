"""text-to-audio on VITS / MMS-TTS (``model.onnx``: input_ids, attention_mask -> waveform
[1, samples]); what text-to-audio's families share, and why a text runs alone: pipeline.py.

    pipe = transmuter.pipeline("text-to-speech", "Xenova/mms-tts-eng")
    pipe("Hello, world!")  -> {"audio": float32 [1, samples], "sampling_rate": 16000}
"""

from .... import buckets
from ....errors import PipelineError
from ....preprocess.text.tokenizer import Encoding
from ....preprocess.text.vits import VitsTokenizer
from .pipeline import TextToAudioPipeline


class VitsTextToAudioPipeline(TextToAudioPipeline):
    """text-to-audio for a model whose config.json says vits."""

    model_type = "vits"

    def _speech(self, model, config, repo, *, sampling_rate, sequence_length, **_):
        speech = VitsSpeech(model, repo, sequence_length, self._run_model)
        return speech, sampling_rate or _config_rate(config)

    def _speech_options(self, forward_params, generate_kwargs, options):
        if generate_kwargs:  # as transformers, for a model that does not generate
            raise PipelineError("VITS runs in one pass: it takes no generate_kwargs")
        given = {**forward_params, **options}
        seed = given.pop("seed", None)
        if given:
            raise PipelineError(f"text-to-audio with VITS takes no option(s) {sorted(given)} "
                                "(its noise scales and speaking rate are fixed in the graph)")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise PipelineError(f"seed must be an int, got {seed!r}")
        # the graph's noise (RandomNormalLike) draws from a key made from the seed: a seed
        # repeats the audio, on each backend (torch's generator is not reproduced)
        return {"seed": seed} if seed is not None else {}


class VitsSpeech:
    """A VITS graph (input_ids, attention_mask -> waveform [1, samples]) and its tokenizer;
    ``run`` is the pipeline's compiled call of the graph."""

    def __init__(self, model, repo, sequence_length, run):
        self.tokenizer = VitsTokenizer.from_repo(repo)
        names = {v.name for v in model.inputs}
        if "input_ids" not in names or not names <= {"input_ids", "attention_mask"}:
            raise PipelineError(f"A VITS graph takes input_ids and attention_mask; this one "
                                f"takes {sorted(names)}")
        self.names = [n for n in ("input_ids", "attention_mask") if n in names]
        given = buckets.DEFAULT_SEQUENCE_LENGTHS if sequence_length is None else sequence_length
        self.lengths = buckets.lengths(given, max(buckets.DEFAULT_SEQUENCE_LENGTHS))
        self.run = run

    def speak_ids(self, ids, seed=None):
        length = buckets.length(len(ids), self.lengths)
        feed = self.tokenizer.pad([Encoding(ids)], length, self.names, rows=1)
        return self.run(feed, rng_seed=seed)["waveform"].astype("float32", copy=False)


def _config_rate(config):
    """transformers reads sample_rate, then sampling_rate, from config.json."""
    rate = None
    for name in ("sample_rate", "sampling_rate"):
        rate = config.get(name) or rate
    if not rate:
        raise PipelineError("config.json gives no sampling_rate; pass sampling_rate=")
    return int(rate)
