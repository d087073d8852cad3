"""Tiny 4-layer BERTs whose float16 runs overflow or drift, from a config with a fixed seed.

Overflow: a feed-forward block is scaled so its inner activations leave float16's range while
what goes in and out of the layer does not (as in real models whose FFN activations grow large).
Drift: an attention output gets a large constant offset that its LayerNorm removes again; in
float16 the offset eats the mantissa, so the signal under it comes out as noise, finite.
"""

from __future__ import annotations

from pathlib import Path


def _scale_ffn(layer: int, factor: float):
    def edit(model):
        block = model.bert.encoder.layer[layer]
        block.intermediate.dense.weight.mul_(factor)
        block.output.dense.weight.div_(factor)
    return edit


def _offset_attention(layer: int, offset: float):
    def edit(model):
        model.bert.encoder.layer[layer].attention.output.dense.bias.add_(offset)
    return edit


MODELS = {
    "overflow-bert4": (_scale_ffn(1, 3e5),),
    "overflow-bert4-twice": (_scale_ffn(1, 3e5), _scale_ffn(3, 3e5)),
    "drift-bert4": (_offset_attention(1, 1000.0),),
    "plain-bert4": (),
}


def build_numerics_zoo(root: Path) -> dict[str, Path]:
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    from fp16studio.core.demo.pipelines import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=4,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
                        num_labels=3)
    paths = {}
    for name, edits in MODELS.items():
        torch.manual_seed(0)
        model = BertForSequenceClassification(config)
        with torch.no_grad():
            for edit in edits:
                edit(model)
        path = root / name
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
        paths[name] = path
    return paths


def text_spec(demo_dir, model, **keys):
    """A spec over the demo's texts for one of these models."""
    from fp16studio.core import PipelineSpec

    return PipelineSpec.from_dict({"model": str(model), "dataset": "data/texts.jsonl", **keys},
                                  base_dir=demo_dir)


def shrunken_tiny_bert(demo_dir, folder, factor: float):
    """The demo's tiny BERT with its embeddings' LayerNorm scaled by `factor` (values that sink
    under float16's smallest normal), saved with its tokenizer to `folder`."""
    import torch
    from transformers import BertForSequenceClassification

    source = demo_dir / "models/tiny-bert"
    model = BertForSequenceClassification.from_pretrained(source)
    with torch.no_grad():
        model.bert.embeddings.LayerNorm.weight.mul_(factor)
        model.bert.embeddings.LayerNorm.bias.mul_(factor)
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((source / name).read_bytes())
    return folder
