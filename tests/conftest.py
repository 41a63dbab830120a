import gc
import os

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# JAX's persistent compilation cache (src/backends/compile_cache.py) stays off in the suite: results never
# depend on what an earlier run left on disk, and nothing is written to the machine's ~/.cache.
# tests/test_compile_cache.py turns it on in child processes, each with its own temp folder.
os.environ.setdefault("TRANSMUTER_COMPILE_CACHE", "0")

# Left out of the default suite (run by `-m slow`, which .ci/run runs after it): JAX runs of
# generation pipelines whose MLX run stays in the default suite (their cost is XLA compiling one
# shape per decode step of a growing cache, 1-3 min each on 2 cores), and the Ray cluster tests.
SLOW_TESTS = {
    "tests/test_pipelines_audio.py::test_matches_recorded_pipeline"
    "[moonshine-automatic-speech-recognition-jax]",
    "tests/test_pipelines_image_to_text.py::test_matches_recorded_pipeline[trocr-jax]",
    "tests/test_pipelines_image_to_text.py::test_matches_recorded_pipeline"
    "[vision-encoder-decoder-jax]",
    "tests/test_pipelines_image_to_text.py::test_a_split_decoder_matches_the_merged_record[jax]",
    "tests/test_pipelines_grounding_dino.py::test_matches_recorded_pipeline[jax]",
    "tests/test_pipelines_grounding_dino.py::test_grounded_matches_recorded_processor[jax]",
    "tests/test_pipelines_mask_generation.py::test_prompts_match_transformers[jax-sam]",
    "tests/test_pipelines_mask_generation.py::test_automatic_matches_transformers[jax-sam]",
    "tests/test_pipelines_mask_generation.py::test_prompts_match_transformers[jax-sam2]",
    "tests/test_pipelines_mask_generation.py::test_automatic_matches_transformers[jax-sam2]",
    "tests/test_pipelines_mask_generation.py::test_prompts_match_transformers[jax-sam3-tracker]",
    "tests/test_pipelines_mask_generation.py::test_automatic_matches_transformers[jax-sam3-tracker]",
    "tests/test_pipelines_audio.py::test_matches_recorded_pipeline"
    "[whisper-split-automatic-speech-recognition-jax]",
    "tests/test_pipelines_audio.py::test_a_batch_equals_one_by_one"
    "[whisper-split-automatic-speech-recognition]",
    # the default suite's two longest batch checks (95 s and 22 s on 2 cores; other families keep
    # the check there): it had reached 25:52
    "tests/test_pipelines_audio.py::test_a_batch_equals_one_by_one"
    "[moonshine-automatic-speech-recognition]",
    "tests/test_pipelines_vision.py::test_batch_equals_one_by_one[object-detection-d-fine]",
    "tests/test_whisper_split.py::test_split_pair_gives_the_merged_decoders_ids[jax-1]",
    "tests/test_whisper_split.py::test_split_pair_gives_the_merged_decoders_ids[jax-2]",
    "tests/test_whisper_fallback.py::test_matches_transformers[condition_on_prev_tokens-jax]",
    "tests/test_whisper_fallback.py::test_matches_transformers"
    "[condition_on_prev_tokens_beams-jax]",
    "tests/test_whisper_fallback.py::test_matches_transformers[fallback_to_greedy_again-jax]",
    "tests/test_whisper_fallback.py::test_matches_transformers[beams_logprob_threshold-jax]",
    "tests/test_text2text_split.py::test_split_t5_gives_transformers_ids[jax]",
    "tests/test_whisper_fallback.py::test_matches_transformers[no_speech_skip-jax]",
    "tests/test_whisper_longform_words.py::test_matches_transformers[longform_words_20s-jax]",
    "tests/test_whisper_longform_words.py::test_matches_transformers[longform_words-jax]",
    "tests/test_whisper_longform_words.py::test_matches_transformers"
    "[longform_words_condition_on_prev_tokens-jax]",
    "tests/test_pipelines_qwen2vl.py::test_matches_recorded_pipeline[qwen2-vl-jax]",
    "tests/test_pipelines_qwen2vl.py::test_matches_recorded_pipeline[qwen2.5-vl-jax]",
    "tests/test_pipelines_image_text_to_text.py::test_matches_recorded_pipeline[jax]",
    "tests/test_pipelines_vision.py::test_matches_recorded_pipeline[object-detection-d-fine-jax]",
    "tests/test_pipelines_vision.py::test_matches_recorded_pipeline"
    "[object-detection-conditional-detr-jax]",
    "tests/test_pipelines_vision.py::test_matches_recorded_pipeline"
    "[object-detection-deformable-detr-jax]",
    "tests/test_pipelines_detection.py::test_matches_recorded_pipeline[jax]",
    "tests/test_pipelines_vision.py::test_batch_equals_one_by_one[object-detection-conditional-detr]",
    "tests/test_pipelines_vision.py::test_batch_equals_one_by_one[object-detection-deformable-detr]",
    "tests/test_pipelines_detection.py::test_exact_boxes_are_post_process_object_detection[jax]",
    "tests/test_pipelines_florence2.py::test_generate_matches_transformers[jax]",
    "tests/test_pipelines_maskformer.py::test_matches_transformers[mask2former-jax]",
    "tests/test_pipelines_maskformer.py::test_matches_transformers[maskformer-jax]",
}
# The same checks on one backend where the other backend's run stays in the default suite (and
# each pipeline's other tests run both): each of these took 30-110 s of a 2-core run, and the
# default suite is kept under 20 minutes (pytest --durations=150 of the suite, December 2026).
SLOW_TESTS |= {
    "tests/test_pipelines_audio.py::test_matches_recorded_pipeline"
    "[whisper-automatic-speech-recognition-jax]",
    "tests/test_pipelines_audio.py::test_matches_recorded_pipeline"
    "[whisper-timestamped-automatic-speech-recognition-jax]",
    "tests/test_pipelines_audio.py::test_matches_recorded_pipeline"
    "[hubert-ctc-automatic-speech-recognition-mlx]",
    "tests/test_pipelines_audio.py::test_matches_recorded_pipeline"
    "[wav2vec2-automatic-speech-recognition-jax]",
    "tests/test_pipelines_audio.py::test_matches_recorded_pipeline"
    "[wav2vec2-classifier-audio-classification-mlx]",
    "tests/test_pipelines_audio.py::test_matches_recorded_pipeline"
    "[clap-zero-shot-audio-classification-jax]",
    "tests/test_pipelines_tts.py::test_matches_transformers[vits-jax]",
    "tests/test_pipelines_tts.py::test_matches_transformers[speecht5-jax]",
    "tests/test_models.py::test_graph_matches_onnxruntime[grounding-dino/model.onnx-compiled-mlx]",
    "tests/test_models.py::test_graph_matches_onnxruntime[d-fine/model.onnx-compiled-mlx]",
}
SLOW_FILES = {"tests/test_ray.py"}


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_code():
    """After each test file: drop JAX's compiled executables. Each one maps its machine code into
    the process, and test files keep their pipelines in module caches; an xdist worker that ran
    many files reached the kernel's 65,530 mappings (vm.max_map_count), and XLA then segfaulted
    while compiling (CI of stop 27, in test_threads), which left xdist waiting forever."""
    yield
    import jax  # here, not at the top: JAX_PLATFORMS is set above before JAX reads it

    gc.collect()
    jax.clear_caches()


@pytest.hookimpl(tryfirst=True)  # before the -m selection reads the marks
def pytest_collection_modifyitems(items):
    for item in items:
        if item.nodeid in SLOW_TESTS or item.nodeid.split("::")[0] in SLOW_FILES:
            item.add_marker(pytest.mark.slow)


def pytest_terminal_summary(terminalreporter):
    """Per backend: `N passed, M excluded` over the ONNX conformance cases."""
    counts = {}
    for status in ("passed", "failed", "skipped"):
        for report in terminalreporter.stats.get(status, []):
            node = getattr(report, "nodeid", "")
            if "test_conformance.py::test_conformance[" not in node:
                continue
            backend = node.split("[", 1)[1].split("-", 1)[0]
            c = counts.setdefault(backend, {"passed": 0, "failed": 0, "skipped": 0})
            c[status] += 1
    for backend, c in sorted(counts.items()):
        terminalreporter.write_line(f"conformance {backend}: {c['passed']} passed, "
                                    f"{c['skipped']} excluded, {c['failed']} failed")
