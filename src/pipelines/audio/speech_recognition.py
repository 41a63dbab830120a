"""automatic-speech-recognition: transformers' AutomaticSpeechRecognitionPipeline over CTC models
(wav2vec2, HuBERT, Data2Vec audio, Wav2Vec2-BERT: ctc.py), Whisper (encoder + merged decoder, or
decoder_model + decoder_with_past_model: whisper/pipeline.py) and Moonshine (seq2seq_speech.py).

    pipe("speech.wav")                                   -> {"text": "HELLO WORLD"}
    pipe(clip, return_timestamps="word")                 -> {"text": ..., "chunks": [...]}
    pipe("long.flac", chunk_length_s=30, batch_size=8)   # windows of one recording share batches
    pipe(clip, generate_kwargs={"language": "fr", "task": "translate"})      # Whisper

``chunk_length_s`` cuts a recording into windows overlapping by ``stride_length_s`` (default a
sixth of the window) on each side, as transformers' ``chunk_iter``; the windows of one recording
and of other recordings share batches, and their outputs are merged as transformers merges them
(CTC: the strides' frames dropped; Whisper: the tokenizer's ``_decode_asr``).
"""

from ...errors import PipelineError
from . import ctc, seq2seq_speech
from .base import AudioPipeline
from .whisper import pipeline as whisper


class AutomaticSpeechRecognitionPipeline(AudioPipeline):
    task = "automatic-speech-recognition"
    featurizers = ("feature_extractor", "tokenizer")
    encoder_component = "encoder_model"  # Whisper's second graph; it takes variant= too
    mix_channels = True

    def __init__(self, model, config=None, *, tokenizer, repo=None, encoder=None,
                 encoder_variant=None, **kwargs):
        self.tokenizer = tokenizer
        kind = whisper if whisper.is_whisper(config) else \
            seq2seq_speech if seq2seq_speech.is_seq2seq_speech(config) else \
            ctc if ctc.is_ctc(config, model) else None
        if kind is None:
            raise PipelineError(f"{self.task} runs CTC models (wav2vec2, HuBERT, ...: a "
                                "*ForCTC config.json), Whisper and Moonshine; this model is "
                                f"{(config or {}).get('architectures') or 'of no known kind'}")
        self.head = kind.Head(self, model, config, repo=repo, encoder=encoder,
                              encoder_variant=encoder_variant)
        super().__init__(model, config, repo=repo, **kwargs)

    @staticmethod
    def onnx_component(repo):
        """Whisper's decoder when the repo has one (the merged decoder, else decoder_model of
        a split pair: hub.Repo.decoder_component), else the CTC model's model.onnx."""
        names = [f.rsplit("/", 1)[-1] for f in repo.onnx_files()]
        return repo.decoder_component() if any(n.startswith("decoder_model")
                                               for n in names) else "model"

    def _sanitize_parameters(self, chunk_length_s=None, stride_length_s=None,
                             return_timestamps=None, return_language=None, generate_kwargs=None,
                             decoder_kwargs=None, ignore_warning=None, **options):
        if decoder_kwargs is not None:
            raise PipelineError("decoder_kwargs are for CTC with a language model (pyctcdecode), "
                                "which Transmuter does not run")
        if generate_kwargs is not None and not isinstance(generate_kwargs, dict):
            raise PipelineError(f"generate_kwargs must be a dict, got {generate_kwargs!r:.80}")
        options = {**(generate_kwargs or {}), **options}
        pre = {"chunk": _chunking(chunk_length_s, stride_length_s, self.sampling_rate,
                                  self.head.align_to)}
        fwd, post = self.head.sanitize(return_timestamps, return_language, options)
        return pre, fwd, post

    def preprocess(self, inputs, chunk=None):
        samples = self.samples(inputs)
        if chunk is None:
            stride = _input_stride(inputs, len(samples), self.sampling_rate)
            for item in self.head.whole(samples):
                item = dict(item, samples=len(samples))
                yield dict(item, stride=stride) if stride is not None else item
            return
        length, left, right = chunk
        step = length - left - right
        for start in range(0, len(samples), step):
            window = samples[start:start + length]
            last = start + length >= len(samples)
            stride = (len(window), 0 if start == 0 else left, 0 if last else right)
            if len(window) > stride[1]:  # transformers drops a window that is all stride
                yield {"audio": self.head.features(window), "stride": stride, "is_last": last,
                       "samples": len(window)}
            if last:
                break

    def _forward_group(self, chunks, **params):
        return self.head.forward(chunks, **params)

    def postprocess(self, outputs, **params):
        return self.head.postprocess(outputs, **params)


def _input_stride(inputs, samples, sampling_rate):
    """A dict input's own ``"stride": (left, right)`` (samples at its rate, as transformers
    takes it: the caller's overlap with its neighbours, decoded away), in the model's samples."""
    if not isinstance(inputs, dict) or inputs.get("stride") is None:
        return None
    stride = inputs["stride"]
    if not isinstance(stride, (list, tuple)) or len(stride) != 2 or \
            not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in stride):
        raise PipelineError(f"An input's 'stride' must be (left, right) sample counts, got "
                            f"{stride!r:.80}")
    if stride[0] + stride[1] > samples:
        raise PipelineError(f"The input's stride {tuple(stride)} is longer than its "
                            f"{samples} samples")
    ratio = sampling_rate / inputs.get("sampling_rate", sampling_rate)
    return samples, int(round(stride[0] * ratio)), int(round(stride[1] * ratio))


def _chunking(chunk_length_s, stride_length_s, sampling_rate, align_to):
    """(window, left stride, right stride) in samples, aligned as transformers aligns them to
    the model's samples per logit frame; None without ``chunk_length_s``."""
    if not chunk_length_s:
        if stride_length_s is not None:
            raise PipelineError("stride_length_s needs chunk_length_s")
        return None
    if not _number(chunk_length_s) or chunk_length_s <= 0:
        raise PipelineError(f"chunk_length_s must be a positive number of seconds, got "
                            f"{chunk_length_s!r}")
    if stride_length_s is None:
        stride_length_s = chunk_length_s / 6
    strides = [stride_length_s] * 2 if _number(stride_length_s) else list(stride_length_s)
    if len(strides) != 2 or not all(_number(s) and s >= 0 for s in strides):
        raise PipelineError(f"stride_length_s must be seconds >= 0 or a (left, right) pair, got "
                            f"{stride_length_s!r}")

    def samples(seconds):
        return int(round(seconds * sampling_rate / align_to) * align_to)

    length, left, right = samples(chunk_length_s), samples(strides[0]), samples(strides[1])
    if length < left + right:
        raise PipelineError(f"chunk_length_s ({chunk_length_s}) must be more than the two "
                            f"strides ({strides[0]} + {strides[1]} s)")
    if length - left - right <= 0:
        raise PipelineError("chunk_length_s leaves no audio between the strides")
    return length, left, right


def _number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)
