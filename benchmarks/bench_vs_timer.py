"""Does bench's timing give what the user's loop gets? Two ratios per variant, one run.

A model built from a config (random weights, fixed seed; one copy per dtype, as a user loads it
in the variant's dtype) and a batch of token ids. Per variant the same callable (the forward
pass under `inference_mode`, autocast or TF32 around it as the variant says) is timed three ways:

- the app: `measure.time_interleaved` with bench's timer and limits (blocks of back-to-back
  calls closed by a device synchronise, the variants taking turns), its median time per call;
- `torch.utils.benchmark.Timer(...).blocked_autorange()`, its median;
- the plain loop a user writes: 10 calls closed by one synchronise, the median of 5 such.

Figures: app / Timer per variant (target within 5%), and the speed-up over float32 by the app
against the plain loop's (target within 5%). `--repeats N` runs the three N times in turn (so a
change in the machine's load hits all three) and takes each figure's median. On CUDA each variant
also gets the GPU's busy time per call (`measure.device_busy_ms`).

    python benchmarks/bench_vs_timer.py                              # CPU, a small BERT, 4x64
    python benchmarks/bench_vs_timer.py --device cuda --model bert-base --batch 32 --seq 256
    python benchmarks/bench_vs_timer.py --device cuda --model llama-1b --batch 8 --seq 256
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from fp16studio.core.precision.measure import (Limits, device_busy_ms, make_timer,
                                               time_interleaved, with_tf32)

MODELS = {  # name: config of a transformers model family, as in the models users run
    "bert-small": ("bert", dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                                intermediate_size=1024)),
    "bert-base": ("bert", {}),
    "llama-1b": ("llama", dict(vocab_size=32000, hidden_size=2048, num_hidden_layers=22,
                               intermediate_size=5632, num_attention_heads=32,
                               num_key_value_heads=4, max_position_embeddings=2048)),
    "llama-small": ("llama", dict(vocab_size=1024, hidden_size=128, num_hidden_layers=4,
                                  intermediate_size=352, num_attention_heads=4,
                                  num_key_value_heads=2, max_position_embeddings=256)),
}


def build(name: str, dtype, device):
    from transformers import BertConfig, BertModel, LlamaConfig, LlamaForCausalLM

    family, overrides = MODELS[name]
    torch.manual_seed(0)
    with torch.device(device):
        if family == "bert":
            model = BertModel(BertConfig(**overrides))
        else:
            model = LlamaForCausalLM(LlamaConfig(**overrides))
    return model.to(dtype).eval()


def token_batch(device, batch_size: int, seq: int) -> dict:
    ids = torch.randint(5, 1000, (batch_size, seq), device=device,
                        generator=torch.Generator(device).manual_seed(0))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def callables(name: str, variants: list[str], device, batch_size: int, seq: int) -> dict:
    """{variant: the forward pass as that variant runs it}, one model per weight dtype."""
    batch = token_batch(device, batch_size, seq)
    models, fns = {}, {}
    for variant in variants:
        half = variant.removeprefix("autocast-")
        weights = "float32" if variant.startswith("autocast-") or variant == "tf32" else half
        if weights not in models:
            models[weights] = build(name, getattr(torch, weights), device)
        model = models[weights]
        amp = (dict(device_type=device.type, dtype=getattr(torch, half))
               if variant.startswith("autocast-") else None)

        def forward(model=model, amp=amp):
            with torch.inference_mode(), (torch.autocast(**amp) if amp else contextlib.nullcontext()):
                return model(**batch)

        fns[variant] = with_tf32(forward) if variant == "tf32" else forward
    return fns


def app_ms(fns: dict, device, limits: Limits) -> dict:
    timings, errors = time_interleaved(fns, make_timer(device), limits)
    if errors:
        raise SystemExit(f"failed in the app's timing: {errors}")
    return {name: t.summary()["p50"] for name, t in timings.items()}


def timer_ms(fn, seconds: float) -> float:
    from torch.utils.benchmark import Timer

    return Timer("fn()", globals={"fn": fn}, num_threads=torch.get_num_threads()) \
        .blocked_autorange(min_run_time=seconds).median * 1000.0


def loop_ms(fn, device, calls: int = 10, repeats: int = 5) -> float:
    """The user's loop: `calls` calls, then one synchronise; the median of `repeats`."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    figures = []
    for _ in range(repeats):
        sync()
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        figures.append((time.perf_counter() - started) * 1000.0 / calls)
    return statistics.median(figures)


def compare(name: str, variants: list[str], device, batch_size: int, seq: int, repeats: int,
            limits: Limits, seconds: float) -> dict:
    fns = callables(name, variants, device, batch_size, seq)
    runs = {key: {v: [] for v in fns} for key in ("app", "timer", "loop")}
    for _ in range(repeats):
        for variant, ms in app_ms(fns, device, limits).items():
            runs["app"][variant].append(ms)
        for variant, fn in fns.items():
            runs["timer"][variant].append(timer_ms(fn, seconds))
            runs["loop"][variant].append(loop_ms(fn, device))
    ms = {key: {v: statistics.median(x) for v, x in by.items()} for key, by in runs.items()}
    rows = []
    for variant in fns:
        row = {"variant": variant, **{f"{key}_ms": ms[key][variant] for key in ms},
               "app_vs_timer": ms["app"][variant] / ms["timer"][variant]}
        if "float32" in fns:
            row["speedup_app"] = ms["app"]["float32"] / ms["app"][variant]
            row["speedup_loop"] = ms["loop"]["float32"] / ms["loop"][variant]
            row["speedup_app_vs_loop"] = row["speedup_app"] / row["speedup_loop"]
        row["busy_ms"] = device_busy_ms(fns[variant], device)
        rows.append(row)
    return {"model": name, "batch": [batch_size, seq], "device": str(device),
            "device_name": (torch.cuda.get_device_name(device) if device.type == "cuda"
                            else platform.processor() or platform.machine()),
            "torch": torch.__version__, "threads": torch.get_num_threads(),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "repeats": repeats, "rows": rows}


def table(result: dict) -> str:
    lines = [f"{result['model']} batch {result['batch'][0]}x{result['batch'][1]} on "
             f"{result['device']} ({result['device_name']}), torch {result['torch']}, "
             f"{result['threads']} threads, {result['date']}, median of {result['repeats']}",
             f"{'variant':18s} {'app ms':>9s} {'Timer ms':>9s} {'loop ms':>9s} {'app/Timer':>9s}"
             f" {'speed-up app':>12s} {'loop':>6s} {'app/loop':>8s} {'busy ms':>8s}"]
    for r in result["rows"]:
        busy = f"{r['busy_ms']:8.2f}" if r["busy_ms"] is not None else f"{'-':>8s}"
        lines.append(f"{r['variant']:18s} {r['app_ms']:9.3f} {r['timer_ms']:9.3f} "
                     f"{r['loop_ms']:9.3f} {r['app_vs_timer']:9.3f} "
                     f"{r.get('speedup_app', float('nan')):12.2f} "
                     f"{r.get('speedup_loop', float('nan')):6.2f} "
                     f"{r.get('speedup_app_vs_loop', float('nan')):8.3f} {busy}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default="bert-small", choices=MODELS)
    parser.add_argument("--variants", default=None,
                        help="default: float32,bfloat16,autocast-bfloat16 on a CPU, every "
                             "variant on CUDA")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.0,
                        help="the app's min_seconds and the Timer's min_run_time")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (a CPU's figures swing with more on a shared machine)")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    variants = (args.variants.split(",") if args.variants else
                ["float32", "tf32", "float16", "bfloat16", "autocast-float16",
                 "autocast-bfloat16"] if device.type == "cuda"
                else ["float32", "bfloat16", "autocast-bfloat16"])
    result = compare(args.model, variants, device, args.batch, args.seq, args.repeats,
                     Limits(min_seconds=args.seconds), args.seconds)
    print(table(result), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
