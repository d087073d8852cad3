"""The FP8 plan (`fp16studio fp8`): eligibility by the recipes' shape rules, a layer made
sensitive on purpose kept in bfloat16, the device pre-flight, the exported script that converts
exactly the plan's layers, and a traced script's FP8 failures. Models are built from configs with
fixed seeds (a Llama-style LM and a BERT). The measured SQNR needs torchao (the `fp8` extra):
those tests skip without it; eligibility, FLOPs and ranges are tested either way."""

import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from numerics_zoo import text_spec

from fp16studio.cli import main
from fp16studio.core.diagnostics.rules import fp8 as fp8_rules
from fp16studio.core.precision import fp8 as fp8_module
from fp16studio.core.precision.fp8 import fp8_plan
from fp16studio.core.common.float8 import recipe_support, shape_reason, supported_recipe
from fp16studio.core.precision.fp8_plan import (SENSITIVE_SQNR_DB, SMALL_SHARE_OF_LARGEST,
                                                Fp8Plan, LayerPlan, decide)
from fp16studio.core.script.trace import trace_script

needs_torchao = pytest.mark.skipif(fp8_module.torchao_float8() is None,
                                   reason="torchao is not installed (pip install '.[fp8]')")


def _sensitive_channel(up, down, channel: int = 5, factor: float = 1e5):
    """One inner channel scaled down going in and up coming out, as the overflow fixtures scale
    a feed-forward block: the bfloat16 function is the same (the activation is linear near 0),
    but the outgoing weight holds a 1e5 outlier, so a per-tensor (or per-row) e4m3 scale
    flushes the rest of it under e4m3's smallest step."""
    up.weight[channel].div_(factor)
    down.weight[:, channel].mul_(factor)


@pytest.fixture(scope="session")
def fp8_models(tmp_path_factory):
    from transformers import (BertConfig, BertForSequenceClassification, LlamaConfig,
                              LlamaForCausalLM)

    from fp16studio.core.demo.pipelines import tiny_tokenizer

    tokenizer = tiny_tokenizer()   # 135 tokens: the LM head's out_features is not a multiple of 16
    root = tmp_path_factory.mktemp("fp8-models")

    def llama(intermediate):
        return LlamaForCausalLM(LlamaConfig(
            vocab_size=len(tokenizer), hidden_size=48, intermediate_size=intermediate,
            num_hidden_layers=2, num_attention_heads=3, num_key_value_heads=3,
            max_position_embeddings=64, pad_token_id=0))

    def bert():
        return BertForSequenceClassification(BertConfig(
            vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2,
            num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
            num_labels=3))

    def llama_sensitive(model):
        mlp = model.model.layers[1].mlp
        _sensitive_channel(mlp.up_proj, mlp.down_proj)

    def bert_sensitive(model):
        layer = model.bert.encoder.layer[1]
        _sensitive_channel(layer.intermediate.dense, layer.output.dense)

    def bert_outlier(model):
        # 1e10: the gradient reaching intermediate.dense gets a column 1e10 times the rest,
        # which an FP8 backward cast's scale (the abs-max's) then flushes under its step.
        layer = model.bert.encoder.layer[1]
        _sensitive_channel(layer.intermediate.dense, layer.output.dense, factor=1e10)

    builds = {"llama": (lambda: llama(40), None), "llama-sensitive": (lambda: llama(64),
                                                                      llama_sensitive),
              "bert": (bert, None), "bert-sensitive": (bert, bert_sensitive),
              "bert-outlier": (bert, bert_outlier)}
    paths = {}
    for name, (make, edit) in builds.items():
        torch.manual_seed(0)
        model = make()
        if edit is not None:
            with torch.no_grad():
                edit(model)
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
        paths[name] = root / name
    return paths


def _spec(demo_dir, fp8_models, name, **keys):
    return text_spec(demo_dir, fp8_models[name], **keys)


# -- the rules ----------------------------------------------------------------------------------

def test_shape_rule_on_both_sides_of_16():
    assert shape_reason(32, 64) is None and shape_reason(16, 4096) is None
    assert shape_reason(40, 64) == "in_features 40 is not divisible by 16"
    assert shape_reason(64, 3) == "out_features 3 is not divisible by 16"
    assert "in_features 8" in shape_reason(8, 24) and "out_features 24" in shape_reason(8, 24)


def test_too_small_to_gain_on_both_sides_of_the_share():
    big = LayerPlan("big", 64, 64, flops=1000)
    above = LayerPlan("above", 64, 64, flops=int(1000 * SMALL_SHARE_OF_LARGEST))
    below = LayerPlan("below", 64, 64, flops=int(1000 * SMALL_SHARE_OF_LARGEST) - 1)
    idle = LayerPlan("idle", 64, 64)
    sensitive = LayerPlan("sensitive", 64, 64, flops=1000, sqnr_db=SENSITIVE_SQNR_DB - 0.1)
    edge = LayerPlan("edge", 64, 64, flops=1000, sqnr_db=SENSITIVE_SQNR_DB)
    decide([big, above, below, idle, sensitive, edge])
    assert big.eligible and above.eligible and not below.eligible and not idle.eligible
    assert below.reason.startswith("too small to gain") and idle.reason == "did not run on this batch"
    assert sensitive.keep_bf16 and sensitive.eligible and not edge.keep_bf16
    assert abs(sum(layer.flops_share for layer in (big, above, below, idle, sensitive, edge))
               - 1) < 1e-9


def test_recipes_against_the_device():
    assert recipe_support("tensorwise", "cpu", None)[:2] == (True, True)
    assert recipe_support("tensorwise", "cuda", (8, 6))[:2] == (False, True)
    assert recipe_support("tensorwise", "cuda", (8, 9))[:2] == (True, False)
    assert recipe_support("rowwise", "cuda", (8, 9))[:2] == (False, True)
    assert recipe_support("rowwise", "cuda", (9, 0))[:2] == (True, False)
    assert supported_recipe("cuda", (8, 9)) == "tensorwise"
    assert supported_recipe("cuda", (8, 0)) is None and supported_recipe("cpu", None) is None
    finding, = fp8_rules.plan_findings([], 20.0, "rowwise", "cuda:0",
                                       recipe_support("rowwise", "cuda", (8, 9)), "tensorwise")
    assert (finding.code, finding.severity) == ("fp8-unsupported", "error")
    assert [fix.id for fix in finding.fixes] == ["fp8-recipe-tensorwise", "fp8-bfloat16"]


def test_preflight_names_an_fp8_checkpoint_dequantised_here():
    from fp16studio.core.precision.fp8 import preflight
    from fp16studio.core.precision.fp8_plan import Fp8Plan, is_fp8_checkpoint

    fp8_config = {"quant_method": "fp8", "activation_scheme": "dynamic",
                  "weight_block_size": [128, 128]}
    assert is_fp8_checkpoint(fp8_config) and not is_fp8_checkpoint(None)
    assert is_fp8_checkpoint({"quant_method": "torchao", "quant_type": {
        "default": {"_type": "Float8DynamicActivationFloat8WeightConfig"}}})
    assert not is_fp8_checkpoint({"quant_method": "bitsandbytes", "load_in_8bit": True})
    plan = Fp8Plan("tensorwise", "cpu", None, True)
    checks = {c["check"]: c for c in preflight(plan, recipe_support("tensorwise", "cpu", None),
                                               None, fp8_config)}
    assert not checks["checkpoint"]["ok"] and "dequantises" in checks["checkpoint"]["message"]
    assert not checks["torchao"]["ok"] and checks["device"]["ok"]
    assert "checkpoint" not in {c["check"] for c in preflight(
        plan, recipe_support("tensorwise", "cpu", None), None, None)}


def test_the_layer_size_check_weighs_tokens_and_both_widths_on_both_sides_of_the_bound():
    from fp16studio.core.precision.fp8 import gemm_size_check
    from fp16studio.core.precision.fp8_plan import SPEED_GEMM

    def check(rows, in_features, out_features):
        layer = LayerPlan("l", in_features, out_features, eligible=True, rows=rows)
        return gemm_size_check([layer, LayerPlan("small", 64, 64, eligible=True, rows=rows)])

    assert check(SPEED_GEMM, SPEED_GEMM, 2 * SPEED_GEMM)["ok"]
    short = check(SPEED_GEMM - 1, SPEED_GEMM, SPEED_GEMM)
    assert not short["ok"] and f"this batch: {SPEED_GEMM - 1} tokens a call" in short["message"]
    assert f"a batch of {SPEED_GEMM} tokens a call or more may gain" in short["message"]
    # Llama-1B's shapes: slower in FP8 on an H100 at any batch (docs/gpu.md).
    narrow = check(8192, 2048, 5632)
    assert not narrow["ok"] and "too narrow to gain at any batch size" in narrow["message"]
    assert "the widest layer 2048x5632" in narrow["message"]
    assert not check(8192, SPEED_GEMM - 1, 8192)["ok"]
    assert gemm_size_check([LayerPlan("head", 64, 3)])["message"] == "no eligible layer to convert"


@pytest.mark.parametrize("kind, message, code", [
    ("AssertionError", "Device compute capability 8.9 or higher required for FP8 execution.",
     "fp8-unsupported"),
    ("RuntimeError", "torch._scaled_mm is only supported on CUDA devices with compute capability "
                     ">= 9.0 or 8.9", "fp8-unsupported"),
    ("AssertionError", "FP8 execution requires 2D input matrices with height divisible by 8 and "
                       "width divisible by 16, but got tensor with dims=[896, 712]", "fp8-shape"),
    ("RuntimeError", "mat1 and mat2 shapes cannot be multiplied (4x3 and 4x2)", None),
])
def test_failure_messages(kind, message, code):
    findings = fp8_rules.failure_findings(kind, message, {"file": "x.py", "line": 3})
    assert [f.code for f in findings] == ([code] if code else [])
    if code:
        assert findings[0].severity == "error" and findings[0].source["line"] == 3


# -- the plan on real models --------------------------------------------------------------------

@pytest.mark.parametrize("name", ["llama", "bert"])
def test_eligibility_matches_the_rules_on_every_layer(demo_dir, fp8_models, name):
    plan = fp8_plan(_spec(demo_dir, fp8_models, name))
    model_linears = {n: m for n, m in _model(fp8_models[name]).named_modules()
                     if type(m) is torch.nn.Linear}
    assert [layer.name for layer in plan.layers] == list(model_linears)
    largest = max(layer.flops_share for layer in plan.layers)
    for layer in plan.layers:
        module = model_linears[layer.name]
        assert (layer.in_features, layer.out_features) == (module.in_features,
                                                          module.out_features)
        rule = (module.in_features % 16 == 0 and module.out_features % 16 == 0
                and layer.flops_share >= SMALL_SHARE_OF_LARGEST * largest)
        assert layer.eligible == rule, (layer.name, layer.reason)
        assert layer.weight_amax == pytest.approx(float(module.weight.detach().abs().max()), rel=1e-2)
        assert layer.weight_scale == pytest.approx(448 / layer.weight_amax, rel=1e-2)
        assert 0 <= layer.underflow_share <= 1 and layer.input_amax > 0
    # Both sides of the rules are in each model: refused and taken layers.
    assert any(layer.eligible for layer in plan.layers)
    assert any(not layer.eligible for layer in plan.layers)
    assert sum(layer.flops_share for layer in plan.layers) == pytest.approx(1.0)
    refused = [f for f in plan.findings if f.code == "fp8-shape"]
    assert refused and set(refused[0].evidence["layers"]) == {
        layer.name for layer in plan.layers if "not divisible" in layer.reason}


def _model(path):
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    auto = AutoModelForSequenceClassification if "bert" in path.name else AutoModelForCausalLM
    return auto.from_pretrained(path)


@needs_torchao
@pytest.mark.parametrize("name, sensitive", [
    ("llama-sensitive", "model.layers.1.mlp.down_proj"),
    ("bert-sensitive", "bert.encoder.layer.1.output.dense"),
])
@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_the_layer_made_sensitive_is_kept_in_bfloat16(demo_dir, fp8_models, name, sensitive,
                                                      recipe):
    plan = fp8_plan(_spec(demo_dir, fp8_models, name), recipe=recipe)
    assert plan.keep_bf16 == [sensitive]
    measured = [layer for layer in plan.layers if layer.sqnr_db is not None]
    assert min(measured, key=lambda layer: layer.sqnr_db).name == sensitive
    assert sensitive not in plan.converted and plan.converted and plan.ok
    doc = plan.to_json()
    finding = next(f for f in doc["findings"] if f["code"] == "fp8-sensitive")
    assert finding["location"] == sensitive and finding["severity"] == "warning"
    row = next(layer for layer in doc["layers"] if layer["name"] == sensitive)
    # Why: the outlier's scale flushes the rest of the weight, more than in any other layer.
    assert row["keep_bf16"] and row["underflow_share"] == max(
        layer["underflow_share"] for layer in doc["layers"]) > 0.2
    # The same model without the edit keeps nothing in bfloat16.
    plain = fp8_plan(_spec(demo_dir, fp8_models, name.removesuffix("-sensitive")),
                     recipe=recipe)
    assert plain.keep_bf16 == [] and all(layer.sqnr_db > SENSITIVE_SQNR_DB
                                         for layer in plain.layers if layer.sqnr_db is not None)


# -- the measured pass against torchao's own Float8Linear ---------------------------------------

def _outlier_layer():
    """A Linear whose output has a few massive channels and tokens, as a transformer's has: the
    case where a plain every-k-th sample of rows and features misses what decides the SQNR."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(96, 320).bfloat16()
    x = torch.randn(4, 60, 96).bfloat16()
    with torch.no_grad():
        layer.weight[[7, 200]] *= 40
        x[:, 3] *= 30
    return layer, x


def _probed(layer, x, recipe, sample):
    float8 = fp8_module.torchao_float8()
    config = fp8_module.float8_config(float8, recipe, emulate=True)
    probe = fp8_module.LinearProbe("layer", layer, recipe, fp8_module.Float8Cast(float8, config),
                                   sample)
    with torch.no_grad():
        layer(x)
    return probe.result()


@needs_torchao
@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_the_measured_sqnr_is_float8_linears(recipe):
    from torchao.float8.float8_linear import Float8Linear
    from torchao.float8.float8_utils import tensor_to_scale

    from fp16studio.core.run.distance import distance_sums, distances

    layer, x = _outlier_layer()
    config = fp8_module.float8_config(fp8_module.torchao_float8(), recipe, emulate=True)
    with torch.no_grad():
        want = distances(distance_sums(layer(x).float(), Float8Linear.from_float(
            layer, config=config)(x).float()).tolist())["sqnr_db"]
    whole = _probed(layer, x, recipe, (10 ** 6, 10 ** 6))
    assert whole.sample_share == 1.0 and whole.sqnr_db == pytest.approx(want, abs=0.01)
    # The scales shown are torchao's own (rowwise: the largest row's).
    granularity = config.cast_config_weight.scaling_granularity
    scale = tensor_to_scale(layer.weight.detach(), torch.float8_e4m3fn,
                            scaling_granularity=granularity,
                            axiswise_dim=1 if recipe == "rowwise" else None,
                            round_scales_to_power_of_2=config.round_scales_to_power_of_2)
    assert whole.weight_scale == float(scale.min())
    # A sample of 32 of the 240 tokens and of the 320 features: its estimate stays near the
    # whole layer's because the largest tokens and features are in it.
    sampled = _probed(layer, x, recipe, (32, 32))
    assert sampled.sample_share == pytest.approx(32 * 32 / (240 * 320))
    assert sampled.sqnr_db == pytest.approx(want, abs=1.5)
    assert sampled.underflow_share == pytest.approx(whole.underflow_share, abs=0.02)


def test_the_terminal_says_when_a_layer_was_sampled():
    from fp16studio.core.present.terminal import format_fp8

    layer = LayerPlan("encoder.dense", 384, 1536, eligible=True, reason="ok", sqnr_db=31.0,
                      underflow_share=0.01, sample_share=0.25)
    head = dataclasses.replace(layer, name="head", sample_share=0.017)
    text = format_fp8(Fp8Plan("tensorwise", "cpu", None, True, layers=[layer, head]))
    assert "estimated on a sample of each layer's output, down to 1.7% of it" in text
    assert max(len(line) for line in text.splitlines()) <= 120
    whole = Fp8Plan("tensorwise", "cpu", None, True, layers=[dataclasses.replace(layer, sample_share=1.0)])
    assert "sample" not in format_fp8(whole)


def test_sample_rows_keeps_the_largest_and_weighs_the_rest():
    largest = torch.tensor([0.5, 9.0, 0.1, 0.3, 7.0, 0.2, 0.4, 0.6, 0.05, 0.7])
    rows, weights = fp8_module.sample_rows(largest, 6)
    assert rows.tolist()[:1] == [1] and len(rows) <= 6
    # Every row is stood for: the weights add up to the rows there are.
    assert float(weights.sum()) == pytest.approx(len(largest))
    assert rows.tolist() == fp8_module.sample_rows(largest, 6)[0].tolist()
    rows, weights = fp8_module.sample_rows(largest, 10)
    assert rows.tolist() == list(range(10)) and weights.tolist() == [1.0] * 10


def test_without_torchao_the_plan_says_so(demo_dir, fp8_models, monkeypatch):
    monkeypatch.setattr(fp8_module, "torchao_float8", lambda: None)
    plan = fp8_plan(_spec(demo_dir, fp8_models, "bert-sensitive"))
    check = next(c for c in plan.preflight if c["check"] == "torchao")
    assert not check["ok"] and "not installed" in check["message"]
    assert all(layer.sqnr_db is None and not layer.keep_bf16 for layer in plan.layers)
    assert plan.converted == [layer.name for layer in plan.layers if layer.eligible]


def test_cli_json_and_exit_codes(demo_dir, fp8_models, tmp_path, capsys):
    from fp16studio.core.spec.documents import save_spec

    path = tmp_path / "bert.json"
    save_spec(_spec(demo_dir, fp8_models, "bert"), path)
    assert main(["fp8", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"recipe", "device", "compute_capability", "emulated", "runs_here", "preflight",
                        "layers", "keep_bf16", "converted", "threshold_db", "findings"}
    assert (doc["recipe"], doc["device"], doc["compute_capability"], doc["emulated"]) == (
        "tensorwise", "cpu", None, True)
    assert set(doc["layers"][0]) == {
        "name", "in_features", "out_features", "eligible", "reason", "flops_share", "weight_amax",
        "input_amax", "weight_scale", "input_scale", "underflow_share", "sqnr_db",
        "sample_share", "keep_bf16"}
    assert main(["fp8", str(path)]) == 0
    text = capsys.readouterr().out
    assert "FP8 plan (tensorwise) on cpu (emulated)" in text
    assert max(len(line) for line in text.splitlines()) <= 120
    assert main(["fp8", str(path), "--recipe", "mxfp8"]) == 2
    assert main(["fp8", str(tmp_path / "missing.json")]) == 2


def test_no_layer_to_convert_exits_1(demo_dir, capsys):
    # The demo's ResNet: its one Linear, the 3-class head, is a shape FP8 refuses.
    assert main(["fp8", "demo:healthy", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["converted"] == [] and [layer["eligible"] for layer in doc["layers"]] == [False]


# -- the exported script ------------------------------------------------------------------------

@needs_torchao
def test_exported_script_converts_exactly_the_plans_layers(demo_dir, fp8_models, tmp_path,
                                                           capsys):
    from fp16studio.core.spec.documents import save_spec

    path = tmp_path / "llama.json"
    save_spec(_spec(demo_dir, fp8_models, "llama-sensitive"), path)
    script = tmp_path / "fp8_llama.py"
    assert main(["fp8", str(path), "--json", "--export", str(script)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["keep_bf16"] == ["model.layers.1.mlp.down_proj"]
    run = subprocess.run([sys.executable, str(script), "--device", "cpu"], capture_output=True,
                         text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    converted = next(line["fp8_converted"] for line in lines if "fp8_converted" in line)
    assert converted == doc["converted"]
    assert set(converted).isdisjoint(doc["keep_bf16"])
    assert next(line for line in lines if "output" in line)["finite"]
    # An existing script is replaced (kept as .bak); the spec, an input, never is.
    assert main(["fp8", str(path), "--export", str(script)]) == 0
    assert (tmp_path / "fp8_llama.py.bak").is_file()
    assert main(["fp8", str(path), "--export", str(path)]) == 2


# -- a traced script's FP8 failures -------------------------------------------------------------

def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _line(path, text):
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_trace_fp8_unsupported_outside_a_model_at_its_line(tmp_path):
    script = _write(tmp_path, "scaled_mm.py", """\
        import torch

        net = torch.nn.Linear(32, 32)
        net(torch.randn(2, 32))
        raise RuntimeError("torch._scaled_mm is only supported on CUDA devices with compute "
                           "capability >= 9.0 or 8.9")
        """)
    result = trace_script(script)
    finding = next(f for f in result.findings if f.code == "fp8-unsupported")
    assert finding.severity == "error" and finding.source["line"] == _line(script, "raise")
    assert finding.fixes[-1].id == "fp8-bfloat16"


def test_trace_fp8_shape_inside_a_model_at_its_line(tmp_path):
    script = _write(tmp_path, "te_shape.py", """\
        import torch


        class FP8Linear(torch.nn.Linear):
            def forward(self, x):
                assert x.shape[-1] % 16 == 0, ("FP8 execution requires 2D input matrices with "
                    "height divisible by 8 and width divisible by 16, but got tensor with "
                    f"dims={list(x.shape)}")
                return super().forward(x)


        net = FP8Linear(12, 32)
        net(torch.randn(3, 12))
        """)
    result = trace_script(script)
    codes = [f.code for f in result.findings]
    assert codes == ["fp8-shape"], codes
    finding = result.findings[0]
    assert finding.severity == "error"
    assert finding.source["line"] in (_line(script, "assert"), _line(script, "net(torch"))
    assert finding.fixes[0].id == "fp8-filter-shapes"


# -- FP8 gradients in a training step -------------------------------------------------------------

SCRIPTS = Path(__file__).parent.parent / "scripts"


@needs_torchao
def test_a_converted_models_steps_report_its_fp8_layers_gradients():
    script = SCRIPTS / "train_fp8.py"
    result = trace_script(script)
    assert [s["index"] for s in result.to_json()["steps"]] == [0, 1]
    assert result.findings == [] and result.ok
    gradients = {node.path.removeprefix("gradients."): node
                 for node in result.tree.find("gradients").children}
    fp8_layers = {name for name, node in gradients.items() if "FP8 backward" in node.note}
    # Every Linear the script converted (all but lm_head), and nothing else, says so.
    assert fp8_layers == {f"model.layers.{i}.{part}" for i in range(2) for part in (
        "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")}
    assert "lm_head" in gradients and "model.norm" in gradients
    assert "in float8_e5m2: 0.0% under its smallest step" in gradients[
        "model.layers.0.mlp.down_proj"].note


@needs_torchao
def test_an_fp8_layers_gradient_flushed_by_its_scale_is_grad_underflow_at_it():
    script = SCRIPTS / "train_fp8_underflow.py"
    assert "non-zero: 0%" in subprocess.run([sys.executable, str(script)], capture_output=True,
                                            text=True, timeout=300).stdout
    result = trace_script(script)
    finding = next(f for f in result.findings if f.code == "grad-underflow")
    assert (finding.severity, finding.location) == ("warning", "out")
    assert finding.evidence["fp8 dtype"] == "float8_e5m2"
    assert finding.evidence["fp8 underflow share"] > 0.9 and finding.evidence["step"] == 0
    assert "float8_e5m2's smallest step" in finding.message
    assert finding.source["line"] == _line(script, "loss.backward()")
    assert finding.fixes[0].id == "fp8-keep-bf16" and "['out']" in finding.fixes[0].code.text
    # The layer before it gets the gradient through the massive column's weights: nothing lost.
    assert "0.0% under" in result.tree.find("gradients.up").note


# -- a spec's FP8 training (train.fp8, train.fp8_keep) ---------------------------------------------

LLAMA_LINEARS = {f"model.layers.{i}.{part}" for i in range(2) for part in (
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")}
OUTLIER_OUT = "bert.encoder.layer.1.output.dense"          # the weight with the 1e10 column
OUTLIER_IN = "bert.encoder.layer.1.intermediate.dense"     # gets the gradient with it


def _train_spec(**train):
    from fp16studio.core.spec.value import PipelineSpec

    return PipelineSpec.from_dict({"model": "m", "dataset": "synthetic", "with_labels": True,
                                   "train": {"steps": 1, "optimizer": "sgd", **train}})


def _classes(model):
    return {name: type(module) for name, module in model.named_modules()}


@needs_torchao
def test_a_specs_training_steps_convert_the_layers_fp8_takes_and_put_them_back(fp8_models):
    from transformers import AutoModelForCausalLM

    from fp16studio.core.run.float8 import fp8_layers
    from fp16studio.core.run.train_steps import run_train_steps

    model = AutoModelForCausalLM.from_pretrained(fp8_models["llama-sensitive"],
                                                 dtype=torch.bfloat16)
    keep = ["model.layers.1.mlp.down_proj"]
    classes = _classes(model)
    ids = torch.randint(0, 100, (2, 12))
    run = run_train_steps(_train_spec(fp8="tensorwise", fp8_keep=keep), model,
                          {"input_ids": ids, "labels": ids}, torch.device("cpu"), {})
    assert run.exception is None
    grads = {g.module: g for g in run.steps[0].grads}
    converted = {name for name, g in grads.items() if g.fp8_dtype == "float8_e5m2"}
    # Every Linear whose shape FP8 takes (all but the 135-token LM head), less the kept one.
    assert converted == set(fp8_layers(model, keep)) == LLAMA_LINEARS - set(keep)
    assert grads["lm_head"].fp8_dtype is None and grads[keep[0]].fp8_dtype is None
    assert all(0 <= grads[name].fp8_underflow <= 1 for name in converted)
    assert _classes(model) == classes           # the nn.Linear layers are back


@needs_torchao
@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_a_native_fp8_step_takes_a_batch_of_any_token_count(fp8_models, monkeypatch, recipe):
    # The weights' gradients multiply over the batch's tokens, and a GPU's torch._scaled_mm
    # takes an inner dimension only in multiples of 16 (a step of 4 tokens failed on an H200).
    # Here the CPU runs the native path (not emulated) under the GPU's rule.
    from transformers import AutoModelForCausalLM

    from fp16studio.core.common.float8 import recipe_support, supported_recipe
    from fp16studio.core.run import float8
    from fp16studio.core.run.train_steps import run_train_steps

    monkeypatch.setattr(float8, "fp8_support", lambda recipe, device: (
        (9, 0), recipe_support(recipe, "cuda", (9, 0)), supported_recipe("cuda", (9, 0))))
    scaled_mm, calls = torch._scaled_mm, []

    def as_a_gpu(mat1, mat2, *args, **kwargs):
        calls.append(mat1.shape[1])
        if mat1.shape[1] % 16:
            raise RuntimeError("Expected trailing dimension of mat1 to be divisible by 16 but "
                               f"got mat1 shape: ({mat1.shape[0]}x{mat1.shape[1]}).")
        return scaled_mm(mat1, mat2, *args, **kwargs)

    monkeypatch.setattr(torch, "_scaled_mm", as_a_gpu)
    model = AutoModelForCausalLM.from_pretrained(fp8_models["llama-sensitive"],
                                                 dtype=torch.bfloat16)
    ids = torch.randint(0, 100, (1, 5))
    run = run_train_steps(_train_spec(fp8=recipe), model, {"input_ids": ids, "labels": ids},
                          torch.device("cpu"), {})
    assert run.exception is None and run.steps[0].finite
    assert calls and all(k % 16 == 0 for k in calls)   # the three matmuls of every layer


@needs_torchao
def test_a_spec_fp8_training_that_cannot_convert_is_one_line(fp8_models, monkeypatch):
    from transformers import BertForSequenceClassification

    from fp16studio.core import InputError
    from fp16studio.core.run import float8
    from fp16studio.core.run.train_steps import run_train_steps

    model = BertForSequenceClassification.from_pretrained(fp8_models["bert"])
    classes = _classes(model)
    batch = {"input_ids": torch.randint(0, 100, (2, 12)), "labels": torch.tensor([0, 2])}
    eligible = float8.fp8_layers(model)

    def refused(**train):
        with pytest.raises(InputError) as caught:
            run_train_steps(_train_spec(fp8="tensorwise", **train), model, batch,
                            torch.device("cpu"), {})
        assert "\n" not in str(caught.value) and _classes(model) == classes
        return str(caught.value)

    assert refused(fp8_keep=["bert.encoder.layer.0.output.dens"]) == (
        "train.fp8_keep: 'bert.encoder.layer.0.output.dens' is not a Linear layer of "
        "BertForSequenceClassification; did you mean 'bert.encoder.layer.0.output.dense'?")
    assert "nothing to convert" in refused(fp8_keep=eligible)
    model.double()
    assert refused().startswith("train.fp8: FP8 training takes float32, bfloat16, float16 "
                                "weights; bert.encoder.layer.0.attention.self.query holds float64")
    model.float()
    monkeypatch.setattr(float8, "torchao_float8", lambda: None)
    assert "needs torchao, which is not installed (pip install 'fp16studio[fp8]')" in refused()


def test_train_fp8_without_torchao_is_exit_2_in_one_line(demo_dir, fp8_models, tmp_path,
                                                          monkeypatch, capsys):
    from fp16studio.core.run import float8
    from fp16studio.core.spec.documents import save_spec

    monkeypatch.setattr(float8, "torchao_float8", lambda: None)
    path = tmp_path / "bert.json"
    save_spec(_spec(demo_dir, fp8_models, "bert", with_labels=True, device="cpu",
                    train={"fp8": "tensorwise", "steps": 1}), path)
    assert main(["diagnose", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "train.fp8: FP8 training needs torchao" in err


@needs_torchao
@pytest.mark.parametrize("recipe, keep, cast", [("tensorwise", [OUTLIER_OUT], "float8_e5m2"),
                                                ("rowwise", [], "float8_e4m3fn")])
def test_a_specs_fp8_gradient_flushed_is_grad_underflow_and_its_fix_clears_it(
        demo_dir, fp8_models, recipe, keep, cast):
    # tensorwise: the weight with the 1e10 column, converted, would flush its own gradient's
    # other columns to zero before they reach intermediate.dense; the plan keeps it bfloat16.
    from fp16studio.core import apply_fix, diagnose
    from fp16studio.core.run.warm import WarmModel

    spec = _spec(demo_dir, fp8_models, "bert-outlier", with_labels=True, device="cpu",
                 train={"optimizer": "sgd", "steps": 1, "fp8": recipe, "fp8_keep": keep})
    warm = WarmModel()
    report = diagnose(spec, warm=warm)
    finding = next(f for f in report.findings if f.code == "grad-underflow")
    assert (finding.severity, finding.location) == ("warning", OUTLIER_IN)
    assert finding.evidence["fp8 dtype"] == cast
    assert finding.evidence["fp8 underflow share"] > 0.9
    # A float32 model: the layer kept out of FP8 stays float32, and the words say so.
    assert finding.message.endswith("keep this layer out of FP8, in float32.")
    fix = finding.fixes[0]
    assert (fix.id, fix.edits) == ("fp8-keep-bf16", {"train": {"fp8_keep": keep + [OUTLIER_IN]}})
    assert fix.title == "Keep 1 layer(s) in float32"
    fixed = apply_fix(spec, fix)
    assert fixed.train == dict(spec.train, fp8_keep=(*keep, OUTLIER_IN))
    after = diagnose(fixed, warm=warm)
    assert "grad-underflow" not in {f.code for f in after.findings}
    assert after.ok and [s.finite for s in after.steps] == [True]
    assert warm.loads == 1          # the conversion left the warm model as it found it


def test_the_plans_keep_bf16_fix_edits_a_training_specs_fp8_keep():
    from fp16studio.core import apply_fix

    layers = [LayerPlan("a", 64, 64, flops=1000, sqnr_db=5.0),
              LayerPlan("b", 64, 64, flops=1000, sqnr_db=40.0)]
    decide(layers)
    spec = _train_spec(fp8_keep=["c"])
    found = fp8_rules.plan_findings(layers, SENSITIVE_SQNR_DB, "rowwise", "cpu",
                                    (True, True, ""), None, spec.train)
    fix = next(f for f in found if f.code == "fp8-sensitive").fixes[0]
    assert (fix.id, fix.edits) == ("fp8-keep-bf16",
                                   {"train": {"fp8_keep": ["c", "a"], "fp8": "rowwise"}})
    assert apply_fix(spec, fix).train == dict(spec.train, fp8="rowwise", fp8_keep=("c", "a"))
    # A spec that does not train: the fix is said in code only.
    inference = fp8_rules.plan_findings(layers, SENSITIVE_SQNR_DB, "rowwise", "cpu",
                                        (True, True, ""), None)
    assert inference[0].fixes[0].edits == {}


@needs_torchao
def test_the_exported_fp8_training_converts_exactly_the_specs_layers(demo_dir, fp8_models,
                                                                    tmp_path):
    from transformers import BertForSequenceClassification

    from fp16studio.core import diagnose, export_script
    from fp16studio.core.run.float8 import fp8_layers

    spec = _spec(demo_dir, fp8_models, "bert-outlier", with_labels=True, device="cpu",
                 train={"optimizer": "sgd", "steps": 2, "fp8": "tensorwise",
                        "fp8_keep": [OUTLIER_OUT]})
    script = tmp_path / "fp8_train.py"
    text = export_script(spec, script)
    assert "module_filter_fn=lambda module, fqn: fqn in FP8_LAYERS" in text
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    converted = next(line["fp8_converted"] for line in lines if "fp8_converted" in line)
    # The script's Float8Linear modules are the layers the app's training steps convert.
    model = BertForSequenceClassification.from_pretrained(fp8_models["bert-outlier"])
    assert converted == fp8_layers(model, [OUTLIER_OUT]) and OUTLIER_OUT not in converted
    assert "bert.encoder.layer.1.intermediate.dense" in converted
    # The forward pass ran before the conversion (the app's own order), the steps after it.
    assert lines.index(next(line for line in lines if "output" in line)) < lines.index(
        next(line for line in lines if "fp8_converted" in line))
    steps = lines[-1]["steps"]
    assert [s["loss"] for s in steps] == pytest.approx(
        [s.loss for s in diagnose(spec).steps], rel=1e-4)


class _WeighedRows(torch.nn.Module):
    """Two Linear layers whose loss weighs each row (token) of the output by its own power of
    ten and each column by a smaller one: the gradient reaching `out` spans seven decades
    across rows and one row's columns span seven more, so a scale per row (rowwise) and one
    for the whole tensor (tensorwise) flush different shares of it."""

    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(32, 64)
        self.out = torch.nn.Linear(64, 32)
        self.gradients = []            # the gradient of `out`'s output, as its backward gets it

    def forward(self, x, labels):
        y = self.out(self.up(x).relu())
        if y.requires_grad:
            y.register_hook(self.gradients.append)
        return {"loss": (y.float() * labels).mean()}


@needs_torchao
def test_a_rowwise_layers_backward_cast_is_measured_per_row_as_torchao_casts_it():
    from torchao.float8 import convert_to_float8_training
    from torchao.float8.config import ScalingGranularity
    from torchao.float8.float8_scaling_utils import hp_tensor_to_float8_dynamic
    from torchao.float8.float8_training_tensor import GemmInputRole, LinearMMConfig

    from fp16studio.core.run import float8
    from fp16studio.core.run.train_steps import run_train_steps
    from fp16studio.core.spec.value import PipelineSpec

    torch.manual_seed(0)
    model = _WeighedRows().to(torch.bfloat16)
    config = float8.float8_config(float8.torchao_float8(), "rowwise", emulate=True)
    convert_to_float8_training(model, config=config)
    labels = torch.logspace(0, -7, 8)[:, None] * torch.logspace(0, -7, 32)
    spec = PipelineSpec.from_dict({"model": "m", "dataset": "synthetic", "with_labels": True,
                                   "train": {"steps": 1, "optimizer": "sgd"}})
    run = run_train_steps(spec, model, {"x": torch.randn(8, 32, dtype=torch.bfloat16),
                                        "labels": labels}, torch.device("cpu"), {})
    assert run.exception is None
    measured = {g.module: g for g in run.steps[0].grads}["out"]
    # torchao's own cast of the same gradient, as its backward makes it for grad_input.
    cast = config.cast_config_grad_output
    assert cast.scaling_granularity is ScalingGranularity.AXISWISE
    grad = model.gradients[0]
    fp8 = hp_tensor_to_float8_dynamic(grad, cast.target_dtype, LinearMMConfig(),
                                      gemm_input_role=GemmInputRole.GRAD_OUTPUT,
                                      scaling_granularity=cast.scaling_granularity,
                                      axiswise_dim=-1,
                                      round_scales_to_power_of_2=config.round_scales_to_power_of_2)
    nonzero = grad != 0
    under = nonzero & ((grad.float() * fp8._scale).abs() < torch.finfo(cast.target_dtype).tiny
                       * torch.finfo(cast.target_dtype).eps)
    assert measured.fp8_dtype == "float8_e4m3fn" == str(cast.target_dtype).removeprefix("torch.")
    assert measured.fp8_underflow == pytest.approx(float(under.sum() / nonzero.sum()), abs=1e-9)
    # What the share counts is what the cast lost: each value it flushed to zero is among them,
    # and one scale for the whole gradient (the tensorwise branch) would have lost far more.
    assert not (nonzero & (fp8._data.float() == 0) & ~under).any()
    whole = hp_tensor_to_float8_dynamic(grad, cast.target_dtype, LinearMMConfig(),
                                        gemm_input_role=GemmInputRole.GRAD_OUTPUT)
    flushed = nonzero & (whole._data.float() == 0)
    assert 0.1 < measured.fp8_underflow < float(flushed.sum() / nonzero.sum()) - 0.2


@needs_torchao
def test_a_specs_fp8_training_on_a_gpu_without_the_recipe_is_fp8_unsupported(
        demo_dir, fp8_models, monkeypatch):
    # An Ada GPU (8.9) runs tensorwise, not rowwise: the steps run emulated and say so, and
    # the fixes edit the spec's train.fp8 (the CPU stands in for the GPU's capability).
    from fp16studio.core import apply_fix, diagnose
    from fp16studio.core.common.float8 import recipe_support, supported_recipe
    from fp16studio.core.run import train_steps

    monkeypatch.setattr(train_steps, "fp8_support", lambda recipe, device: (
        (8, 9), recipe_support(recipe, "cuda", (8, 9)), supported_recipe("cuda", (8, 9))))
    spec = _spec(demo_dir, fp8_models, "bert", with_labels=True, device="cpu",
                 train={"optimizer": "sgd", "steps": 1, "fp8": "rowwise"})
    report = diagnose(spec)
    (finding,) = [f for f in report.findings if f.code == "fp8-unsupported"]
    assert (finding.severity, finding.location) == ("error", "cpu")
    assert "the rowwise recipe needs 9.0" in finding.message and "ran emulated" in finding.message
    assert finding.evidence == {"recipe": "rowwise", "supported recipe": "tensorwise"}
    recipe_fix, bf16_fix = finding.fixes
    assert recipe_fix.edits == {"train": {"fp8": "tensorwise"}}
    assert bf16_fix.edits == {"model_dtype": "bfloat16", "train": {"fp8": None}}
    assert apply_fix(spec, bf16_fix).train["fp8"] is None
    fixed = apply_fix(spec, recipe_fix)
    assert fixed.train["fp8"] == "tensorwise"
    assert "fp8-unsupported" not in {f.code for f in diagnose(fixed).findings}
    # Without train.fp8 nothing is said about FP8.
    plain = spec.replace(train={"optimizer": "sgd", "steps": 1})
    assert "fp8-unsupported" not in {f.code for f in diagnose(plain).findings}
