"""Task names and aliases, as transformers spells them, plus ours; each maps to its pipeline class,
and a model family that a task runs its own way to that family's class (picked by config.json's
``model_type``: a task's class knows no family).

Classes are named by module path and imported on first use, so importing transmuter does not
import every task."""

import importlib
import re

from ..errors import PipelineError

# task -> (module under transmuter.pipelines, class name)
TASKS = {
    "feature-extraction": ("text.embedding", "FeatureExtractionPipeline"),
    "text-embedding": ("text.embedding", "TextEmbeddingPipeline"),
    "text-classification": ("text.classification", "TextClassificationPipeline"),
    "token-classification": ("text.token_classification", "TokenClassificationPipeline"),
    "fill-mask": ("text.fill_mask", "FillMaskPipeline"),
    "question-answering": ("text.question_answering", "QuestionAnsweringPipeline"),
    "zero-shot-classification": ("text.zero_shot", "ZeroShotClassificationPipeline"),
    "text-ranking": ("text.ranking", "TextRankingPipeline"),
    "text-generation": ("text.text_generation", "TextGenerationPipeline"),
    "zero-shot-entity-recognition": ("text.zero_shot_entity", "ZeroShotEntityRecognitionPipeline"),
    "text2text-generation": ("text.text2text", "Text2TextGenerationPipeline"),
    "summarization": ("text.text2text", "SummarizationPipeline"),
    "translation": ("text.text2text", "TranslationPipeline"),
    "image-classification": ("vision.classification", "ImageClassificationPipeline"),
    "zero-shot-image-classification": ("vision.zero_shot", "ZeroShotImageClassificationPipeline"),
    "object-detection": ("vision.detection", "ObjectDetectionPipeline"),
    "zero-shot-object-detection": ("vision.zero_shot_detection", "ZeroShotObjectDetectionPipeline"),
    "image-segmentation": ("vision.segmentation", "ImageSegmentationPipeline"),
    "mask-generation": ("vision.mask_generation", "MaskGenerationPipeline"),
    "depth-estimation": ("vision.depth", "DepthEstimationPipeline"),
    "image-to-image": ("vision.image_to_image", "ImageToImagePipeline"),
    "background-removal": ("vision.background_removal", "BackgroundRemovalPipeline"),
    "image-feature-extraction": ("vision.embedding", "ImageFeatureExtractionPipeline"),
    "image-to-text": ("vision.image_to_text", "ImageToTextPipeline"),
    "image-text-to-text": ("vision.image_text_to_text", "ImageTextToTextPipeline"),
    "image-embedding": ("vision.embedding", "ImageEmbeddingPipeline"),
    "text-to-image": ("vision.diffusion.pipeline", "TextToImagePipeline"),
    "text-to-audio": ("audio.tts.pipeline", "TextToAudioPipeline"),
    "audio-classification": ("audio.classification", "AudioClassificationPipeline"),
    "zero-shot-audio-classification": ("audio.zero_shot", "ZeroShotAudioClassificationPipeline"),
    "automatic-speech-recognition": ("audio.speech_recognition",
                                     "AutomaticSpeechRecognitionPipeline"),
}
# (task, config.json's model_type) -> (module, class name): a family's own class (a subclass of
# the task's), for models of that type; other model types get the task's class of TASKS.
FAMILIES = {
    ("image-to-text", "florence2"): ("vision.florence2.pipeline", "Florence2Pipeline"),
    ("zero-shot-object-detection", "grounding-dino"): ("vision.grounding_dino",
                                                       "GroundingDinoDetectionPipeline"),
    # text-to-audio's own class runs neither: it refuses other model types
    ("text-to-audio", "vits"): ("audio.tts.vits", "VitsTextToAudioPipeline"),
    ("text-to-audio", "speecht5"): ("audio.tts.speecht5", "SpeechT5TextToAudioPipeline"),
    # Kokoro as onnx-community exports it (transformers.js' StyleTextToSpeech2Model)
    ("text-to-audio", "style_text_to_speech_2"): ("audio.tts.kokoro",
                                                  "KokoroTextToAudioPipeline"),
}
# transformers' pipelines/__init__.py TASK_ALIASES, plus ours.
ALIASES = {
    "sentiment-analysis": "text-classification",
    "ner": "token-classification",
    "sentence-similarity": "text-embedding",
    "embeddings": "text-embedding",
    "reranking": "text-ranking",
    "text-to-speech": "text-to-audio",
}
# Tasks transformers (or the design) names that no pipeline here implements yet.
PLANNED = set()


def normalize(task):
    """The canonical name of ``task`` (aliases resolved)."""
    if not isinstance(task, str):
        raise PipelineError(f"task must be a string like 'text-classification', got {task!r}")
    return ALIASES.get(task, task)


def model_type(task, repo):
    """config.json's model_type of ``repo``; without one, the family its files show: for
    text-to-audio, a Kokoro folder in kokoro-onnx's layout (one .onnx file at the root beside a
    voices .npz, or a .bin that holds one, and a phoneme vocabulary: vocab.json or config.json's
    "vocab")."""
    kind = repo.config().get("model_type")
    if kind is not None or normalize(task) != "text-to-audio":
        return kind
    files = repo.files()
    root = [f for f in files if "/" not in f]
    voices = any(f.endswith(".npz") or f.startswith("voices") and f.endswith(".bin")
                 for f in root)
    vocabulary = "vocab.json" in root or "vocab" in repo.config()
    if sum(f.endswith(".onnx") for f in root) == 1 and voices and vocabulary:
        return "style_text_to_speech_2"
    return None


def get(task, model_type=None):
    """The pipeline class of ``task`` (or one of its aliases); with ``model_type`` (config.json's),
    that family's class where FAMILIES has one."""
    name = normalize(task)
    if isinstance(model_type, str) and (name, model_type) in FAMILIES:
        return _load(*FAMILIES[name, model_type])
    if re.fullmatch(r"translation_[^_]+_to_[^_]+", name):  # transformers' translation_xx_to_yy
        return get("translation").for_task(name)
    if name not in TASKS:
        if name in PLANNED:
            raise PipelineError(f"Task {task!r} has no pipeline in Transmuter yet; the tasks "
                                f"it has: {', '.join(supported())}")
        raise PipelineError(f"Unknown task {task!r}; known tasks: {', '.join(supported())} "
                            f"(aliases: {', '.join(f'{a} -> {t}' for a, t in ALIASES.items())})")
    return _load(*TASKS[name])


def _load(module, cls):
    return getattr(importlib.import_module(f"{__package__}.{module}"), cls)


def supported():
    return sorted(TASKS)
