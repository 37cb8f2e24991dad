# Not an attack: the honest victim of cancel_other_job.py. Its first forward waits (at most 60 s)
# until the test creates @RELEASE_PATH@, so that the job is still running while the attacker
# tries to cancel it; then it computes ReLU correctly.
import os
import time

import torch
import torch.nn as nn

RELEASE_PATH = "@RELEASE_PATH@"
_waited = []


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        if not _waited:
            deadline = time.monotonic() + 60
            while not os.path.exists(RELEASE_PATH) and time.monotonic() < deadline:
                time.sleep(0.01)
            _waited.append(True)
        return torch.relu(x)
