"""A re-run after a fix that does not touch loading, against the first run (target: <= 0.5x
on a 1B+ float32 model). In one process, as the window's engine and `fp16studio fix` run it.

Each round: a fresh WarmModel, `diagnose(spec)` (loads the model), then `diagnose(edited)` with
a data-side edit (`input_dtype`: the loading keys unchanged, the same work) on the same cache,
then the cache cleared. The figure is the median of the per-round ratios.

What loading costs, and so what a warm model saves, depends on the checkpoint: a float32 file
loaded in float32 is only mapped (the first forward pass pages it in, from the page cache after
the first round), while a checkpoint stored in bfloat16, as most 1B+ models are published, is
read and converted. `--stored bfloat16` runs on such a copy; `--cold` evicts the model's files
from the page cache before each first run (a model not read recently), as the first Run on a
model the user just picked meets it.

    python benchmarks/warm_rerun.py [--model llama-1b] [--rounds 3] [--stored bfloat16] [--cold]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _models import NAMES, stored_in
from fp16studio.core.diagnostics.diagnosis import diagnose
from fp16studio.core.spec.value import PipelineSpec
from fp16studio.core.run.warm import WarmModel


def evict(folder: Path):
    """Drop the folder's files from the page cache (their clean pages; no privileges needed)."""
    for path in folder.iterdir():
        with open(path, "rb") as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def timed(spec, cache):
    start = time.perf_counter()
    report = diagnose(spec, warm=cache)
    return time.perf_counter() - start, report


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-1b", choices=NAMES)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stored", default="float32", choices=("float32", "bfloat16"),
                        help="the dtype the checkpoint is stored in (the run is float32)")
    parser.add_argument("--cold", action="store_true",
                        help="evict the model's files from the page cache before each first run")
    args = parser.parse_args()
    folder = stored_in(args.model, args.stored)
    spec = PipelineSpec(model=str(folder), dataset="synthetic", device="cpu",
                        samples=8, batch_size=4)
    edited = spec.replace(input_dtype="float32")
    ratios = []
    for i in range(args.rounds + 1):
        cache = WarmModel()
        if args.cold:
            evict(folder)
        first, report = timed(spec, cache)
        rerun, again = timed(edited, cache)
        assert cache.loads == 1 and report.ok and again.ok, (report.error, again.error)
        cache.clear()
        if i == 0:  # warms the file cache and lazy imports: not counted
            continue
        ratios.append(rerun / first)
        stages = ", ".join(f"{k} {report.timings[k]:.2f}/{again.timings.get(k, 0):.2f}"
                           for k in report.timings)
        print(f"round {i}: first run {first:.2f} s, re-run {rerun:.2f} s: {rerun / first:.3f}x"
              f"   (stages, first/re-run s: {stages})", flush=True)
    print(f"{args.model} stored in {args.stored}{', cold' if args.cold else ''}, run in float32:"
          f" re-run / first run, median {statistics.median(ratios):.3f}x (target <= 0.5x)")


if __name__ == "__main__":
    main()
