"""espeak-ng's text -> phonemes, through its C library as the `espeakng-loader` wheel ships it
(library and data), bound with ctypes. Loaded once, at first use.

espeak-ng keeps one global state (voice, text position, trace file), so every call holds one lock: a
voice is set and a text converted with no other thread in between.

kokoro-js' phonemizer (espeak-ng built to WebAssembly) synthesizes the text with espeak-ng's phoneme
trace on (`espeak_SetPhonemeTrace`, IPA) and keeps the trace's non-empty lines, one per clause
(espeak-ng ends a clause at punctuation or a blank line). So does `clauses`, discarding the audio:
the trace is what speech uses, which `espeak_TextToPhonemes` is not (a clause with no stressed
syllable gets one when spoken: "Hmm" is "hˈəm" in the trace, "həm" from `espeak_TextToPhonemes`).
The kokoro package's other languages go through `espeak_TextToPhonemes` (phonemizer's espeak-ng
backend): `translated_clauses`.
"""

import ctypes
import functools
import importlib.util
import itertools
import os
import tempfile
import threading

from ...errors import InputError

_AUDIO_OUTPUT_SYNCHRONOUS = 2   # espeak_AUDIO_OUTPUT: no audio device, no thread
_INITIALIZE_DONT_EXIT = 0x8000  # report a missing data folder instead of exiting the process
_CHARS_AUTO = 0                 # what kokoro-js' phonemizer passes (UTF-8 when valid, as ours is)
_CHARS_UTF8 = 1
_POS_CHARACTER = 1
_PHONEMES_SHOW = 0x01  # espeak-ng's phoneme names
_PHONEMES_IPA = 0x02
_PHONEMES_TIE = 0x80   # bits 8-23 join the letters of one phoneme instead of separating phonemes
TIE = "\u0361"         # espeak-ng's tie: "t͡ʃ"

_LOCK = threading.Lock()

MISSING = ("Text to phonemes needs espeak-ng: pip install \"transmuter-onnx[tts]\" (the "
           "espeakng-loader wheel, which ships the library and its data), or pass the phonemes "
           "directly ({{\"phonemes\": ...}}). ({})")


def available() -> bool:
    """Whether espeak-ng can be loaded (the espeakng-loader wheel is installed)."""
    return importlib.util.find_spec("espeakng_loader") is not None


@functools.lru_cache(maxsize=1)
def _library():
    try:
        import espeakng_loader  # optional: only text-to-phonemes needs it
    except ImportError as e:
        raise InputError(MISSING.format(e)) from None
    try:
        lib = ctypes.CDLL(espeakng_loader.get_library_path())
        data = espeakng_loader.get_data_path()
    except (OSError, RuntimeError) as e:
        raise InputError(MISSING.format(f"espeakng-loader is installed but unusable: {e}")
                         ) from None
    lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    lib.espeak_Initialize.restype = ctypes.c_int
    lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
    lib.espeak_SetVoiceByName.restype = ctypes.c_int
    lib.espeak_TextToPhonemes.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_int,
                                          ctypes.c_int]
    lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
    lib.espeak_SetPhonemeTrace.argtypes = [ctypes.c_int, ctypes.c_void_p]
    lib.espeak_Synth.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int,
                                 ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
    lib.espeak_Synth.restype = ctypes.c_int
    lib.espeak_Info.argtypes = [ctypes.c_void_p]
    lib.espeak_Info.restype = ctypes.c_char_p
    with _LOCK:
        if lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, data.encode(),
                                 _INITIALIZE_DONT_EXIT) < 0:
            raise InputError(MISSING.format(f"espeak-ng did not start with its data at {data}"))
    return lib


def version() -> str:
    """The espeak-ng library's version ("1.52.0")."""
    return _library().espeak_Info(None).decode()


@functools.lru_cache(maxsize=1)
def _libc():
    if os.name == "nt":  # espeak-ng.dll's C runtime is not one ctypes can hand a FILE* from
        raise InputError("Text to phonemes through espeak-ng's phoneme trace is not available on "
                         "Windows yet: pass the phonemes directly ({\"phonemes\": ...})")
    # the C library the process runs on: espeak-ng writes its trace to a FILE*
    libc = ctypes.CDLL(None)
    libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    libc.fopen.restype = ctypes.c_void_p
    libc.fclose.argtypes = [ctypes.c_void_p]
    return libc


def clauses(text: str, voice: str, ipa: bool = True, separator: str = "") -> list[str]:
    """`text`'s clauses as espeak-ng's `voice` ("en-us", "fr-fr") speaks them: IPA with stress
    marks (or espeak-ng's own phoneme names when not `ipa`), words split by spaces, phonemes by
    `separator`; clauses that give no phonemes are left out."""
    lib, libc = _library(), _libc()
    mode = (_PHONEMES_IPA if ipa else _PHONEMES_SHOW) | (ord(separator) << 8 if separator else 0)
    encoded = text.encode("utf-8") + b"\0"
    handle, path = tempfile.mkstemp(prefix="transmuter-espeak-")
    os.close(handle)
    try:
        with _LOCK:
            if lib.espeak_SetVoiceByName(voice.encode()) != 0:
                raise InputError(f"espeak-ng has no voice {voice!r}")
            trace = libc.fopen(path.encode(), b"wb")
            if not trace:
                raise OSError(f"cannot write espeak-ng's phoneme trace to {path}")
            lib.espeak_SetPhonemeTrace(mode, trace)
            try:
                lib.espeak_Synth(encoded, 0, 0, _POS_CHARACTER, 0, _CHARS_AUTO, None, None)
            finally:
                lib.espeak_SetPhonemeTrace(0, None)
                libc.fclose(trace)
        with open(path, encoding="utf-8") as f:
            return [line for line in f.read().split("\n") if line]
    finally:
        os.unlink(path)


class _Voice(ctypes.Structure):  # the head of espeak_VOICE: what espeak_ListVoices tells
    _fields_ = [("name", ctypes.c_char_p), ("languages", ctypes.c_char_p),
                ("identifier", ctypes.c_char_p)]


@functools.lru_cache(maxsize=1)
def _voice_files() -> dict[str, str]:
    """Each language's voice file ("fr-fr" -> "roa/fr"): the first voice whose first language it
    is, as phonemizer's espeak-ng backend chooses (its `set_voice`)."""
    lib = _library()
    lib.espeak_ListVoices.argtypes = [ctypes.c_void_p]
    lib.espeak_ListVoices.restype = ctypes.POINTER(ctypes.POINTER(_Voice))
    files = {}
    with _LOCK:
        voices = lib.espeak_ListVoices(None)
        for i in itertools.count():
            if not voices[i]:
                break
            voice = voices[i].contents
            # languages: a priority byte, then the language, then more such pairs
            files.setdefault(voice.languages[1:].decode(), voice.identifier.decode())
    return files


def translated_clauses(text: str, voice: str) -> list[str]:
    """`text`'s clauses in IPA with stress marks and ties (`TIE`) from `espeak_TextToPhonemes`, as
    phonemizer's espeak-ng backend asks for them; clauses that give no phonemes are left out."""
    lib = _library()
    voice_file = _voice_files().get(voice)
    if voice_file is None:
        raise InputError(f"espeak-ng has no voice for {voice!r}")
    encoded = ctypes.create_string_buffer(text.encode("utf-8"))
    position = ctypes.c_char_p(ctypes.addressof(encoded))  # espeak-ng moves it clause by clause
    mode = _PHONEMES_IPA | _PHONEMES_TIE | ord(TIE) << 8
    out = []
    with _LOCK:
        if lib.espeak_SetVoiceByName(voice_file.encode()) != 0:
            raise InputError(f"espeak-ng has no voice {voice!r}")
        while position.value:
            clause = lib.espeak_TextToPhonemes(ctypes.byref(position), _CHARS_UTF8, mode)
            if clause:
                out.append(clause.decode("utf-8"))
    return out
