"""Text generation over decoder graphs: settings, logits processors, sampling, KV-cache modes,
stopping and the decode loop (design §5)."""

from .cache import CacheLayout
from .config import GenerationConfig
from .loop import Generator

__all__ = ["GenerationConfig", "Generator", "CacheLayout"]
