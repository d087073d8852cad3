"""What the FP8 plan's measured pass costs against one plain forward pass (target: at most 3x).

The pipeline is prepared once, in bfloat16 as the plan runs it (all-MiniLM-L6-v2 by default,
its 36 Linear layers all eligible). Then rounds alternate, on the same model and batch:

- plain: one forward pass under no_grad, no hooks;
- the plan's pass (`measured_layers`): the same forward pass with every nn.Linear measured in
  its hook: abs-max and scales of weight and input, and on a sample of rows of each (at most
  SAMPLE_ROWS tokens and SAMPLE_FEATURES features) the underflow counts and Float8Linear's
  output (torchao's cast, emulated matmul) for the SQNR against the bfloat16 output.

The figure is the ratio of the medians, in wall-clock time and in the process's CPU time (far
steadier where other work shares the machine). The whole command (`fp8_plan(spec)`: load,
batch, the pass, the rules) is timed too, against the plain load, batch and forward pass it
repeats. Last, what the sample costs in accuracy: each layer's sampled SQNR against the one
measured on every row and feature.

    python benchmarks/fp8_plan_cost.py [--rounds 5] [--model DIR] [--recipe tensorwise]
                                       [--batch-size 8] [--threads N]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path


def main():
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _processes import call_clocks
    from _text_spec import options, text_spec

    parser = options(__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="tensorwise")
    args = parser.parse_args()
    model, spec = text_spec(args, "fp8-cost")
    import torch

    from fp16studio.core.precision.bench import variant_spec
    from fp16studio.core.precision.fp8 import fp8_plan, measured_layers
    from fp16studio.core.run.float8 import float8_config, torchao_float8
    from fp16studio.core.run.pipeline import forward, prepare

    float8 = torchao_float8()
    if float8 is None:
        raise SystemExit("torchao is not installed: pip install '.[fp8]'")
    bf16 = variant_spec(spec, "bfloat16")
    prepared = prepare(bf16)
    config = float8_config(float8, args.recipe, emulate=True)

    def plain_pass():
        with torch.no_grad():
            prepared.model(**prepared.batch)

    def plan_pass():
        measured_layers(prepared, args.recipe, float8, config)

    layers = measured_layers(prepared, args.recipe, float8, config)
    plain_pass()
    fp8_plan(spec, args.recipe)                                   # warm-up: first calls
    plain, measured, whole, plain_whole = [], [], [], []
    for _ in range(args.rounds):
        plain.append(call_clocks(plain_pass))
        measured.append(call_clocks(plan_pass))
        plain_whole.append(call_clocks(lambda: forward(prepare(bf16))))
        whole.append(call_clocks(fp8_plan, spec, args.recipe))
    plain_s, measured_s, whole_s, plain_whole_s = (statistics.median(t[0] for t in runs)
                                                   for runs in (plain, measured, whole,
                                                                plain_whole))
    plain_cpu, measured_cpu = (statistics.median(t[1] for t in runs)
                               for runs in (plain, measured))
    every_row = measured_layers(prepared, args.recipe, float8, config, sample=(10**9, 10**9))
    errors = [abs(a.sqnr_db - b.sqnr_db) for a, b in zip(layers, every_row)]
    print(f"model {model.parent.name if not args.model else model.name}, bfloat16, batch "
          f"{args.batch_size} ({prepared.batch['input_ids'].shape[-1]} tokens a row), "
          f"{len(layers)} Linear layers, recipe {args.recipe}, {args.rounds} alternating rounds, "
          f"{torch.get_num_threads()} CPU threads")
    print(f"  forward pass: plain {plain_s * 1000:.1f} ms, the plan's measured pass "
          f"{measured_s * 1000:.1f} ms (medians): {measured_s / plain_s:.2f}x (target <= 3x); "
          f"CPU time {plain_cpu * 1000:.1f} / {measured_cpu * 1000:.1f} ms: "
          f"{measured_cpu / plain_cpu:.2f}x")
    print(f"  whole: load + batch + forward {plain_whole_s:.3f} s, fp8_plan(spec) {whole_s:.3f} s: "
          f"{whole_s / plain_whole_s:.2f}x")
    print("  runs (ms), plain:", ", ".join(f"{t * 1000:.1f}" for t, _ in plain),
          "| measured:", ", ".join(f"{t * 1000:.1f}" for t, _ in measured))
    print(f"  sampled SQNR against every row and feature's: max |difference| {max(errors):.2f} "
          f"dB, mean {statistics.mean(errors):.2f} dB over {len(errors)} layers (share of each "
          f"output sampled: {min(layer.sample_share for layer in layers):.1%} to "
          f"{max(layer.sample_share for layer in layers):.1%})")


if __name__ == "__main__":
    main()
