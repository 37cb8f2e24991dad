# Honest control: a ModelNew = Model that prints its process's nice value when it is imported
# (the runner compiles it, the job does not hold a device yet) and at its first forward (the job
# holds its device). Queued jobs' runners wait in the background; a job's own come forward at its
# grant (worker/isolation/cpu_priority.hpp).
import os

import torch
import torch.nn as nn

print(f"KEVAL_NICE import {os.getpriority(os.PRIO_PROCESS, 0)}", flush=True)
_reported = False


class ModelNew(nn.Module):
    def forward(self, x):
        global _reported
        if not _reported:
            _reported = True
            print(f"KEVAL_NICE forward {os.getpriority(os.PRIO_PROCESS, 0)}", flush=True)
        return torch.relu(x)
