"""float16 embeddings, then a cut-off at the 90th percentile of their norms:

    RuntimeError: quantile() input tensor must be either float or double dtype
"""
import torch
from transformers import BertConfig, BertModel

torch.manual_seed(0)
config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=32)
encoder = BertModel._from_config(config, dtype=torch.float32).half().eval()

input_ids = torch.randint(0, 64, (8, 8))
with torch.no_grad():
    embeddings = encoder(input_ids=input_ids).last_hidden_state.mean(dim=1)


def outliers(vectors):
    norms = vectors.norm(dim=-1)
    cutoff = torch.quantile(norms, 0.9)  # MARK: quantile
    return norms > cutoff


print("outliers", outliers(embeddings).sum().item())
