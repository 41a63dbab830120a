"""Images and audio given as http(s) URLs, as transformers' pipelines take them
(``transformers.image_utils.load_image``, the audio pipelines' ``ffmpeg_read`` of a URL's bytes).

The bytes come through huggingface_hub's HTTP session (its proxies and user agent; no token is
sent) with its retries on time-outs, dropped connections, 429 and 5xx (``http_stream_backoff``),
a time-out for each wait (HF_HUB_DOWNLOAD_TIMEOUT seconds, default 10) and a size bound
(``MAX_BYTES``; TRANSMUTER_MAX_URL_BYTES moves it). Every failure is an InputError naming the URL.
"""

import os

from ..errors import InputError

MAX_BYTES = int(os.environ.get("TRANSMUTER_MAX_URL_BYTES", 256 << 20))
RETRIES = 2  # a transient failure is tried twice more (after 0.5 s, then 1 s)


def is_url(source):
    return isinstance(source, str) and source.startswith(("http://", "https://"))


def fetch(url, what):
    """The bytes at ``url`` (``what``: "image", "audio file", for the errors)."""
    from huggingface_hub import constants
    from huggingface_hub.utils import http_stream_backoff

    timeout = constants.HF_HUB_DOWNLOAD_TIMEOUT
    limit = MAX_BYTES
    try:
        with http_stream_backoff("GET", url, max_retries=RETRIES, base_wait_time=0.5,
                                 timeout=timeout, follow_redirects=True) as response:
            if response.status_code >= 400:
                raise InputError(f"Cannot fetch the {what} at {url!r}: the server answered HTTP "
                                 f"{response.status_code} {response.reason_phrase}".rstrip())
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                raise _too_large(what, url, int(declared), limit)
            data = bytearray()
            for chunk in response.iter_bytes():
                data += chunk
                if len(data) > limit:
                    raise _too_large(what, url, len(data), limit)
            return bytes(data)
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001 - httpx's transport errors, time-outs, bad URLs
        kind = type(e).__name__
        hint = (f" (no data for {timeout:g} s: HF_HUB_DOWNLOAD_TIMEOUT sets the seconds)"
                if "Timeout" in kind else "")
        raise InputError(f"Cannot fetch the {what} at {url!r}: {kind}: {e}{hint}. Check the URL "
                         "and the connection, or download it and give the file") from None


def _too_large(what, url, size, limit):
    return InputError(f"The {what} at {url!r} is larger than {limit:,} bytes ({size:,} so far); "
                      "download it and give the file, or raise TRANSMUTER_MAX_URL_BYTES")
