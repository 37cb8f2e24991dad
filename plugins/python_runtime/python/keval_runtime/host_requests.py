"""Asking the trusted worker for something while one of its commands runs in this runner.

The runner answers the trusted worker's commands over one channel (core/worker/runner/
runner_protocol.hpp); while a command runs (``compile``: the driver is loading the source), the
driver may send one request of its own on that channel and wait for the answer. The runner's C++
side is inside the command then and reads nothing, so the request and its answer are this
module's alone. Today the only request is ``build_request`` (the torch_cuda type's extensions).

Frames are the runner protocol's: "KEV1", a big-endian uint32 length, a JSON object with "v" and
"type"; descriptors travel with a frame (SCM_RIGHTS).
"""
import array
import json
import os
import socket
import struct
import threading

CHANNEL_VARIABLE = "KEVAL_RUNNER_CHANNEL_FD"
MAGIC = b"KEV1"
PROTOCOL_VERSION = 1
MAX_REPLY_BYTES = 8 << 20
MAX_FDS = 8


# One request at a time on the channel: two threads' frames would interleave.
_LOCK = threading.Lock()


class HostRequestError(Exception):
    """The channel failed or the answer is not a frame of the protocol."""


def available():
    """Whether this process is a runner with a channel to a trusted worker."""
    return os.environ.get(CHANNEL_VARIABLE, "").isdigit()


def request(message, reply_type):
    """Sends ``message`` (a dict with "type") and returns (the answer's dict, [descriptors]): the
    next frame, which must be of ``reply_type``. The descriptors are this process's to close."""
    fd = int(os.environ[CHANNEL_VARIABLE])
    # A socket object of its own (a duplicate), so closing it leaves the runner's channel open.
    with _LOCK, socket.socket(fileno=os.dup(fd)) as channel:
        channel.setblocking(True)
        payload = json.dumps(dict(message, v=PROTOCOL_VERSION), separators=(",", ":"),
                             allow_nan=False).encode("utf-8")
        channel.sendall(MAGIC + struct.pack(">I", len(payload)) + payload)
        header, fds = _receive(channel, 8, with_fds=True)
        if header[:4] != MAGIC:
            _close(fds)
            raise HostRequestError("the trusted worker's answer is not a frame")
        (length,) = struct.unpack(">I", header[4:])
        if length > MAX_REPLY_BYTES:
            _close(fds)
            raise HostRequestError(f"the trusted worker's answer is {length} bytes")
        body, more = _receive(channel, length, with_fds=False)
        fds += more
    try:
        reply = json.loads(body)
    except ValueError as exc:
        _close(fds)
        raise HostRequestError(f"the trusted worker's answer is not JSON: {exc}") from None
    if not isinstance(reply, dict) or reply.get("type") != reply_type:
        _close(fds)
        raise HostRequestError(f"the trusted worker answered something other than {reply_type}")
    return reply, fds


def _receive(channel, count, with_fds):
    """Exactly ``count`` bytes, and the descriptors that came with them."""
    data, fds = bytearray(), []
    while len(data) < count:
        if with_fds:
            chunk, ancillary, _, _ = channel.recvmsg(
                count - len(data), socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize))
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    received = array.array("i")
                    received.frombytes(payload[:len(payload) - len(payload) % received.itemsize])
                    fds += list(received)
        else:
            chunk = channel.recv(count - len(data))
        if not chunk:
            _close(fds)
            raise HostRequestError("the trusted worker closed the channel")
        data += chunk
    return bytes(data), fds


def _close(fds):
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
