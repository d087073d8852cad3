"""Mixed precision switched by a flag that is off: the autocast around the model is disabled
(enabled=False) and nothing else is half precision, so the whole run is float32."""
import torch
from torch import nn

use_amp = torch.cuda.is_available()   # "AMP on the GPU only"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=use_amp):  # the autocast
    logits = model(torch.randn(4, 8))
print(logits.dtype)
