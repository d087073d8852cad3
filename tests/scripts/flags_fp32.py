"""The same training with fp16=False: float32 as asked, no precision setting to report."""
import sys

import torch
from transformers import AutoModelForSequenceClassification, BertConfig, Trainer, TrainingArguments

torch.manual_seed(0)
config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=32, num_labels=2)
model = AutoModelForSequenceClassification.from_config(config, dtype=torch.float32)
rows = [{"input_ids": torch.randint(0, 64, (8,)), "labels": torch.tensor(i % 2)} for i in range(8)]
args = TrainingArguments(output_dir=sys.argv[1], fp16=False, max_steps=2,
                         per_device_train_batch_size=4, report_to=[], save_strategy="no")
trainer = Trainer(model=model, args=args, train_dataset=rows)
print("loss", trainer.train().training_loss)
