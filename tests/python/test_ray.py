"""keval.ray: the cluster-wide evaluator, on a Ray cluster of 3 simulated nodes on this machine.

Unit tests of the routing function need no cluster. The cluster tests start
``ray.cluster_utils.Cluster`` (a head and two worker nodes, one CPU each, no dashboard, a small
object store), one ``keval serve`` per node (each in its own state directory: the simulated nodes
share a filesystem) with the ``fault`` test plugin (a CPU kernel type), and check: every request
answered once with its verdict, routing by GPU type, a 400 with its field path, an attempt past
its timeout, a daemon that crashes (its node failed over and restarted), and a node removed while
its jobs run: those jobs retried once on another node, nothing lost or duplicated, and the daemon
of the removed node gone. Skipped when ``ray`` is not importable or KEVAL_BIN is not set.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter

import pytest

try:
    import ray
    from ray.cluster_utils import Cluster
except ImportError as e:  # pragma: no cover - depends on the environment
    pytest.skip(f"ray is not importable ({e}): pip install -r python/requirements-test.txt",
                allow_module_level=True)

from keval.ray import Evaluator, NodeState, format_node_path, pick_node, request_needs
from keval.ray.routing import resolve_mode

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OBJECT_STORE = 78643200  # 75 MiB, Ray's minimum
HANG_S = 8.0  # a hanging job's own timeout: the window in which its node is removed


# -- requests ------------------------------------------------------------------------------------
def fault_request(fault=None, *, scale=None, timeout=30.0, n=256, **extra):
    """An /evaluate request for the fault test plugin (tests/support/fault_plugin): out = in *
    scale on n floats; ``fault`` makes it misbehave (compile_error, hang_in_launch, ...)."""
    metadata = {}
    if fault:
        metadata["fault"] = fault
    if scale is not None:
        metadata["scale"] = scale
    request = {"kernel": {"source_code": "// fault injection", "kernel_type": "fault",
                          "metadata": metadata,
                          "io": {"args": [
                              {"name": "x", "type": "tensor", "role": "input",
                               "tensor_spec": {"shape": [n], "dtype": "float32",
                                               "init": {"kind": "randn", "seed": 7}}},
                              {"name": "y", "type": "tensor", "role": "output",
                               "tensor_spec": {"shape": [n], "dtype": "float32"}}]}},
               "num_trials": 1, "timeout": timeout}
    request.update(extra)
    return request


# -- routing, no cluster -------------------------------------------------------------------------
def _node(i, in_flight=0, capacity=1, max_in_flight=2, gpus=None, kernels=("fault",),
          state="ready", cpu=True):
    return NodeState(node_id=f"{i:02d}" + "0" * 54, state=state, gpu_types=dict(gpus or {}),
                     kernel_types=tuple(kernels), cpu_device=cpu, capacity=capacity,
                     max_in_flight=max_in_flight, in_flight=in_flight, order=i)


def test_pick_node_least_loaded_first():
    nodes = [_node(1, in_flight=2, capacity=4, max_in_flight=8),   # load 0.5
             _node(2, in_flight=1, capacity=1, max_in_flight=2),   # load 1.0
             _node(3, in_flight=1, capacity=8, max_in_flight=16)]  # load 0.125
    assert pick_node(nodes, ("fault",)).node is nodes[2]
    nodes[2].in_flight = 8                                         # load 1.0
    assert pick_node(nodes, ("fault",)).node is nodes[0]
    # Equal load: fewer in flight, then more capacity, then the order nodes joined.
    a, b = _node(1, in_flight=2, capacity=2, max_in_flight=4), _node(2, in_flight=1, capacity=1)
    assert pick_node([a, b], ()).node is b
    a, b = _node(1, capacity=1), _node(2, capacity=4, max_in_flight=8)
    assert pick_node([a, b], ()).node is b
    a, b = _node(1), _node(2)
    assert pick_node([a, b], ()).node is a


def test_pick_node_bounds_in_flight_and_waits():
    nodes = [_node(1, in_flight=2), _node(2, in_flight=2)]  # both at max_in_flight
    route = pick_node(nodes, ("fault",))
    assert route.wait and route.node is None and route.reason is None
    nodes[1].in_flight = 1
    assert pick_node(nodes, ("fault",)).node is nodes[1]
    # Nothing ready yet but a node starting: wait for it rather than fail.
    assert pick_node([_node(1, state="starting")], ("fault",)).wait


def test_pick_node_by_gpu_type_and_kernel_type():
    h100 = _node(1, in_flight=1, capacity=8, max_in_flight=16, gpus={"H100": 8},
                 kernels=("cuda", "triton"))
    a100 = _node(2, capacity=4, max_in_flight=8, gpus={"A100": 4}, kernels=("cuda",))
    cpu = _node(3, kernels=("fault",))
    nodes = [h100, a100, cpu]
    assert pick_node(nodes, ("cuda",), "H100").node is h100
    assert pick_node(nodes, ("cuda",), "A100").node is a100
    assert pick_node(nodes, ("cuda",)).node is a100            # least loaded of the two
    assert pick_node(nodes, ("triton",)).node is h100          # only one serves triton
    assert pick_node(nodes, ("fault",)).node is cpu
    assert pick_node(nodes, ("fault",), "H100").reason  # a GPU type is a GPU's
    route = pick_node(nodes, ("cuda",), "B200")
    assert route.node is None and "B200" in route.reason and "A100, H100" in route.reason
    route = pick_node(nodes, ("triton",), "A100")
    assert route.node is None and "together" in route.reason, route.reason
    route = pick_node(nodes, ("nope",))
    assert route.node is None and "'nope'" in route.reason
    # No ready node at all: wait (nodes may join; the driver bounds the wait).
    assert pick_node([_node(1, state="dead"), _node(2, state="failed")], ("fault",)).wait
    assert pick_node([], ("fault",)).wait
    # A failed node that served the type comes back after its backoff: wait for it; one that
    # did not is no reason to wait.
    assert pick_node([cpu, _node(4, state="failed", gpus={"B200": 8}, kernels=("cuda",))],
                     ("cuda",), "B200").wait
    assert pick_node([cpu, _node(4, state="failed", kernels=("cuda",))], ("cuda",), "B200").reason


def test_pick_node_retry_avoids_the_first_node():
    a, b = _node(1), _node(2, in_flight=1)
    assert pick_node([a, b], (), avoid=a.node_id).node is b
    b.in_flight = 2  # the other is full: wait for it rather than go back to the first
    assert pick_node([a, b], (), avoid=a.node_id).wait
    # The first node is the only one that serves it: it may take the retry.
    assert pick_node([a], (), avoid=a.node_id).node is a


def test_request_needs_and_mode():
    req = fault_request()
    assert resolve_mode(req) == "evaluate"
    cmp = {"ref_kernel": {"kernel_type": "torch"}, "custom_kernel": {"kernel_type": "triton"}}
    assert resolve_mode(cmp) == "compare"
    assert request_needs(cmp, "compare") == (("torch", "triton"), None)
    assert request_needs(req, "evaluate", "H100") == (("fault",), "H100")
    assert request_needs({**req, "gpu_type": "A100"}, "evaluate", "H100") == (("fault",), "A100")
    with pytest.raises(ValueError):
        resolve_mode(req, "bogus")
    node_id = "ab" * 28
    assert format_node_path("/tmp/kr/{node}", node_id) == "/tmp/kr/" + "ab" * 6
    assert format_node_path("/s/{node_id}.sock", node_id) == f"/s/{node_id}.sock"
    assert format_node_path(None, node_id) is None
    assert (format_node_path("http://{node_ip}:8470", node_id, "10.0.0.7")
            == "http://10.0.0.7:8470")


# -- the cluster ---------------------------------------------------------------------------------
def _keval_serve_pids(marker):
    """pids of ``keval serve`` processes whose command line contains ``marker``."""
    out = subprocess.run(["pgrep", "-f", f"keval serve --state-dir {marker}"],
                         capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _wait_gone(marker, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _keval_serve_pids(marker):
            return True
        time.sleep(0.2)
    return not _keval_serve_pids(marker)


@pytest.fixture(scope="module")
def cluster_env():
    keval_bin = os.environ.get("KEVAL_BIN")
    if not keval_bin:
        pytest.skip("KEVAL_BIN is not set (CTest sets it to the keval binary it built)")
    keval_bin = os.path.abspath(keval_bin)
    plugins = os.path.join(os.path.dirname(os.path.dirname(keval_bin)), "lib", "keval",
                           "test-plugins")
    if not os.path.isdir(plugins):
        pytest.skip(f"no test plugins at {plugins} (the build makes them)")
    # The nodes' worker processes import keval.ray.node: they inherit this environment.
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(REPO, "python")] + ([saved] if saved else []))
    base = tempfile.mkdtemp(prefix="kr-", dir="/tmp")
    cluster = None
    ev = None
    try:
        cluster = Cluster(initialize_head=True, connect=True, head_node_args={
            "num_cpus": 1, "include_dashboard": False, "object_store_memory": OBJECT_STORE})
        for _ in range(2):
            cluster.add_node(num_cpus=1, object_store_memory=OBJECT_STORE)
        cluster.wait_for_nodes(timeout=60)
        ev = Evaluator(
            keval_bin=keval_bin, state_dir=os.path.join(base, "{node}"),
            # One worker per daemon: a second job on a node waits in its daemon's queue.
            serve_args=["--max-workers", "1", "--warm-workers", "0", "--shutdown-grace", "1"],
            daemon_env={"KEVAL_PLUGIN_PATH": plugins}, start_timeout=60.0,
            refresh_interval=5.0, node_wait_timeout=30.0)
        yield {"cluster": cluster, "ev": ev, "base": base, "plugins": plugins}
    finally:
        try:
            if ev is not None:
                ev.close(timeout=20.0)
        finally:
            ray.shutdown()
            if cluster is not None:
                cluster.shutdown()
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved
            gone = _wait_gone(base, 20.0)
            for pid in _keval_serve_pids(base):  # ours, by pid; the test fails below
                os.kill(pid, signal.SIGKILL)
            shutil.rmtree(base, ignore_errors=True)
            assert gone, "a keval serve of the test cluster outlived it"


def test_one_actor_per_node_reports_daemon(cluster_env):
    ev = cluster_env["ev"]
    nodes = ev.nodes()
    assert len(nodes) == 3 and all(n["state"] == "ready" for n in nodes), nodes
    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert {n["node_id"] for n in nodes} == alive
    for n in nodes:
        assert "fault" in n["kernel_types"] and n["gpu_types"] == {}
        assert n["capacity"] == 1 and n["max_in_flight"] == 2 and n["in_flight"] == 0
    reports = ev.node_reports()
    assert len(reports) == 3 and all(r["ok"] for r in reports), reports
    state_dirs = {r["daemon"]["state_dir"] for r in reports}
    assert len(state_dirs) == 3  # one daemon per node, each in its own directory
    assert all(r["daemon"]["started"] and r["cpu_device"] for r in reports)
    assert {r["node_id"] for r in reports} == alive


def _verdict_ok(r, kind):
    if kind == "compile_error":
        return r.kind == "result" and r.result.status == "success" and not r.result.compiled
    if kind == "hang":
        return (r.kind == "result" and r.result.status == "failed"
                and "timeout" in r.error.message)
    return r.ok


def test_many_requests_answered_once_with_verdicts(cluster_env):
    ev = cluster_env["ev"]
    kinds = ["plain", "compile_error", "scale", "plain"] * 6  # 24 requests
    requests = [fault_request("compile_error") if k == "compile_error" else
                fault_request(scale=3.0) if k == "scale" else fault_request() for k in kinds]
    t0 = time.monotonic()
    results = list(ev.evaluate_many(requests, timeout=120))
    took = time.monotonic() - t0
    counts = Counter(r.index for r in results)
    assert sorted(counts) == list(range(len(requests))) and set(counts.values()) == {1}
    for r in results:
        assert _verdict_ok(r, kinds[r.index]), (kinds[r.index], r.to_dict())
        assert r.retried is None and r.attempts == 1
        if kinds[r.index] != "compile_error":  # a job that never got a device names none
            assert r.result.gpu_type == "cpu", r.to_dict()
    used = Counter(r.node_id for r in results)
    assert len(used) == 3, used  # spread over every node
    print(f"24 requests in {took:.1f} s, per node {sorted(used.values())}")
    assert all(n["in_flight"] == 0 for n in ev.nodes())
    # evaluate_all: the same in the requests' order; evaluate: one.
    ordered = ev.evaluate_all(requests[:4])
    assert [r.index for r in ordered] == [0, 1, 2, 3]
    assert ev.evaluate(fault_request()).ok


def test_gpu_type_no_node_has_is_an_error_result(cluster_env):
    ev = cluster_env["ev"]
    r = ev.evaluate(fault_request(), gpu_type="H100")
    assert r.kind == "unroutable" and not r.ok and r.node_id is None and r.attempts == 0
    assert r.error.error_class == "unroutable"
    assert "H100" in r.error.message and "none" in r.error.message, r.error.message
    # A request's own gpu_type among others: only it is refused.
    requests = [fault_request(), fault_request(gpu_type="A100"), fault_request(),
                fault_request()]
    requests[3]["kernel"]["kernel_type"] = "no_such_type"
    by_index = {r.index: r for r in ev.evaluate_many(requests, timeout=60)}
    assert by_index[0].ok and by_index[2].ok
    assert by_index[1].kind == "unroutable" and "A100" in by_index[1].error.message
    assert by_index[3].kind == "unroutable" and "no_such_type" in by_index[3].error.message


def test_bad_request_comes_back_with_its_path(cluster_env):
    ev = cluster_env["ev"]
    bad = fault_request()
    del bad["kernel"]["source_code"]
    r = ev.evaluate(bad)
    assert r.kind == "bad_request" and r.result.http_status == 400, r.to_dict()
    assert r.error.path == "kernel.source_code" and r.error.error_class
    assert r.retried is None and r.attempts == 1 and r.node_id


def _wait_daemons_idle(ev, seconds=30.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        reports = ev.node_reports()
        if all(r.get("ok") and not r["jobs"].get("active") and not r["jobs"].get("queued")
               and not r["in_flight"] for r in reports):
            return
        time.sleep(0.2)
    raise AssertionError(f"daemons still busy after {seconds:g} s: {ev.node_reports()}")


def test_attempt_timeout_retries_once_then_reports_infrastructure(cluster_env):
    """An attempt past attempt_timeout is given up and run once more on another node; the
    second one given up too, the request gets one infrastructure result, and the answers that
    come late from the daemons are dropped."""
    ev = cluster_env["ev"]
    ev.attempt_timeout = 1.0
    try:
        results = list(ev.evaluate_many([fault_request("hang_in_launch", timeout=3.0),
                                         fault_request()], timeout=60))
    finally:
        ev.attempt_timeout = None
    assert sorted(r.index for r in results) == [0, 1]
    hung, fine = sorted(results, key=lambda r: r.index)
    assert fine.ok and fine.retried is None
    assert hung.kind == "infrastructure" and hung.attempts == 2 and hung.node_id is None
    assert hung.error.error_class == "infrastructure"
    assert "every attempt failed (2)" in hung.error.message, hung.error.message
    assert "attempt_timeout" in hung.retried["after"] and hung.retried["first_node"]
    assert all(n["in_flight"] == 0 for n in ev.nodes())
    _wait_daemons_idle(ev)  # the abandoned jobs run out their own timeout on the daemons


def test_daemon_crash_fails_node_over_and_restarts_it(cluster_env):
    """The daemon of one node dies while its actor lives: the jobs sent there come back
    ``unavailable``, are retried on the other nodes, and the node, failed, gets a new actor (and
    daemon) after its backoff."""
    ev, cluster, base = cluster_env["ev"], cluster_env["cluster"], cluster_env["base"]
    head = cluster.head_node.node_id
    marker = os.path.join(base, head[:12])
    pids = _keval_serve_pids(marker)
    assert len(pids) == 1, pids
    ev.node_backoff = 0.5  # a failed node gets its new actor this soon
    try:
        os.kill(pids[0], signal.SIGKILL)  # the daemon this test's actor started, by its pid
        assert _wait_gone(marker, 10.0)
        results = list(ev.evaluate_many([fault_request() for _ in range(6)], timeout=60))
        _check_failed_over(ev, results, head)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            states = {n["node_id"]: n["state"] for n in ev.refresh(wait=True, timeout=60)}
            if states[head] == "ready":
                break
            time.sleep(0.2)
    finally:
        ev.node_backoff = 30.0
    assert states[head] == "ready", ev.nodes()
    assert len(_keval_serve_pids(marker)) == 1  # a new daemon, started by the new actor
    more = list(ev.evaluate_many([fault_request() for _ in range(3)], timeout=60))
    assert all(r.ok for r in more) and head in {r.node_id for r in more}


def _check_failed_over(ev, results, head):
    assert sorted(r.index for r in results) == list(range(6))
    assert all(r.ok for r in results), [r.to_dict() for r in results]
    retried = [r for r in results if r.retried]
    assert len(retried) == 2, [r.to_dict() for r in results]  # the two sent to the head node
    for r in retried:
        assert r.retried["first_node"] == head and "unavailable" in r.retried["after"]
        assert r.node_id != head and r.attempts == 2
    assert {n["node_id"]: n["state"] for n in ev.nodes()}[head] in ("failed", "starting",
                                                                    "ready")


def test_node_killed_mid_run_every_request_answered_once(cluster_env):
    """A worker node is removed while it runs a hanging job and holds a queued one: both are
    retried once on the other nodes (the hanging one times out again there: keval's verdict on
    it, not retried further; the other gets its verdict); every request gets exactly one result;
    then a new node joins and takes jobs."""
    ev, cluster, base = cluster_env["ev"], cluster_env["cluster"], cluster_env["base"]
    victim = sorted(cluster.worker_nodes, key=lambda n: n.node_id)[0]
    target = victim.node_id
    assert target in ev.in_flight()
    # The first three hang (one per node: least loaded first), the next three queue behind
    # them (one per node, max-workers 1), the rest follow as slots free.
    kinds = ["hang"] * 3 + ["plain"] * 3 + ["plain", "compile_error", "scale"] * 6  # 24
    requests = [fault_request("hang_in_launch", timeout=HANG_S) if k == "hang" else
                fault_request("compile_error") if k == "compile_error" else
                fault_request(scale=3.0) if k == "scale" else fault_request() for k in kinds]
    killed = {}

    def target_busy():
        # Two jobs in flight there, and its daemon running one (a hang: the first wave's jobs
        # may reach the daemon in either order, and a plain one that came first is done by now)
        # with the other queued behind it: both are then stuck there until the node goes.
        if ev.in_flight().get(target, 0) < 2:
            return False
        report = {r.get("node_id"): r for r in ev.node_reports(timeout=10)}.get(target) or {}
        jobs = report.get("jobs") or {}
        return jobs.get("active", 0) >= 1 and jobs.get("queued", 0) >= 1

    def kill_when_busy():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if target_busy():
                t = time.monotonic()
                cluster.remove_node(victim)
                killed["at"] = t
                killed["remove_s"] = time.monotonic() - t
                return
            time.sleep(0.05)
        killed["error"] = "the target node never had 2 jobs in flight"

    killer = threading.Thread(target=kill_when_busy, daemon=True)
    killer.start()
    t0 = time.monotonic()
    results = list(ev.evaluate_many(requests, timeout=150))
    took = time.monotonic() - t0
    killer.join(30)
    assert "error" not in killed and "at" in killed, killed

    counts = Counter(r.index for r in results)
    assert sorted(counts) == list(range(len(requests))), "a request got no result"
    assert set(counts.values()) == {1}, f"duplicated: {[i for i, c in counts.items() if c > 1]}"
    retried = [r for r in results if r.retried]
    for r in results:
        assert _verdict_ok(r, kinds[r.index]), (kinds[r.index], r.to_dict())
        # Only a job that was done before the node went may come from it.
        assert r.node_id != target or (r.retried is None and kinds[r.index] != "hang"), \
            r.to_dict()
    # Exactly the removed node's two jobs: its hanging one and the one queued behind it.
    retried_kinds = sorted(kinds[r.index] for r in retried)
    assert len(retried) == 2 and retried_kinds[0] == "hang" and retried_kinds[1] != "hang", \
        [r.to_dict() for r in retried]
    for r in retried:
        assert r.node_id != target
        assert r.retried["first_node"] == target and r.attempts == 2
        after = r.retried["after"]  # ActorDiedError ("... its node has died"), or Ray's node table
        assert any(w in after for w in ("died", "dead", "Unavailable")), r.retried
        assert r.kind == "result"
    assert all(n["in_flight"] == 0 for n in ev.nodes())
    states = {n["node_id"]: n["state"] for n in ev.nodes()}
    assert states[target] == "dead" and sum(s == "ready" for s in states.values()) == 2
    print(f"node removed {killed['at'] - t0:.2f} s into the run (remove_node took "
          f"{killed['remove_s']:.2f} s); {len(results)} results in {took:.1f} s; "
          f"{len(retried)} retried: " +
          ", ".join(f"#{r.index} {kinds[r.index]} after {r.retried['after']!r}" for r in retried))
    # The removed node's daemon went with its actor (PDEATHSIG, --shutdown-grace 1).
    assert _wait_gone(os.path.join(base, target[:12]), 20.0), "the removed node's daemon lives on"

    # A node that joins is picked up on refresh, and takes work.
    cluster.add_node(num_cpus=1, object_store_memory=OBJECT_STORE)
    cluster.wait_for_nodes(timeout=60)
    ready = [n for n in ev.refresh(wait=True, timeout=90) if n["state"] == "ready"]
    assert len(ready) == 3, ev.nodes()
    new = {n["node_id"] for n in ready} - set(states)
    assert len(new) == 1
    more = list(ev.evaluate_many([fault_request() for _ in range(6)], timeout=60))
    assert all(r.ok for r in more) and sorted(r.index for r in more) == list(range(6))
    assert new & {r.node_id for r in more}, "the new node got no job"
