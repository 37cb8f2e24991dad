# Attack: take the machine's process table. At import time this source forks until fork fails
# (at most @ATTEMPTS@ children, each asleep), reports "KEVAL_FORKS {forked, error, threads}"
# (threads: its process's own when it began) and then ends its children; the job's process limit
# (--job-pids) must stop it long before @ATTEMPTS@ with EAGAIN. The model is an honest ReLU: running out of processes is the kernel's own problem.
import errno
import json
import os
import signal
import time

import torch
import torch.nn as nn

def own_threads():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return -1


threads = own_threads()
children = []
error = None
for _ in range(int("@ATTEMPTS@")):
    try:
        pid = os.fork()
    except OSError as e:
        error = errno.errorcode.get(e.errno, str(e.errno))
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    children.append(pid)
print("KEVAL_FORKS " + json.dumps({"forked": len(children), "error": error, "threads": threads}), flush=True)
for pid in children:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
