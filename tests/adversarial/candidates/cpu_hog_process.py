# Attack (issue 13): slow the reference down instead of speeding itself up, on the CPU. At its
# first call it starts helper processes, one per core, that burn CPU whenever the candidate is not
# computing: the reference's timed samples then share every core with them. Around its own work
# the candidate stops the helpers (a byte down a pipe each, acknowledged) and lets them resume a
# little after returning, so its own samples run alone. Its matmul is honest: only the
# reference's times lie. Helpers that worked report a speedup far above 1 with a correct verdict.
import os
import subprocess
import sys

import torch
import torch.nn as nn

HOG = r"""
import os, select, sys, time
fd, ack = int(sys.argv[1]), int(sys.argv[2])
running, resume_at = True, 0.0
while True:
    ready, _, _ = select.select([fd], [], [], 0 if running else 0.0002)
    if ready:
        data = os.read(fd, 4096)
        if not data:
            break
        if data[-1:] == b"0":
            running = False
            os.write(ack, b"k")
        else:
            resume_at = time.monotonic() + 0.0005
    if not running and resume_at and time.monotonic() >= resume_at:
        running, resume_at = True, 0.0
    if running:
        deadline = time.monotonic() + 0.0002
        while time.monotonic() < deadline:
            pass
"""

_helpers = []


def _start_helpers():
    for _ in range(os.cpu_count() or 1):
        hog_in, to_hog = os.pipe()
        from_hog, ack = os.pipe()
        process = subprocess.Popen([sys.executable, "-c", HOG, str(hog_in), str(ack)],
                                   pass_fds=(hog_in, ack))
        os.close(hog_in)
        os.close(ack)
        _helpers.append((process, to_hog, from_hog))
    print(f"KEVAL_HOG started {len(_helpers)} helpers", flush=True)


class ModelNew(nn.Module):
    def forward(self, a, b):
        if not _helpers:
            _start_helpers()
        for _, to_hog, _ in _helpers:
            os.write(to_hog, b"0")
        for _, _, from_hog in _helpers:
            if not os.read(from_hog, 1):
                raise RuntimeError("a helper died")
        y = torch.matmul(a, b)
        for _, to_hog, _ in _helpers:
            os.write(to_hog, b"1")  # resume half a millisecond from now
        return y
