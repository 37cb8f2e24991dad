# Attack: outlive a job that is ended from outside. At import time this source leaves a child in
# its own session (os.setsid) and a daemonised grandchild (fork, setsid, fork), each recording its
# pid in @PID_DIR@ and then sleeping for a minute, and its forward never returns. The job is then
# ended by its timeout, or by the death of the keval process that runs it: either way nothing of
# it may survive.
import os
import time

import torch.nn as nn

PID_DIR = "@PID_DIR@"


def leave_behind(role, double_fork):
    pid = os.fork()
    if pid != 0:
        if double_fork:
            os.waitpid(pid, 0)
        return
    try:
        os.setsid()
        if double_fork and os.fork() != 0:
            os._exit(0)
        with open(os.path.join(PID_DIR, f"{role}.pid.tmp"), "w") as f:
            f.write(str(os.getpid()))
        os.rename(os.path.join(PID_DIR, f"{role}.pid.tmp"), os.path.join(PID_DIR, f"{role}.pid"))
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, 65536)
        time.sleep(60)
    finally:
        os._exit(0)


leave_behind("setsid_child", double_fork=False)
leave_behind("daemonised_grandchild", double_fork=True)


class ModelNew(nn.Module):
    def forward(self, x):
        time.sleep(600)
        return x
