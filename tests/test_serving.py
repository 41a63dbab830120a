"""Dynamic batching (src/serving/server.py, pipeline.serve()): many threads and asyncio tasks, one input
each, every result equal to the pipeline called alone on that input (and, for the recorded
inputs, to the transformers / sentence-transformers outputs); a bad input fails only its caller;
close() finishes the queued calls and refuses new ones; batches are really formed (pipeline calls
counted by a spy, not timed); examples/serve.py's OpenAI embeddings endpoint over it.

The load test here is 16 threads x 20 requests; bench/serve.py runs the issue's 64 x 50 (on the
fixtures and the real all-MiniLM-L6-v2) with the same check of every result."""

import asyncio
import concurrent.futures

import numpy as np
import pytest

import transmuter
from transmuter import serving
from transmuter.pipelines import PipelineError

from .fixtures import ROOT, pipeline_reference
from .test_examples import example
from .test_pipelines_text import BATCH_TOL, TOL, assert_close

# BATCH_TOL (1e-5): a served input runs in a padded batch with other rows (masked out), the
# pipeline alone runs it in a batch of one: the same graph, another shape, another XLA schedule.
# TOL (1e-4): ours against the recorded transformers pipeline (f32 under XLA vs PyTorch kernels).
THREADS, REQUESTS = 16, 20

FIXTURES = {  # task -> fixture whose recorded pipeline inputs/outputs the test uses
    "text-embedding": "bert-sentence-transformers",
    "text-classification": "bert-sequence-classification",
    "image-classification": "vit",
}


@pytest.fixture(scope="module")
def pipes():
    made = {}

    def get(task, **options):
        key = (task, tuple(sorted(options.items())))
        if key not in made:
            fixture = ROOT / FIXTURES.get(task, options.pop("fixture", ""))
            if task != "image-classification":  # one length, rows 1, 2, 4: few shapes to compile
                options = {"sequence_length": 32, "batch_size": 4, **options}
            made[key] = transmuter.pipeline(task, fixture, **options)
        return made[key]

    return get


def recorded(task):
    """The first recorded call's (inputs, outputs) with its call options."""
    call = pipeline_reference(FIXTURES[task], task)["calls"][0]
    return call["inputs"], call["outputs"], call["call_kwargs"]


def text_inputs(task, n=24):
    """The recorded inputs, then distinct variants of them (a crossed result shows)."""
    texts, _, _ = recorded(task)
    return texts + [f"{texts[i % len(texts)]} number {i}" for i in range(n - len(texts))]


@pytest.fixture
def spy(monkeypatch):
    """Inputs per call of the pipeline (a list's length, 1 for one input) from now on."""
    sizes = []

    def install(pipe):
        cls, original = type(pipe), type(pipe).__call__

        def counted(self, inputs, **kwargs):
            sizes.append(len(inputs) if isinstance(inputs, list) else 1)
            return original(self, inputs, **kwargs)

        monkeypatch.setattr(cls, "__call__", counted)
        return sizes

    return install


def assert_same(got, want, tol=BATCH_TOL, where="result"):
    if isinstance(want, np.ndarray):  # text-embedding's vector
        assert isinstance(got, np.ndarray) and got.dtype == want.dtype, where
        np.testing.assert_allclose(got, want, rtol=0, atol=tol, err_msg=where)
    else:
        assert_close(got, want, tol, where)


def test_recorded_inputs_through_the_server_match_transformers(pipes):
    for task in ("text-embedding", "text-classification"):
        inputs, outputs, kwargs = recorded(task)
        assert not kwargs
        with pipes(task).serve(batch_timeout_ms=50) as server:
            with concurrent.futures.ThreadPoolExecutor(len(inputs)) as pool:
                got = list(pool.map(server, inputs))
        for i, (g, w) in enumerate(zip(got, outputs)):
            # as pipe(text) answers (recorded one text per call): text-classification's lone
            # string gives transformers' one-element list, though a list call gives dicts
            assert_close(g, w, TOL, f"{task} input {i}")


@pytest.mark.parametrize("task", ["text-embedding", "text-classification"])
def test_threads_get_exactly_their_own_results(pipes, spy, task):
    pipe = pipes(task)
    inputs = text_inputs(task)
    want = [pipe(x) for x in inputs]
    sizes = spy(pipe)
    failures = []

    def client(k):
        got = []
        for j in range(REQUESTS):
            i = (k * 7 + j) % len(inputs)  # each thread its own order of inputs
            try:
                got.append((i, server(inputs[i])))
            except Exception as error:  # noqa: BLE001 -- counted, the test reports them
                failures.append(error)
        return got

    with pipe.serve(max_batch_size=8) as server:
        with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
            answers = [r for rs in pool.map(client, range(THREADS)) for r in rs]
    assert failures == []
    assert len(answers) == THREADS * REQUESTS  # none lost
    for i, got in answers:  # none crossed
        assert_same(got, want[i], where=f"input {i}")
    assert sum(sizes) == THREADS * REQUESTS  # batches of one call the pipeline on the input
    assert server.stats["requests"] == THREADS * REQUESTS and server.stats["reruns"] == 0
    # 16 threads waiting on one worker: batches form (the deterministic check is below)
    assert server.stats["largest_batch"] > 1 and server.stats["batches"] < THREADS * REQUESTS


def test_calls_arriving_together_make_one_pipeline_call(pipes, spy):
    pipe = pipes("text-embedding")
    inputs = text_inputs("text-embedding", 8)
    sizes = spy(pipe)
    # the first input waits up to 10 s for others; the 8 are queued within microseconds
    with pipe.serve(max_batch_size=4, batch_timeout_ms=10_000) as server:
        futures = [server.submit(x) for x in inputs]
        got = [f.result() for f in futures]
    assert sizes == [4, 4]
    assert server.stats == {"requests": 8, "batches": 2, "largest_batch": 4, "reruns": 0}
    for i, (g, x) in enumerate(zip(got, inputs)):
        assert_same(g, pipe(x), where=f"input {i}")


def test_asyncio_clients(pipes):
    pipe = pipes("text-classification")
    inputs = text_inputs("text-classification", 12)
    want = [pipe(x) for x in inputs]

    async def clients(server):
        ticks = 0

        async def ticker():  # the loop keeps running while the calls wait (no blocking wait)
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        tick = asyncio.ensure_future(ticker())
        got = await asyncio.gather(*(server.acall(x) for x in inputs * 4))
        tick.cancel()
        return got, ticks

    with pipe.serve(max_batch_size=8) as server:
        got, ticks = asyncio.run(clients(server))
    assert ticks > 0
    for i, g in enumerate(got):
        assert_same(g, want[i % len(inputs)], where=f"call {i}")
    assert server.stats["largest_batch"] > 1  # 48 calls queued by one gather share batches


def test_a_bad_input_fails_only_its_caller(pipes):
    pipe = pipes("text-classification")
    good = text_inputs("text-classification", 3)
    with pytest.raises(transmuter.InputError) as alone:
        pipe("   ")
    with pipe.serve(max_batch_size=4, batch_timeout_ms=10_000) as server:
        futures = [server.submit(x) for x in (good[0], "   ", good[1], good[2])]
        with pytest.raises(PipelineError, match="one input per call"):  # refused at once
            server([good[0], good[1]])
        with pytest.raises(PipelineError, match="one input per call"):
            server(42)
    error = futures[1].exception()
    assert type(error) is type(alone.value) and str(error) == str(alone.value)
    for f, x in zip([futures[0], futures[2], futures[3]], good):
        assert_same(f.result(), pipe(x))
    assert server.stats["reruns"] == 1


def test_close_finishes_the_queued_calls_and_refuses_new_ones(pipes):
    pipe = pipes("text-embedding")
    inputs = text_inputs("text-embedding", 5)
    server = pipe.serve(max_batch_size=8, batch_timeout_ms=60_000)
    futures = [server.submit(x) for x in inputs]  # the worker waits for 3 more, up to a minute
    server.close()  # reaching close ends that wait: the 5 run at once
    assert not server._thread.is_alive() and server.closed
    for f, x in zip(futures, inputs):
        assert_same(f.result(timeout=0), pipe(x))
    with pytest.raises(PipelineError, match="closed"):
        server(inputs[0])
    with pytest.raises(PipelineError, match="closed"):
        asyncio.run(server.acall(inputs[0]))
    server.close()  # twice is fine
    with pipe.serve() as again:
        assert again(inputs[0]).shape == pipe(inputs[0]).shape
    assert again.closed and again._thread.daemon


def test_image_classification_through_the_server(pipes, spy):
    ref = pipeline_reference("vit", "image-classification")  # one call on both images, top_k=5
    images = [str(ROOT / "vit" / p) for p in ref["inputs"]["images"]]
    pipe = pipes("image-classification", variant="fp32")
    want = [pipe(x, **ref["call_kwargs"]) for x in images]
    sizes = spy(pipe)
    with pipe.serve(max_batch_size=4, batch_timeout_ms=10_000, **ref["call_kwargs"]) as server:
        futures = [server.submit(images[i % 2]) for i in range(8)]
        got = [f.result() for f in futures]
    assert sizes == [4, 4]
    for i, g in enumerate(got):
        assert_same(g, want[i % 2], where=f"image {i}")
        assert_close(g, ref["outputs"][i % 2], TOL, f"recorded image {i % 2}")


def test_chunked_inputs_give_one_result_each(pipes, spy):
    """zero-shot-classification runs one chunk per label: a list call still gives one result
    per input, so the server hands each caller its own."""
    pipe = pipes("zero-shot-classification", fixture="bert-nli")
    texts = text_inputs("text-classification", 4)
    labels = ["sports", "weather"]  # 4 texts: 8 chunks (rows), in two graph calls of 4
    want = [pipe(t, candidate_labels=labels) for t in texts]
    sizes = spy(pipe)
    with pipe.serve(max_batch_size=4, batch_timeout_ms=10_000, candidate_labels=labels) as server:
        got = [f.result() for f in [server.submit(t) for t in texts]]
    assert sizes == [4]
    for i, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w, where=f"text {i}")


def test_long_question_answering_contexts_give_one_result_each(pipes, spy):
    """Long contexts run as several windows each (max_seq_len 32, stride 8): one answer list per
    question, the recorded transformers one."""
    call = pipeline_reference("bert-qa-long", "question-answering")["calls"][1]
    assert call["call_kwargs"]["top_k"] == 3
    pipe = pipes("question-answering", fixture="bert-qa-long")
    sizes = spy(pipe)
    n = len(call["inputs"])
    with pipe.serve(max_batch_size=n, batch_timeout_ms=10_000, **call["call_kwargs"]) as server:
        got = [f.result() for f in [server.submit(x) for x in call["inputs"]]]
    assert sizes == [n]
    for i, (g, w) in enumerate(zip(got, call["outputs"])):
        assert_close(g, w, TOL, f"question {i}")


def test_bad_options_and_generating_tasks_are_refused(pipes):
    pipe = pipes("text-classification")
    for options, message in [({"max_batch_size": 0}, "max_batch_size"),
                             ({"batch_timeout_ms": -1}, "batch_timeout_ms"),
                             ({"batch_timeout_ms": float("nan")}, "batch_timeout_ms"),
                             ({"progress": True}, "progress"),
                             ({"top_k": "two"}, "top_k"),
                             ({"no_such_option": 1}, "no_such_option")]:
        with pytest.raises(PipelineError, match=message):
            pipe.serve(**options)
    assert not pipe.generates and not pipes("image-classification").generates
    generator = transmuter.pipeline("text-generation", ROOT / "gpt2")
    assert generator.generates  # served by continuous batching (test_continuous_batching.py)
    with pytest.raises(PipelineError, match="continuous batching"):
        serving.Server(generator)
    whisper = transmuter.pipeline("automatic-speech-recognition", ROOT / "whisper")
    assert whisper.generates  # through its ASR head's generator
    with pytest.raises(PipelineError, match="not served"):
        whisper.serve()
    ctc = transmuter.pipeline("automatic-speech-recognition", ROOT / "wav2vec2")
    assert not ctc.generates
    # label sets by position would go to whichever inputs share a batch: refused (no model
    # call is made, so the pipeline is never run)
    gliner = transmuter.pipeline("zero-shot-entity-recognition", ROOT / "gliner-span")
    with pytest.raises(PipelineError, match="its own as"):
        gliner.serve(labels=[["person"], ["city"]])
    gliner.serve(labels=["person", "city"]).close()  # one label set for every call: fine


# --- examples/serve.py -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def app(pipes):
    pytest.importorskip("starlette", reason="the serve extra: pip install -e '.[serve]'")
    pytest.importorskip("httpx", reason="starlette's TestClient needs httpx")
    return example("serve").make_app(pipes("text-embedding"), "fixture", batch_timeout_ms=20)


def test_http_embeddings_are_the_pipeline_s(app, pipes):
    from starlette.testclient import TestClient
    pipe = pipes("text-embedding")
    texts, outputs, _ = recorded("text-embedding")
    with TestClient(app) as client:
        one = client.post("/v1/embeddings", json={"input": texts[0], "model": "m"}).json()
        many = client.post("/v1/embeddings", json={"input": texts}).json()
        packed = client.post("/v1/embeddings",
                             json={"input": texts, "encoding_format": "base64"}).json()
        bad = client.post("/v1/embeddings", json={"input": [texts[0], "  "]})
        wrong = client.post("/v1/embeddings", json={"input": [1, 2, 3]})
        chat = client.post("/v1/chat/completions", json={"messages": []})
    assert one["object"] == "list" and one["model"] == "m" and len(one["data"]) == 1
    assert many["model"] == "fixture"
    assert [d["index"] for d in many["data"]] == list(range(len(texts)))
    tokens = sum(len(pipe.tokenizer.encode(t).ids) for t in texts)
    assert many["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}
    for i, (d, p, w) in enumerate(zip(many["data"], packed["data"], outputs)):
        assert d["object"] == "embedding"
        assert_same(np.array(d["embedding"], np.float32), pipe(texts[i]), where=f"text {i}")
        assert_close(d["embedding"], w, TOL, f"recorded text {i}")
        unpacked = np.frombuffer(__import__("base64").b64decode(p["embedding"]), "<f4")
        np.testing.assert_array_equal(unpacked, np.array(d["embedding"], np.float32))
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "input"
    assert "input[1]" in bad.json()["error"]["message"]
    assert wrong.status_code == 400 and "list of strings" in wrong.json()["error"]["message"]
    # no chat model given to this app (test_continuous_batching.py serves one)
    assert chat.status_code == 404 and "--chat-model" in chat.json()["error"]["message"]


def test_http_asyncio_clients_share_batches(app, pipes):
    """32 concurrent HTTP requests (httpx's AsyncClient on the app, in process): each answer is
    its text's embedding alone."""
    import httpx
    pipe = pipes("text-embedding")
    texts = text_inputs("text-embedding", 32)

    async def run():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            async with app.router.lifespan_context(app):
                replies = await asyncio.gather(*(
                    client.post("/v1/embeddings", json={"input": t}) for t in texts))
        return [r.json()["data"][0]["embedding"] for r in replies]

    for i, got in enumerate(asyncio.run(run())):
        assert_same(np.array(got, np.float32), pipe(texts[i]), where=f"request {i}")
