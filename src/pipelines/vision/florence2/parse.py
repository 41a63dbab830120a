"""Florence-2's task prompts and ``post_process_generation``, as transformers 4.57's
Florence2Processor / Florence2PostProcessor (models/florence2/processing_florence2.py): the
generated text (decoded with its special tokens) becomes the task's answer, locations
``<loc_0>``..``<loc_999>`` dequantized to image pixels.

    post_process_generation("</s><s>car<loc_52><loc_333><loc_932><loc_774></s>", "<OD>",
                            (640, 480), config)
        -> {"<OD>": {"bboxes": [[33, 160, 596, 371]], "labels": ["car"]}}

Coordinates are integers, as transformers gives them (bin centre in float32, then truncated);
``config`` is processor_config.json's ``post_processor_config`` (the phrase-grounding banned
phrases; its ocr pattern is read by transformers under the key "PATTERN" only); without one, the
banned phrases are BANNED_GROUNDING.
"""

import re

import numpy as np

from ....errors import PipelineError

# task token -> post-processing type (Florence2Processor.tasks_answer_post_processing_type)
ANSWER_TYPES = {
    "<OCR>": "pure_text",
    "<OCR_WITH_REGION>": "ocr",
    "<CAPTION>": "pure_text",
    "<DETAILED_CAPTION>": "pure_text",
    "<MORE_DETAILED_CAPTION>": "pure_text",
    "<OD>": "description_with_bboxes",
    "<DENSE_REGION_CAPTION>": "description_with_bboxes",
    "<CAPTION_TO_PHRASE_GROUNDING>": "phrase_grounding",
    "<REFERRING_EXPRESSION_SEGMENTATION>": "polygons",
    "<REGION_TO_SEGMENTATION>": "polygons",
    "<OPEN_VOCABULARY_DETECTION>": "description_with_bboxes_or_polygons",
    "<REGION_TO_CATEGORY>": "pure_text",
    "<REGION_TO_DESCRIPTION>": "pure_text",
    "<REGION_TO_OCR>": "pure_text",
    "<REGION_PROPOSAL>": "bboxes",
}
PROMPTS = {  # task_prompts_without_inputs
    "<OCR>": "What is the text in the image?",
    "<OCR_WITH_REGION>": "What is the text in the image, with regions?",
    "<CAPTION>": "What does the image describe?",
    "<DETAILED_CAPTION>": "Describe in detail what is shown in the image.",
    "<MORE_DETAILED_CAPTION>": "Describe with a paragraph what is shown in the image.",
    "<OD>": "Locate the objects with category name in the image.",
    "<DENSE_REGION_CAPTION>": "Locate the objects in the image, with their descriptions.",
    "<REGION_PROPOSAL>": "Locate the region proposals in the image.",
}
PROMPTS_WITH_INPUT = {  # task_prompts_with_input
    "<CAPTION_TO_PHRASE_GROUNDING>": "Locate the phrases in the caption: {input}",
    "<REFERRING_EXPRESSION_SEGMENTATION>": "Locate {input} in the image with mask",
    "<REGION_TO_SEGMENTATION>": "What is the polygon mask of region {input}",
    "<OPEN_VOCABULARY_DETECTION>": "Locate {input} in the image.",
    "<REGION_TO_CATEGORY>": "What is the region {input}?",
    "<REGION_TO_DESCRIPTION>": "What does the region {input} describe?",
    "<REGION_TO_OCR>": "What text is in the region {input}?",
}
# The phrase-grounding phrases transformers' convert_florence2_original_pytorch_to_hf.py writes
# into post_processor_config (the remote-code processor's black list): used for a repo whose
# processor_config.json has none (onnx-community's, made from the remote-code processor).
BANNED_GROUNDING = [
    "it", "I", "me", "mine", "you", "your", "yours", "he", "him", "his", "she", "her", "hers",
    "they", "them", "their", "theirs", "one", "oneself", "we", "us", "our", "ours", "you", "your",
    "yours", "they", "them", "their", "theirs", "mine", "yours", "his", "hers", "its", "ours",
    "yours", "theirs", "myself", "yourself", "himself", "herself", "itself", "ourselves",
    "yourselves", "themselves", "this", "that", "these", "those", "who", "whom", "whose", "which",
    "what", "who", "whom", "whose", "which", "that", "all", "another", "any", "anybody", "anyone",
    "anything", "each", "everybody", "everyone", "everything", "few", "many", "nobody", "none",
    "one", "several", "some", "somebody", "someone", "something", "each other", "one another",
    "myself", "yourself", "himself", "herself", "itself", "ourselves", "yourselves", "themselves",
    "the image", "image", "images", "the", "a", "an", "a group", "other objects", "lots", "a set",
]
BINS = 1000
_LOC = r"<loc_(\d+)>"
_QUAD = r"(.+?)" + _LOC * 8
_BOX = _LOC * 4
_PHRASE = r"^\s*(.*?)(?=<od>|</od>|<box>|</box>|<bbox>|</bbox>|<loc_)"


def task_prompt(task, text=None):
    """The prompt a task token stands for (Florence2Processor._construct_prompts on ``task`` +
    ``text``); a string that holds no task token is its own prompt."""
    prompt = task + (text or "")
    for token, fixed in PROMPTS.items():
        if token in prompt:
            if prompt != token:
                raise PipelineError(f"The task {token} takes no text (got {text!r}); tasks "
                                    f"that take one: {', '.join(PROMPTS_WITH_INPUT)}")
            return fixed
    for token, template in PROMPTS_WITH_INPUT.items():
        if token in prompt:
            return template.format(input=prompt.replace(token, "").strip())
    return prompt


def post_process_generation(text, task, image_size, config=None):
    """``{task: answer}`` for the generated ``text``; ``image_size`` is (width, height)."""
    kind = ANSWER_TYPES.get(task, "pure_text")
    config = config or {"phrase_grounding": {"banned_grounding_tokens": BANNED_GROUNDING}}
    if kind == "pure_text":  # the one answer that keeps <pad> (transformers strips <s>, </s>)
        return {task: text.replace("<s>", "").replace("</s>", "").strip()}
    text = text.replace("<s>", "").replace("</s>", "").replace("<pad>", "")
    if kind in ("description_with_bboxes", "bboxes"):
        found = _with_bboxes(text, image_size, allow_empty=kind == "bboxes")
        return {task: {"bboxes": [i["bbox"] for i in found],
                       "labels": [i["cat_name"] for i in found]}}
    if kind == "ocr":
        ocr = config.get("ocr") or {}
        found = _ocr(text, ocr.get("PATTERN") or _QUAD, image_size, ocr.get("AREA_THRESHOLD", 0.0))
        return {task: {"quad_boxes": [q for q, _ in found], "labels": [t for _, t in found]}}
    if kind == "phrase_grounding":
        banned = set((config.get("phrase_grounding") or {}).get("banned_grounding_tokens", []))
        boxes, labels = [], []
        for phrase, bboxes in _grounding(text, image_size, banned):
            boxes += bboxes
            labels += [phrase] * len(bboxes)
        return {task: {"bboxes": boxes, "labels": labels}}
    if kind == "polygons":
        found = _with_polygons(text, image_size, allow_empty=True)
        return {task: {"polygons": [i["polygons"] for i in found],
                       "labels": [i["cat_name"] for i in found]}}
    # description_with_bboxes_or_polygons
    found = _with_polygons(text, image_size) if "<poly>" in text else _with_bboxes(text, image_size)
    answer = {"bboxes": [], "bboxes_labels": [], "polygons": [], "polygons_labels": []}
    for i in found:
        key = "polygons" if "polygons" in i else "bboxes"
        answer[key].append(i["polygons"] if key == "polygons" else i["bbox"])
        answer[f"{key}_labels"].append(i["cat_name"])
    return {task: answer}


def dequantize(bins, size):
    """Bin centres in pixels, as Florence2PostProcessor.dequantize: pairs (x, y) or boxes
    (x0, y0, x1, y1); float32 arithmetic as torch's, truncated to int."""
    bins = np.asarray(bins, np.int64)
    per_bin = np.array([size[0] / BINS, size[1] / BINS], np.float32)
    scale = np.tile(per_bin, bins.shape[-1] // 2)
    return ((bins + np.float32(0.5)).astype(np.float32) * scale).astype(np.int32).tolist()


def _ocr(text, pattern, size, area_threshold):
    out = []
    for content, *quad in re.findall(pattern, text):
        box = dequantize([int(i) for i in quad], size)
        if area_threshold > 0:
            xs, ys = box[0::2], box[1::2]
            area = 0.5 * abs(sum(xs[i] * ys[i + 1] - xs[i + 1] * ys[i] for i in range(3)))
            if area < size[0] * size[1] * area_threshold:
                continue
        out.append((box, content.strip()))
    return out


def _phrase_boxes(phrase_text, size):
    """(phrase, boxes) of one ``phrase<loc_..>x4...`` match, or None where transformers skips."""
    phrase_text = phrase_text.replace("<ground>", "", 1).replace("<obj>", "", 1)
    match = re.search(_PHRASE, phrase_text)
    if not phrase_text or not match:
        return None
    bins = [[int(g) for g in m.groups()] for m in re.finditer(_BOX, phrase_text)]
    if not bins:
        return None
    return match.group().strip(), dequantize(bins, size)


def _grounding(text, size, banned):
    out = []
    for phrase_text in re.findall(r"([^<]+(?:<loc_\d+>){4,})", text):
        found = _phrase_boxes(phrase_text, size)
        if found is None or found[0] in banned:
            continue
        out.append((_ascii(found[0]), found[1]))
    return out


def _with_bboxes(text, size, allow_empty=False):
    pattern = r"(?:(?:<loc_\d+>){4,})" if allow_empty else r"([^<]+(?:<loc_\d+>){4,})"
    out = []
    for phrase_text in re.findall(pattern, text):
        found = _phrase_boxes(phrase_text, size)
        if found is not None:
            out += [{"bbox": box, "cat_name": _ascii(found[0])} for box in found[1]]
    return out


def _with_polygons(text, size, allow_empty=False):
    """parse_description_with_polygons_from_text_and_spans with its default tokens (<sep>,
    <poly>, </poly>) and no box at the start."""
    marks = r"(?:<loc_\d+>|<sep>|<poly>|</poly>){4,}"
    pattern = f"(?:{marks})" if allow_empty else f"([^<]+{marks})"
    out = []
    for phrase_text in re.findall(pattern, text):
        stripped = re.sub(r"^<loc_\d+>", "", phrase_text, count=1)
        match = re.search(r"^\s*(.*?)(?=<od>|</od>|<box>|</box>|<bbox>|</bbox>|<loc_|<poly>)",
                          stripped)
        if (not stripped and not allow_empty) or not match:
            continue
        phrase = match.group().strip()
        if "<poly>" in phrase_text and "</poly>" in phrase_text:
            instances = [m.group(1) for m in re.finditer(r"<poly>(.*?)</poly>", phrase_text)]
        else:
            instances = [phrase_text]
        for inst in instances:
            polygons = []
            for m in re.finditer(r"((?:<loc_\d+>)+)(?:<sep>|$)", inst):
                bins = [int(b) for b in re.findall(_LOC, m.group(1))]
                bins = bins[:len(bins) // 2 * 2]
                polygons.append(dequantize(bins, size) if bins else [])
            if polygons:
                out.append({"cat_name": phrase, "polygons": polygons})
    return out


def _ascii(phrase):
    return phrase.encode("ascii", "ignore").decode("ascii")
