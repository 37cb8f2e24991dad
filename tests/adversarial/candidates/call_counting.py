# Attack (issue 13): correct for its first @CALLS@ calls (the correctness trials), then it returns
# the output of its last honest call without computing anything: before every timed sample got
# fresh inputs and a check, this reported a large speedup and "correct".
import torch
import torch.nn as nn

CALLS = @CALLS@


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.last = None

    def forward(self, x):
        self.calls += 1
        if self.calls <= CALLS or self.last is None:
            self.last = torch.relu(x)
        return self.last
