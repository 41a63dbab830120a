"""question-answering: transformers' QuestionAnsweringPipeline (fast-tokenizer path).

    pipe({"question": "Where?", "context": "I live in London."})
    pipe(question="Where?", context="I live in London.", top_k=2)
    -> {"score", "start", "end", "answer"} (a list of them when top_k > 1)

A context longer than ``max_seq_len`` tokens is split into windows that overlap by ``doc_stride``
tokens; each window is a chunk (a row of a batch), and the best spans over all windows win.
"""

import numpy as np

from ...errors import PipelineError
from .base import TextPipeline, check_text


class QuestionAnsweringPipeline(TextPipeline):
    task = "question-answering"

    def _sanitize_parameters(self, top_k=None, doc_stride=None, max_answer_len=None,
                             max_seq_len=None, max_question_len=None,
                             handle_impossible_answer=None, align_to_words=None, padding=None,
                             **unknown):
        super()._sanitize_parameters(**unknown)
        pre = {k: v for k, v in (("doc_stride", doc_stride), ("max_seq_len", max_seq_len))
               if v is not None}
        post = {}
        if top_k is not None:
            if not isinstance(top_k, int) or top_k < 1:
                raise PipelineError(f"top_k parameter should be >= 1 (got {top_k})")
            post["top_k"] = top_k
        if max_answer_len is not None:
            if max_answer_len < 1:
                raise PipelineError(f"max_answer_len parameter should be >= 1 (got "
                                    f"{max_answer_len})")
            post["max_answer_len"] = max_answer_len
        if handle_impossible_answer is not None:
            post["handle_impossible_answer"] = handle_impossible_answer
        if align_to_words is not None:
            post["align_to_words"] = align_to_words
        return pre, {}, post

    def __call__(self, inputs=None, *, question=None, context=None, **kwargs):
        if inputs is None:
            if question is None or context is None:
                raise PipelineError("question-answering needs both question= and context= (or "
                                    'a {"question": ..., "context": ...} dict)')
            if isinstance(question, list) or isinstance(context, list):
                questions = question if isinstance(question, list) else [question] * len(context)
                contexts = context if isinstance(context, list) else [context] * len(questions)
                if len(questions) != len(contexts):
                    raise PipelineError(f"{len(questions)} questions but {len(contexts)} contexts")
                inputs = [{"question": q, "context": c} for q, c in zip(questions, contexts)]
            else:
                inputs = {"question": question, "context": context}
        return super().__call__(inputs, **kwargs)

    def _is_single(self, inputs):
        return isinstance(inputs, dict)

    def _input_kind(self):
        return 'a {"question": ..., "context": ...} dict'

    def preprocess(self, example, doc_stride=None, max_seq_len=None):
        if not isinstance(example, dict) or "question" not in example or "context" not in example:
            raise PipelineError('Each question-answering input is a dict {"question": ..., '
                                f'"context": ...}}; got {example!r:.100}')
        question = check_text(example["question"], "question")
        context = check_text(example["context"], "context")
        if max_seq_len is None:
            max_seq_len = min(self.tokenizer.model_max_length or self.max_length, 384)
        max_seq_len = min(max_seq_len, self.sequence_lengths[-1])
        if doc_stride is None:
            doc_stride = min(max_seq_len // 2, 128)
        if doc_stride > max_seq_len:
            raise PipelineError(f"`doc_stride` ({doc_stride}) is larger than `max_seq_len` "
                                f"({max_seq_len})")
        question_first = self.tokenizer.padding_side == "right"
        first, second = (question, context) if question_first else (context, question)
        enc = self.tokenizer.encode(first, second, max_length=max_seq_len, stride=doc_stride,
                                    truncation="only_second" if question_first else "only_first")
        for span in [enc] + list(enc.overflowing):
            p_mask = np.array([tok != 1 if question_first else 0 for tok in span.sequence_ids],
                              np.int64)
            if self.tokenizer.cls_token_id is not None:
                p_mask[np.array(span.ids) == self.tokenizer.cls_token_id] = 0
            yield {"encoding": span, "p_mask": p_mask, "context": context}

    def postprocess(self, outputs, top_k=1, handle_impossible_answer=False, max_answer_len=15,
                    align_to_words=True):
        min_null_score = 1000000  # large and positive
        answers = []
        sequence_index = 1 if self.tokenizer.padding_side == "right" else 0
        for out in outputs:
            enc, n = out["encoding"], len(out["encoding"].ids)
            start = self.output(out, "start_logits")[:n]
            end = self.output(out, "end_logits")[:n]
            pre_topk = top_k * 2 + 10 if align_to_words else top_k
            starts, ends, scores, min_null_score = select_starts_ends(
                start, end, out["p_mask"], np.array(enc.attention_mask), min_null_score,
                pre_topk, handle_impossible_answer, max_answer_len)
            for s, e, score in zip(starts, ends, scores):
                start_index, end_index = get_indices(enc, s, e, sequence_index, align_to_words)
                text = out["context"][start_index:end_index]
                same = next((a for a in answers if a["answer"].lower() == text.lower()), None)
                if same:
                    same["score"] += score.item()
                else:
                    answers.append({"score": score.item(), "start": start_index,
                                    "end": end_index, "answer": text})
        if handle_impossible_answer:
            answers.append({"score": min_null_score, "start": 0, "end": 0, "answer": ""})
        answers = sorted(answers, key=lambda x: x["score"], reverse=True)[:top_k]
        return answers[0] if len(answers) == 1 else answers


def decode_spans(start, end, topk, max_answer_len, undesired_tokens):
    """The ``topk`` best (start, end) pairs with start <= end < start + max_answer_len, both on
    allowed tokens, scored by p(start) * p(end)."""
    start, end = start[None], end[None]
    outer = np.matmul(np.expand_dims(start, -1), np.expand_dims(end, 1))
    candidates = np.tril(np.triu(outer), max_answer_len - 1)
    scores_flat = candidates.flatten()
    if topk == 1:
        idx_sort = [np.argmax(scores_flat)]
    elif len(scores_flat) < topk:
        idx_sort = np.argsort(-scores_flat)
    else:
        idx = np.argpartition(-scores_flat, topk)[0:topk]
        idx_sort = idx[np.argsort(-scores_flat[idx])]
    starts, ends = np.unravel_index(idx_sort, candidates.shape)[1:]
    allowed = undesired_tokens.nonzero()
    desired = np.isin(starts, allowed) & np.isin(ends, allowed)
    starts, ends = starts[desired], ends[desired]
    return starts, ends, candidates[0, starts, ends]


def select_starts_ends(start, end, p_mask, attention_mask, min_null_score=1000000, top_k=1,
                       handle_impossible_answer=False, max_answer_len=15):
    """Mask what cannot be an answer, softmax the logits, keep the null (CLS) score, decode."""
    undesired = np.abs(np.array(p_mask) - 1)
    if attention_mask is not None:
        undesired = undesired & attention_mask
    masked = undesired == 0.0
    start = np.where(masked, -10000.0, start.astype(np.float32))
    end = np.where(masked, -10000.0, end.astype(np.float32))
    start = np.exp(start - start.max(axis=-1, keepdims=True))
    start = start / start.sum()
    end = np.exp(end - end.max(axis=-1, keepdims=True))
    end = end / end.sum()
    if handle_impossible_answer:
        min_null_score = min(min_null_score, (start[0] * end[0]).item())
    start[0] = end[0] = 0.0  # mask CLS
    starts, ends, scores = decode_spans(start, end, top_k, max_answer_len, undesired)
    return starts, ends, scores, min_null_score


def get_indices(enc, s, e, sequence_index, align_to_words):
    """Character span of tokens s..e: whole words when ``align_to_words`` (and the tokenizer
    knows words), else the tokens' offsets."""
    if align_to_words:
        try:
            start_word, end_word = enc.token_to_word(int(s)), enc.token_to_word(int(e))
            return (enc.word_to_chars(start_word, sequence_index)[0],
                    enc.word_to_chars(end_word, sequence_index)[1])
        except Exception:  # noqa: BLE001 - transformers falls back the same way on any failure
            pass
    return enc.offsets[s][0], enc.offsets[e][1]
