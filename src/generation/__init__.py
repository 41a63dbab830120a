"""Text generation over decoder graphs: settings, logits processors, sampling, KV-cache modes
(steppers), beam search, stopping, the decode loop and encoder-decoder models (design §5)."""

from .cache import CacheLayout
from .config import GenerationConfig
from .loop import Generator
from .seq2seq import Seq2SeqGenerator

__all__ = ["GenerationConfig", "Generator", "Seq2SeqGenerator", "CacheLayout"]
