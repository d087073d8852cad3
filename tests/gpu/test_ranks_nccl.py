"""`trace --launch` on NCCL: two ranks, a GPU each (skipped without two CUDA devices)."""

from pathlib import Path

import pytest
import torch

from fp16studio.core.script.ranks import trace_launch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")]

SCRIPTS = Path(__file__).parent.parent / "scripts"
TORCHRUN = "torchrun --nproc-per-node 2"


def test_bf16_compress_hook_is_a_half_reduction_on_every_rank():
    doc = trace_launch(TORCHRUN, SCRIPTS / "ranks_ddp_bf16_hook_nccl.py", steps=2).to_json()
    hook = next(f for f in doc["findings"] if f["code"] == "half-reduction")
    assert hook["ranks"] == [0, 1] and hook["evidence"]["dtype"] == "bfloat16"
    assert hook["evidence"]["loss"]["values"] > 0
    assert [r["status"] for r in doc["ranks"]["per_rank"]] == ["ok", "ok"]


def test_a_nan_on_rank_1_names_it_and_the_run_ends_though_nccl_would_wait():
    doc = trace_launch(TORCHRUN, SCRIPTS / "ranks_nan_rank1_nccl.py", steps=4,
                       rank_wait=10).to_json()
    first = doc["ranks"]["first_nonfinite"]
    assert (first["rank"], first["step"], first["phase"]) == (1, 2, "forward")
    assert doc["ranks"]["first_failed"]["rank"] == 1
    assert {r["rank"]: r["status"] for r in doc["ranks"]["per_rank"]}[1] == "failed"
