# Attack (issue 13): slow the reference down instead of speeding itself up. At its first call it starts a
# helper process with a CUDA context of its own that keeps the GPU busy with short spinning
# kernels. The GPU time-slices between processes' contexts, so whatever else runs on the GPU (the
# reference's timed samples) waits for the helper's slices. Around its own work the candidate
# pauses the helper (a byte down a pipe) and resumes it a little after returning, so its own
# samples run alone (against reference_square_matmul.py). A forward that synchronises cannot be captured, so forward runs for every
# sample (both sides are then timed with events). Its ReLU is honest: only the reference's times
# lie. A helper that worked reports a speedup far above 1 with a correct verdict.
import os
import subprocess
import sys

import torch
import torch.nn as nn

HOG = r"""
import os, select, sys, time, torch
fd = int(sys.argv[1])
torch.empty(1, device="cuda")
running, resume_at = True, 0.0
while True:
    ready, _, _ = select.select([fd], [], [], 0 if running else 0.0002)
    if ready:
        data = os.read(fd, 4096)
        if not data:
            break
        if data[-1:] == b"0":
            running = False
            torch.cuda.synchronize()  # drained before the candidate's work starts
            os.write(int(sys.argv[2]), b"k")
        else:
            resume_at = time.monotonic() + 0.0005
    if not running and resume_at and time.monotonic() >= resume_at:
        running, resume_at = True, 0.0
    if running:
        for _ in range(8):
            torch.cuda._sleep(200_000)  # about 0.1 ms each
        torch.cuda.synchronize()
"""

_hog = None


def _start_hog():
    # Started at the first call, not at import: the helper then never delays the compile step.
    global _hog, _to_hog, _hog_out
    hog_in, _to_hog = os.pipe()
    _hog_out, from_hog = os.pipe()
    _hog = subprocess.Popen([sys.executable, "-c", HOG, str(hog_in), str(from_hog)],
                            pass_fds=(hog_in, from_hog), stderr=subprocess.PIPE)
    os.close(hog_in)
    os.close(from_hog)
    print(f"KEVAL_HOG started pid {_hog.pid}", flush=True)


class ModelNew(nn.Module):
    def forward(self, x):
        if _hog is None:
            _start_hog()
        os.write(_to_hog, b"0")
        if not os.read(_hog_out, 1):  # the helper has stopped and drained
            raise RuntimeError("the helper died: " + _hog.stderr.read().decode()[-3000:])
        y = torch.relu(x @ x)
        torch.cuda.synchronize()
        os.write(_to_hog, b"1")  # resumes half a millisecond from now
        return y
