"""References of the espeak-ng languages of src/preprocess/phonemes (tests/test_phonemes.py): the
kokoro package's own text -> phonemes for Spanish, French, Hindi, Italian and Brazilian Portuguese,
misaki's `EspeakG2P` (kokoro's pipeline.py builds it for lang codes e, f, h, i, p), over
phonemizer-fork's espeak-ng backend and the espeakng-loader wheel.

Setup (a venv of its own: misaki pins nothing we have):

    python -m venv /work/venvs/misaki
    /work/venvs/misaki/bin/pip install misaki==0.9.4 phonemizer-fork==3.3.2 espeakng-loader==0.2.4

Run (from the repository root):

    /work/venvs/misaki/bin/python tests/support/record_kokoro_espeak_languages.py
"""

import importlib.metadata
import json
import pathlib

from misaki import espeak

OUT = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "kokoro_phonemes" / "misaki_espeak.json"

# kokoro's LANG_CODES for espeak-ng, and sentences with punctuation, numbers, parentheses, quotes
# and an English word (a language switch in espeak-ng)
SENTENCES = {
    "e": ["Hola, ¿cómo estás? ¡Muy bien!", "El tren sale a las 9:30 (más o menos).",
          "Compré 3 libros y un ordenador nuevo; cuestan 120 euros.",
          "«Buenos días», dijo el señor García… y se fue.", "Me gusta el jazz y el fútbol."],
    "f": ["Bonjour, le monde ! Comment ça va ?", "Il est né en 1987 (à Paris).",
          "« C'est magnifique », dit-elle… puis elle partit.", "J'ai acheté 3 croissants; c'est tout.",
          "Le week-end, nous écoutons du rock."],
    "h": ["नमस्ते, आप कैसे हैं?", "मेरा नाम राम है।", "यह किताब बहुत अच्छी है (सच में)!",
          "मुझे 5 सेब चाहिए।"],
    "i": ["Ciao, come stai? Sto bene!", "Il treno parte alle 8 (forse).",
          "«Che bella giornata», disse Maria… e sorrise.", "Ho comprato 2 pizze; costano 15 euro.",
          "Mi piace il computer nuovo."],
    "p": ["Olá, tudo bem? Tudo ótimo!", "Eu nasci em 1990 (no Rio de Janeiro).",
          "«Que dia lindo», disse João… e saiu.", "Comprei 4 livros; custaram 80 reais.",
          "Eu gosto de futebol e de rock."],
}

LANG_CODES = {"e": "es", "f": "fr-fr", "h": "hi", "i": "it", "p": "pt-br"}

cases = []
for code, sentences in SENTENCES.items():
    g2p = espeak.EspeakG2P(language=LANG_CODES[code])
    for text in sentences:
        phonemes, _ = g2p(text)
        cases.append({"text": text, "language": code, "phonemes": phonemes})
        print(code, text, "->", phonemes)

recorded_with = {name: importlib.metadata.version(name)
                 for name in ("misaki", "phonemizer-fork", "espeakng-loader")}
OUT.write_text(json.dumps({"recorded_with": recorded_with, "phonemes": cases}, ensure_ascii=False,
                          indent=1) + "\n", encoding="utf-8")
