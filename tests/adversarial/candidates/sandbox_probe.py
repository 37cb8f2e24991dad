# Attack: everything a candidate could reach beyond its own process, tried at import time. Each
# attempt is recorded as "allowed" or "denied: <why>", and the whole report printed as one line
# "KEVAL_PROBE <json>" (the test reads it from the result); the model itself is an honest ReLU, so
# the job's verdict stays correct: the sandbox must never cost an honest kernel its result.
import ctypes
import errno
import json
import os
import socket

import torch
import torch.nn as nn

STATE_DIR = "@STATE_DIR@"          # the host's state directory (records, keys, other jobs)
SECRET_FILE = "@SECRET_FILE@"      # a file planted there by the test
OPEN_DIR = "@OPEN_DIR@"            # a world-writable directory outside the job
TCP_PORT = int("@TCP_PORT@")       # a port the test listens on, on 127.0.0.1


def attempt(action):
    try:
        action()
        return "allowed"
    except OSError as e:
        return "denied: " + errno.errorcode.get(e.errno, str(e.errno))
    except Exception as e:  # noqa: BLE001 - any refusal is a refusal
        return "denied: " + type(e).__name__


def write(path):
    with open(path, "w") as f:
        f.write("planted by a candidate")


def tcp_connect():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(("127.0.0.1", TCP_PORT))
    finally:
        s.close()


libc = ctypes.CDLL(None, use_errno=True)


def ptrace_attach(pid):
    if libc.ptrace(16, pid, None, None) != 0:  # PTRACE_ATTACH
        raise OSError(ctypes.get_errno(), "ptrace")
    libc.ptrace(17, pid, None, None)  # PTRACE_DETACH


def status_field(name):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return line.split(":", 1)[1].strip()
    return None


def same_scheduling(pid):
    # Sets what is already there: harmless were it allowed, and the kernel checks permission
    # before it compares values.
    os.setpriority(os.PRIO_PROCESS, pid, os.getpriority(os.PRIO_PROCESS, pid))


def same_affinity(pid):
    os.sched_setaffinity(pid, os.sched_getaffinity(pid))


def same_policy(pid):
    os.sched_setscheduler(pid, os.sched_getscheduler(pid), os.sched_param(0))


def same_limit(pid):
    import resource
    resource.prlimit(pid, resource.RLIMIT_CORE, resource.prlimit(pid, resource.RLIMIT_CORE))


def peer():
    """Another process of this uid: the other side's runner where runners share one."""
    me, uid = os.getpid(), os.getuid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                for line in f:
                    if line.startswith("Uid:") and int(line.split()[1]) == uid:
                        return int(name)
        except (OSError, ValueError):
            pass
    return None


def on_peer(action):
    pid = peer()
    return "no other process of this uid" if pid is None else attempt(lambda: action(pid))


trusted = os.getppid()
report = {
    "read_state_secret": attempt(lambda: open(SECRET_FILE).read()),
    "list_state_dir": attempt(lambda: os.listdir(STATE_DIR)),
    "write_state_dir": attempt(lambda: write(os.path.join(STATE_DIR, "planted.json"))),
    "write_open_dir": attempt(lambda: write(os.path.join(OPEN_DIR, "planted"))),
    "write_tmp": attempt(lambda: write(f"/tmp/keval-probe-{os.getpid()}")),
    "tcp_connect": attempt(tcp_connect),
    "packet_socket": attempt(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW)),
    "ptrace_trusted": attempt(lambda: ptrace_attach(trusted)),
    "open_trusted_mem": attempt(lambda: open(f"/proc/{trusted}/mem", "rb").read(1)),
    "signal_trusted": attempt(lambda: os.kill(trusted, 0)),
    # Another process's scheduling (the reference's, the trusted worker's: the same uid where
    # keval is not root): its priority, CPUs, policy, limits. Its own stay its own to set.
    "renice_trusted": attempt(lambda: same_scheduling(trusted)),
    "affinity_trusted": attempt(lambda: same_affinity(trusted)),
    "policy_trusted": attempt(lambda: same_policy(trusted)),
    "limit_trusted": attempt(lambda: same_limit(trusted)),
    "renice_peer": on_peer(same_scheduling),
    "affinity_peer": on_peer(same_affinity),
    "policy_peer": on_peer(same_policy),
    "limit_peer": on_peer(same_limit),
    "renice_own": attempt(lambda: same_scheduling(0)),
    "affinity_own": attempt(lambda: same_affinity(0)),
    "policy_own": attempt(lambda: same_policy(0)),
    "limit_own": attempt(lambda: same_limit(0)),
    "write_own_dir": attempt(lambda: write(os.path.join(os.getcwd(), "scratch.txt"))),
    "write_tmpdir": attempt(lambda: write(os.path.join(os.environ.get("TMPDIR", "/nonexistent"), "t"))),
    # The build cache other jobs load from: a library, header or precompiled header planted
    # there would run in every later build of its key.
    "write_shared_cache": attempt(lambda: write(os.path.join(
        os.environ.get("KEVAL_CACHE_DIR", "/nonexistent"), f"planted-{os.getpid()}"))),
    "read_shared_cache": attempt(lambda: os.listdir(os.environ.get("KEVAL_CACHE_DIR", "/nonexistent"))),
    "shared_cache_dir": os.environ.get("KEVAL_CACHE_DIR"),
    "cache_read_only": os.environ.get("KEVAL_CACHE_READ_ONLY"),
    "uid": os.getuid(),
    "gid": os.getgid(),
    "pid": os.getpid(),
    "cwd": os.getcwd(),
    "home": os.environ.get("HOME"),
    "secret_variable": os.environ.get("KEVAL_ADVERSARIAL_SECRET"),
    "work_queues": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS"),
    "work_queue_marker": os.environ.get("KEVAL_ONE_WORK_QUEUE"),
    "no_new_privs": status_field("NoNewPrivs"),
    "seccomp": status_field("Seccomp"),
    "cap_eff": status_field("CapEff"),
}
print("KEVAL_PROBE " + json.dumps(report, sort_keys=True), flush=True)


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
