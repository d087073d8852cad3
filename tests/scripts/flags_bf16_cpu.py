"""TrainingArguments(bf16=True) on a machine without a bfloat16 GPU (trl #3616): transformers
refuses when the arguments are made, `Your setup doesn't support bf16/gpu`."""
import sys

import torch
from transformers import AutoModelForSequenceClassification, BertConfig, Trainer, TrainingArguments

torch.manual_seed(0)
config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=32, num_labels=2)
model = AutoModelForSequenceClassification.from_config(config, dtype=torch.float32)
rows = [{"input_ids": torch.randint(0, 64, (8,)), "labels": torch.tensor(i % 2)} for i in range(8)]
args = TrainingArguments(output_dir=sys.argv[1], bf16=True, max_steps=2, report_to=[])  # the flag
trainer = Trainer(model=model, args=args, train_dataset=rows)
trainer.train()
