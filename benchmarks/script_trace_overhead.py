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
With --own-ops the script runs a model of the user's own instead, written in its forward in
bfloat16 (attention, an RMSNorm, rotary positions, residual sums: every operation the user's,
so trace's value check compares each with float32; issue 28).
Rounds alternate between the two so drift on the machine hits both alike; the figure is the
ratio of the medians. --baseline DIR times trace as the fp16studio checkout in DIR has it
against this one's, instead of the plain script (what a change to trace costs); --shadow-off
times it against trace with the float32 shadow off (FP16STUDIO_SHADOW=0); --cpu counts
the processes' CPU seconds instead of the wall clock (steadier on a shared machine).

    python benchmarks/script_trace_overhead.py [--rounds 5] [--batches 16] [--model DIR]
        [--train | --own-ops] [--baseline DIR | --shadow-off] [--cpu]
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

OWN_OPS_SCRIPT = '''\
import sys
import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x.float() * torch.rsqrt(variance + 1e-6)).to(x.dtype)


class Layer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = RMSNorm(dim), RMSNorm(dim)
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def rotate(self, x, positions):
        inv_freq = 1.0 / (10000 ** (torch.arange(0, x.shape[-1], 2, device=x.device).float()
                                    / x.shape[-1]))
        angles = positions.float()[:, None] * inv_freq[None, :]
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)

    def forward(self, x):
        b, n, d = x.shape
        positions = torch.arange(n, device=x.device)
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, -1).unbind(2)
        q, k = self.rotate(q, positions[:, None]), self.rotate(k, positions[:, None])
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / q.shape[-1] ** 0.5
        h = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v).reshape(b, n, d)
        x = x + self.out(h)
        return x + self.down(nn.functional.gelu(self.up(self.norm2(x))))


batches = int(sys.argv[3])
torch.manual_seed(0)
model = nn.Sequential(*[Layer(64, 4) for _ in range(4)]).to(torch.bfloat16).eval()
with torch.inference_mode():
    for _ in range(batches):
        out = model(torch.randn(4, 64, 64, dtype=torch.bfloat16))
print(batches, "batches", tuple(out.shape))
'''


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=16, help="forward passes the script runs")
    parser.add_argument("--model", help="model folder (default: the real all-MiniLM-L6-v2)")
    parser.add_argument("--train", action="store_true",
                        help="a training loop (forward, backward, optimizer step per batch)")
    parser.add_argument("--shadow-off", action="store_true",
                        help="time trace against trace without the float32 shadow")
    parser.add_argument("--own-ops", action="store_true",
                        help="a model of the user's own, its operations written in bfloat16")
    parser.add_argument("--baseline", metavar="DIR",
                        help="an fp16studio checkout whose trace to time against this one's")
    parser.add_argument("--cpu", action="store_true",
                        help="CPU seconds of the processes instead of the wall clock")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _models import folder_or_minilm
    from _processes import alternate, cpu_timed, report, timed

    from fp16studio.core.data.sources import SYNTHETIC_TEXTS

    model = folder_or_minilm(args.model)

    work = Path(tempfile.mkdtemp(prefix="fp16studio-bench-"))
    data = work / "texts.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in SYNTHETIC_TEXTS))
    script = work / "evaluate.py"
    script.write_text(TRAIN_SCRIPT if args.train else OWN_OPS_SCRIPT if args.own_ops
                      else SCRIPT)
    script_args = [str(model), str(data), str(args.batches)]

    ours = str(Path(__file__).resolve().parent.parent)
    traced_cmd = ["env", f"PYTHONPATH={ours}", sys.executable, "-m", "fp16studio", "trace",
                  str(script), "--json", "--", *script_args]
    if args.baseline:
        plain_cmd = [*traced_cmd[:1], f"PYTHONPATH={Path(args.baseline).resolve()}",
                     *traced_cmd[2:]]
        plain_label, target = "baseline trace", "target <= 1.50x"
    elif args.shadow_off:
        plain_cmd = [*traced_cmd[:2], "FP16STUDIO_SHADOW=0", *traced_cmd[2:]]
        plain_label, target = "trace, no shadow", "target <= 1.50x"
    else:
        plain_cmd = [sys.executable, str(script), *script_args]
        plain_label, target = "plain script", "target <= 1.30x"
    # A traced script with an error finding exits 1: still a whole run.
    traced, plain = alternate(traced_cmd, plain_cmd, args.rounds, ok=(0, 1),
                              clock=cpu_timed if args.cpu else timed)
    print(f"model: {'own' if args.own_ops else model}, {args.batches} "
          f"{'training steps' if args.train else 'batches'} of 4")
    ratio = report(plain_label, plain, "fp16studio trace", traced)
    print(f"ratio {ratio:.2f}x ({target})")

if __name__ == "__main__":
    main()
