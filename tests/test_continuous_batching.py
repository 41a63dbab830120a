"""Continuous batching (pipelines/text/continuous.py, text-generation's pipeline.serve()): requests
from many threads, arriving at different times with different lengths and options, each equal
token for token to the same request run alone through the pipeline (greedy, and seeded sampling:
a row draws its request's own noise), and the recorded transformers outputs where recorded; rows
are reused as soon as they free; a bad request fails alone; close() finishes the queued ones;
streams; examples/serve.py's OpenAI chat-completions endpoint over it.

Fixtures: llama-gqa (GroupQueryAttention, the cache written in place) and qwen3 (position_ids,
the concat mode). Token ids are compared exactly: a served row runs other compiled shapes (a
buffer of the rows' capacity, R rows per step) whose float32 rounding differs from the lone
call's by ~1e-6, far from flipping a token of these fixtures."""

import asyncio
import json
import random
import threading
import time

import pytest

import transmuter
from transmuter.errors import InputError
from transmuter.generation import Generator
from transmuter.pipelines import PipelineError

from .fixtures import ROOT, pipeline_reference
from .test_examples import example

CHAT = [{"role": "user", "content": "What is the capital of France?"}]
_PIPES = {}


def pipe(name, backend="jax"):
    # one pipeline per fixture: the lone calls and the servers share its compiled shapes
    if (name, backend) not in _PIPES:
        _PIPES[name, backend] = transmuter.pipeline("text-generation", ROOT / name,
                                                    variant="fp32", backend=backend)
    return _PIPES[name, backend]


def generate_reference(name):
    return json.loads((ROOT / name / "references" / "generate.json").read_text())


def recorded(name):
    """(input, options, transformers' output) of the fixture's recorded greedy calls."""
    if name == "llama-gqa":  # transformers' generate on the chat prompt
        ref = generate_reference(name)
        options = dict(max_new_tokens=ref["max_new_tokens"], do_sample=False,
                       eos_token_id=ref["eos_token_id"], return_tensors=True)
        want = [{"generated_token_ids": ref["prompt_ids"] + ref["transformers"]}]
        return [(ref["prompt_messages"], options, want)]
    text, ids = pipeline_reference(name, "text-generation")["calls"]
    return [(x, call["call_kwargs"], out) for call in (text, ids)
            for x, out in zip(call["inputs"], call["outputs"])]


def mixed_requests():
    """Different lengths and per-request options: greedy and seeded sampling, chat and text,
    processors, stop strings, several sequences."""
    return [
        ("Hello world", dict(max_new_tokens=10, do_sample=True, seed=11, top_k=20,
                             temperature=0.7)),
        ("The capital", dict(max_new_tokens=5, do_sample=True, seed=12, top_p=0.9)),
        (CHAT, dict(max_new_tokens=7, do_sample=False, repetition_penalty=1.3,
                    no_repeat_ngram_size=2)),
        ("one two three four five six", dict(max_new_tokens=6, do_sample=True, seed=4,
                                             num_return_sequences=2, return_tensors=True)),
        ("a", dict(max_new_tokens=12, do_sample=False, return_full_text=False)),
        (CHAT, dict(max_new_tokens=9, do_sample=True, seed=5, min_new_tokens=9,
                    token_summary=True)),
        ("Stop here", dict(max_new_tokens=10, do_sample=False, stop_strings=["e"])),
    ]


def without_padding(records):
    """Records with token_summary's padding left out: it counts what the row ran, the prompt
    width of the group it was prefilled with (a batch's, as in pipe(list)), not of the lone
    call; the input and output counts stay."""
    return [dict(r, token_summary=dict(r["token_summary"], padding=None))
            if "token_summary" in r else r for r in records]


@pytest.mark.parametrize("name", ["llama-gqa", "qwen3"])
def test_staggered_threads_equal_each_request_alone(name):
    p = pipe(name)
    cases = [(x, o) for x, o, _ in recorded(name)] + mixed_requests()
    alone = [p(x, **o) for x, o in cases]
    for (x, o, want), got in zip(recorded(name), alone):
        assert got == want  # the lone call is transformers' (as test_generation_pipeline)
    delays = random.Random(0).sample(range(len(cases)), len(cases))
    got = [None] * len(cases)

    def client(i):
        time.sleep(delays[i] * 0.05)  # arrivals spread over the running decode
        got[i] = server(cases[i][0], **cases[i][1])

    with p.serve(max_batch_size=3) as server:
        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(cases))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for i, (g, a) in enumerate(zip(got, alone)):
        assert without_padding(g) == without_padding(a), f"request {i}: {cases[i]}"
    assert server.stats["requests"] == len(cases) and server.stats["largest_batch"] <= 3
    assert server.stats["joined"] > 0  # some arrived while other rows were decoding


def test_a_finished_row_takes_the_next_request_at_once():
    """2 rows, one long request and five short ones queued together: the short ones pass
    through the second row while the long one runs, each finishing before it, and the decode
    takes the long one's steps alone (static batches of 2 would take 23 + 2 + 2)."""
    p = pipe("llama-gqa")
    long = ("Hello world", dict(max_new_tokens=24, min_new_tokens=24, do_sample=False))
    short = [(f"a b c {i}", dict(max_new_tokens=3, min_new_tokens=3, do_sample=False))
             for i in range(5)]
    cases = [long, *short]
    alone = [p(x, **o) for x, o in cases]
    order = []
    with p.serve(max_batch_size=2) as server:
        futures = [server.submit(x, **o) for x, o in cases]
        for i, f in enumerate(futures):
            f.add_done_callback(lambda _, i=i: order.append(i))
        got = [f.result() for f in futures]
    assert got == alone
    assert order[-1] == 0 and sorted(order[:-1]) == [1, 2, 3, 4, 5]
    # the long row: 1 token from its prefill, 23 steps; the short rows share those steps
    stats = server.stats
    assert (stats["requests"], stats["steps"], stats["largest_batch"]) == (6, 23, 2)
    # the first short one may be prefilled with the long one (both queued before the worker
    # took them): the other four joined a running decode
    assert stats["joined"] >= 4


def test_a_bad_request_fails_alone():
    p = pipe("llama-gqa")
    good = [("Hello world", dict(max_new_tokens=4, do_sample=False)),
            (CHAT, dict(max_new_tokens=5, do_sample=True, seed=2))]
    alone = [p(x, **o) for x, o in good]
    with pytest.raises(InputError) as empty:
        p("   ", max_new_tokens=3)
    with pytest.raises(InputError, match="context") as long:
        p("Hello", max_new_tokens=400)  # past the fixture's 256 positions
    with p.serve(max_batch_size=2) as server:
        futures = [server.submit(good[0][0], **good[0][1]), server.submit("   ", max_new_tokens=3),
                   server.submit("Hello", max_new_tokens=400),
                   server.submit(good[1][0], **good[1][1])]
        for inputs, options, message in [
                (["a", "b"], {}, "one input per call"), (42, {}, "one input per call"),
                ("Hi", dict(num_beams=2), "Beam search"),
                ("Hi", dict(no_such_option=1), "no_such_option"),
                ("Hi", dict(num_return_sequences=3, do_sample=True), "max_batch_size=2")]:
            # refused at once, in the caller, as the pipeline refuses them
            with pytest.raises(transmuter.TransmuterError, match=message):
                server(inputs, **options)
        with pytest.raises(PipelineError, match="one sequence"):
            server.stream("Hi", num_return_sequences=2, do_sample=True)
    for future, want in [(futures[1], empty.value), (futures[2], long.value)]:
        error = future.exception()
        assert type(error) is type(want) and str(error) == str(want)
    assert [futures[0].result(), futures[3].result()] == alone


def test_close_finishes_queued_requests_and_refuses_new_ones():
    p = pipe("llama-gqa")
    cases = [(f"word {i} " * (i + 1), dict(max_new_tokens=3 + i, do_sample=False))
             for i in range(5)]
    alone = [p(x, **o) for x, o in cases]
    server = p.serve(max_batch_size=2)
    futures = [server.submit(x, **o) for x, o in cases]
    server.close()  # 2 rows, 5 requests: the 3 queued still run
    assert server.closed and not server._thread.is_alive()
    assert [f.result(timeout=0) for f in futures] == alone
    for call in (lambda: server("Hi"), lambda: server.stream("Hi"),
                 lambda: asyncio.run(server.acall("Hi"))):
        with pytest.raises(PipelineError, match="closed"):
            call()
    server.close()  # twice is fine


def test_streams_equal_the_pipeline_s_stream():
    p = pipe("llama-gqa")
    options = dict(max_new_tokens=9, do_sample=True, seed=3, token_summary=True)
    want = list(p(CHAT, stream=True, **options))
    assert isinstance(want[-1], dict) and len(want) > 2
    other = ("Hello world", dict(max_new_tokens=12, do_sample=False))
    other_alone = p(*other[:1], **other[1])

    async def clients(server):
        async def collect():
            return [c async for c in server.astream(CHAT, **options)]
        return await asyncio.gather(collect(), server.acall(other[0], **other[1]), collect())

    with p.serve(max_batch_size=3) as server:
        assert list(server.stream(CHAT, **options)) == want
        streamed, result, again = asyncio.run(clients(server))
    assert streamed == want and again == want and result == other_alone


def test_closing_a_stream_early_frees_its_row():
    p = pipe("llama-gqa")
    after = ("a b", dict(max_new_tokens=3, do_sample=False))
    want = p(after[0], **after[1])
    with p.serve(max_batch_size=1) as server:
        chunks = server.stream("Hello world", max_new_tokens=60, min_new_tokens=60,
                               do_sample=False)
        next(chunks)
        chunks.close()  # the one row frees at the next step, not after 60 tokens
        assert server(after[0], **after[1]) == want
    # its 60 tokens would take 59 steps; it ran until the worker saw it closed (timing: the
    # bound is loose, a closed stream on a loaded machine still frees within a few steps)
    assert server.stats["steps"] < 59
    with p.serve(max_batch_size=1) as server:  # a caller's timeout frees the row too
        # 1 ms: 60 steps of even this tiny decoder take longer on any machine (a quiet 2-core
        # one made them within 50 ms)
        with pytest.raises(TimeoutError):
            server("Hello world", max_new_tokens=60, min_new_tokens=60, do_sample=False,
                   timeout=0.001)
        assert server(after[0], **after[1]) == want
    assert server.stats["steps"] < 59  # its 60 tokens alone would take 59 steps


def test_refused_servers():
    grows = transmuter.pipeline("text-generation", ROOT / "llama", variant="fp32")
    # as a merged decoder without position_ids runs (the text fixtures all have them)
    grows.generator = Generator(grows.model, grows.config, cache="grow")
    with pytest.raises(PipelineError, match="grows"):
        grows.serve()
    p = pipe("llama-gqa")
    for options, message in [({"max_batch_size": 0}, "max_batch_size"),
                             ({"batch_timeout_ms": 5}, "batch_timeout_ms"),
                             ({"num_beams": 2}, "Beam search"),
                             ({"batch_size": 4}, "batch_size"),
                             ({"cache_length": 0}, "cache_length"),
                             ({"temperature": -1}, "temperature")]:
        with pytest.raises(transmuter.TransmuterError, match=message):
            p.serve(**options)
    t5 = transmuter.pipeline("text2text-generation", ROOT / "t5")
    with pytest.raises(PipelineError, match="not served"):
        t5.serve()


def test_mlx_rows_equal_alone():
    pytest.importorskip("mlx.core")
    p = pipe("llama", backend="mlx")
    cases = [("Hello world", dict(max_new_tokens=6, do_sample=True, seed=3, top_k=20)),
             ("The capital of France is a city", dict(max_new_tokens=5, do_sample=False)),
             ("a b", dict(max_new_tokens=4, do_sample=False))]
    alone = [p(x, return_tensors=True, **o) for x, o in cases]
    with p.serve(max_batch_size=2) as server:
        got = [f.result() for f in [server.submit(x, return_tensors=True, **o)
                                    for x, o in cases]]
    assert got == alone and server.stats["joined"] > 0


# --- examples/serve.py: /v1/chat/completions ------------------------------------------------


@pytest.fixture(scope="module")
def chat_app():
    pytest.importorskip("starlette", reason="the serve extra: pip install -e '.[serve]'")
    pytest.importorskip("httpx")
    return example("serve").make_app(None, "fixture", chat=pipe("llama-gqa"), rows=2)


def _post_all(app, bodies):
    """Each body POSTed at once (httpx's AsyncClient on the app, in process)."""
    import httpx

    async def run():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            async with app.router.lifespan_context(app):
                return await asyncio.gather(*(client.post("/v1/chat/completions", json=b)
                                              for b in bodies))

    return asyncio.run(run())


def _events(reply):
    assert reply.headers["content-type"].startswith("text/event-stream")
    lines = [line for line in reply.text.split("\n\n") if line]
    assert all(line.startswith("data: ") for line in lines) and lines[-1] == "data: [DONE]"
    return [json.loads(line[6:]) for line in lines[:-1]]


def test_http_chat_completions(chat_app):
    p = pipe("llama-gqa")
    greedy = dict(max_new_tokens=8, do_sample=False)
    sampled = dict(max_new_tokens=6, do_sample=True, temperature=0.8, seed=9)
    bodies = [{"messages": CHAT, "max_tokens": 8, "temperature": 0, "model": "m"},
              {"messages": CHAT, "max_completion_tokens": 6, "temperature": 0.8, "seed": 9},
              {"messages": CHAT, "max_tokens": 8, "temperature": 0, "stream": True,
               "stream_options": {"include_usage": True}},
              {"messages": CHAT, "max_tokens": 6, "temperature": 0.8, "seed": 9,
               "stream": True},
              {"messages": []}, {"messages": CHAT, "n": 2},
              {"messages": CHAT, "temperature": -1}]
    replies = _post_all(chat_app, bodies)
    for body, options, reply in zip(bodies[:2], (greedy, sampled), replies[:2]):
        data = reply.json()
        alone = p(CHAT, return_full_text=False, token_summary=True, **options)[0]
        stream = list(p(CHAT, stream=True, token_summary=True, **options))
        assert data["object"] == "chat.completion" and data["id"].startswith("chatcmpl-")
        assert data["model"] == body.get("model", "fixture")
        assert data["choices"] == [{"index": 0, "finish_reason": stream[-1]["finish_reason"],
                                    "message": {"role": "assistant",
                                                "content": alone["generated_text"]}}]
        n, m = alone["token_summary"]["input"], alone["token_summary"]["output"]
        assert data["usage"] == {"prompt_tokens": n, "completion_tokens": m,
                                 "total_tokens": n + m}
    for options, reply, usage in zip((greedy, sampled), replies[2:4], (True, False)):
        events = _events(reply)
        want = list(p(CHAT, stream=True, token_summary=True, **options))
        assert {e["object"] for e in events} == {"chat.completion.chunk"}
        assert len({e["id"] for e in events}) == 1
        assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        texts = [e["choices"][0]["delta"]["content"] for e in events[1:-1 - usage]]
        assert texts == want[:-1]  # the pipeline's own stream chunks, in order
        end = events[-1 - usage]["choices"][0]
        assert end["delta"] == {} and end["finish_reason"] == want[-1]["finish_reason"]
        if usage:
            summary = want[-1]["token_summary"]
            assert events[-1]["choices"] == [] and events[-1]["usage"] == {
                "prompt_tokens": summary["input"], "completion_tokens": summary["output"],
                "total_tokens": summary["input"] + summary["output"]}
    for reply, param in zip(replies[4:], ("messages", "n", "messages")):
        assert reply.status_code == 400 and reply.json()["error"]["param"] == param
    assert "temperature" in replies[6].json()["error"]["message"]


def test_http_without_a_chat_model_says_so():
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient
    app = example("serve").make_app(None, "fixture")
    with TestClient(app) as client:
        reply = client.post("/v1/chat/completions", json={"messages": CHAT})
        embed = client.post("/v1/embeddings", json={"input": "x"})
    assert reply.status_code == 404 and "--chat-model" in reply.json()["error"]["message"]
    assert embed.status_code == 404

