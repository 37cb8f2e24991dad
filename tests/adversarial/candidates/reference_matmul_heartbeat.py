# A matmul reference that watches the candidate's heartbeat (heartbeat_helper.py, @PAGE@): for
# every call it appends to @PAGE@.log whether the counter moved during the call and since the call
# before, so a test can see that the candidate's helper ran between the reference's timed calls
# but never during one. (A file: what a call prints is not kept in the result.)
import os
import struct

import torch
import torch.nn as nn

PAGE = "@PAGE@"
_last = None
_calls = 0


def _beat():
    try:
        with open(PAGE, "rb") as f:
            return struct.unpack("<Q", f.read(8))[0]
    except (OSError, struct.error):
        return None


class Model(nn.Module):
    def forward(self, a, b):
        global _last, _calls
        _calls += 1
        before = _beat()
        y = torch.matmul(a, b)
        for _ in range(3):
            y = torch.matmul(a, y)
        if y.is_cuda:
            # On a GPU: the work is done before the counter is read again, and a forward that
            # synchronises is not captured, so every timed sample calls it (no graph replay).
            torch.cuda.synchronize()
        after = _beat()
        since = _last is not None and before is not None and before != _last
        during = before is not None and after != before
        with open(PAGE + ".log", "a") as log:
            log.write(f"KEVAL_HEARTBEAT call {_calls} during={int(during)} since={int(since)}\n")
        _last = after
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(256, 256), torch.randn(256, 256)]


def get_init_inputs():
    return []
