"""Writes crates/dp-models/tests/data/torch_cnn.safetensors: a small PyTorch CNN's
state_dict in float64 (as PyTorch saves a double model), an input batch and PyTorch's
logits for it, so that tests/nn/state_dict.rs can check that the DP layers loaded from a
PyTorch state dict compute PyTorch's function. Needs torch and safetensors:
    python3 xtask/scripts/state_dict_fixture.py crates/dp-models/tests/data/torch_cnn.safetensors
"""
import sys

import torch
from safetensors.torch import save_file

torch.manual_seed(7)
model = torch.nn.Sequential(
    torch.nn.Conv2d(2, 3, 3, stride=1, padding=1),
    torch.nn.Tanh(),
    torch.nn.MaxPool2d(2, 1),
    torch.nn.Flatten(),
    torch.nn.Linear(3 * 5 * 5, 8),
    torch.nn.GELU(),  # exact (erf), PyTorch's default
    torch.nn.LayerNorm(8),
    torch.nn.Linear(8, 4),
).double()
x = torch.randn(5, 2 * 6 * 6, dtype=torch.float64)
with torch.no_grad():
    logits = model(x.view(5, 2, 6, 6))
tensors = {name: t.contiguous() for name, t in model.state_dict().items()}
tensors["input"] = x
tensors["logits"] = logits
save_file(tensors, sys.argv[1])
