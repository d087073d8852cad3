"""A text pipeline with a collate function of its own that casts the whole batch to half."""
import sys
from pathlib import Path

import torch
from datasets import load_dataset
from transformers import AutoModelForSequenceClassification, AutoTokenizer

demo = Path(sys.argv[1])
model = AutoModelForSequenceClassification.from_pretrained(demo / "models/tiny-bert",
                                                           dtype=torch.float16).eval()
tokenizer = AutoTokenizer.from_pretrained(demo / "models/tiny-bert")
rows = load_dataset("json", data_files={"train": str(demo / "data/texts.jsonl")}, split="train")
rows = rows.map(lambda row: tokenizer(row["text"]), remove_columns=["text", "label"])


def collate(examples):
    width = max(len(e["input_ids"]) for e in examples)
    batch = {key: torch.tensor([e[key] + [0] * (width - len(e[key])) for e in examples])
             for key in examples[0]}
    return {key: value.to(torch.float16) for key, value in batch.items()}  # ids too


loader = torch.utils.data.DataLoader(rows, batch_size=4, collate_fn=collate)
print("batches:", len(loader))
with torch.inference_mode():
    for batch in loader:
        model(**batch)
