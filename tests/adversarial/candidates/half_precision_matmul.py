# Attack (issue 13): a float32 matmul computed from inputs rounded to float16, as a kernel that
# does its work in half precision and casts back. Its error (about 2e-3) passes the default
# tolerance of 1e-2 and fails float32's strict 1e-4: flagged "precision".
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a.half().float(), b.half().float())
