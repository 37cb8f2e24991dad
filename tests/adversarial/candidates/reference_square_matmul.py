# A reference of a few milliseconds on an H100 (relu of a 4096^2 float32 matmul): long enough
# that another context's time slices land inside its samples (gpu_hog_process.py).
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x @ x)


def get_inputs():
    return [torch.randn(4096, 4096)]


def get_init_inputs():
    return []
