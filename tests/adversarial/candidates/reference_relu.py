# The honest reference of the adversarial cases: KernelBench level-1 style ReLU on 4096 float32
# values drawn from a normal distribution, so about half are negative. A candidate that returns
# its input, zeros, or nothing at all is wrong.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4096)]


def get_init_inputs():
    return []
