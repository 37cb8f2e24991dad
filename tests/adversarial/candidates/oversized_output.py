# Attack: make the process that judges allocate what the candidate likes. The candidate returns an
# output 64 times the size of the reference's (a real attack would announce terabytes in a forged
# reply; the bound that stops this stops that). It must fail as the candidate's own fault, with
# nothing copied, never as keval's failure.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.zeros(x.numel() * 1024, dtype=x.dtype, device=x.device)
