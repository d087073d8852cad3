"""Tiny models and datasets for tests, built from configs with fixed seeds (kilobytes, fast).

The demo's own models (ResNet, ViT, BERT, an overflowing BERT) come from fp16studio.core.demo.pipelines;
this adds ConvNeXt, CLIP vision, a T5 encoder, FNet (an FFT without a CPU half kernel), a Llama,
and for audio a Whisper (input_features) and a Wav2Vec2 classifier (input_values), plus folders
of sine-wave clips written with soundfile.
"""

from __future__ import annotations

from pathlib import Path

LABELS = {"num_labels": 3, "id2label": {0: "cat", 1: "dog", 2: "bird"},
          "label2id": {"cat": 0, "dog": 1, "bird": 2}}


def build_zoo(root: Path) -> dict[str, Path]:
    import torch
    from transformers import (CLIPConfig, CLIPModel, CLIPVisionConfig, CLIPVisionModel,
                              ConvNextConfig, ConvNextForImageClassification, FNetConfig,
                              FNetModel, LlamaConfig, LlamaForCausalLM, T5Config, T5EncoderModel,
                              Wav2Vec2Config, Wav2Vec2FeatureExtractor,
                              Wav2Vec2ForSequenceClassification, WhisperConfig,
                              WhisperFeatureExtractor, WhisperForConditionalGeneration)

    from fp16studio.core.demo.pipelines import image_processor, tiny_tokenizer

    images = image_processor(32)
    tokenizer = tiny_tokenizer()
    builds = {
        "convnext": (lambda: ConvNextForImageClassification(ConvNextConfig(
            num_channels=3, num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], **LABELS)), images),
        "clip-vision": (lambda: CLIPVisionModel(CLIPVisionConfig(
            image_size=32, patch_size=8, hidden_size=32, intermediate_size=64,
            num_hidden_layers=2, num_attention_heads=2)), images),
        "t5-encoder": (lambda: T5EncoderModel(T5Config(
            vocab_size=len(tokenizer), d_model=32, d_kv=8, d_ff=64, num_layers=2,
            num_heads=2)), tokenizer),
        "fnet": (lambda: FNetModel(FNetConfig(
            vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, intermediate_size=64,
            max_position_embeddings=64, use_tpu_fourier_optimizations=False)), tokenizer),
        "llama": (lambda: LlamaForCausalLM(LlamaConfig(
            vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
            num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
            pad_token_id=0)), tokenizer),
        # chunk_length=1: a 1-second window (100 frames), so max_source_positions is 50.
        "whisper": (lambda: WhisperForConditionalGeneration(WhisperConfig(
            vocab_size=64, num_mel_bins=16, d_model=32, encoder_layers=1, decoder_layers=1,
            encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
            decoder_ffn_dim=64, max_source_positions=50, max_target_positions=32,
            decoder_start_token_id=1, pad_token_id=0, bos_token_id=1, eos_token_id=2)),
            WhisperFeatureExtractor(feature_size=16, sampling_rate=16000, chunk_length=1)),
        "wav2vec2": (lambda: Wav2Vec2ForSequenceClassification(Wav2Vec2Config(
            vocab_size=32, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 4), conv_kernel=(10, 8),
            num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2, classifier_proj_size=16,
            num_labels=2)),
            Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0,
                                     do_normalize=True, return_attention_mask=True)),
    }
    builds["clip"] = (lambda: CLIPModel(CLIPConfig(
        text_config=dict(vocab_size=74, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, max_position_embeddings=64, bos_token_id=0,
                         eos_token_id=1, pad_token_id=1),
        vision_config=dict(image_size=32, patch_size=8, hidden_size=32, intermediate_size=64,
                           num_hidden_layers=1, num_attention_heads=2),
        projection_dim=16)), clip_processor(root))
    paths = {}
    for name, (make, processor) in builds.items():
        torch.manual_seed(0)
        path = root / name
        make().save_pretrained(path)
        processor.save_pretrained(path)
        paths[name] = path
    return paths


def clip_processor(root: Path):
    """A CLIPProcessor (BPE tokenizer over single characters, 32-pixel images): the processor
    users load with AutoProcessor for a model that takes text and images together."""
    import json
    import string

    from transformers import CLIPImageProcessor, CLIPProcessor, CLIPTokenizer

    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for char in string.ascii_lowercase + string.digits:
        vocab[char] = len(vocab)
        vocab[char + "</w>"] = len(vocab)
    folder = root / "clip-tokenizer"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    images = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    return CLIPProcessor(image_processor=images, tokenizer=tokenizer)


def write_clips(folder: Path, suffixes=("wav", "flac"), rate: int = 8000) -> Path:
    """Sine-wave clips of different lengths in two class folders, yes/ and no/, at `rate`."""
    import numpy as np
    import soundfile

    for i in range(4):
        label = ("yes", "no")[i % 2]
        (folder / label).mkdir(parents=True, exist_ok=True)
        n = rate + rate // 10 * i
        wave = 0.5 * np.sin(2 * np.pi * 220 * (i + 1) * np.arange(n) / rate).astype(np.float32)
        soundfile.write(folder / label / f"clip{i}.{suffixes[i % len(suffixes)]}", wave, rate)
    return folder
