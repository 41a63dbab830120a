"""Which tokenizer a repo has: ``tokenizer_for(repo)`` picks it from the repo's files, as
transformers' AutoTokenizer would.

    from transmuter.preprocess.text.auto import tokenizer_for
    tok = tokenizer_for(repo)     # a Tokenizer (tokenizer.json), or a slow kind below

A repo with tokenizer.json gets ``Tokenizer`` (tokenizer.py). Without one, the slow tokenizers
transformers would load, tried in this order:

- source.spm and vocab.json: ``MarianTokenizer`` (tokenizer.py);
- spiece.model and tokenizer_class SiglipTokenizer: ``SiglipTokenizer`` (siglip.py);
- vocab.json and tokenizer_class Wav2Vec2CTCTokenizer: ``CTCTokenizer`` (ctc.py).

Anything else is refused (``Tokenizer.from_repo``'s error: no tokenizer.json). VITS and SpeechT5
tokenizers are built by their text-to-speech pipelines, not here.
"""

from ... import hub
from .ctc import CTCTokenizer
from .siglip import SiglipTokenizer
from .tokenizer import MarianTokenizer, Tokenizer


def tokenizer_for(repo):
    """The tokenizer of a ``hub`` repo (or a folder, or a Hub id), by its files (see above)."""
    repo = hub.resolve(repo) if not isinstance(repo, hub.Repo) else repo
    if repo.has("tokenizer.json"):
        return Tokenizer.from_repo(repo)
    if repo.has("source.spm") and repo.has("vocab.json"):
        return MarianTokenizer.from_repo(repo)
    if repo.has("spiece.model") and _tokenizer_class(repo) == "SiglipTokenizer":
        return SiglipTokenizer.from_repo(repo)
    if repo.has("vocab.json") and _tokenizer_class(repo) == "Wav2Vec2CTCTokenizer":
        return CTCTokenizer.from_repo(repo)
    return Tokenizer.from_repo(repo)  # refuses a repo without tokenizer.json, naming it


def _tokenizer_class(repo):
    """tokenizer_config.json's tokenizer_class (read only where the files point to a slow kind)."""
    return repo.json("tokenizer_config.json", {}).get("tokenizer_class")
