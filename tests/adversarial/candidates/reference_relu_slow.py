# A reference that takes 20 ms per call (it sleeps, then computes ReLU): any honest candidate is
# "faster" by orders of magnitude, which is what excessive_speedup is there to flag.
import time

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        time.sleep(0.02)
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4096)]


def get_init_inputs():
    return []
