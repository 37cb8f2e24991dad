# Attack: take the machine's memory. The forward allocates (and touches) @GIB@ GiB of host memory
# per call, far past the job's memory limit: the job must end with the candidate failed and a
# result that says it exceeded its memory limit, and keval must carry on.
import torch
import torch.nn as nn

GIB = int("@GIB@")


class ModelNew(nn.Module):
    def forward(self, x):
        hog = torch.ones(GIB << 28, dtype=torch.float32)  # GIB GiB, every page written
        return torch.relu(x) + hog[:1].sum() * 0
