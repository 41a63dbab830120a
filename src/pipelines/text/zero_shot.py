"""zero-shot-classification: transformers' ZeroShotClassificationPipeline on an NLI model.

    pipe("The match ended late.", candidate_labels=["sports", "weather"])
    -> {"sequence": ..., "labels": [best first], "scores": [...]}

Each label becomes the hypothesis of a (sequence, hypothesis) pair, one row of the batch; the
entailment logit (id from label2id) scores it.
"""

import numpy as np

from ...errors import PipelineError
from .base import TextPipeline, check_text


class ZeroShotClassificationPipeline(TextPipeline):
    task = "zero-shot-classification"

    def __init__(self, model, config=None, **kwargs):
        label2id = (config or {}).get("label2id") or {}
        if not label2id:
            raise PipelineError("zero-shot-classification needs an NLI model: its config.json "
                                "has no label2id (entailment / neutral / contradiction)")
        # transformers: the first label starting with "entail", else -1 (with a warning)
        self.entailment_id = next((int(i) for label, i in label2id.items()
                                   if label.lower().startswith("entail")), -1)
        super().__init__(model, config, **kwargs)

    def _sanitize_parameters(self, candidate_labels=None, hypothesis_template="This example is {}.",
                             multi_label=False, multi_class=None, **unknown):
        super()._sanitize_parameters(**unknown)
        pre = {"hypothesis_template": hypothesis_template}
        if candidate_labels is not None:
            if isinstance(candidate_labels, str):
                candidate_labels = [x.strip() for x in candidate_labels.split(",") if x.strip()]
            pre["candidate_labels"] = list(candidate_labels)
        if multi_class is not None:  # transformers' deprecated name
            multi_label = multi_class
        return pre, {}, {"multi_label": bool(multi_label)}

    def __call__(self, inputs, candidate_labels=None, **kwargs):
        if candidate_labels is not None:
            kwargs["candidate_labels"] = candidate_labels
        return super().__call__(inputs, **kwargs)

    def preprocess(self, sequence, candidate_labels=None, hypothesis_template="This example is {}."):
        sequence = check_text(sequence, "sequence")
        if not candidate_labels:
            raise PipelineError("zero-shot-classification needs candidate_labels (a list, or a "
                                "comma-separated string) with at least one label")
        if hypothesis_template.format(candidate_labels[0]) == hypothesis_template:
            raise PipelineError(f'The hypothesis_template "{hypothesis_template}" has no {{}} for '
                                "the label; e.g. 'This example is {}.'")
        for label in candidate_labels:
            enc = self.tokenizer.encode(sequence, hypothesis_template.format(label),
                                        max_length=self.sequence_lengths[-1],
                                        truncation="only_first")
            yield {"encoding": enc, "candidate_label": label, "sequence": sequence}

    def postprocess(self, outputs, multi_label=False):
        labels = [o["candidate_label"] for o in outputs]
        logits = np.stack([self.output(o, "logits") for o in outputs]).astype(np.float32)
        if multi_label or len(labels) == 1:
            contradiction_id = -1 if self.entailment_id == 0 else 0
            pair = logits[:, [contradiction_id, self.entailment_id]]
            scores = (np.exp(pair) / np.exp(pair).sum(-1, keepdims=True))[:, 1]
        else:
            entail = logits[:, self.entailment_id]
            scores = np.exp(entail) / np.exp(entail).sum(-1, keepdims=True)
        order = list(reversed(scores.argsort()))
        return {"sequence": outputs[0]["sequence"], "labels": [labels[i] for i in order],
                "scores": scores[order].tolist()}
