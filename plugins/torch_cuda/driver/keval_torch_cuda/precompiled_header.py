"""The precompiled keval_torch_extension.h (headers.PCH_HEADER) that main.cpp includes.

load_inline's main.cpp includes torch/extension.h through keval's own header; when the cache
holds a GCC precompiled form of it for the unit's host flags, the host compiler uses it instead
of parsing torch's headers again (what that saves: plugins/torch_cuda/README.md, Measured).

A build never waits for a precompiled header, it uses one that is there: the torch_cuda type's
prewarm (keval serve's prestarted workers) starts the compiler in a process of its own session,
holding the lock, and returns at once, so a prestarted worker is ready for a job in seconds
rather than after the header's compile, and the header is finished even if that worker's job
ends first. Each one is a directory of the cache's ``pch/``, keyed by the toolchain and the host
flags, published as a whole by rename, with the compiler's ``log``.
"""
import fcntl
import hashlib
import json
import os
import shlex
import subprocess
import uuid

from .cache import CACHE_FORMAT
from .headers import PCH_HEADER, PCH_HEADER_TEXT, write_file


def directory(cache_dir, toolchain_key_parts, cxx_flags):
    """Where the precompiled keval_torch_extension.h for these host flags is (or goes).
    The architecture is not part of it: the host compile does not depend on it."""
    parts = {k: v for k, v in toolchain_key_parts.items() if k != "arch"}
    material = json.dumps({"format": CACHE_FORMAT, "toolchain": parts, "flags": cxx_flags},
                          sort_keys=True)
    return os.path.join(cache_dir, "pch", hashlib.sha256(material.encode()).hexdigest())


def usable(pch_dir):
    """Whether ``pch_dir`` holds a precompiled header (a failed compile leaves only its log)."""
    return os.path.exists(os.path.join(pch_dir, PCH_HEADER + ".gch"))


def precompile(cxx, cxx_flags, pch_dir, wait=True):
    """Precompiles keval_torch_extension.h with ``cxx`` and ``cxx_flags`` into ``pch_dir``
    unless it is there or another process is building it; ``wait=False`` returns once the
    compiler started. Returns "present", "being built", "started" or, with ``wait``, "built" or
    "failed" (the compiler's output is in the directory's log)."""
    if os.path.exists(os.path.join(pch_dir, "complete")):
        return "present"
    os.makedirs(os.path.dirname(pch_dir), exist_ok=True)
    with open(pch_dir + ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return "being built"
        if os.path.exists(os.path.join(pch_dir, "complete")):
            return "present"
        staging = f"{pch_dir}.tmp-{uuid.uuid4().hex}"
        os.makedirs(staging)
        header = write_file(staging, PCH_HEADER, PCH_HEADER_TEXT)
        gch = os.path.join(staging, PCH_HEADER + ".gch")
        command = [cxx, "-x", "c++-header", header, "-o", gch] + cxx_flags
        # Published as a whole by rename, "complete" last inside it; a .gch only if the
        # compiler succeeded. The lock goes with the process (its inherited descriptor).
        quoted = {k: shlex.quote(v) for k, v in
                  (("gch", gch), ("staging", staging), ("final", pch_dir))}
        script = ('"$@" > log 2>&1; status=$?\n'
                  f'[ "$status" -eq 0 ] || rm -f {quoted["gch"]}\n'
                  'echo "{\\"status\\": $status}" > complete\n'
                  f'rm -rf {quoted["final"]} && mv {quoted["staging"]} {quoted["final"]}\n')
        process = subprocess.Popen(["/bin/sh", "-c", script, "sh"] + command, cwd=staging,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=True,
                                   pass_fds=(lock.fileno(),))
    if not wait:
        return "started"
    process.wait()
    return "built" if usable(pch_dir) else "failed"
