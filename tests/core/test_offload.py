"""A model dispatched by a device_map (accelerate): each block's device in the tree, and blocks
offloaded to the CPU or disk that compute in float16 there found (offload-half), with a fix at
the from_pretrained line that a re-run of the fixed copy proves."""

from pathlib import Path
from types import SimpleNamespace

from fp16studio.core.hf.offload import block_devices, offloaded_blocks
from fp16studio.core.script.proof import fixed_script
from fp16studio.core.script.trace import trace_script

SCRIPT = Path(__file__).parent.parent / "scripts" / "offload_half.py"
LOAD_LINE = next(i for i, line in enumerate(SCRIPT.read_text().splitlines(), 1)
                 if ".from_pretrained(" in line)


def test_offloaded_float16_blocks_are_found_shown_in_the_tree_and_bfloat16_fixes_them(tmp_path):
    result = trace_script(SCRIPT, [str(tmp_path / "model")])
    codes = [f.code for f in result.findings]
    assert "offload-half" in codes and "half-on-cpu" not in codes   # said once, per block
    found = next(f for f in result.findings if f.code == "offload-half")
    assert found.evidence["offloaded"]["model.layers.1"] == "disk"
    assert found.evidence["offloaded"]["lm_head"] == "cpu"
    assert [fix.id for fix in found.fixes] == ["model-bfloat16", "model-float32"]
    assert found.source["line"] == LOAD_LINE
    disk = result.tree.find("model.layers.1")
    assert disk.device == "disk" and disk.find("model.layers.1.mlp.up_proj.weight").device == "disk"
    assert result.tree.find("model.layers.0.mlp").device == "cpu"

    text, applied = fixed_script(result.script, result.findings, ["model-bfloat16"])
    assert applied == [{"id": "model-bfloat16", "line": LOAD_LINE, "code": "offload-half"}]
    fixed = tmp_path / "fixed.py"
    fixed.write_text(text)
    again = trace_script(fixed, [str(tmp_path / "model-again")])
    assert again.error is None
    assert not {"offload-half", "half-on-cpu"} & {f.code for f in again.findings}
    assert again.tree.find("model.layers.1").device == "disk"


def test_only_a_map_that_moves_blocks_off_their_device_offloads():
    def model(placement):
        return SimpleNamespace(hf_device_map=placement)

    assert offloaded_blocks(model({"": "cpu"})) == {}      # device_map="auto" without a GPU
    assert offloaded_blocks(model({"a": 0, "b": "cpu", "c": "disk"})) == {"b": "cpu", "c": "disk"}
    assert block_devices(model({"a": 0, "b": "mps"})) == {"a": "cuda:0", "b": "mps"}
    assert block_devices(SimpleNamespace()) == {}


def test_offloaded_blocks_brought_to_a_gpu_for_their_forward_are_not_found():
    """With an accelerator in the map, accelerate runs the offloaded blocks there: float16 on a
    GPU is what the user wants; only what was seen computing on a CPU is found."""
    from fp16studio.core.diagnostics.rules.evidence import Evidence
    from fp16studio.core.diagnostics.rules.offload import rule_offload_half
    from fp16studio.core.run.trace import ModuleCall, TensorInfo
    from fp16studio.core.spec.value import PipelineSpec

    def evidence(compute_device):
        out = TensorInfo("out", "float16", compute_device, (1, 4))
        calls = [ModuleCall(0, "model.layers.0", "Block", {"float16": 16}, ("cuda:0",),
                            outputs=[out], completed=True),
                 ModuleCall(1, "lm_head", "Linear", {"float16": 16}, ("meta",),
                            outputs=[out], completed=True)]
        return Evidence(spec=PipelineSpec(model="m", dataset="d"), device_type="cuda",
                        param_dtypes={"float16": 32}, module_param_dtypes={}, calls=calls,
                        offloaded={"lm_head": "disk"})

    assert rule_offload_half(evidence("cuda:0")) == []
    [found] = rule_offload_half(evidence("cpu"))
    assert found.location == "lm_head" and found.evidence["offloaded"] == {"lm_head": "disk"}
