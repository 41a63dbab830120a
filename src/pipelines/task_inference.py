"""A task when ``pipeline()`` is given none, and a model when it is given none, as the peers do.

The task: the repo's ``pipeline_tag`` (the Hub's model info, else the model card's front matter),
as transformers' ``pipeline(model=...)`` reads it; else config.json's ``architectures``, by the
head its class name ends with (the model classes transformers' AutoModelFor<Task> maps pick).
The model: transformers.js' default of the task (src/pipelines/index.js SUPPORTED_TASKS).
"""

import logging
import re

from ..errors import PipelineError
from . import registry

log = logging.getLogger(__name__)

# transformers.js SUPPORTED_TASKS[task].default: (model, dtype). text-embedding takes
# feature-extraction's (transformers.js runs sentence-transformers models as that task). Left
# out: text-to-audio (onnx-community/Supertonic-TTS-ONNX, a model family Transmuter does not run)
# and the tasks transformers.js has no default for.
DEFAULT_MODELS = {
    "text-classification": ("Xenova/distilbert-base-uncased-finetuned-sst-2-english", None),
    "token-classification": ("Xenova/bert-base-multilingual-cased-ner-hrl", None),
    "question-answering": ("Xenova/distilbert-base-cased-distilled-squad", None),
    "fill-mask": ("onnx-community/ettin-encoder-32m-ONNX", "fp32"),
    "summarization": ("Xenova/distilbart-cnn-6-6", None),
    "translation": ("Xenova/t5-small", None),
    "text2text-generation": ("Xenova/flan-t5-small", None),
    "text-generation": ("onnx-community/Qwen3-0.6B-ONNX", "q4"),
    "zero-shot-classification": ("Xenova/distilbert-base-uncased-mnli", None),
    "audio-classification": ("Xenova/wav2vec2-base-superb-ks", None),
    "zero-shot-audio-classification": ("Xenova/clap-htsat-unfused", None),
    "automatic-speech-recognition": ("Xenova/whisper-tiny.en", None),
    "image-to-text": ("Xenova/vit-gpt2-image-captioning", None),
    "image-classification": ("Xenova/vit-base-patch16-224", None),
    "image-segmentation": ("Xenova/detr-resnet-50-panoptic", None),
    "background-removal": ("Xenova/modnet", None),
    "zero-shot-image-classification": ("Xenova/clip-vit-base-patch32", None),
    "object-detection": ("Xenova/detr-resnet-50", None),
    "zero-shot-object-detection": ("Xenova/owlvit-base-patch32", None),
    "image-to-image": ("Xenova/swin2SR-classical-sr-x2-64", None),
    "depth-estimation": ("onnx-community/depth-anything-v2-small", None),
    "feature-extraction": ("onnx-community/all-MiniLM-L6-v2-ONNX", "fp32"),
    "text-embedding": ("onnx-community/all-MiniLM-L6-v2-ONNX", "fp32"),
    "image-feature-extraction": ("onnx-community/dinov3-vits16-pretrain-lvd1689m-ONNX", "fp32"),
}


def default_model(task):
    """(model, dtype) transformers.js loads for ``task`` when given no model."""
    name = registry.normalize(task)
    registry.get(name)  # an unknown task's error first
    if name.startswith("translation_"):
        name = "translation"
    if name not in DEFAULT_MODELS:
        raise PipelineError(f"pipeline({task!r}) needs a model: {name} has no default model "
                            "(transformers.js names none that Transmuter runs). Give a Hub id "
                            "like 'org/name', a local folder, or a transmuter.Model")
    model, dtype = DEFAULT_MODELS[name]
    # transformers warns the same way ("No model was supplied, defaulted to ...")
    log.warning("No model was supplied, defaulted to %s for %s (transformers.js' default); give "
                "model= in production", model, name)
    return model, dtype


# The head an architecture's class name ends with -> task (transformers' model classes:
# BertForSequenceClassification, GPT2LMHeadModel, ...), first match wins.
HEADS = (
    ("ForSequenceClassification", "text-classification"),
    ("ForAudioClassification", "audio-classification"),
    ("ForTokenClassification", "token-classification"),
    ("ForQuestionAnswering", "question-answering"),
    ("ForMaskedLM", "fill-mask"),
    ("ForCausalLM", "text-generation"),
    ("LMHeadModel", "text-generation"),
    ("ForCTC", "automatic-speech-recognition"),
    ("ForImageClassification", "image-classification"),
    ("ForImageClassificationWithTeacher", "image-classification"),
    ("ForObjectDetection", "object-detection"),
    ("ForSemanticSegmentation", "image-segmentation"),
    ("ForUniversalSegmentation", "image-segmentation"),
    ("ForInstanceSegmentation", "image-segmentation"),
    ("ForSegmentation", "image-segmentation"),  # DetrForSegmentation (panoptic)
    # the cut-out models transformers.js' background-removal runs, by their own class names
    ("MODNet", "background-removal"), ("BriaRMBG", "background-removal"),
    ("BiRefNet", "background-removal"),
    ("ForDepthEstimation", "depth-estimation"),
    ("ForImageSuperResolution", "image-to-image"),
    ("ForTextToSpeech", "text-to-audio"),
)
# Where the class name does not say the task: config.json's model_type does.
MODEL_TYPES = {
    # *ForConditionalGeneration
    "whisper": "automatic-speech-recognition", "moonshine": "automatic-speech-recognition",
    "speech_to_text": "automatic-speech-recognition",
    "t5": "text2text-generation", "mt5": "text2text-generation", "bart": "text2text-generation",
    "mbart": "text2text-generation", "marian": "translation", "m2m_100": "translation",
    "pegasus": "summarization",
    "florence2": "image-to-text", "vision-encoder-decoder": "image-to-text",
    "blip": "image-to-text", "idefics3": "image-text-to-text", "smolvlm": "image-text-to-text",
    "qwen2_vl": "image-text-to-text", "qwen2_5_vl": "image-text-to-text",
    "gemma3": "image-text-to-text",
    # dual encoders and detectors queried with text
    "clip": "zero-shot-image-classification", "siglip": "zero-shot-image-classification",
    "clap": "zero-shot-audio-classification",
    "sam": "mask-generation", "sam2": "mask-generation", "sam3_tracker": "mask-generation",
    "vits": "text-to-audio",
}
# detectors queried with text, whose class names say ForObjectDetection
ZERO_SHOT_DETECTORS = {"owlvit", "owlv2", "grounding-dino"}
# families Transmuter runs under one task only, whatever the model card says (Florence-2's card
# says image-text-to-text; its task tokens run here as image-to-text, registry.FAMILIES)
ONLY_TASK = {"florence2": "image-to-text"}
# audio families whose *ForSequenceClassification classifies recordings
AUDIO_TYPES = {"wav2vec2", "hubert", "wavlm", "data2vec-audio", "unispeech", "unispeech-sat",
               "sew", "sew-d", "wav2vec2-conformer", "whisper", "ast"}


def infer_task(repo):
    """The task of ``repo``'s model (a hub.Repo): its pipeline_tag where that names a task here,
    else the one its config.json's architectures and model_type say."""
    tag = pipeline_tag(repo)
    kind = repo.config().get("model_type")
    if kind in ONLY_TASK:
        return ONLY_TASK[kind]
    if tag and _known(tag):
        return registry.normalize(tag)
    if repo.has("model_index.json") and repo.has("unet/model.onnx"):  # a diffusers export
        return "text-to-image"
    if repo.has("modules.json"):  # a sentence-transformers model, as its model_type says
        kind = repo.json("config_sentence_transformers.json", {}).get("model_type")
        if kind in (None, "SentenceTransformer", "CrossEncoder"):
            return "text-ranking" if kind == "CrossEncoder" else "text-embedding"
    task = task_of_config(repo.config(), has_tokenizer=_has_tokenizer(repo))
    if task is None:
        names = repo.config().get("architectures")
        raise PipelineError(
            f"Cannot tell the task of {repo.label}: its pipeline_tag is {tag!r} and config.json's "
            f"architectures {names} with model_type {repo.config().get('model_type')!r} name no "
            f"task here. Give it: pipeline(task, model); tasks: {', '.join(registry.supported())}")
    return task


def task_of_config(config, has_tokenizer=True):
    """The task config.json's architectures (then model_type) say, or None."""
    kind = config.get("model_type")
    for name in config.get("architectures") or []:
        for head, task in HEADS:
            if name.endswith(head):
                if task == "text-classification" and kind in AUDIO_TYPES:
                    return "audio-classification"
                if task == "object-detection" and kind in ZERO_SHOT_DETECTORS:
                    return "zero-shot-object-detection"
                return task
    if kind in MODEL_TYPES:
        return MODEL_TYPES[kind]
    names = config.get("architectures") or []
    if any(n.endswith("Model") for n in names):  # a bare encoder (BertModel, ViTModel)
        return "feature-extraction" if has_tokenizer else "image-feature-extraction"
    return None


def pipeline_tag(repo):
    """The Hub's pipeline_tag of ``repo`` (its model info when it came from the Hub), else the
    ``pipeline_tag:`` of its model card's front matter, else None."""
    tag = getattr(repo, "pipeline_tag", None)
    if tag or not repo.has("README.md"):
        return tag
    with open(repo.file("README.md"), encoding="utf-8") as f:
        text = f.read()
    front = text.split("---")[1] if text.startswith("---") else ""
    match = re.search(r"^pipeline_tag:\s*['\"]?([\w-]+)", front, re.M)
    return match.group(1) if match else None


def _known(tag):
    try:
        registry.get(tag)
    except PipelineError:
        return False
    return True


def _has_tokenizer(repo):
    return any(repo.has(name) for name in ("tokenizer.json", "tokenizer_config.json",
                                           "vocab.txt", "vocab.json"))
