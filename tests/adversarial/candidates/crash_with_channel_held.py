# A kernel that leaves a daemonised process behind (it keeps every descriptor it inherited, the
# runner's channel among them) and then crashes its runner with SIGSEGV in forward. The channel
# never reaches its end while that process lives, so only the runner's own end can tell keval
# that it died: the job must fail promptly as a crash, not wait out its timeout.
import os
import signal
import time

import torch
import torch.nn as nn

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(600)
    os._exit(0)
os.wait()


class ModelNew(nn.Module):
    def forward(self, x):
        os.kill(os.getpid(), signal.SIGSEGV)
        return torch.relu(x)
