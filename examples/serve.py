"""An OpenAI-style embeddings endpoint over dynamic batching (pipeline.serve()).

    pip install "transmuter[serve]"                  # starlette + uvicorn
    python examples/serve.py [--model MODEL] [--host 127.0.0.1] [--port 8000]
                             [--batch-size 32] [--batch-timeout-ms 5]

    curl -s localhost:8000/v1/embeddings -H 'Content-Type: application/json' \\
         -d '{"input": ["The cat sat on the mat.", "A dog runs."], "model": "minilm"}'

``POST /v1/embeddings`` takes OpenAI's request (``input``: a string or a list of strings;
``encoding_format``: "float" or "base64"; ``model`` is echoed) and answers OpenAI's response
(``{"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model",
"usage"}``), so the ``openai`` client works with ``base_url="http://localhost:8000/v1"``. Every
string of every request is one call to the server: strings of concurrent requests share compiled
batches. A bad input answers 400 with OpenAI's error shape, naming it.

MODEL is a Hub id or a local folder with a text-embedding model; without --model, the real
all-MiniLM-L6-v2 from the PyPI packages (local_model.py).
"""

import argparse
import asyncio
import base64
import contextlib

import numpy as np
import transmuter
from local_model import model_argument
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route


def make_app(pipe, model_name, **serve_options):
    """The ASGI app: the server starts with the app and is closed (queued calls finished) when
    it stops. ``serve_options`` go to ``pipe.serve()`` (max_batch_size, batch_timeout_ms)."""
    state = {}

    @contextlib.asynccontextmanager
    async def lifespan(app):
        with pipe.serve(**serve_options) as server:
            state["server"] = server
            yield

    async def embeddings(request):
        try:
            body = await request.json()
        except ValueError:
            return _error("The request body is not JSON", None)
        texts, problem = _texts(body)
        if problem:
            return _error(problem, "input")
        encoding = body.get("encoding_format", "float")
        if encoding not in ("float", "base64"):
            return _error(f"encoding_format must be 'float' or 'base64', got {encoding!r}",
                          "encoding_format")
        server = state["server"]
        results = await asyncio.gather(*(server.acall(t) for t in texts), return_exceptions=True)
        for i, result in enumerate(results):
            if isinstance(result, transmuter.TransmuterError):
                return _error(f"input[{i}]: {result}", "input")
            if isinstance(result, BaseException):
                raise result
        tokens = sum(_tokens(pipe, t) for t in texts)
        return JSONResponse({
            "object": "list",
            "data": [{"object": "embedding", "index": i, "embedding": _encode(v, encoding)}
                     for i, v in enumerate(results)],
            "model": body.get("model") or model_name,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        })

    async def chat_completions(request):
        # TODO(issue #19): POST /v1/chat/completions (with "stream": true as server-sent events)
        # over a text-generation pipeline. It needs continuous batching (a request joining the
        # running decode in a free row), which is separate work; pipeline.serve() refuses
        # generating tasks. Until then this endpoint says so instead of answering slowly.
        return JSONResponse({"error": {
            "message": "chat completions are not served yet: they need continuous batching "
                       "(issue #19); this example serves /v1/embeddings",
            "type": "not_implemented", "param": None, "code": None}}, status_code=501)

    return Starlette(routes=[Route("/v1/embeddings", embeddings, methods=["POST"]),
                             Route("/v1/chat/completions", chat_completions, methods=["POST"])],
                     lifespan=lifespan)


def _texts(body):
    """(the input strings, None) or (None, what is wrong with ``input``)."""
    texts = body.get("input") if isinstance(body, dict) else None
    texts = [texts] if isinstance(texts, str) else texts
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        return None, ("input must be a string or a non-empty list of strings (token-id inputs "
                      "are not taken: send the text)")
    return texts, None


def _encode(vector, encoding):
    vector = np.asarray(vector, np.float32)
    if encoding == "base64":  # OpenAI's: little-endian float32 bytes
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()


def _tokens(pipe, text):
    """Tokens of ``text`` as the pipeline encodes it (same truncation: the tokenizer's
    truncation setting is shared state, so a different one would race with the server)."""
    return len(pipe.tokenizer.encode(text, max_length=pipe.sequence_lengths[-1]).ids)


def _error(message, param):
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error",
                                   "param": param, "code": None}}, status_code=400)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="Hub id or folder (default: the packaged all-MiniLM-L6-v2)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--batch-size", type=int, default=32, help="most inputs per batch")
    parser.add_argument("--batch-timeout-ms", type=float, default=5,
                        help="how long a waiting input waits for others")
    args = parser.parse_args()
    import uvicorn

    source = model_argument(args.model)
    pipe = transmuter.pipeline("text-embedding", source, batch_size=args.batch_size)
    app = make_app(pipe, args.model or "all-MiniLM-L6-v2",
                   batch_timeout_ms=args.batch_timeout_ms)
    uvicorn.run(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
