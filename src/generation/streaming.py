"""Streaming text: transformers' TextStreamer chunking rule, as a small stateful decoder.

Tokens are decoded together (so merged pieces and spaces come out right); a chunk is released
up to the last space, at once after a newline or a CJK character, and never while the text ends
in U+FFFD (a character whose bytes span tokens still to come). ``end()`` gives the rest, so the
chunks join to the decoded text of all the tokens.
"""

import queue
import threading


class TextStreamer:
    def __init__(self, decode):
        self.decode = decode
        self.tokens, self.printed = [], 0

    def put(self, token_ids):
        """The text ready after ``token_ids`` (possibly "")."""
        self.tokens.extend(int(t) for t in token_ids)
        text = self.decode(self.tokens)
        if text.endswith("\ufffd"):
            return ""
        if text.endswith("\n"):
            chunk = text[self.printed:]
            self.tokens, self.printed = [], 0
            return chunk
        if text and _is_cjk(ord(text[-1])):
            chunk = text[self.printed:]
        else:
            chunk = text[self.printed:text.rfind(" ") + 1]
        self.printed += len(chunk)
        return chunk

    def end(self):
        chunk = self.decode(self.tokens)[self.printed:] if self.tokens else ""
        self.tokens, self.printed = [], 0
        return chunk


def _is_cjk(cp):
    # the CJK Unicode blocks transformers' TextStreamer._is_chinese_char lists
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


def stream(run, decode, final=None):
    """Iterator of text chunks from ``run(on_step)`` (a generation of one row) running in a
    worker thread; its errors re-raise in the consumer. ``final(result)``, when given, makes
    one more item after the last chunk from what ``run`` returned (a token summary)."""
    chunks, done = queue.Queue(), object()
    streamer = TextStreamer(decode)

    def on_step(tokens, active):
        if active[0]:
            chunks.put(streamer.put([tokens[0]]))

    def work():
        try:
            result = run(on_step)
            chunks.put(streamer.end())
            if final is not None:
                chunks.put(FinalItem(final(result)))
            chunks.put(done)
        except BaseException as e:  # handed to the consumer
            chunks.put(e)

    threading.Thread(target=work, daemon=True).start()
    while True:
        item = chunks.get()
        if item is done:
            return
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, FinalItem):
            yield item.value
        elif item:
            yield item


class FinalItem:
    """The last item of a stream (not a text chunk, so it is yielded even when empty)."""

    def __init__(self, value):
        self.value = value
