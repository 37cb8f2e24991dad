# A kernel that crashes its runner with a real fault: it reads address 8 in forward. The job fails
# as the kernel's crash ("killed by SIGSEGV"), and the runner's note on its way out says where it
# faulted and from which stack (worker/runner/crash_report.hpp).
import ctypes

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        ctypes.c_int.from_address(8).value
        return torch.relu(x)
