"""What `drift` costs against one diagnosis of the same spec (target: at most 2.5x).

In one process, after a warm-up of each (imports and first-call costs are paid once by both),
rounds alternate `diagnose(spec)` and `drift(spec, variant)` so load on the machine hits both
alike; the figure is the ratio of the medians. A drift loads the model twice (float32 and the
variant, each as the spec's load path does) and runs two hooked forward passes on one batch; a
diagnosis loads once and runs one traced pass. In-process is the stricter figure: as whole
processes the interpreter's start and the imports, paid once by each, make the ratio smaller.
The two runs a drift makes are also timed plainly (float32 and the variant: load, batch, one
forward pass each, no hooks) in the same rounds: drift against them is the cost of the hooks
and the comparison, and does not move when the diagnosis's tracer gets faster.

    python benchmarks/drift_cost.py [--rounds 5] [--model DIR] [--variants float16,bfloat16]
                                    [--threads N]

On a machine whose cores are busy with other work, torch's parallel CPU kernels wait on each
other (tens of ms per small operation), which punishes many small operations (hooks) far more
than an idle machine would; `--threads 1` takes that out of the figure.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path


def main():
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _processes import call_timed
    from _text_spec import options, text_spec

    parser = options(__doc__.splitlines()[0])
    parser.add_argument("--variants", default="float16,bfloat16")
    args = parser.parse_args()
    model, spec = text_spec(args, "drift-cost")
    import torch

    from fp16studio.core.diagnostics.diagnosis import diagnose
    from fp16studio.core.precision.drift import drift, variant_specs
    from fp16studio.core.run.pipeline import forward, prepare

    print(f"model {model.parent.name}, batch {args.batch_size}, {args.rounds} alternating rounds, "
          f"{torch.get_num_threads()} CPU threads")
    for variant in args.variants.split(","):
        diagnose(spec)
        drift(spec, variant)  # warm-up: imports, first calls
        plain, base, cost = [], [], []
        pair = variant_specs(spec, variant)
        for _ in range(args.rounds):
            plain.append(sum(call_timed(lambda s: forward(prepare(s)), s) for s in pair))
            base.append(call_timed(diagnose, spec))
            cost.append(call_timed(drift, spec, variant))
        plain_s, base_s, cost_s = map(statistics.median, (plain, base, cost))
        print(f"  {variant:9} float32 + {variant} plainly {plain_s:.3f} s, diagnose "
              f"{base_s:.3f} s, drift {cost_s:.3f} s (medians): drift / diagnose "
              f"{cost_s / base_s:.2f}x (target <= 2.5x), drift / the two plain runs "
              f"{cost_s / plain_s:.2f}x")


if __name__ == "__main__":
    main()
