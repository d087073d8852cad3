"""A mixed-precision fine-tuning loop over a Hugging Face pipeline that clips the gradients
before scaler.unscale_: clipping acts on gradients scaled x65536 and learning goes flat
(returnn #1590, Lightning #9599)."""
import sys
from pathlib import Path

import torch
from datasets import load_dataset
from transformers import AutoModelForSequenceClassification, AutoTokenizer

demo = Path(sys.argv[1])
torch.manual_seed(0)
model = AutoModelForSequenceClassification.from_pretrained(demo / "models/tiny-bert")
tok = AutoTokenizer.from_pretrained(demo / "models/tiny-bert")
ds = load_dataset("json", data_files=str(demo / "data/texts.jsonl"), split="train")
ds = ds.map(lambda b: tok(b["text"], padding=True), batched=True, batch_size=None)
ds = ds.remove_columns(["text"]).rename_column("label", "labels").with_format("torch")
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
scaler = torch.amp.GradScaler("cpu")
model.train()
for step, batch in enumerate(torch.utils.data.DataLoader(ds, batch_size=4)):
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(**batch).loss
    scaler.scale(loss).backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)  # clip
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    print(f"step {step}: loss {loss.item():.4f} grad norm {norm.item():.1f}")
