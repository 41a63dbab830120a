"""fill-mask: transformers' FillMaskPipeline.

    pipe("Paris is the [MASK] of France.")  -> [{"score", "token", "token_str", "sequence"}] * top_k
    Several masks give one such list per mask; ``targets`` limits the candidates.
"""

import warnings

import numpy as np

from ...errors import PipelineError
from ..heads import softmax
from .base import TextPipeline, check_text


class FillMaskPipeline(TextPipeline):
    task = "fill-mask"

    def __init__(self, model, config=None, **kwargs):
        if kwargs["tokenizer"].mask_token_id is None:
            raise PipelineError("fill-mask: the tokenizer defines no mask_token "
                                "(tokenizer_config.json), so this model cannot fill masks")
        super().__init__(model, config, **kwargs)

    def _sanitize_parameters(self, top_k=None, targets=None, **unknown):
        super()._sanitize_parameters(**unknown)
        post = {}
        if top_k is not None:
            if not isinstance(top_k, int) or top_k < 1:
                raise PipelineError(f"top_k must be a positive int, got {top_k!r}")
            post["top_k"] = top_k
        if targets is not None:
            post["target_ids"] = self.target_ids(targets)
        return {}, {}, post

    def target_ids(self, targets):
        """Vocabulary ids of ``targets``; a word outside it becomes its first token, as
        transformers does (with a warning)."""
        vocab = self.tokenizer.get_vocab()
        ids = []
        for target in [targets] if isinstance(targets, str) else targets:
            id_ = vocab.get(target)
            if id_ is None:
                enc = self.tokenizer.encode(target, add_special_tokens=False, max_length=1)
                if not enc.ids:
                    warnings.warn(f"The target {target!r} is not in the vocabulary; ignoring it")
                    continue
                id_ = enc.ids[0]
                warnings.warn(f"The target {target!r} is not in the vocabulary; replacing it "
                              f"with {self.tokenizer.id_to_token(id_)!r}")
            ids.append(id_)
        ids = list(set(ids))
        if not ids:
            raise PipelineError("At least one target must be provided when passed.")
        return np.array(ids)

    def preprocess(self, text):
        encoding = self.tokenizer.encode(check_text(text, "text"),
                                         max_length=self.sequence_lengths[-1])
        if self.tokenizer.mask_token_id not in encoding.ids:
            raise PipelineError(f"No mask_token ({self.tokenizer.mask_token}) found in the input: "
                                f"{text!r:.100}")
        yield {"encoding": encoding}

    def postprocess(self, outputs, top_k=5, target_ids=None):
        out = outputs[0]
        input_ids = np.array(out["encoding"].ids)
        masked = np.nonzero(input_ids == self.tokenizer.mask_token_id)[0]
        probs = softmax(self.output(out, "logits")[masked])
        if target_ids is not None:
            probs = probs[..., target_ids]
            top_k = min(top_k, len(target_ids))
        single = len(masked) == 1
        result = []
        for i, row in enumerate(probs):
            order = _topk(row, top_k)
            result.append([self._proposition(input_ids, masked[i], row[j],
                                             int(j if target_ids is None else target_ids[j]),
                                             single) for j in order])
        return result[0] if single else result

    def _proposition(self, input_ids, position, score, token, single):
        tokens = input_ids.copy()
        tokens[position] = token
        tokens = tokens[tokens != self.tokenizer.pad_token_id]
        return {"score": float(score), "token": token,
                "token_str": self.tokenizer.decode([token]),
                "sequence": self.tokenizer.decode(tokens, skip_special_tokens=single)}


def _topk(row, k):
    # torch.topk order: largest first; ties keep the lower index first (stable sort)
    return np.argsort(-row, kind="stable")[:k]
