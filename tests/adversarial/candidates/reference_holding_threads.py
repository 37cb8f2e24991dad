# An honest, if odd, reference: its module keeps @THREADS@ threads alive for as long as its process
# lives (each waits on an event nobody sets). Its threads are its own runner's business: another
# runner's process limit must not count them.
import threading

import torch
import torch.nn as nn

_never = threading.Event()
for _ in range(int("@THREADS@")):
    threading.Thread(target=_never.wait, daemon=True).start()


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4096)]


def get_init_inputs():
    return []
