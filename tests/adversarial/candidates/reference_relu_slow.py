# A reference that does its ReLU 500 times over, on the device it is given: an honest single
# ReLU is "faster" by orders of magnitude, which is what excessive_speedup is there to flag.
# (Not a sleep: on a GPU the timed replay holds only device work, so host time would not count.)
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        for _ in range(500):
            y = torch.relu(x)
        return y


def get_inputs():
    return [torch.randn(4096)]


def get_init_inputs():
    return []
