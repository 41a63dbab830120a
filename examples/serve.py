"""OpenAI-style embeddings and chat-completions endpoints over pipeline.serve().

    pip install -e ".[serve]"                  # starlette + uvicorn
    python examples/serve.py [--model MODEL] [--chat-model CHAT] [--host 127.0.0.1]
                             [--port 8000] [--batch-size 32] [--batch-timeout-ms 5] [--rows 8]

    curl -s localhost:8000/v1/embeddings -H 'Content-Type: application/json' \\
         -d '{"input": ["The cat sat on the mat.", "A dog runs."], "model": "minilm"}'
    curl -s localhost:8000/v1/chat/completions -H 'Content-Type: application/json' \\
         -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 32, "stream": true}'

``POST /v1/embeddings`` takes OpenAI's request (``input``: a string or a list of strings;
``encoding_format``: "float" or "base64"; ``model`` is echoed) and answers OpenAI's response
(``{"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model",
"usage"}``), so the ``openai`` client works with ``base_url="http://localhost:8000/v1"``. Every
string of every request is one call to the server: strings of concurrent requests share compiled
batches. A bad input answers 400 with OpenAI's error shape, naming it.

``POST /v1/chat/completions`` (with --chat-model, a text-generation model with a chat template)
takes OpenAI's ``messages``, ``max_tokens`` / ``max_completion_tokens``, ``temperature`` (0:
greedy), ``top_p``, ``seed``, ``stop``, ``stream`` and ``stream_options.include_usage``, and
answers a ``chat.completion`` (or, streaming, server-sent ``chat.completion.chunk`` events ending
in ``data: [DONE]``). Each request is one row of a continuous-batching server (``--rows`` decode
together; a new request joins at the next step).

MODEL is a Hub id or a local folder with a text-embedding model; without --model, the real
all-MiniLM-L6-v2 from the PyPI packages (local_model.py).
"""

import argparse
import asyncio
import base64
import contextlib
import json
import time
import uuid

import numpy as np
import transmuter
from local_model import model_argument
from starlette.applications import Starlette
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route


def make_app(pipe, model_name, *, chat=None, chat_name=None, rows=8, **serve_options):
    """The ASGI app: the servers start with the app and are closed (queued calls finished) when
    it stops. ``pipe``: a text-embedding pipeline (or None); ``serve_options`` go to its
    ``serve()`` (max_batch_size, batch_timeout_ms). ``chat``: a text-generation pipeline for
    /v1/chat/completions, served with ``max_batch_size=rows``."""
    state = {}

    @contextlib.asynccontextmanager
    async def lifespan(app):
        with contextlib.ExitStack() as stack:
            if pipe is not None:
                state["server"] = stack.enter_context(pipe.serve(**serve_options))
            if chat is not None:
                state["chat"] = stack.enter_context(chat.serve(max_batch_size=rows))
            yield

    async def embeddings(request):
        if pipe is None:
            return _error("This server has no embedding model", "model", 404)
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
        if chat is None:
            return _error("This server has no chat model: start it with --chat-model", "model",
                          404)
        try:
            body = await request.json()
        except ValueError:
            return _error("The request body is not JSON", None)
        messages, options, problem = _chat_request(body)
        if problem:
            return _error(*problem)
        name, server = body.get("model") or chat_name or model_name, state["chat"]
        reply = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()),
                 "model": name}
        try:
            if body.get("stream"):
                chunks = server.astream(messages, token_summary=True, **options)
                first = await anext(chunks)  # a bad request fails here, while 400 can answer
                usage = bool((body.get("stream_options") or {}).get("include_usage"))
                return StreamingResponse(_events(reply, first, chunks, usage),
                                         media_type="text/event-stream")
            record = (await server.acall(messages, return_full_text=False, token_summary=True,
                                         finish_reason=True, **options))[0]
        except transmuter.TransmuterError as error:
            return _error(str(error), "messages")
        summary = record["token_summary"]
        return JSONResponse({**reply, "object": "chat.completion", "choices": [{
            "index": 0, "message": {"role": "assistant", "content": record["generated_text"]},
            "finish_reason": record["finish_reason"]}], "usage": _usage(summary)})

    return Starlette(routes=[Route("/v1/embeddings", embeddings, methods=["POST"]),
                             Route("/v1/chat/completions", chat_completions, methods=["POST"])],
                     lifespan=lifespan)


def _chat_request(body):
    """(messages, the pipeline's options, None) or (None, None, (problem, param))."""
    if not isinstance(body, dict):
        return None, None, ("The request body must be a JSON object", None)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        return None, None, ("messages must be a non-empty list of {'role', 'content'} objects",
                            "messages")
    if body.get("n", 1) != 1:
        return None, None, ("n must be 1 (one choice per request)", "n")
    options = {}
    tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if tokens is not None:
        options["max_new_tokens"] = tokens
    temperature = body.get("temperature")
    if temperature == 0:  # OpenAI's temperature 0 is greedy decoding
        options["do_sample"] = False
    elif temperature is not None:
        options.update(do_sample=True, temperature=temperature)
    if body.get("top_p") is not None:
        options.update(do_sample=options.get("do_sample", True), top_p=body["top_p"])
    if body.get("seed") is not None:
        options["seed"] = body["seed"]
    if body.get("stop"):
        options["stop_strings"] = body["stop"]
    return messages, options, None


async def _events(reply, first, chunks, usage):
    """Server-sent events in OpenAI's chunk format: the role, the text chunks, the finish
    reason, the usage when asked, then [DONE]."""
    def event(delta=None, reason=None, **extra):
        choices = [] if delta is None else [{"index": 0, "delta": delta,
                                             "finish_reason": reason}]
        data = {**reply, "object": "chat.completion.chunk", "choices": choices, **extra}
        return f"data: {json.dumps(data)}\n\n"

    try:
        yield event({"role": "assistant", "content": ""})
        item = first
        while isinstance(item, str):
            yield event({"content": item})
            item = await anext(chunks)
        # the stream's last item (token_summary=True): its summary and why it ended
        yield event({}, item["finish_reason"])
        if usage:
            yield event(usage=_usage(item["token_summary"]))
        yield "data: [DONE]\n\n"
    finally:  # a client gone mid-stream frees its row
        await chunks.aclose()


def _usage(summary):
    return {"prompt_tokens": summary["input"], "completion_tokens": summary["output"],
            "total_tokens": summary["input"] + summary["output"]}


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


def _error(message, param, status=400):
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error",
                                   "param": param, "code": None}}, status_code=status)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="Hub id or folder (default: the packaged all-MiniLM-L6-v2)")
    parser.add_argument("--chat-model", help="Hub id or folder of a text-generation model for "
                        "/v1/chat/completions (none by default)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--batch-size", type=int, default=32, help="most inputs per batch")
    parser.add_argument("--batch-timeout-ms", type=float, default=5,
                        help="how long a waiting input waits for others")
    parser.add_argument("--rows", type=int, default=8, help="chat requests decoded together")
    args = parser.parse_args()
    import uvicorn

    source = model_argument(args.model)
    pipe = transmuter.pipeline("text-embedding", source, batch_size=args.batch_size)
    chat = transmuter.pipeline("text-generation", args.chat_model) if args.chat_model else None
    app = make_app(pipe, args.model or "all-MiniLM-L6-v2", chat=chat, chat_name=args.chat_model,
                   rows=args.rows, batch_timeout_ms=args.batch_timeout_ms)
    uvicorn.run(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
