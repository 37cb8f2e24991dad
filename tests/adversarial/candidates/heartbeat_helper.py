# A candidate whose helper process keeps the CPU busy for the whole job: it counts as fast as it
# can into a shared page (@PAGE@), the heartbeat that reference_matmul_heartbeat.py watches. Its
# matmul is honest. While the reference is timed the helper must not run: the counter must not
# move during any timed call of the reference's.
import mmap
import os
import subprocess
import sys

import torch
import torch.nn as nn

PAGE = "@PAGE@"
HELPER = r"""
import mmap, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDWR)
page = mmap.mmap(fd, 4096)
n = 0
while True:
    n += 1
    page[0:8] = struct.pack("<Q", n)
"""

with open(PAGE, "wb") as f:
    f.write(b"\0" * 4096)
_helper = subprocess.Popen([sys.executable, "-c", HELPER, PAGE])
print(f"KEVAL_HEARTBEAT helper {_helper.pid}", flush=True)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)
