"""Tiny models and datasets for tests, built from configs with fixed seeds (kilobytes, fast).

The demo's own models (ResNet, ViT, BERT, an overflowing BERT) come from fp16studio.core.demo;
this adds ConvNeXt, CLIP vision, a T5 encoder and FNet (an FFT without a CPU half kernel).
"""

from __future__ import annotations

from pathlib import Path

LABELS = {"num_labels": 3, "id2label": {0: "cat", 1: "dog", 2: "bird"},
          "label2id": {"cat": 0, "dog": 1, "bird": 2}}


def build_zoo(root: Path) -> dict[str, Path]:
    import torch
    from transformers import (CLIPVisionConfig, CLIPVisionModel, ConvNextConfig,
                              ConvNextForImageClassification, FNetConfig, FNetModel, T5Config,
                              T5EncoderModel)

    from fp16studio.core.demo import image_processor, tiny_tokenizer

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
    }
    paths = {}
    for name, (make, processor) in builds.items():
        torch.manual_seed(0)
        path = root / name
        make().save_pretrained(path)
        processor.save_pretrained(path)
        paths[name] = path
    return paths
