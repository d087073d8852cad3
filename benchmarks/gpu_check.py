"""The GPU check's measuring phases (benchmarks/gpu_check.sh runs each under its own timeout).

    python benchmarks/gpu_check.py bench OUT   # app vs torch.utils.benchmark vs the user's loop
    python benchmarks/gpu_check.py app OUT     # `fp16studio bench --json` on BERT-base: the verdict
    python benchmarks/gpu_check.py trace OUT   # the traced forward pass against the plain one
    python benchmarks/gpu_check.py fp8 OUT     # FP8 on the GPU: the plan, real FP8 layers, training
    python benchmarks/gpu_check.py steps OUT   # a training step's time, bfloat16 against FP8

Models of real size built from configs (random weights): BERT-base at 32x256 tokens and a
1.1B Llama (TinyLlama's shape) at 8x256. Each phase writes its figures into OUT/results.json
(one key per phase; at most 8 files come back from the device) as soon as a model is done, so
a phase cut short still leaves what it measured.

GPU_CHECK_DRY=1 runs the phases on the CPU with BERT-small and a 4-layer Llama at 2x64 tokens:
the check's own code tried here before it spends device time.
"""

from __future__ import annotations

import copy
import io
import json
import math
import os
import statistics
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch

from bench_vs_timer import MODELS as CONFIGS
from bench_vs_timer import build, compare, loop_ms, table, token_batch
from fp16studio.core.precision.measure import Limits

DRY = os.environ.get("GPU_CHECK_DRY") == "1"
DEVICE = torch.device("cpu" if DRY else "cuda")
# (model, batch size, tokens): the figures in docs/gpu.md are of these.
MODELS = (("bert-small", 2, 64), ("llama-small", 2, 64)) if DRY else \
    (("bert-base", 32, 256), ("llama-1b", 8, 256))
BERT, LLAMA = (name for name, _, _ in MODELS)
VARIANTS = ["float32", "bfloat16"] if DRY else \
    ["float32", "tf32", "float16", "bfloat16", "autocast-float16", "autocast-bfloat16"]


def record(out: Path, phase: str, value):
    """Write one phase's figures so far into OUT/results.json (the phases run one by one)."""
    path = out / "results.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    results[phase] = value
    path.write_text(json.dumps(results, indent=1) + "\n")


def synchronize():
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def run_cli(args: list[str]) -> tuple[int, dict | None, float]:
    """`fp16studio ARGS --json` in this process: exit code, its document, seconds."""
    from fp16studio.cli import main

    text = io.StringIO()
    started = time.perf_counter()
    with redirect_stdout(text):
        code = main([*args, "--json"])
    try:
        document = json.loads(text.getvalue())
    except ValueError:
        document = None
    return code, document, round(time.perf_counter() - started, 1)


def bench(out: Path):
    results = []
    for name, batch, seq in MODELS:
        results.append(compare(name, VARIANTS, DEVICE, batch, seq, repeats=2,
                               limits=Limits(min_seconds=1.0), seconds=1.0))
        print(table(results[-1]), flush=True)
        record(out, "bench", results)
        empty_cache()


def saved_classifier(folder: Path) -> Path:
    """BERT (the check's size) with a classification head, saved with the demo's tokenizer
    (its ids fit any BERT vocabulary), so `dataset: synthetic` makes text rows and labels."""
    from transformers import BertConfig, BertForSequenceClassification

    from fp16studio.core.demo.pipelines import ensure_demo_files

    if not (folder / "config.json").exists():
        torch.manual_seed(0)
        BertForSequenceClassification(BertConfig(**CONFIGS[BERT][1])).save_pretrained(folder)
        tokenizer = ensure_demo_files() / "models/tiny-bert"
        for name in ("tokenizer.json", "tokenizer_config.json"):
            (folder / name).write_bytes((tokenizer / name).read_bytes())
    return folder


def saved_spec(name: str, **keys) -> Path:
    batch = MODELS[0][1]
    spec = {"model": str(saved_classifier(Path(f"/tmp/gpu-check-{BERT}"))),
            "dataset": "synthetic", "samples": batch, "batch_size": batch,
            "device": DEVICE.type, **keys}
    path = Path(f"/tmp/gpu-check-{name}.json")
    path.write_text(json.dumps(spec))
    return path


def app(out: Path):
    """The whole `bench` command on the saved BERT with a synthetic batch: its verdicts."""
    code, doc, seconds = run_cli(["bench", str(saved_spec("bench")), "--min-seconds", "0.5"])
    print(f"fp16studio bench exit {code} in {seconds}s\n{doc and doc.get('verdict')}")
    record(out, "app", {"exit": code, "seconds": seconds, "document": doc})
    for v in (doc or {}).get("variants", []):
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
            record(out, "trace", results)
            empty_cache()


def traced_over_plain(name: str, dtype: str, batch_size: int, seq: int, rounds: int = 5) -> float:
    from fp16studio.core.run.trace import Tracer

    model = build(name, getattr(torch, dtype), DEVICE)
    batch = token_batch(DEVICE, batch_size, seq)

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
            synchronize()
            started = time.perf_counter()
            fn()
            synchronize()
            times.append(time.perf_counter() - started)
        ratios.append(times[1] / times[0])
    return statistics.median(ratios)


def fp8(out: Path):
    """FP8 where it runs for real (compute capability 9.0 takes both recipes):
    - the plan (`fp16studio fp8 --json`) per recipe on the saved BERT: not emulated, its checks;
    - the plan's SQNR per layer (its sample, torchao's cast, a float32 matmul) against the SQNR
      of torchao's Float8Linear on the same input, by the GPU's FP8 matmul and emulated;
    - a spec's FP8 training steps (`train.fp8`) through `diagnose --json`."""
    results: dict = {"capability": list(torch.cuda.get_device_capability()) if not DRY else None}
    for recipe in ("tensorwise", "rowwise"):
        code, doc, seconds = run_cli(["fp8", str(saved_spec("fp8")), "--recipe", recipe])
        doc = doc or {}
        layers = [row for row in doc.get("layers", []) if row.get("sqnr_db") is not None]
        results[f"plan {recipe}"] = {
            "exit": code, "seconds": seconds, "emulated": doc.get("emulated"),
            "preflight": doc.get("preflight"), "converted": len(doc.get("converted", [])),
            "keep_bf16": doc.get("keep_bf16"),
            "sqnr_db min/median": [min(r["sqnr_db"] for r in layers),
                                   statistics.median(r["sqnr_db"] for r in layers)]
            if layers else None,
            "findings": [(f["code"], f["severity"], f["location"])
                         for f in doc.get("findings", [])]}
        print(f"fp8 plan {recipe}: {results[f'plan {recipe}']}", flush=True)
        record(out, "fp8", results)
        results[f"sqnr {recipe}"] = layer_sqnr(recipe)
        print(f"sqnr {recipe}: {results[f'sqnr {recipe}']['summary']}", flush=True)
        record(out, "fp8", results)
        train = {"optimizer": "adamw", "steps": 2, "fp8": recipe}
        code, doc, seconds = run_cli(["diagnose", str(saved_spec("train", with_labels=True,
                                                                 model_dtype="bfloat16",
                                                                 train=train))])
        doc = doc or {}
        results[f"train {recipe}"] = {
            "exit": code, "seconds": seconds, "ok": doc.get("ok"), "steps": doc.get("steps"),
            "findings": [(f["code"], f["severity"], f["location"])
                         for f in doc.get("findings", [])]}
        print(f"train {recipe}: {results[f'train {recipe}']}", flush=True)
        record(out, "fp8", results)
        empty_cache()


# The steps phase's runs, the figures that decide first (a compile can take a minute or more):
# GPU_CHECK_STEPS names some of them for a rerun.
STEPS = "bfloat16 tensorwise bfloat16-compiled tensorwise-compiled rowwise rowwise-compiled"


def steps(out: Path):
    """Training-step time of the Llama, bfloat16 against FP8, eager and torch.compile'd."""
    results = {}
    for key in os.environ.get("GPU_CHECK_STEPS", STEPS).split():
        recipe, compiled = key.removesuffix("-compiled"), key.endswith("-compiled")
        results[key] = training_step_ms(None if recipe == "bfloat16" else recipe, compiled)
        print(f"{LLAMA} training step, {key}: {results[key]:.2f} ms", flush=True)
        record(out, "steps", results)
        empty_cache()


def layer_sqnr(recipe: str) -> dict:
    """Per nn.Linear of the bfloat16 BERT on the spec's batch: the plan's SQNR and the SQNR
    of a Float8Linear of the layer on the layer's own recorded input, by the FP8 matmul
    (`native`, off a GPU: none) and emulated; the largest gaps, in dB."""
    from fp16studio.core.precision.bench import variant_spec
    from fp16studio.core.precision.fp8 import measured_layers
    from fp16studio.core.run.float8 import float8_config, torchao_float8
    from fp16studio.core.run.pipeline import prepare
    from fp16studio.core.spec.documents import load_spec

    float8 = torchao_float8()
    prepared = prepare(variant_spec(load_spec(saved_spec("fp8")), "bfloat16"))
    plan = {layer.name: layer.sqnr_db for layer in measured_layers(
        prepared, recipe, float8, float8_config(float8, recipe, emulate=DRY))}
    calls: dict[str, tuple] = {}  # name: (input, output) of the layer's first call

    def keep(name):
        def hook(module, args, output):
            calls.setdefault(name, (args[0], output))
        return hook

    hooks = [module.register_forward_hook(keep(name))
             for name, module in prepared.model.named_modules() if name in plan]
    with torch.no_grad():
        prepared.model(**prepared.batch)
    for hook in hooks:
        hook.remove()
    rows = {}
    for emulate in ((True,) if DRY else (False, True)):
        converted = float8.convert_to_float8_training(
            copy.deepcopy(prepared.model), config=float8_config(float8, recipe, emulate),
            module_filter_fn=lambda module, fqn: fqn in plan and module.in_features % 16 == 0
            and module.out_features % 16 == 0)
        for name, (x, reference) in calls.items():
            module = converted.get_submodule(name)
            if type(module) is torch.nn.Linear:
                continue
            with torch.no_grad():
                rows.setdefault(name, {"plan": plan[name]})[
                    "emulated" if emulate else "native"] = sqnr_db(reference, module(x))
        del converted
    gaps = {kind: [abs(r["plan"] - r[kind]) for r in rows.values()
                   if r.get(kind) is not None and r["plan"] is not None]
            for kind in ("native", "emulated")}
    summary = {f"plan - {kind} dB max/median": [round(max(g), 2), round(statistics.median(g), 2)]
               for kind, g in gaps.items() if g}
    if not DRY:
        summary["native - emulated dB max"] = round(max(
            abs(r["native"] - r["emulated"]) for r in rows.values()), 2)
    return {"summary": summary, "layers": rows}


def sqnr_db(reference, output) -> float:
    reference, output = reference.float(), output.float()
    noise = (output - reference).pow(2).sum().item()
    return round(10 * math.log10(reference.pow(2).sum().item() / noise), 2) if noise else math.inf


def training_step_ms(recipe: str | None, compiled: bool, steps: int = 10) -> float:
    """The Llama in bfloat16, AdamW, one step per call (forward with labels, backward, step),
    its Linear layers in FP8 by `recipe` (the app's own choice of layers) or not."""
    from fp16studio.core.run.float8 import float8_config, fp8_layers, torchao_float8

    name, batch_size, seq = MODELS[1]
    model = build(name, torch.bfloat16, DEVICE).train()
    if recipe is not None:
        float8, layers = torchao_float8(), set(fp8_layers(model))
        model = float8.convert_to_float8_training(
            model, config=float8_config(float8, recipe, emulate=DRY),
            module_filter_fn=lambda module, fqn: fqn in layers)
    forward = torch.compile(model) if compiled else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ids = token_batch(DEVICE, batch_size, seq)["input_ids"]

    def step():
        forward(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    return round(loop_ms(step, DEVICE, calls=steps, repeats=3), 3)


def empty_cache():
    if DEVICE.type == "cuda":
        torch.cuda.empty_cache()


if __name__ == "__main__":
    phase, out = sys.argv[1], Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    {"bench": bench, "app": app, "trace": trace, "fp8": fp8, "steps": steps}[phase](out)
