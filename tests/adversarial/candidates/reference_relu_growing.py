# A reference whose get_inputs returns a longer tensor on every call: each correctness trial's
# inputs have a shape of their own, which keval cannot write into the buffers of the trial before
# (it binds new ones), and which timed samples cannot take at all (a timed sample's inputs are
# written into the buffers its captured launch holds).
import torch
import torch.nn as nn

calls = 0


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    global calls
    calls += 1
    return [torch.randn(1024 + calls)]


def get_init_inputs():
    return []
