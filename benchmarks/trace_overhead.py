"""The traced forward pass against the plain one, in one process (targets: <= 1.10x on the
Llama-style models in float32 and bfloat16, <= 2x on the 640-layer BERT; peak memory <= 1.05x).

Per model and dtype: the model loaded once, one batch of token ids, then rounds alternating the
plain forward pass (`torch.inference_mode()`) and the same pass under fp16studio's Tracer (hooks
on every module, statistics of every floating tensor, read back at the end), so drift in the
machine's load hits both. The figure is the median of the per-round ratios. Peak memory is what
the pass adds to the process's resident set at its high-water mark (Linux: VmHWM, reset before
each pass through /proc/self/clear_refs); the ratio is of the process's peaks, the added MiB
beside it. `--old COMMIT` also times the tracer of that commit (any commit: its package is
loaded beside this one), alternating with the others: new/old is the median over rounds of the
two tracers' times in the round. It also compares what both recorded (every call and tensor:
names, dtypes, devices, shapes, abs-max, inf/NaN). One torch thread by default: on a shared
machine more threads wait on each other and the figures swing.

    python benchmarks/trace_overhead.py                          # every model, fp32 and bf16
    python benchmarks/trace_overhead.py --models llama-1b --dtypes bfloat16 --old ebacb9c
"""

from __future__ import annotations

import argparse
import gc
import importlib
import io
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch

from _models import LLAMA, NAMES, model_dir
from fp16studio.core.run.trace import Tracer


def old_tracer(commit: str) -> tuple:
    """(the Tracer class as it was at `commit`, the garbage collection mode diagnose ran it
    under then), for before/after figures in one process: that commit's package, extracted and
    imported as `old_fp16studio` (its modules import each other relatively). Before core was
    split into packages the tracer did not pause garbage collection itself: diagnose paused it
    around the tracers, so the old one gets that here."""
    root = Path(__file__).resolve().parents[1]
    archive = subprocess.run(["git", "archive", commit, "fp16studio"], cwd=root,
                             capture_output=True, check=True).stdout
    folder = Path(tempfile.mkdtemp())
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    (folder / "fp16studio").rename(folder / "old_fp16studio")
    sys.path.insert(0, str(folder))
    flat = (folder / "old_fp16studio" / "core" / "trace.py").is_file()
    module = importlib.import_module("old_fp16studio.core." + ("trace" if flat else "run.trace"))
    return module.Tracer, _gc_paused if flat else nullcontext


def evidence(calls) -> list:
    """What the rules read of a traced pass, comparable between tracers (NaN as a string)."""
    def tensors(infos):
        return [(t.name, t.dtype, t.device, t.shape, str(t.absmax), t.nonfinite) for t in infos]

    return [(c.index, c.name, c.cls, c.params, c.param_devices, c.completed, c.finished,
             tensors(c.inputs), tensors(c.outputs)) for c in calls]


@contextmanager
def _gc_paused():
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def run(fn):
    """(seconds, the process's resident set before, its peak during the pass)."""
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    before = _status("VmRSS")
    start = time.perf_counter()
    fn()
    seconds = time.perf_counter() - start
    return seconds, before, _status("VmHWM")


def measure(name, dtype, rounds, batch_size, seq, tracers):
    from transformers import AutoModel, AutoModelForCausalLM

    cls = AutoModelForCausalLM if name in LLAMA else AutoModel
    model = cls.from_pretrained(model_dir(name), dtype=getattr(torch, dtype)).eval()
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 100, (batch_size, seq), generator=generator)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    def plain():
        with torch.inference_mode():
            model(**batch)

    def traced(cls, grad_mode, gc_mode):
        def go(keep=False):
            with cls(model) as tracer, grad_mode(), gc_mode():
                model(**batch)
            if keep:  # the warm-up's, outside the timed passes
                go.calls = tracer.calls
        return go

    # As diagnose runs them: under no_grad (version counters: a tensor seen again unchanged is
    # measured once).
    fns = {"plain": plain, **{label: traced(cls, torch.no_grad, gc_mode)
                              for label, (cls, gc_mode) in tracers.items()}}
    plain()  # warm-up: lazy init, allocator
    for label in tracers:
        fns[label](keep=True)
    tensors = sum(len(c.inputs) + len(c.outputs) for c in fns["new"].calls)
    same = all(evidence(fns[label].calls) == evidence(fns["new"].calls) for label in tracers)
    for label in tracers:
        del fns[label].calls
    figures = {label: [] for label in fns}
    for _ in range(rounds):
        for label, fn in fns.items():
            figures[label].append(run(fn))
    out = {"model": name, "dtype": dtype, "tensors": tensors, "same_evidence": same,
           "plain_s": statistics.median(f[0] for f in figures["plain"]),
           "rss_before_mib": statistics.median(f[1] for f in figures["plain"]) / 2**20}
    for label in fns:
        out[f"{label}_peak_added_mib"] = statistics.median(
            f[2] - f[1] for f in figures[label]) / 2**20
    if "old" in tracers:  # the two tracers' times within each round: the A/B figure
        out["new_over_old"] = statistics.median(
            new[0] / old[0] for new, old in zip(figures["new"], figures["old"]))
    for label in tracers:
        out[f"{label}_ratio"] = statistics.median(
            t[0] / p[0] for t, p in zip(figures[label], figures["plain"]))
        # The process's peak during the pass, traced over plain.
        out[f"{label}_peak_ratio"] = statistics.median(
            t[2] / p[2] for t, p in zip(figures[label], figures["plain"]))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(NAMES))
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--old", metavar="COMMIT", help="also time the tracer of this commit")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tracers = {"new": (Tracer, nullcontext)}
    if args.old:
        tracers["old"] = old_tracer(args.old)
    results = []
    for name in args.models.split(","):
        for dtype in args.dtypes.split(","):
            r = measure(name, dtype, args.rounds, args.batch_size, args.seq, tracers)
            results.append(r)
            line = (f"{name:11s} {dtype:9s} {r['tensors']:6d} tensors  plain {r['plain_s']:.3f}s"
                    f"  traced/plain {r['new_ratio']:.3f}x  peak {r['new_peak_ratio']:.3f}x"
                    f" (+{r['new_peak_added_mib']:.0f} vs +{r['plain_peak_added_mib']:.0f} MiB)")
            if "old" in tracers:
                line += (f"   old tracer {r['old_ratio']:.3f}x, peak {r['old_peak_ratio']:.3f}x"
                         f" (+{r['old_peak_added_mib']:.0f} MiB), new/old {r['new_over_old']:.3f},"
                         f" same evidence: {'yes' if r['same_evidence'] else 'NO'}")
            print(line, flush=True)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch "
          f"{args.batch_size}x{args.seq} tokens, {args.rounds} rounds")
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
