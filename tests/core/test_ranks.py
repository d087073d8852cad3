"""`fp16studio trace --launch`: distributed runs traced as the payload of a real `torchrun`, two
gloo ranks on the CPU; and the merge and the rules on hand-built evidence.

Each launched run costs a torchrun start (seconds): each fixture script runs once per session
and its tests read the one result.
"""

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fp16studio.core.diagnostics.rules import distributed as rules
from fp16studio.core.present.ranks import format_ranked_trace, rank_scope
from fp16studio.core.script.rank_merge import RankedTrace, RankRecord, merged_trace
from fp16studio.core.script.ranks import trace_launch
from json_schemas import valid

SCRIPTS = Path(__file__).parent.parent / "scripts"
TORCHRUN = "torchrun --nproc-per-node 2"
RUNS: dict = {}

needs_torchrun = pytest.mark.skipif(
    not any((Path(p) / "torchrun").exists() for p in os.environ.get("PATH", "").split(":")),
    reason="needs torchrun")


def launched(name: str, *args, **options):
    """The merged document of SCRIPTS/name under torchrun (once per session), and the ranks'
    pids: none of them may be alive once the trace is over."""
    return launched_trace(name, *args, **options).to_json()


def launched_trace(name: str, *args, **options):
    key = (name, args, tuple(sorted(options.items())))
    if key not in RUNS:
        RUNS[key] = trace_launch(TORCHRUN, SCRIPTS / name, args, **{"steps": 4, **options})
    return RUNS[key]


def line_of(name: str, text: str) -> int:
    return next(i for i, line in enumerate((SCRIPTS / name).read_text().splitlines(), 1)
                if text in line)


def alive(pid) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def rows(doc):
    return {row["rank"]: row for row in doc["ranks"]["per_rank"]}


def nothing_left_running(doc):
    pids = [row["pid"] for row in doc["ranks"]["per_rank"]]
    assert pids and all(pids) and not any(alive(pid) for pid in pids)


def finding(doc, code, location=None):
    return next(f for f in doc["findings"] if f["code"] == code
                and (location is None or f["location"] == location))


# -- real torchrun, gloo --------------------------------------------------------------------------

@needs_torchrun
def test_ddp_fp16_compress_hook_is_named_with_what_it_loses_on_every_rank(tmp_path):
    name = "ranks_ddp_fp16_hook.py"
    out = subprocess.run(
        [sys.executable, "-m", "fp16studio", "trace", "--json", "--launch", TORCHRUN,
         str(SCRIPTS / name)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    hook = finding(doc, "half-reduction")
    assert hook["ranks"] == [0, 1] and hook["location"] == "DistributedDataParallel.comm_hook"
    assert hook["source"]["line"] == line_of(name, "register_comm_hook(")
    loss = hook["evidence"]["loss"]
    assert loss["values"] > 0 and 0 < loss["relative_error"] < 1e-2
    assert "float16" in hook["message"] and "relative error" in hook["message"]
    code = hook["fixes"][0]["code"]
    ast.parse(code)
    assert "default_hooks.allreduce_hook" in code
    assert [r["status"] for r in doc["ranks"]["per_rank"]] == ["ok", "ok"]
    assert doc["ranks"]["ended"] == "completed" and doc["ok"]
    nothing_left_running(doc)


@needs_torchrun
def test_fsdp2_reduce_dtype_bfloat16_is_named_at_the_policy_line():
    name = "ranks_fsdp2_reduce_bf16.py"
    doc = launched(name)
    reduce = finding(doc, "half-reduction")
    assert reduce["location"] == "FSDP2.MixedPrecisionPolicy.reduce_dtype"
    assert reduce["ranks"] == [0, 1] and reduce["evidence"]["dtype"] == "bfloat16"
    assert reduce["source"]["line"] == line_of(name, "policy = MixedPrecisionPolicy(")
    code = reduce["fixes"][0]["code"]
    ast.parse(code)
    assert "reduce_dtype=torch.float32" in code and "param_dtype=torch.bfloat16" in code
    assert [r["status"] for r in doc["ranks"]["per_rank"]] == ["ok", "ok"]
    assert len(doc["steps"]) == 3 and all(s["finite"] for s in doc["steps"])


@needs_torchrun
def test_a_healthy_fsdp2_bfloat16_run_is_traced_silent_with_each_rank_s_tree():
    trace = launched_trace("ranks_fsdp2_healthy.py")
    doc = trace.to_json()
    assert doc["findings"] == [] and doc["ok"] and doc["error"] is None
    # Each rank's tensor tree, for the window's rank picker; the document has none of them.
    assert sorted(trace.rank_trees) == [0, 1] and trace.tree is trace.rank_trees[0]
    assert all(tree.find("model") is not None for tree in trace.rank_trees.values())
    assert not {"finding_ranks", "rank_trees", "tree"} & doc.keys()
    assert doc["ranks"]["disagreements"] == [] and doc["ranks"]["first_nonfinite"] is None
    assert [r["status"] for r in doc["ranks"]["per_rank"]] == ["ok", "ok"]
    nothing_left_running(doc)


@needs_torchrun
def test_a_nan_made_on_rank_1_at_step_2_names_rank_1_first():
    name = "ranks_nan_rank1.py"
    doc = launched(name)
    first = doc["ranks"]["first_nonfinite"]
    assert (first["rank"], first["step"], first["phase"]) == (1, 2, "forward")
    assert first["source"]["line"] == line_of(name, "loss.backward()")   # the step's line
    by_rank = rows(doc)
    # Rank 0's loss was finite: its NaN gradients came through the all-reduce, from rank 1.
    assert by_rank[0]["first_nonfinite"]["phase"] == "collective"
    assert by_rank[0]["first_nonfinite"]["from_rank"] == 1
    assert doc["ranks"]["first_failed"]["rank"] == 1
    assert by_rank[1]["status"] == "failed" and by_rank[0]["status"] != "ok"
    assert doc["error"]["rank"] == 1 and not doc["ok"]
    assert finding(doc, "overflow", "loss")["ranks"] == [1]
    text = format_ranked_trace(launched_trace(name))
    assert "first inf/NaN: rank 1, step 2, forward" in text and "rank 1 only" in text
    nothing_left_running(doc)


@needs_torchrun
def test_ranks_whose_autocast_dtype_differs_are_named_with_a_fix_at_the_line():
    name = "ranks_autocast_differs.py"
    doc = launched(name)
    mismatch = finding(doc, "rank-mismatch")
    assert mismatch["location"] == "autocast dtype"
    assert mismatch["evidence"]["values"] == {"0": "bfloat16", "1": "float16"}
    assert mismatch["source"]["line"] == line_of(name, "torch.autocast(")
    code = mismatch["fixes"][0]["code"]
    ast.parse(textwrap.dedent(code) + "\n    pass")   # indented as the user's line
    assert "dtype=torch.bfloat16" in code
    # The settings explain the dtypes the tensors showed: said once.
    assert [d["what"] for d in doc["ranks"]["disagreements"]] == ["autocast dtype"]


@needs_torchrun
def test_a_rank_stuck_inside_a_step_is_stopped_at_the_timeout_with_its_place():
    name = "ranks_rank1_stuck.py"
    doc = launched(name, timeout=10)
    by_rank = rows(doc)
    assert doc["ranks"]["ended"] == "timeout"
    assert by_rank[0]["status"] == by_rank[1]["status"] == "timeout"
    # Rank 0 waits in step 2's all-reduce (its backward); rank 1 never got past the forward.
    assert (by_rank[0]["last_step"], by_rank[0]["in_step"]) == (2, True)
    assert by_rank[0]["at"]["line"] == line_of(name, "loss.backward()")
    assert (by_rank[1]["last_step"], by_rank[1]["in_step"]) == (1, False)
    assert by_rank[1]["at"]["line"] == line_of(name, "time.sleep(600)   # stuck: the other")
    nothing_left_running(doc)


@needs_torchrun
def test_a_rank_still_running_past_the_bound_after_another_ended_is_named_hung():
    name = "ranks_rank1_stuck.py"
    doc = launched(name, "after", rank_wait=3)
    by_rank = rows(doc)
    assert doc["ranks"]["ended"] == "hung"
    assert by_rank[0]["status"] == "ok" and by_rank[1]["status"] == "hung"
    assert by_rank[1]["at"]["line"] == line_of(name, "time.sleep(600)       # stuck after")
    assert by_rank[1]["last_step"] == 3
    nothing_left_running(doc)


# -- the command line's bad input ---------------------------------------------------------------

@pytest.mark.parametrize("options, said", [
    (["--launch", ""], "--launch needs the launcher"),
    (["--launch", "mpirun -np 2"], "not a launcher fp16studio knows"),
    (["--launch", "torchrun --nproc-per-node 2 train.py"], "the script goes after it"),
    (["--rank-wait", "5"], "--rank-wait goes with --launch"),
    (["--launch", TORCHRUN, "--python", sys.executable], "--python and --launch"),
    (["--launch", TORCHRUN, "--rank-wait", "0"], "--rank-wait must be more than 0"),
])
def test_bad_launch_options_are_one_line_and_exit_2(options, said):
    out = subprocess.run([sys.executable, "-m", "fp16studio", "trace",
                          str(SCRIPTS / "ranks_ddp_fp16_hook.py"), *options],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and said in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


# -- the merge, on hand-built ranks -----------------------------------------------------------------

def step(index, first=None, loss=1.0):
    return {"index": index, "loss": loss, "finite": first is None or first["phase"] != "forward",
            "grad_nonfinite": 0, "first_nonfinite": first, "source": None}


def document(steps, findings=(), error=None):
    return {"ok": error is None, "spec": None, "device": "cpu", "findings": list(findings),
            "error": error, "inventory": {"dtypes": {"float32": 4}}, "output": None,
            "timings": {}, "environment": {}, "steps": steps, "script": "train.py",
            "args": [], "models": [], "notes": []}


def record(rank, steps, findings=(), error=None, done=True, precision=None):
    return RankRecord(rank, document(steps, findings, error),
                      {"rank": rank, "pid": None, "steps": steps, "in_step": False,
                       "precision": precision or {}, "at": None}, True, done)


GRAD = {"phase": "backward", "location": "layers.3"}
LOSS = {"phase": "forward", "location": "loss"}


def test_the_first_non_finite_value_is_ordered_by_step_then_phase_then_rank():
    records = [record(0, [step(0), step(1, GRAD)]),
               record(1, [step(0), step(1, GRAD)]),
               record(2, [step(0), step(1, LOSS)]),
               record(3, [step(0, GRAD)])]
    doc = merged_trace(records, "train.py", (), TORCHRUN, 0, None, None, 60).to_json()
    first = doc["ranks"]["first_nonfinite"]
    assert (first["rank"], first["step"], first["phase"]) == (3, 0, "backward")
    by_rank = rows(doc)
    # Step 1: rank 2's loss went NaN; ranks 0 and 1 got it through the all-reduce.
    assert by_rank[0]["first_nonfinite"]["phase"] == "collective"
    assert by_rank[1]["first_nonfinite"]["from_rank"] == 2
    assert by_rank[2]["first_nonfinite"]["phase"] == "forward"
    assert by_rank[3]["first_nonfinite"]["phase"] == "backward"


def test_findings_are_merged_with_the_ranks_they_were_made_on():
    hook = {"code": "half-reduction", "severity": "warning", "location": "DDP.comm_hook",
            "message": "m", "evidence": {}, "fixes": [], "source": None}
    odd = dict(hook, code="overflow", severity="error", location="loss")
    records = [record(r, [step(0)], [hook] + ([odd] if r == 3 else [])) for r in range(4)]
    doc = merged_trace(records, "train.py", (), TORCHRUN, 0, None, None, 60).to_json()
    by_code = {f["code"]: f["ranks"] for f in doc["findings"]}
    assert by_code == {"half-reduction": [0, 1, 2, 3], "overflow": [3]}
    assert doc["findings"][0]["code"] == "overflow"   # most severe first
    assert rank_scope([0, 1, 2, 3], 4) == "on all 4 ranks"
    assert rank_scope([3], 4) == "rank 3 only" and rank_scope([0, 2], 4) == "ranks 0, 2"


def test_a_rank_that_never_started_is_missing_and_the_run_is_not_ok():
    records = [record(0, [step(0)]), RankRecord(1, None, None, False, False)]
    doc = merged_trace(records, "train.py", (), TORCHRUN, 1, None, None, 60).to_json()
    assert rows(doc)[1]["status"] == "missing" and not doc["ok"]
    assert doc["ranks"]["ended"] == "failed"


def test_a_launched_run_s_document_fits_its_schema_and_reads_back_as_it_was():
    """The trace --launch document is derived from its definition (RankedTrace): each finding
    with its ranks, the error with its rank, and nothing its schema does not say."""
    hook = {"code": "half-reduction", "severity": "warning", "location": "DDP.comm_hook",
            "message": "m", "evidence": {}, "fixes": [], "source": None}
    failed = {"type": "RuntimeError", "message": "boom", "stage": "script", "module": None,
              "source": {"file": "train.py", "line": 7}}
    records = [record(0, [step(0)], [hook]), record(1, [step(0, LOSS)], [hook], error=failed)]
    trace = merged_trace(records, "train.py", (), TORCHRUN, 1, None, None, 60)
    doc = valid("trace-launch", json.loads(json.dumps(trace.to_json())))
    assert [f["ranks"] for f in doc["findings"]] == [[0, 1]]
    assert doc["error"] == dict(failed, rank=1) and doc["ranks"]["first_failed"]["rank"] == 1
    crossed = json.loads(json.dumps(trace.to_json(full=True)))   # as the engine sends it
    assert RankedTrace.from_json(crossed).to_json() == doc


def test_a_setting_that_differs_is_named_and_the_dtypes_it_explains_are_not():
    setting = {"value": "float32", "source": None}
    records = [record(0, [step(0)], precision={"FSDP2 reduce_dtype": setting}),
               record(1, [step(0)], precision={"FSDP2 reduce_dtype": dict(setting,
                                                                          value="bfloat16")})]
    records[1].document["inventory"]["dtypes"] = {"bfloat16": 4}
    doc = merged_trace(records, "train.py", (), TORCHRUN, 0, None, None, 60).to_json()
    assert [d["what"] for d in doc["ranks"]["disagreements"]] == ["FSDP2 reduce_dtype"]
    assert finding(doc, "rank-mismatch")["ranks"] == [0, 1]


# -- the rules, on hand-built evidence --------------------------------------------------------------

def test_fsdp_policy_rules_follow_the_dtypes_they_are_given():
    assert rules.policy_half_reduction("FSDP2", "MixedPrecisionPolicy",
                                       {"param_dtype": "bfloat16", "reduce_dtype": "float32"},
                                       None) is None
    unset = rules.policy_half_reduction("FSDP2", "MixedPrecisionPolicy",
                                        {"param_dtype": "float16"}, None)
    assert unset.evidence["dtype"] == "float16" and "no reduce_dtype" in unset.message
    ast.parse(unset.fixes[0].code_text())
    scaler = rules.half_params_without_scaler("FSDP", "MixedPrecision",
                                              {"param_dtype": "float16"}, None)
    assert scaler.code == "distributed-precision"
    assert "ShardedGradScaler()" in scaler.fixes[0].code_text()
    for fix in scaler.fixes:
        ast.parse(fix.code_text())


def test_accelerator_against_the_launch_configuration_keeps_the_other_arguments(tmp_path):
    script = tmp_path / "train.py"
    script.write_text('accelerator = Accelerator(cpu=True, mixed_precision="fp16")\n')
    found = rules.accelerator_against_launch("fp16", "bf16", {"file": str(script), "line": 1})
    assert "'bf16'" in found.message and "'fp16'" in found.message
    code = found.fixes[0].code_text()
    ast.parse(code)
    assert code == "accelerator = Accelerator(cpu=True)"


@pytest.mark.parametrize("config, codes", [
    ({"fp16": {"enabled": True}, "bf16": {"enabled": True}}, ["distributed-precision"]),
    ({"bf16": {"enabled": True}, "communication_data_type": "bf16"}, ["half-reduction"]),
    ({"fp16": {"enabled": True, "loss_scale": 128}}, ["distributed-precision"]),
    ({"bf16": {"enabled": True}, "torch_autocast": {"enabled": True}},
     ["distributed-precision"]),
    ({"bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}, []),
])
def test_deepspeed_config_precision(config, codes):
    found = rules.deepspeed_config(config, "/tmp/ds.json", None)
    assert [f.code for f in found] == codes
    for f in found:
        ast.parse(f.fixes[0].code_text())


def test_deepspeed_bf16_under_the_scripts_own_float16_autocast():
    found = rules.deepspeed_config({"bf16": {"enabled": True}}, "/tmp/ds.json", "float16")
    assert [f.location for f in found] == ["deepspeed.autocast"]
    assert found[0].evidence["autocast"] == "float16"


@needs_torchrun
def test_accelerate_launch_is_a_launcher_too():
    launch = ("accelerate launch --multi_gpu --num_processes 2 --num_machines 1 "
              "--mixed_precision no --dynamo_backend no")   # on a CPU: gloo, through torchrun
    doc = trace_launch(launch, SCRIPTS / "ranks_ddp_fp16_hook.py", steps=2).to_json()
    assert finding(doc, "half-reduction")["ranks"] == [0, 1]
    assert [r["status"] for r in doc["ranks"]["per_rank"]] == ["ok", "ok"]
    assert doc["ranks"]["launch"] == launch
    nothing_left_running(doc)
