# Attack (issue 13): behaves while a CUDA graph is being captured. Called eagerly (the correctness
# trials) it computes ReLU; while the stream is capturing (keval times graph replays) it records a
# cheap token kernel instead, so every replay is fast and wrong. Every timed replay runs on fresh
# inputs written into the captured buffers and its output is checked: it fails the first sample.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        if torch.cuda.is_current_stream_capturing():
            return torch.zeros_like(x)
        return torch.relu(x)
