"""What only a GPU shows: CUDA wordings, inputs left on the CPU, device maps, fp16 kernels.

Skipped on machines without CUDA; run on a GPU box with `pytest tests/gpu -m gpu`.
"""

import pytest
import torch

from fp16studio.core import apply_fix, diagnose
from fp16studio.core.demo.pipelines import demo_spec

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def codes(report):
    return {f.code for f in report.findings}


def test_inputs_left_on_the_cpu_are_a_device_mismatch(demo_dir):
    spec = demo_spec("healthy").replace(device="cuda", input_device="cpu")
    report = diagnose(spec)
    f = next(f for f in report.findings if f.code == "device-mismatch")
    assert f.severity == "error" and "cuda:0" in f.evidence["parameters on"]
    assert f.evidence["inputs on"] == ["cpu"]
    fixed = diagnose(apply_fix(spec, f.fixes[0]))
    assert fixed.ok and fixed.device == "cuda:0"


def test_fp16_model_on_cuda_reports_the_cuda_wording_and_fixes(demo_dir):
    spec = demo_spec("fp16-model").replace(device="cuda")
    report = diagnose(spec)
    assert "torch.cuda" in report.error.message or "Half" in report.error.message
    f = next(f for f in report.findings if f.code == "dtype-mismatch")
    fixed = diagnose(apply_fix(spec, f.fixes[0]))
    assert fixed.ok and fixed.output.dtype == "float16"
    assert "half-on-cpu" not in codes(fixed)


def test_device_map_auto_runs_on_the_gpu(demo_dir):
    report = diagnose(demo_spec("healthy").replace(device_map="auto", model_dtype="float16",
                                                   input_dtype="float16"))
    assert report.ok and report.device.startswith("cuda")
    devices = {n.device for n in report.tree.walk() if n.kind == "parameter"}
    assert devices == {"cuda:0"} or all(d.startswith("cuda") for d in devices)


def test_autocast_on_cuda_is_active(demo_dir):
    report = diagnose(demo_spec("healthy").replace(device="cuda", autocast="float16"))
    assert report.ok and "autocast-inactive" not in codes(report)


def test_a_missing_gpu_index_is_device_unavailable(demo_dir):
    spec = demo_spec("healthy").replace(device=f"cuda:{torch.cuda.device_count()}")
    report = diagnose(spec)
    assert [f.code for f in report.findings] == ["device-unavailable"]


def test_overflow_on_cuda_fp16(demo_dir):
    report = diagnose(demo_spec("overflow").replace(device="cuda"))
    assert "overflow" in codes(report)
    fixed = diagnose(apply_fix(report.spec, report.fix("model-bfloat16")))
    if torch.cuda.is_bf16_supported():
        assert fixed.ok


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability() < (8, 0),
                    reason="TF32 needs compute capability 8.0")
def test_bench_runs_tf32_beside_float32_and_gives_the_setting_back(demo_dir):
    from fp16studio.core.precision.bench import benchmark

    before = torch.backends.cuda.matmul.allow_tf32
    doc = benchmark(demo_spec("healthy").replace(device="cuda"), variants="float32,tf32",
                    warmup=1, min_iterations=5, min_seconds=0.0, min_rounds=2).to_json()
    fp32, tf32 = doc["variants"]
    assert fp32["ok"] and tf32["ok"] and tf32["support"] == "native"
    assert tf32["weights_bytes"] == fp32["weights_bytes"]
    assert torch.backends.cuda.matmul.allow_tf32 == before


def test_a_cast_lost_in_map_is_said_when_autocast_saved_the_run(demo_dir, tmp_path):
    """The seed's first example as it was written for a GPU: autocast("cuda") around the
    float16 model casts the float32 batch again, so the script runs; the lost cast is still a
    fact about the pipeline (issue 27)."""
    from fp16studio.core.demo.pipelines import trace_demo_script
    from fp16studio.core.script.trace import trace_script

    original = trace_demo_script("map-cast")
    text = original.read_text().replace(
        "    with torch.inference_mode():\n        output = model(input_tensor)",
        '    with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16):\n'
        "        output = model(input_tensor)")
    assert "autocast" in text
    script = original.with_name("map_cast_autocast.py")
    script.write_text(text)
    try:
        result = trace_script(script)
    finally:
        script.unlink()
    assert result.error is None
    lost = next(f for f in result.findings if f.code == "map-cast-lost")
    assert lost.severity == "warning" and "autocast(float16)" in lost.message


def test_a_tensor_made_on_the_cpu_inside_the_forward_is_fixed_where_it_was_made(tmp_path):
    from fp16studio.core.script.trace import trace_script

    script = tmp_path / "made_on_cpu.py"
    script.write_text(
        "import torch\nfrom torch import nn\n\n\n"
        "class Scaled(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.proj = nn.Linear(8, 8)\n\n"
        "    def forward(self, hidden):\n        hidden = self.proj(hidden)\n"
        "        ramp = torch.linspace(0, 1, hidden.shape[-1], dtype=hidden.dtype)  # made\n"
        "        return hidden * ramp\n\n\n"
        "model = Scaled().cuda()\nprint(model(torch.rand(4, 8, device='cuda')))\n")
    result = trace_script(script)
    (finding,) = [f for f in result.findings if f.code == "device-mismatch"]
    assert finding.source["line"] == 12 and "batch was not moved" not in finding.message
    assert "device=hidden.device" in finding.fixes[0].code_text()


def test_the_traced_pass_adds_one_operation_per_measured_tensor_and_one_read_back():
    """As on the CPU (tests/core/test_trace_op_count.py), with the read of the GPU's statistics:
    one chunk here, copied to the host once."""
    from op_count import top_level_ops

    from fp16studio.core.run.trace import Tracer

    torch.manual_seed(0)
    net = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(20)]).cuda().half().eval()
    x = torch.randn(4, 16, device="cuda", dtype=torch.float16)

    def plain():
        with torch.no_grad():
            net(x)

    def traced():
        with torch.no_grad(), Tracer(net) as tracer:
            net(x)
        traced.tracer = tracer

    plain(), traced()  # the second traced pass takes the chunk the first made
    added = top_level_ops(traced) - top_level_ops(plain)
    assert added.pop("aten::aminmax") == 21  # the input, then each layer's output
    # tolist: two calls that only look at flags, and the copy to the host (one sync).
    assert added == {"aten::resolve_conj": 1, "aten::resolve_neg": 1, "aten::to": 1}
    with torch.no_grad():
        expected = net(x).abs().max().item()
    assert traced.tracer.calls[-1].outputs[0].absmax == expected


def test_a_healthy_float16_amp_loop_with_a_grad_scaler_gives_no_warning():
    """tests/scripts/amp_scaler_healthy.py on CUDA: float16 autocast with the GradScaler on
    (on a CPU it runs bfloat16 without one: tests/core/test_library_decisions.py)."""
    from pathlib import Path

    from fp16studio.core.script.trace import trace_script

    script = Path(__file__).parent.parent / "scripts" / "amp_scaler_healthy.py"
    result = trace_script(script, steps=3)
    assert result.error is None and result.findings == [] and result.ok
    assert result.device.startswith("cuda") and all(s.finite for s in result.steps)


FP8_GPU = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)


@pytest.mark.skipif(not FP8_GPU, reason="needs an FP8 GPU (compute capability 8.9)")
@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_fp8_runs_on_the_gpus_own_fp8_matmul(demo_dir, tmp_path, recipe):
    """The plan and a spec's FP8 training steps, not emulated: torch._scaled_mm on the GPU."""
    pytest.importorskip("torchao")
    if recipe == "rowwise" and torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("rowwise needs compute capability 9.0")
    from numerics_zoo import text_spec
    from transformers import BertConfig, BertForSequenceClassification

    from fp16studio.core.demo.pipelines import tiny_tokenizer
    from fp16studio.core.precision.fp8 import fp8_plan

    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    BertForSequenceClassification(BertConfig(
        vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128, max_position_embeddings=64, num_labels=3)).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    spec = text_spec(demo_dir, tmp_path, device="cuda")
    plan = fp8_plan(spec, recipe)
    assert not plan.emulated and plan.runs_here and plan.preflight[0]["ok"]
    assert len(plan.converted) == 13  # q, k, v, two dense and intermediate per layer; pooler
    assert all(layer.sqnr_db > 20 for layer in plan.layers if layer.eligible)
    train = spec.replace(with_labels=True, model_dtype="bfloat16",
                         train={"steps": 2, "fp8": recipe})
    report = diagnose(train)
    assert report.ok and [s.finite for s in report.steps] == [True, True]
    # The exported script trains the same steps on the GPU's FP8 matmul, compiled.
    import json
    import subprocess
    import sys

    from fp16studio.core import export_script

    script = tmp_path / "fp8_train.py"
    export_script(train, script)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=240, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert len(next(line["fp8_converted"] for line in lines if "fp8_converted" in line)) == 13
    assert [s["finite"] for s in lines[-1]["steps"]] == [True, True]
