# Attack (issue 13): returns its input unchanged. Wrong for ReLU in general; right only where
# every input is >= 0, which is the degenerate problem (reference_relu_nonnegative.py) the check
# cannot tell from a right kernel: it passes there, and is flagged.
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.clone()
