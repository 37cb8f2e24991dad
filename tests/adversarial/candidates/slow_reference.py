# Attack: slow the reference down to inflate the speedup. Monkeypatches torch.relu,
# torch.nn.functional.relu and torch.Tensor.__add__ to sleep 50 ms before doing their work; this
# kernel itself computes the right answer without them. If the patch reached the reference, its
# runtime would be at least 50 ms and the speedup thousands; the test asserts the reference's
# median stays far below the sleep.
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SLEEP_S = 0.05


def slowed(fn):
    def wrapper(*args, **kwargs):
        time.sleep(SLEEP_S)
        return fn(*args, **kwargs)
    return wrapper


torch.relu = slowed(torch.relu)
F.relu = slowed(F.relu)
torch.Tensor.__add__ = slowed(torch.Tensor.__add__)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.clamp(min=0)
