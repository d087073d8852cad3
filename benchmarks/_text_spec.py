"""The set-up of the benchmarks that time fp16studio's passes in this process on a text model:
their common options, torch's threads, the libraries' log chatter quieted as the command line
quiets it (torchao's kernels it cannot load, torch's pytree deprecations), and a
feature-extraction spec of the model (the real all-MiniLM-L6-v2 by default) on the synthetic
texts."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path


def options(description: str) -> argparse.ArgumentParser:
    """The options every such benchmark takes; add its own before parsing."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--model", help="model folder (default: the real all-MiniLM-L6-v2)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    return parser


def text_spec(args, name: str):
    """(the model's folder, the spec of a batch of `args.batch_size` texts on the CPU), with
    the logs quieted and torch's threads set before anything imports the libraries; `name`
    prefixes the temporary folder of the texts."""
    from fp16studio.core.common.library_logs import quiet_library_logs

    quiet_library_logs()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from _models import folder_or_minilm

    from fp16studio.core.data.sources import SYNTHETIC_TEXTS
    from fp16studio.core.spec.value import PipelineSpec

    model = folder_or_minilm(args.model)
    data = Path(tempfile.mkdtemp(prefix=f"{name}-")) / "texts.jsonl"
    data.write_text("".join(f'{{"text": "{t}"}}\n' for t in SYNTHETIC_TEXTS * 4))
    return model, PipelineSpec.from_dict({
        "model": str(model), "dataset": str(data), "device": "cpu",
        "samples": args.batch_size, "batch_size": args.batch_size, "task": "feature-extraction"})
