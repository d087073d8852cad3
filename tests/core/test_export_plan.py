"""The exported script's plan: what the script must do, decided from a spec below the
presentation layer (core/run/export_plan.py), from a tiny config and its tokenizer (no weights)."""

import ast
import json
from pathlib import Path

import pytest

from fp16studio.core import PipelineSpec
from fp16studio.core.run.export_plan import Columns, FixNote, Labels, Rows, export_plan


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A BERT classifier's config and tokenizer (no weights: the plan never reads them), and a
    data file whose label column is `y` beside a `labels` column of another meaning."""
    from transformers import BertConfig

    from fp16studio.core.demo.pipelines import tiny_tokenizer

    root = tmp_path_factory.mktemp("plan")
    tokenizer = tiny_tokenizer()
    BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=2,
               num_attention_heads=2, intermediate_size=32, max_position_embeddings=32,
               num_labels=3, architectures=["BertForSequenceClassification"]).save_pretrained(root / "bert")
    tokenizer.save_pretrained(root / "bert")
    (root / "rows.jsonl").write_text("".join(
        json.dumps({"sentence": f"a cat {i}", "y": i % 3, "labels": "x"}) + "\n" for i in range(4)))
    (root / "pre.py").write_text("def fn(example):\n    return example\n")
    return root


def spec(folder, **keys):
    return PipelineSpec.from_dict({"model": "bert", "dataset": "synthetic", **keys},
                                  base_dir=folder)


def test_half_islands_load_float32_and_cast_the_rest_themselves(folder):
    plan = export_plan(spec(folder, model_dtype="float16", run_in_float32=["*.layer.1"],
                            with_labels=True))
    assert plan.model_class == "BertForSequenceClassification"
    assert plan.model_ref == str((folder / "bert").resolve())
    assert (plan.load_dtype, plan.islands, plan.island_dtype) == ("float32", ("*.layer.1",), "float16")
    assert (plan.processor_class, plan.main_input, plan.processor_input) == \
        ("AutoTokenizer", "input_ids", "text")
    assert plan.rows == Rows("synthetic", None, "train", None, None)
    assert (plan.synthetic.kind, plan.synthetic.num_labels) == ("text", 3)
    assert plan.columns == Columns(text="text", label="label")
    assert plan.labels == Labels("label", (), "never")
    assert (plan.train, plan.fp8, plan.preprocess, plan.decoder_start) == (None, None, None, None)


def test_islands_in_a_float32_model_have_nothing_to_do_and_a_cast_is_the_whole_models(folder):
    assert export_plan(spec(folder, run_in_float32=["*.layer.1"])).islands == ()
    cast = export_plan(spec(folder, model_cast="bfloat16"))
    assert (cast.load_dtype, cast.islands, cast.cast_after_load) == ("float32", (), "bfloat16")
    islands = export_plan(spec(folder, model_cast="float16", run_in_float32=["*.layer.1"]))
    # model.half() with islands: the islands' helper casts the rest; no whole-model cast.
    assert (islands.load_dtype, islands.cast_after_load, islands.island_dtype) == \
        ("float32", None, "float16")


def test_training_decisions(folder):
    half = export_plan(spec(folder, model_cast="float16", with_labels=True, train={
        "optimizer": "adam", "eps": 1e-4, "master_weights": True, "grad_scaler": True,
        "clip_grad_norm": 1.0, "clip_before_unscale": True, "steps": 3}))
    t = half.train
    assert (t.optimizer_class, t.lr, t.eps, t.steps) == ("Adam", 1e-3, 1e-4, 3)
    assert (t.grad_scaler, t.clip_grad_norm, t.clip_before_unscale) == (True, 1.0, True)
    # Master weights over half weights need a float32 copy; over float32 weights they are the
    # weights themselves. SGD takes no eps.
    assert (t.master_weights, t.master_copies) == (True, True)
    sgd = export_plan(spec(folder, with_labels=True, train={
        "optimizer": "sgd", "eps": 1e-4, "master_weights": True})).train
    assert (sgd.optimizer_class, sgd.eps, sgd.master_weights, sgd.master_copies) == \
        ("SGD", None, True, False)


def test_fp8_training_converts_the_specs_linear_layers_less_the_kept(folder):
    plan = export_plan(spec(folder, with_labels=True, train={
        "optimizer": "sgd", "fp8": "rowwise", "fp8_keep": ["bert.encoder.layer.0.output.dense"]}))
    fp8 = plan.fp8
    assert (fp8.recipe, fp8.training, fp8.keep_bf16, fp8.capability) == \
        ("rowwise", True, ("bert.encoder.layer.0.output.dense",), (9, 0))
    assert "bert.encoder.layer.1.output.dense" in fp8.converted
    assert "bert.encoder.layer.0.output.dense" not in fp8.converted
    assert "classifier" not in fp8.converted   # 16 -> 3: a shape FP8 refuses


def test_a_data_files_label_column_replaces_its_labels_column(folder):
    plan = export_plan(spec(folder, dataset="rows.jsonl", with_labels=True,
                            columns={"text": "sentence", "label": "y"}))
    assert plan.rows == Rows("file", str((folder / "rows.jsonl").resolve()), "train", None, "json")
    assert plan.synthetic is None
    assert plan.labels == Labels("y", (), "always")
    # With a preprocess function the labels column may be its own: dropped only if there.
    pre = export_plan(spec(folder, dataset="rows.jsonl", with_labels=True, preprocess="pre.py:fn",
                           columns={"text": "sentence", "label": "y"}))
    assert pre.preprocess == (str((folder / "pre.py").resolve()), "fn")
    assert pre.labels == Labels("y", (), "if-present")


def test_applied_fixes_are_typed_with_the_keys_they_edited(folder):
    fixes = [{"id": "keep", "title": "Keep it", "explain": "Why.", "edits": {"keep_fp32": ["x"]}},
             {"id": "old", "title": "Recorded before edits were"}]
    plan = export_plan(spec(folder, applied_fixes=fixes))
    assert plan.fixes == (FixNote("keep", "Keep it", "Why.", frozenset({"keep_fp32"})),
                          FixNote("old", "Recorded before edits were", None, frozenset()))


def test_the_script_is_written_from_the_plan_alone():
    """present/export.py reads neither the model (core/hf) nor the data (core/data)."""
    import fp16studio.core.present.export as export

    tree = ast.parse(Path(export.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for alias in node.names}
    below = {name for name in imported
             if name and name.lstrip(".").split(".")[0] in ("hf", "data", "transformers", "datasets")}
    assert not below, below
