"""What the traced forward pass adds in device operations, per tensor it measures (target <= 1).

On a fast GPU each operation the trace adds is a kernel launch the interpreter pays for while the
GPU waits; on the CPU the same operations show as aten calls. So the proxy, measured on the CPU
with torch.profiler: (top-level aten operations of the traced pass - those of the plain pass)
/ tensors measured. Both passes run under no_grad, as diagnose runs them; an operation inside
another (aminmax's own allocations) is not counted apart.

    python benchmarks/trace_op_count.py                       # llama-10m and bert-wide, fp32 and bf16
    python benchmarks/trace_op_count.py --models llama-100m --dtypes float16
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from torch.profiler import ProfilerActivity, profile

from _models import LLAMA, model_dir
from fp16studio.core.run.trace import Tracer


def top_level_ops(fn) -> Counter:
    """The aten operations `fn` calls directly (not those an operation calls), by name."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return Counter(e.name for e in prof.events()
                   if e.name.startswith("aten::") and _outside_aten(e))


def _outside_aten(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return False
        parent = parent.cpu_parent
    return True


def measure(name: str, dtype: str, batch_size: int, seq: int, first: bool) -> dict:
    from transformers import AutoModel, AutoModelForCausalLM

    cls = AutoModelForCausalLM if name in LLAMA else AutoModel
    model = cls.from_pretrained(model_dir(name), dtype=getattr(torch, dtype)).eval()
    ids = torch.randint(5, 100, (batch_size, seq), generator=torch.Generator().manual_seed(0))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    measured = []

    def plain():
        with torch.no_grad():
            model(**batch)

    def traced():
        with Tracer(model) as tracer, torch.no_grad():
            measure = tracer._measure

            def counting(*args):
                measured.append(1)
                return measure(*args)

            tracer._measure = counting
            model(**batch)

    plain()  # warm-up: lazy init
    if not first:
        traced()
        measured.clear()
    ops_plain, ops_traced = top_level_ops(plain), top_level_ops(traced)
    added = ops_traced - ops_plain
    tensors = len(measured)
    return {"model": name, "dtype": dtype, "tensors_measured": tensors,
            "ops_plain": sum(ops_plain.values()), "ops_traced": sum(ops_traced.values()),
            "added_per_tensor": (sum(ops_traced.values()) - sum(ops_plain.values())) / tensors,
            "added": dict(added.most_common(6))}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="llama-10m,bert-wide")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--first", action="store_true",
                        help="count the first traced pass in the process, not a later one")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = []
    for name in args.models.split(","):
        for dtype in args.dtypes.split(","):
            r = measure(name, dtype, args.batch_size, args.seq, args.first)
            results.append(r)
            print(f"{name:11s} {dtype:9s} {r['tensors_measured']:6d} tensors measured  "
                  f"ops plain {r['ops_plain']:6d}  traced {r['ops_traced']:6d}  "
                  f"added per tensor {r['added_per_tensor']:.3f}  ({r['added']})", flush=True)
    print(f"torch {torch.__version__}, batch {args.batch_size}x{args.seq} tokens, "
          f"{'the first' if args.first else 'a later'} traced pass in the process")
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
