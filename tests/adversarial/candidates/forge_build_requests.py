# Attack: speak the build service's protocol by hand (issue 11). The runner's channel is in
# KEVAL_RUNNER_CHANNEL_FD so that keval's own load_inline can ask the trusted worker for a build;
# a candidate can write there too. Mode @MODE@:
#   lie    one well-formed request for an honest-looking extension, claiming a toolchain this
#          machine does not have (an entry kept under it would be loaded by a later job that has
#          it); the answer is raised, so the result shows what keval said.
#   flood  more requests than keval answers for one runner, each malformed.
# Expected: a malformed request is refused, a lying one built for nothing and kept nowhere, a
# flood ends the runner; a job whose kernel types build nothing ends the runner at the first
# request. Never a verdict: the candidate fails.
import json
import os
import struct
import socket

import torch
import torch.nn as nn

MODE = "@MODE@"
CHANNEL = socket.socket(fileno=os.dup(int(os.environ["KEVAL_RUNNER_CHANNEL_FD"])))


def ask(message):
    payload = json.dumps(dict(message, v=1)).encode()
    CHANNEL.sendall(b"KEV1" + struct.pack(">I", len(payload)) + payload)
    header = CHANNEL.recv(8, socket.MSG_WAITALL)
    if len(header) < 8:
        raise RuntimeError("keval closed the channel")
    (length,) = struct.unpack(">I", header[4:])
    return json.loads(CHANNEL.recv(length, socket.MSG_WAITALL))


UNIT = ("#include <torch/types.h>\n__global__ void k(float* x) { x[threadIdx.x] = 0; }\n")
LIE = {"type": "build_request", "kind": "torch_cuda_extension", "module": "planted_0123456789abcdef",
       "toolchain": {"torch": "99.0.0+poison", "torch_cuda": "99.0", "arch": 90},
       "extension": {"name": "planted", "cpp_units": [], "cuda_units": [["cuda.cu", UNIT]],
                     "extra_cflags": [], "extra_cuda_cflags": [], "extra_ldflags": [],
                     "with_cuda": True}}

if MODE == "lie":
    raise RuntimeError("keval answered: " + json.dumps(ask(LIE)))
answers = [ask({"type": "build_request", "kind": "forged", "n": n}) for n in range(64)]
raise RuntimeError("keval answered all 64: " + json.dumps(answers[-1]))


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
