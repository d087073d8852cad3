"""TrainingArguments(fp16=True) on a CPU: it constructs and trains, silently in float32
(accelerate turns native AMP off on a CPU: no autocast, no GradScaler, no warning)."""
import sys

import torch
from transformers import AutoModelForSequenceClassification, BertConfig, Trainer, TrainingArguments

torch.manual_seed(0)
config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=32, num_labels=2)
model = AutoModelForSequenceClassification.from_config(config, dtype=torch.float32)
rows = [{"input_ids": torch.randint(0, 64, (8,)), "labels": torch.tensor(i % 2)} for i in range(8)]
seen = []
model.bert.encoder.layer[0].attention.self.query.register_forward_hook(
    lambda module, inputs, output: seen.append(str(output.dtype)))
args = TrainingArguments(output_dir=sys.argv[1], fp16=True, max_steps=2,  # the flag
                         per_device_train_batch_size=4, report_to=[], save_strategy="no")
trainer = Trainer(model=model, args=args, train_dataset=rows)
trainer.train()
print("computed in", sorted(set(seen)))
