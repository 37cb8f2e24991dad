# Inspection: what can a kernel under the daemon reach? Lists /proc/self/fd at import time and in
# forward and prints each listing as one line, "KEVAL_FDS <where> <json>": per descriptor its
# target, and for sockets the family, type, whether it listens, and its local and peer
# addresses. The kernel itself is honest (ReLU), so the job is correct; the test checks the
# listings: no listening socket, no client connection of the daemon, nothing in the daemon's
# state directory but the job's own work directory, at most one socket.
import json
import os
import socket
import stat

import torch
import torch.nn as nn


def address(value):
    if isinstance(value, bytes):
        return "@" + value.lstrip(b"\0").decode(errors="replace")  # abstract namespace
    if isinstance(value, tuple):
        return ":".join(str(v) for v in value)
    return str(value)


def describe(fd):
    entry = {"fd": fd}
    try:
        entry["target"] = os.readlink(f"/proc/self/fd/{fd}")
        mode = os.fstat(fd).st_mode
    except OSError as e:
        entry["error"] = str(e)
        return entry
    if stat.S_ISSOCK(mode):
        try:
            s = socket.socket(fileno=os.dup(fd))
        except OSError as e:
            entry["error"] = str(e)
            return entry
        try:
            entry["family"] = int(s.family)
            entry["type"] = int(s.type)
            entry["listening"] = bool(s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
            try:
                entry["local"] = address(s.getsockname())
            except OSError:
                pass
            try:
                entry["peer"] = address(s.getpeername())
            except OSError:
                pass
        finally:
            s.close()
    return entry


def list_fds(where):
    # The listing itself opens a descriptor for /proc/self/fd; it is gone before describe() runs.
    fds = sorted(int(name) for name in os.listdir("/proc/self/fd"))
    entries = [describe(fd) for fd in fds if os.path.exists(f"/proc/self/fd/{fd}")]
    os.write(1, f"KEVAL_FDS {where} {json.dumps(entries)}\n".encode())


list_fds("import")
_listed = []


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        if not _listed:
            _listed.append(True)
            list_fds("forward")
        return torch.relu(x)
