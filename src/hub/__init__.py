"""The Hub layer: a repo id or folder resolved to files (repo.py), the variant chosen
(variants.py), downloads verified (verify.py), models loaded from a repo (load.py) and saved
(save.py), framework weight files read and written (weight_files.py). ``transmuter.hub.resolve``
and the names below keep the paths of the old hub.py."""

from ..engine.io.onnx_file import read_onnx
from .load import load, load_beside
from .repo import Repo, is_repo_id, is_repo_source, resolve
from .save import save, save_pretrained
from .variants import DTYPE_SUFFIXES, choose_variant, external_data_files, kv_cache_dtype

__all__ = ["Repo", "resolve", "is_repo_id", "is_repo_source", "load", "load_beside", "save",
           "save_pretrained", "choose_variant", "kv_cache_dtype", "external_data_files",
           "DTYPE_SUFFIXES", "read_onnx"]
