# Honest control of the /evaluate cases: ReLU on its own inputs, about half of them negative.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4096)]


def get_init_inputs():
    return []
