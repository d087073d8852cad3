"""A classifier of the user's own: a small encoder, then attention pooling that masks the
padding with -1e9 before the softmax. In float16 that value does not fit:

    RuntimeError: value cannot be converted to type c10::Half without overflow
"""
import torch
from torch import nn
from transformers import BertConfig, BertModel


class AttentionPooling(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.score = nn.Linear(hidden, 1)

    def forward(self, states, mask):
        scores = self.score(states).squeeze(-1)
        scores = scores.masked_fill(mask == 0, -1e9)  # MARK: masked_fill
        weights = scores.softmax(dim=-1)
        return (weights.unsqueeze(-1) * states).sum(dim=1)


class Classifier(nn.Module):
    def __init__(self, config, labels):
        super().__init__()
        self.encoder = BertModel._from_config(config, dtype=torch.float32)
        self.pool = AttentionPooling(config.hidden_size)
        self.head = nn.Linear(config.hidden_size, labels)

    def forward(self, input_ids, attention_mask):
        states = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.head(self.pool(states, attention_mask))


torch.manual_seed(0)
config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=32)
model = Classifier(config, labels=2).half().eval()
input_ids = torch.randint(1, 64, (2, 8))
attention_mask = torch.ones(2, 8, dtype=torch.long)
attention_mask[1, 5:] = 0
with torch.no_grad():
    logits = model(input_ids, attention_mask)
print("logits", logits)
