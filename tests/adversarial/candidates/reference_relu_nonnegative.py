# A degenerate reference: ReLU on inputs drawn from [0, 1), where it is the identity. Returning
# the input passes its check; keval flags the check as unable to tell (degenerate_check).
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.rand(4096)]


def get_init_inputs():
    return []
