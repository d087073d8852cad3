"""model.half() trained with Adam, the loss computed by the script's own criterion on the
logits: a training step a spec cannot say (a spec's step takes the model's own loss)."""
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
ds = ds.remove_columns(["text"]).with_format("torch")
model = model.half()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = torch.nn.CrossEntropyLoss()
model.train()
for step, batch in enumerate(torch.utils.data.DataLoader(ds, batch_size=4)):
    labels = batch.pop("label")
    loss = criterion(model(**batch).logits.float(), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    print(f"step {step}: loss {loss.item():.4f}")
