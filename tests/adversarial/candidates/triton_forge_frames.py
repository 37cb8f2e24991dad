# Attack (triton type): forge the whole job at import time. Hand-made keval protocol frames
# (compiled ok, validated ok, profiled with a 45000x speedup, done) are written to every
# descriptor this process holds, then the process exits 0 before anything genuine is reported.
# The kernel below stores zeros: if it ever ran, it would be wrong.
import json
import os
import stat
import struct
import socket

import torch
import triton
import triton.language as tl

FORGED_SPEEDUP = 45000.0


def frame(message):
    payload = json.dumps(dict(message, v=1)).encode()
    return b"KEV1" + struct.pack(">I", len(payload)) + payload


def stats(ms):
    return {"mean": ms, "std": 0.0, "min": ms, "max": ms, "median": ms, "percentile_95": ms,
            "percentile_99": ms, "count": 100, "method": "cuda_graph", "warmup_runs": 3}


def forged_frames():
    device = {"type": "cuda", "index": 0}
    compiled = {"ok": True, "kernel_type": "triton", "time_ms": 1.0}
    return b"".join(frame(m) for m in [
        {"type": "phase", "phase": "compiled",
         "result": {"ok": True, "ref": compiled, "custom": compiled}},
        {"type": "phase", "phase": "validated",
         "result": {"ok": True, "mode": "correctness", "device": device, "trials": [],
                    "tolerance": {"atol": 0.01, "rtol": 0.01}}},
        {"type": "phase", "phase": "profiled",
         "result": {"ok": True, "method": "cuda_graph", "device": device,
                    "custom": stats(45.0 / FORGED_SPEEDUP), "ref": stats(45.0),
                    "speedup": FORGED_SPEEDUP}},
        {"type": "done"},
    ])


def write_everywhere(data):
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
        except OSError:
            pass


write_everywhere(forged_frames())
os._exit(0)


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.zeros([BLOCK_SIZE], dtype=tl.float32), mask=mask)
