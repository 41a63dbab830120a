#!/usr/bin/env bash
# Regenerates every committed fixture in tests/fixtures/ from pinned versions.
#   bash tests/support/regenerate.sh
# Four environments: optimum-onnx 0.1.0 needs transformers < 4.58 (requirements-export.txt),
# onnxruntime-genai's model builder needs transformers 5 (requirements-genai.txt), and the gliner
# package pins its own versions (requirements-gliner.txt); the *Fast image processors' references
# need torchvision, which the export venv's CPU torch cannot load (requirements-fast.txt), and so
# does RF-DETR's processor in transformers 5.24 (requirements-rfdetr.txt: that torch, transformers 5).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE/../.."
VENVS="${TRANSMUTER_VENVS:-$HOME/.cache/transmuter-tests}"
PYTHON="${PYTHON:-python3}"

venv() {  # venv NAME REQUIREMENTS -> path of its python
    local dir="$VENVS/venv-$1"
    if [ ! -x "$dir/bin/python" ] || ! cmp -s "$2" "$dir/.requirements"; then
        "$PYTHON" -m venv "$dir"
        "$dir/bin/python" -m pip install --quiet --disable-pip-version-check -r "$2"
        cp "$2" "$dir/.requirements"
    fi
    echo "$dir/bin/python"
}

EXPORT="$(venv export "$HERE/requirements-export.txt")"
GENAI="$(venv genai "$HERE/requirements-genai.txt")"
GLINER="$(venv gliner "$HERE/requirements-gliner.txt")"
FAST="$(venv fast "$HERE/requirements-fast.txt")"  # torch + torchvision for the *Fast processors
AUDIO="$(venv audio "$HERE/requirements-audio.txt")"  # torch 2.9.1 + torchaudio: resample
RFDETR="$(venv rfdetr "$HERE/requirements-rfdetr.txt")"  # transformers 5.24 + torchvision: RF-DETR
SAM3="$(venv sam3 "$HERE/requirements-sam3.txt")"  # transformers 5.24 + torchvision 0.28 on the CPU torch: SAM 3 tracker
DIFFUSION="$(venv diffusion "$HERE/requirements-diffusion.txt")"  # diffusers 0.42, transformers 5.25

time "$EXPORT" tests/support/families_text.py
time "$EXPORT" tests/support/families_vision_audio.py
time "$EXPORT" tests/support/families_audio_timestamped.py  # whisper-timestamped: the whisper model, cross-attention outputs
time "$EXPORT" tests/support/record_whisper_words.py  # _extract_token_timestamps on synthetic cross-attentions
time "$EXPORT" tests/support/record_audio_pipelines.py  # audio pipeline references on real speech: rebuilds the torch models above
time "$EXPORT" tests/support/record_whisper_prompts.py  # Whisper prompts on real configs
time "$EXPORT" tests/support/families_audio_whisper_split.py  # whisper-split: the whisper model, decoder_model + decoder_with_past_model
time "$EXPORT" tests/support/record_whisper_fallback.py  # Whisper temperature fallback / no-speech / condition_on_prev_tokens on long.flac
time "$EXPORT" tests/support/record_whisper_longform_words.py  # word timestamps over sequential long-form decoding (whisper-timestamped)
time "$EXPORT" tests/support/families_text_split.py  # t5-split: the t5 model as decoder_model + decoder_with_past_model
time "$EXPORT" tests/support/record_tts.py  # text-to-speech waveforms in full: rebuilds vits / speecht5 above
time "$EXPORT" tests/support/record_tts_tokenizers.py  # VitsTokenizer / SpeechT5Tokenizer ids
time "$EXPORT" tests/support/families_audio_more.py  # wav2vec2-classifier, hubert-ctc (wav2vec2's vocab, the cases above)
time "$EXPORT" tests/support/families_audio_clap_split.py  # clap-split: the clap fixture's weights as text_model / audio_model
time "$EXPORT" tests/support/families_audio_moonshine.py  # moonshine: encoder + merged decoder, ASR cases on the speech
time "$EXPORT" tests/support/families_image_to_text.py  # trocr: DeiT + TrOCR decoder, encoder + merged decoder
time "$EXPORT" tests/support/record_image_to_text.py  # image-to-text pipeline cases: rebuilds vision-encoder-decoder and trocr
time "$EXPORT" tests/support/families_image_to_text_split.py  # vision-encoder-decoder-split: its weights as the unmerged decoder pair
time "$EXPORT" tests/support/families_florence2.py  # florence2: DaViT + BART, vision_encoder + embed_tokens + encoder_model + decoder_model_merged (torch.onnx)
time "$EXPORT" tests/support/record_florence2.py  # its generate / post_process_generation references (rebuilds the model)
time "$EXPORT" tests/support/families_idefics3.py  # idefics3: SmolVLM-shaped, vision_encoder + embed_tokens + decoder_model_merged (torch.onnx)
time "$EXPORT" tests/support/record_image_text_to_text.py  # image-text-to-text pipeline cases and Idefics3Processor outputs
time "$EXPORT" tests/support/families_qwen2vl.py  # qwen2-vl, qwen2.5-vl: vision_encoder (grid) + embed_tokens + decoder_model_merged (M-RoPE), torch.onnx
time "$EXPORT" tests/support/record_qwen2vl.py  # its processor, get_rope_index and pipeline cases (onnxruntime greedy checked equal)
time "$EXPORT" tests/support/families_vision_more.py
time "$EXPORT" tests/support/families_vision_owl.py
time "$EXPORT" tests/support/families_detr_panoptic.py  # detr-panoptic: optimum image-segmentation export
time "$EXPORT" tests/support/record_detr_panoptic.py  # its panoptic / instance / semantic pipeline references
time "$EXPORT" tests/support/families_maskformer.py  # mask2former, maskformer: optimum image-segmentation exports
time "$EXPORT" tests/support/record_maskformer.py  # their panoptic / instance / semantic pipeline references, label_ids_to_fuse
time "$EXPORT" tests/support/families_grounding_dino.py  # grounding-dino: torch.onnx, one image size
time "$EXPORT" tests/support/record_grounding_dino.py  # its pipeline / grounded / processor references (rebuilds the model)
time "$EXPORT" tests/support/families_sam.py  # sam: optimum SAM split export (vision_encoder + prompt_encoder_mask_decoder)
time "$EXPORT" tests/support/record_sam.py  # its prompt-mode (SamProcessor) and automatic mask-generation pipeline references
time "$EXPORT" tests/support/families_sam2.py  # sam2: SAM 2 traced in the onnx-community layout; saves the torch model for record_sam2.py
time "$SAM3" tests/support/families_sam3_tracker.py  # sam3-tracker: SAM 3 tracker traced in the onnx-community layout, its processor_config.json and prompt references
time "$EXPORT" tests/support/families_vision_rtdetr.py
time "$EXPORT" tests/support/families_vision_dfine.py  # d-fine: optimum export, photo references
time "$RFDETR" tests/support/families_vision_rfdetr.py  # rf-detr: torch.onnx; transformers 5.24's RfDetrImageProcessor needs torchvision
time "$RFDETR" tests/support/record_fast_image_processors.py  # RfDetrImageProcessor's references (fast_rfdetr*.npz: the recorder's SETS_5, in this venv)
time "$EXPORT" tests/support/families_vision_detr_variants.py  # conditional-detr, deformable-detr: torch.onnx
time "$EXPORT" tests/support/families_background_removal.py  # rmbg, rmbg-logits, modnet: torch.onnx, RMBG-1.4's names
# their transformers.js references (npm install --ignore-scripts @huggingface/transformers@4.3.2 into
# $TRANSFORMERS_JS, outside the repo: see the script's header)
time env TRANSFORMERS_JS="${TRANSFORMERS_JS:-$VENVS/transformers-js}" node tests/support/record_background_removal.mjs
time "$EXPORT" tests/support/families_vision_sr.py
time "$DIFFUSION" tests/support/families_diffusion.py  # stable-diffusion: text_encoder, unet, vae_decoder, vae_encoder (torch.onnx, optimum's names)
time "$DIFFUSION" tests/support/record_text_to_image.py  # its diffusers pipeline references (onnxruntime and PyTorch; rebuilds the torch models)
time "$EXPORT" tests/support/families_pipelines.py
time "$EXPORT" tests/support/record_generation.py  # beam references: after the fixtures they rebuild
time "$EXPORT" tests/support/record_finetune.py  # PyTorch gradients of bert-sequence-classification, vit, gpt2
time "$EXPORT" tests/support/record_image_processors.py  # pixel_values on scikit-image photos
time "$EXPORT" tests/support/record_siglip_tokenizer.py
time "$FAST" tests/support/record_sam2.py  # sam2's prompt (points, boxes) and automatic references: Sam2ImageProcessorFast needs torchvision
time "$FAST" tests/support/record_fast_image_processors.py  # the *ImageProcessorFast references
time "$AUDIO" tests/support/record_resample.py  # torchaudio.functional.resample references
time "$EXPORT" tests/support/record_audio_features.py; time "$AUDIO" tests/support/record_audio_features.py --torchaudio  # feature extractors; AST also on torchaudio
time "$GENAI" tests/support/families_genai.py
time "$GENAI" tests/support/families_genai.py --record-beam  # beam references for the GQA fixtures
time "$GLINER" tests/support/families_gliner.py
