"""Batches of columns in and out of a pipeline, for engines that hand a function a batch of rows
(Ray Data's ``map_batches``): a dict of NumPy arrays or a pandas DataFrame.

Result columns are named once, for every task, from the pipeline's result for a row:

- an array (``text-embedding``, ``image-embedding``, ``feature-extraction``) goes in
  ``embedding``: a fixed-size 2-D array (rows x dim, the result's dtype, float32) when every row
  has the same shape, else one array per row;
- a dict (``automatic-speech-recognition``'s ``{"text": ...}``, ``depth-estimation``) gives one
  column per key;
- a list of dicts (``text-classification`` with ``top_k``, ``image-classification``, ``ner``,
  ``image-segmentation``, ``object-detection``) gives one column per key, each row holding the
  list of that key's values (``label``: ``["cat", "dog"]``, ``score``: ``[0.9, 0.1]``);
- a list of one dict of generated text (``generated_text``, ``summary_text``,
  ``translation_text``: ``text-generation``, ``image-to-text``, ``text2text-generation``) gives
  plain strings, one per row.

PIL images in a result (segmentation masks, depth maps) become NumPy arrays. ``prefix`` is put
before every result column; a result column that would overwrite an input column is refused.
"""

import numpy as np

from ..pipelines import PipelineError

ARRAY_COLUMN = "embedding"
# What a pipeline takes in one row, by the kind of featurizer it declares.
ACCEPTS = {
    "text": (str, dict),  # dicts: {"question", "context"}, {"text", "text_pair"} rows (parquet)
    "image": (str, bytes, np.ndarray),  # a path, the file's bytes, an HWC array (read_images)
    "audio": (str, bytes, np.ndarray, dict),  # a path, the file's bytes (read_binary_files)
}
DEFAULT_COLUMN = {"text": "text", "image": "image", "audio": "bytes"}


def modality(pipe):
    """"image", "audio" or "text": what one input of ``pipe`` is."""
    if "image_processor" in pipe.featurizers:
        return "image"
    if "feature_extractor" in pipe.featurizers:
        return "audio"
    return "text"


def accepts(value, kind):
    """True when a row's ``value`` is something a ``kind`` pipeline takes (PIL images too)."""
    if isinstance(value, ACCEPTS[kind]):
        return True
    return kind == "image" and type(value).__module__.startswith("PIL.")


# --- batches in ---------------------------------------------------------------------------------

def read_batch(batch):
    """(columns: name -> column, rebuild) where ``rebuild(new_columns)`` gives ``batch`` in its
    own format with ``new_columns`` added (the input columns are never modified)."""
    if isinstance(batch, dict):
        return batch, lambda new: {**batch, **new}
    if _is_pandas(batch):
        return {str(name): batch[name] for name in batch.columns}, lambda new: _with(batch, new)
    raise PipelineError(f"A batch must be a dict of NumPy arrays or a pandas DataFrame, got "
                        f"{type(batch).__module__}.{type(batch).__name__}: pass "
                        "batch_format='numpy' (the default) or 'pandas' to map_batches")


def _is_pandas(batch):
    return type(batch).__module__.startswith("pandas") and hasattr(batch, "columns")


def _with(frame, new):
    out = frame.copy(deep=False)
    for name, column in new.items():
        # pandas holds one object per cell: a 2-D array becomes its rows (Ray turns them back
        # into a tensor column)
        out[name] = list(column) if isinstance(column, np.ndarray) and column.ndim > 1 else column
    return out


def row_values(columns, name, kind, task):
    """The values of column ``name``, one plain Python / NumPy value per row. A missing column,
    or one where no row holds what the pipeline takes, is a PipelineError naming it and the
    columns present."""
    if name not in columns:
        raise PipelineError(f"The batch has no column {name!r} for the {task} pipeline; its "
                            f"columns are {sorted(columns)}: pass column= to the predictor "
                            "(read_text gives 'text', read_images 'image', read_binary_files "
                            "'bytes' and 'path')")
    column = columns[name]
    values = [_plain_input(v) for v in (column.to_numpy() if hasattr(column, "to_numpy")
                                        and not isinstance(column, np.ndarray) else column)]
    if values and not any(accepts(v, kind) for v in values):
        found = sorted({type(v).__name__ for v in values})
        raise PipelineError(f"Column {name!r} holds {', '.join(found)} values; the {task} "
                            f"pipeline takes {kind} rows ({describe(kind)}). The batch's columns "
                            f"are {sorted(columns)}: pass column= naming the right one")
    return values


def describe(kind):
    return {"text": "str, or a dict such as {'question', 'context'}",
            "image": "an HWC uint8 array, encoded bytes, a path or a PIL image",
            "audio": "encoded bytes, a path, an array of samples or {'raw', 'sampling_rate'}"}[kind]


def _plain_input(value):
    if isinstance(value, np.str_):
        return str(value)
    if isinstance(value, np.bytes_):
        return bytes(value)
    return value


# --- results out --------------------------------------------------------------------------------

def result_columns(results, task, prefix="", taken=()):
    """name -> column (one entry per row; a row whose result is None, a failed row, is null in
    every column) from the pipeline's results. A name already in ``taken`` is refused."""
    fields = [None if r is None else result_fields(r, task) for r in results]
    names = []
    for f in fields:
        names.extend(k for k in (f or ()) if k not in names)
    out = {}
    for key in names:
        name = prefix + key
        if name in taken:
            raise PipelineError(f"The {task} result column {name!r} would overwrite the batch's "
                                f"column {name!r}: pass prefix= (e.g. prefix='result_') to the "
                                "predictor")
        out[name] = column([None if f is None else f.get(key) for f in fields])
    return out


def result_fields(result, task):
    """key -> value of one row's result (the rules of this module's docstring)."""
    if isinstance(result, np.ndarray) or _is_number_list(result):
        return {ARRAY_COLUMN: np.asarray(result)}
    if isinstance(result, dict):
        return {k: _plain_output(v) for k, v in result.items()}
    if isinstance(result, list) and all(isinstance(r, dict) for r in result):
        keys = list(dict.fromkeys(k for r in result for k in r))
        if len(result) == 1 and keys and all(k.endswith("_text") for k in keys):
            return {k: _plain_output(v) for k, v in result[0].items()}
        return {k: [_plain_output(r.get(k)) for r in result] for k in keys}
    raise PipelineError(f"Cannot make columns of the {task} result {type(result).__name__}: "
                        f"{result!r:.80}")


def _is_number_list(result):
    """feature-extraction's nested lists of floats (transformers' format)."""
    while isinstance(result, list) and result:
        result = result[0]
    return isinstance(result, (float, int)) and not isinstance(result, bool)


def _plain_output(value):
    if type(value).__module__.startswith("PIL."):
        return np.asarray(value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {k: _plain_output(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain_output(v) for v in value]
    return value


def column(values):
    """One column: arrays of one shape and dtype stack into a fixed-size array (embeddings:
    rows x dim), numbers and bools into a 1-D array; anything else (strings, lists, arrays of
    several shapes, nulls) is an object array with one Python value per row."""
    if values and all(isinstance(v, np.ndarray) for v in values) and \
            len({(v.shape, v.dtype) for v in values}) == 1:
        return np.stack(values)
    for kind in (bool, int, float):  # exact types: a column mixing them stays objects
        if values and all(type(v) is kind for v in values):
            return np.array(values)
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out
