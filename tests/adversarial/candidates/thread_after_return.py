# Attack (issue 13): returns a correct output, then keeps working on a thread after forward has
# returned (here it only recomputes into a cache, harmlessly) — the shape of a kernel that moves
# its work out of the timed region. The static scan flags the thread; strict makes it a failure.
import threading

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.relu(x)
        worker = threading.Thread(target=lambda: torch.relu(x))
        worker.start()
        worker.join()
        return out
