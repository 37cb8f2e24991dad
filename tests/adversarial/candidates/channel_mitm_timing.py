# Attack: under-report its own time by sitting between its runner and the trusted worker. At
# import (the compile step) it finds the runner's channel (see _channel), moves it behind a
# socketpair of its own and relays every frame both ways from two threads, descriptors included,
# dividing the "ms" of every timed sample's reply by SHRINK. Its kernel computes the right ReLU,
# so only the time lies: a relay that worked would report a speedup near SHRINK with a correct
# verdict. MODE says how the channel's number is taken over:
#   dup2   the socketpair's end is dup2'd onto the channel's number;
#   close  the channel's number is closed and the lower free numbers filled, so that the next
#          socketpair lands on it.
# It prints "KEVAL_TAKEOVER <mode> relayed" or "KEVAL_TAKEOVER <mode> failed: <why>" and, failed,
# stays an honest ReLU.
import array
import json
import os
import socket
import stat
import struct
import threading

import torch
import torch.nn as nn

MODE = "@MODE@"
SHRINK = 1e6
MAGIC = b"KEV1"


def _recv(sock):
    fds = array.array("i")
    data, ancdata, _, _ = sock.recvmsg(1 << 16, socket.CMSG_SPACE(64 * fds.itemsize))
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    return data, list(fds)


def _send(sock, data, fds):
    ancdata = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sock.sendmsg([data], ancdata)
    for fd in fds:
        os.close(fd)


def _relay(source, sink, rewrite):
    buffered, fds = b"", []
    while True:
        data, more = _recv(source)
        if not data:
            return
        buffered += data
        fds += more
        while len(buffered) >= 8:
            length = struct.unpack(">I", buffered[4:8])[0]
            if len(buffered) < 8 + length:
                break
            payload, buffered = buffered[8 : 8 + length], buffered[8 + length :]
            if rewrite:
                message = json.loads(payload)
                if isinstance(message.get("ms"), (int, float)):
                    message["ms"] = message["ms"] / SHRINK
                payload = json.dumps(message).encode()
            _send(sink, MAGIC + struct.pack(">I", len(payload)) + payload, fds)
            fds = []


def _channel():
    """The runner's channel as an attacker who read keval's source finds it: of its Unix sockets
    (CUDA and torch may hold others), the one whose peer is its parent, the trusted worker; else
    the highest-numbered, where keval moves the channel."""
    sockets = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                sockets.append(int(name))
        except OSError:
            pass
    if not sockets:
        raise RuntimeError("found no socket")
    for fd in sockets:
        try:
            probe = socket.socket(fileno=os.dup(fd))
            try:
                peer_pid = struct.unpack("3i", probe.getsockopt(
                    socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[0]
            finally:
                probe.close()
        except OSError:
            continue
        if peer_pid == os.getppid():
            return fd
    return max(sockets)


def _take_over(channel):
    real = socket.socket(fileno=os.dup(channel))
    ours, runner_side = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    if MODE == "dup2":
        os.dup2(runner_side.fileno(), channel)
    else:
        os.close(channel)
        fillers = []
        while True:
            fd = os.open("/dev/null", os.O_RDONLY)
            if fd == channel:
                os.close(fd)
                break
            fillers.append(fd)
            if fd == channel - 1:
                break
        if os.dup(runner_side.fileno()) != channel:
            raise RuntimeError("the socketpair did not land on the channel's number")
    runner_side.close()
    threading.Thread(target=_relay, args=(real, ours, False), daemon=True).start()
    threading.Thread(target=_relay, args=(ours, real, True), daemon=True).start()


try:
    _take_over(_channel())
    print(f"KEVAL_TAKEOVER {MODE} relayed", flush=True)
except (OSError, RuntimeError) as e:
    print(f"KEVAL_TAKEOVER {MODE} failed: {e}", flush=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)
