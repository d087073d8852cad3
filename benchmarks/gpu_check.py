"""The GPU check's measuring phases (benchmarks/gpu_check.sh runs each under its own timeout).

    python benchmarks/gpu_check.py bench OUT   # app vs torch.utils.benchmark vs the user's loop
    python benchmarks/gpu_check.py app OUT     # `fp16studio bench --json` on BERT-base: the verdict
    python benchmarks/gpu_check.py trace OUT   # the traced forward pass against the plain one

Models of real size built from configs (random weights): BERT-base at 32x256 tokens and a
1.1B Llama (TinyLlama's shape) at 8x256. Each phase writes its JSON into OUT as soon as a model
is done, so a phase cut short still leaves what it measured.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch

from bench_vs_timer import build, compare, table, token_batch
from fp16studio.core.precision.measure import Limits

MODELS = (("bert-base", 32, 256), ("llama-1b", 8, 256))
CUDA = torch.device("cuda")


def bench(out: Path):
    results = []
    for name, batch, seq in MODELS:
        results.append(compare(name, ["float32", "tf32", "float16", "bfloat16",
                                      "autocast-float16", "autocast-bfloat16"], CUDA, batch, seq,
                               repeats=2, limits=Limits(min_seconds=1.0), seconds=1.0))
        print(table(results[-1]), flush=True)
        (out / "bench.json").write_text(json.dumps(results, indent=1) + "\n")
        torch.cuda.empty_cache()


def app(out: Path):
    """The whole `bench` command on a saved BERT-base with a synthetic batch: its verdicts."""
    from fp16studio.cli import main

    folder = Path("/tmp/gpu-check-bert-base")
    build("bert-base", torch.float32, "cpu").save_pretrained(folder)
    spec = folder.with_suffix(".json")
    spec.write_text(json.dumps({"model": str(folder), "dataset": "synthetic", "samples": 32,
                                "batch_size": 32, "device": "cuda"}))
    document = out / "app.json"
    with document.open("w") as stdout:
        saved, sys.stdout = sys.stdout, stdout
        try:
            code = main(["bench", str(spec), "--json", "--min-seconds", "0.5"])
        finally:
            sys.stdout = saved
    print(f"fp16studio bench exit {code}")
    doc = json.loads(document.read_text())
    print(doc.get("verdict"))
    for v in doc["variants"]:
        print(f"{v['name']:18s} ok={v['ok']} samples/s={v.get('samples_per_s')} "
              f"busy={v.get('busy_ms')} overhead={v.get('overhead_ms')} bound={v.get('bound')} "
              f"kernels={v.get('kernel_speedup')} stable={v.get('stable')}\n    {v.get('verdict')}")


def trace(out: Path):
    """Per model and half dtype: the median over rounds of traced / plain wall time (each
    synchronised), plain under inference_mode, traced under no_grad as diagnose runs it."""
    results = []
    for name, batch_size, seq in MODELS:
        for dtype in ("float16", "bfloat16"):
            results.append({"model": name, "dtype": dtype, "batch": [batch_size, seq],
                            "traced_over_plain": traced_over_plain(name, dtype, batch_size, seq)})
            print(f"{name:10s} {dtype:9s} traced/plain {results[-1]['traced_over_plain']:.3f}x",
                  flush=True)
            (out / "trace.json").write_text(json.dumps(results, indent=1) + "\n")
            torch.cuda.empty_cache()


def traced_over_plain(name: str, dtype: str, batch_size: int, seq: int, rounds: int = 5) -> float:
    from fp16studio.core.run.trace import Tracer

    model = build(name, getattr(torch, dtype), CUDA)
    batch = token_batch(CUDA, batch_size, seq)

    def plain():
        with torch.inference_mode():
            model(**batch)

    def traced():
        with torch.no_grad(), Tracer(model):
            model(**batch)

    plain(), traced()  # warm-up
    ratios = []
    for _ in range(rounds):
        times = []
        for fn in (plain, traced):
            torch.cuda.synchronize()
            started = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - started)
        ratios.append(times[1] / times[0])
    return statistics.median(ratios)


if __name__ == "__main__":
    phase, out = sys.argv[1], Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    {"bench": bench, "app": app, "trace": trace}[phase](out)
