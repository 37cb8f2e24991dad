# Honest control: KernelBench's baseline, ModelNew = Model. Must be reported correct, so that
# isolation is shown to raise no false flags.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


ModelNew = Model
