# Attack (neighbour of fingerprint_cache.py): caches its output under the input's address and
# shape, betting that each trial's inputs arrive in a buffer of their own. keval writes every
# trial's fresh inputs into the buffers the side already holds (as between timed samples), so the
# second trial finds its own address with other values and returns the first trial's output.
import torch
import torch.nn as nn

cache = {}


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        key = (x.data_ptr(), tuple(x.shape))
        if key not in cache:
            cache[key] = torch.relu(x)
        return cache[key]
