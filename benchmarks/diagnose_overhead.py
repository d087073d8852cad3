"""What a diagnosis costs over running the same pipeline plainly (target: at most 1.10x).

Whole processes, as a user runs them: `fp16studio diagnose SPEC --json` against a plain script
that loads the same model, reads the same rows, tokenizes them in `Dataset.map`, collates one
batch and runs one forward pass. Rounds alternate between the two so drift on the machine hits
both alike; the figure is the ratio of the medians.

    python benchmarks/diagnose_overhead.py [--rounds 5] [--model DIR] [--dtype bfloat16]
    python benchmarks/diagnose_overhead.py --model llama-1b     # a model from _models.py
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

PLAIN = '''\
import inspect, sys
import datasets, torch, transformers
from transformers import AutoTokenizer
model_dir, data, dtype = sys.argv[1], sys.argv[2], getattr(torch, sys.argv[3])
config = transformers.AutoConfig.from_pretrained(model_dir)
cls = getattr(transformers, (config.architectures or ["AutoModel"])[0])
model = cls.from_pretrained(model_dir, dtype=dtype).eval()
tokenizer = AutoTokenizer.from_pretrained(model_dir)
accepted = set(inspect.signature(model.forward).parameters)
rows = datasets.load_dataset("json", data_files={"train": data}, split="train").select(range(8))
rows = rows.map(lambda b: dict(tokenizer(b["text"], padding=True, truncation=True,
                                         return_tensors="pt")), batched=True, batch_size=None)
rows = rows.remove_columns([c for c in rows.column_names if c not in accepted])
batch = next(iter(torch.utils.data.DataLoader(rows.with_format("torch"), batch_size=4)))
with torch.inference_mode():
    out = model(**batch)
print(out[0].shape)
'''


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--model", help="model folder, or a name from benchmarks/_models.py "
                                        "(default: the real all-MiniLM-L6-v2)")
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _models import NAMES, folder_or_minilm, model_dir
    from _processes import alternate, report

    if args.model in NAMES:
        model = model_dir(args.model)
    else:
        model = folder_or_minilm(args.model)
    from fp16studio.core.data.sources import SYNTHETIC_TEXTS

    work = Path(tempfile.mkdtemp(prefix="fp16studio-bench-"))
    data = work / "texts.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in SYNTHETIC_TEXTS))
    spec = work / "spec.json"
    spec.write_text(json.dumps({"model": str(model), "dataset": str(data),
                                "model_dtype": args.dtype}))
    plain = work / "plain.py"
    plain.write_text(PLAIN)

    app_cmd = [sys.executable, "-m", "fp16studio", "diagnose", str(spec), "--json"]
    plain_cmd = [sys.executable, str(plain), str(model), str(data), args.dtype]
    app, ref = alternate(app_cmd, plain_cmd, args.rounds, ok=(0, 1))
    print(f"model: {model} in {args.dtype}")
    ratio = report("plain pipeline", ref, "fp16studio diag.", app)
    print(f"ratio {ratio:.3f}x (target <= 1.10x)")

if __name__ == "__main__":
    main()
