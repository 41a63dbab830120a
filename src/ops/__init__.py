"""Operator implementations, one module per family. Importing this package registers them all."""

import importlib
import pkgutil

from .registry import lookup, op, registered  # noqa: F401


def _import_all():
    for package in (__name__, __name__ + ".contrib"):
        mod = importlib.import_module(package)
        for info in pkgutil.iter_modules(mod.__path__):
            if info.name != "registry":
                importlib.import_module(f"{package}.{info.name}")


_import_all()
