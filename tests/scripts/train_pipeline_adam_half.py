"""A fine-tuning loop a user writes over a Hugging Face pipeline: from_pretrained, load_dataset,
Dataset.map, a DataLoader, then model.half() trained with Adam. The loss is finite, then NaN
after the first optimizer.step() (eps=1e-8 is 0 in float16; pytorch #147437)."""
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
model = model.half()  # cast: half weights
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
model.train()
for step, batch in enumerate(torch.utils.data.DataLoader(ds, batch_size=4)):
    loss = model(**batch).loss
    loss.backward()
    optimizer.step()  # optimizer step
    optimizer.zero_grad()
    print(f"step {step}: loss {loss.item():.4f}")
