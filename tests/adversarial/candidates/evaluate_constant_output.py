# Attack (issue 13, /evaluate): returns the same tensor whatever its inputs. With no reference
# it still "runs"; keval flags it: its outputs never changed while its inputs did.
import torch
import torch.nn as nn

FIXED = torch.linspace(-1, 1, 4096)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return FIXED.to(x.device, copy=True)


def get_inputs():
    return [torch.randn(4096)]


def get_init_inputs():
    return []
