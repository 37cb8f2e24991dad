# Attack (issue 13): caches its output under a fingerprint of a few input values (here the first
# value, coarsely rounded) and returns the cached output whenever the fingerprint repeats. On
# inputs that never change, every call after the first is a hit; on fresh inputs the fingerprint
# collides while the values differ, and the stale output fails the check of that sample.
import torch
import torch.nn as nn

cache = {}


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        key = (tuple(x.shape), round(float(x.reshape(-1)[0]) * 2))
        if key not in cache:
            cache[key] = torch.relu(x)
        return cache[key]
