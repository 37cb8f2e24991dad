# Attack (issue 13, /evaluate): with no reference to compare against, a kernel that returns its
# input unchanged "runs". keval flags it: its output is bit for bit its input.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.clone()


def get_inputs():
    return [torch.randn(4096)]


def get_init_inputs():
    return []
