# Honest control for the channel layer: a kernel whose import starts processes the way build
# tools do (subprocess with close_fds, a shell that redirects descriptor 3, os.closerange over
# everything, multiprocessing's fork) must run as it would anywhere else. Any of them failing
# raises, and the job then fails to compile: the test expects it correct.
import multiprocessing
import os
import subprocess
import sys

import torch
import torch.nn as nn


def _check(what, ok):
    if not ok:
        raise RuntimeError(f"honest subprocess use failed under keval: {what}")


_check("subprocess.run(close_fds=True)",
       subprocess.run([sys.executable, "-c", "print('ok')"], capture_output=True,
                      text=True).stdout.strip() == "ok")
_check("sh redirecting descriptor 3",
       subprocess.run(["sh", "-c", "exec 3>/dev/null; echo ok >&3; echo done"],
                      capture_output=True, text=True).stdout.strip() == "done")
_check("closerange in a forked child",
       subprocess.run([sys.executable, "-c", "import os; os.closerange(3, 1 << 20); print('ok')"],
                      capture_output=True, text=True).stdout.strip() == "ok")


def _square(x):
    return x * x


with multiprocessing.get_context("fork").Pool(2) as pool:
    _check("multiprocessing fork pool", pool.map(_square, [1, 2, 3]) == [1, 4, 9])
print("KEVAL_SUBPROCESSES ok", flush=True)


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
