"""A text pipeline under the article's torch.cuda.amp.autocast(): on a machine without CUDA it does nothing."""
import sys
from pathlib import Path

import torch
from datasets import load_dataset
from transformers import AutoModelForSequenceClassification, AutoTokenizer
demo = Path(sys.argv[1])
model = AutoModelForSequenceClassification.from_pretrained(demo / "models/tiny-bert")
tok = AutoTokenizer.from_pretrained(demo / "models/tiny-bert")
ds = load_dataset("json", data_files=str(demo / "data/texts.jsonl"), split="train")
ds = ds.map(lambda b: tok(b["text"], padding=True), batched=True, batch_size=None)
ds = ds.remove_columns(["text"]).rename_column("label", "labels").with_format("torch")
batch = next(iter(torch.utils.data.DataLoader(ds, batch_size=4)))
with torch.cuda.amp.autocast():
    out = model(**batch)
print(out.loss)
