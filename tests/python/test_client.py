"""keval.Client and keval.AsyncClient against a real daemon (CPU kernel type torch), and the
error mapping against the fake one.

The real daemon (conftest ``keval_daemon``) is shared by the session; each real job is a tiny
function-style torch job, so the whole file runs a handful of them.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from client_support import (AXPY_WRONG, SLEEPER, compare_request, evaluate_request)
from keval import (AsyncClient, Client, DaemonUnavailable, EvalResult, Flag, Health, Job,
                   KevalError, KevalHTTPError, RuntimeStats)
from keval.client import JobTimeout

RUNNING = ("compiling", "validating", "profiling")


@pytest.fixture
def client(keval_daemon):
    with Client(socket_path=keval_daemon.socket_path) as c:
        yield c


def bad_shape_request():
    request = evaluate_request()
    request["kernel"]["io"]["args"][0]["tensor_spec"]["shape"] = [4, 0]
    return request


def wait_for(predicate, client, job_id, attempts=600):
    """Polls job() until predicate(job) holds (bounded: the job's own timeout ends it anyway)."""
    for _ in range(attempts):
        job = client.job(job_id)
        if predicate(job):
            return job
        # GET /jobs is answered at once; the bound is the number of polls, not a clock.
        try:
            client.wait(job_id, timeout=0.05, poll_interval=0.05)
        except JobTimeout:
            pass
    raise AssertionError(f"job {job_id} never reached the expected state: {job.raw}")


# -- the daemon ----------------------------------------------------------------------------------

def test_health_stats_plugins(client):
    health = client.health()
    assert isinstance(health, Health) and health.ok and health.http_status == 200
    assert "torch" in health.plugins and health.cpu_device
    assert "queue_capacity" in health.jobs
    if health.gpus:
        assert isinstance(health.driver.get("held"), bool), health.driver
    else:  # the CUDA driver is held only where there is a GPU
        assert health.driver == {"held": False, "reason": "no GPU"}, health.driver
    stats = client.stats()
    assert isinstance(stats, dict) and "connections" in stats
    plugins = client.plugins()
    assert "search_path" in plugins and "plugins" in plugins
    assert "keval_" in client.metrics()


def test_unknown_job_is_404(client):
    with pytest.raises(KevalHTTPError) as e:
        client.job("no-such-job")
    assert e.value.status == 404 and e.value.error_class == "not_found"
    assert "no-such-job" in e.value.message and e.value.path is None
    with pytest.raises(KevalHTTPError) as e:
        client.cancel("no-such-job")
    assert e.value.status == 404


def test_bad_request_carries_the_field_path(client):
    with pytest.raises(KevalHTTPError) as e:
        client.evaluate(bad_shape_request())
    err = e.value
    assert isinstance(err, KevalError)
    assert err.status == 400 and err.error_class == "bad_request"
    assert err.path == "kernel.io.args[0].tensor_spec.shape[1]"
    assert "must be > 0" in err.message and err.path in str(err)
    assert err.body["status"] == "failed"
    # submit() parses as synchronously: the 400 comes before any job exists.
    with pytest.raises(KevalHTTPError) as e:
        client.submit(bad_shape_request())
    assert e.value.path == "kernel.io.args[0].tensor_spec.shape[1]"
    with pytest.raises(ValueError, match="mode"):
        client.submit(evaluate_request(), mode="profile")


# -- jobs ----------------------------------------------------------------------------------------

def test_compare_success_is_typed(client):
    r = client.compare(compare_request())
    assert isinstance(r, EvalResult)
    assert r.ok and r.status == "success" and r.http_status == 200 and r.gpu_type == "cpu"
    assert r.compiled is True and r.correctness is True and r.error is None
    assert r.compilation_error is None and r.validation_error is None
    assert isinstance(r.job_id, str) and r.job_id == r.raw["job_id"]
    assert isinstance(r.runtime_stats, RuntimeStats) and isinstance(r.ref_runtime, RuntimeStats)
    assert r.runtime_stats.count == 3 and r.ref_runtime.count == 3
    assert r.runtime == pytest.approx(r.runtime_stats.mean)
    assert r.runtime_stats.method == "cpu_wall_clock"
    assert r.speedup is not None and r.speedup > 0
    # keval's own wall times bound the speedup from below: never above it.
    assert r.speedup_floor is not None and 0 < r.speedup_floor <= r.speedup
    assert isinstance(r.flags, list) and all(isinstance(f, Flag) for f in r.flags)
    assert r.metadata["compile"]["custom"]["info"]["function_name"] == "axpy2"
    assert isinstance(r.seed, int)


def test_device_metrics_say_why_on_the_cpu_and_are_absent_unasked(client):
    request = compare_request()
    assert client.compare(request).device_metrics is None
    request["device_metrics"] = ["memory"]
    r = client.compare(request)
    assert r.ok, "metrics never change the verdict"
    for side in (r.device_metrics, r.ref_device_metrics):
        assert side is not None and side["available"] is False
        assert "CUDA device" in side["reason"]


def test_wrong_kernel_is_a_result(client):
    r = client.compare(compare_request(custom=AXPY_WRONG, custom_name="axpy_wrong"))
    assert r.http_status == 200 and r.status == "success"
    assert r.compiled and not r.correctness and not r.ok
    assert r.validation_error and "elements differ" in r.validation_error


def test_submit_wait_and_the_job_view(client):
    job_id = client.submit(evaluate_request())
    assert isinstance(job_id, str) and job_id
    job = client.wait(job_id, timeout=300)
    assert isinstance(job, Job) and job.done and job.job_id == job_id
    assert job.status == "completed" and job.http_status == 200
    assert isinstance(job.result, EvalResult) and job.result.ok
    assert job.result.job_id == job_id and job.result.gpu_type == "cpu"
    assert job.result.runtime_stats is not None and job.result.runtime_stats.count == 3
    # A finished job cannot be cancelled; its result stays.
    with pytest.raises(KevalHTTPError) as e:
        client.cancel(job_id)
    assert e.value.status == 409 and e.value.error_class == "conflict"
    assert client.job(job_id).result.ok


def test_cancel_a_queued_then_a_running_job(client):
    job_id = client.submit(evaluate_request(SLEEPER, "sleeper", timeout=300))
    # Cancelled the moment it is accepted: still queued, or just starting; cancelled either way.
    early_id = client.submit(evaluate_request(SLEEPER, "sleeper", timeout=300))
    early = client.cancel(early_id)
    assert early.job_id == early_id and early.status == "failed"
    assert "cancelled by the client" in early.error.message
    wait_for(lambda j: j.status in RUNNING or j.done, client, job_id)
    with pytest.raises(JobTimeout) as e:
        client.wait(job_id, timeout=0.01)
    assert e.value.job.job_id == job_id and not e.value.job.done
    cancelled = client.cancel(job_id)
    assert cancelled.status == "failed" and cancelled.done and cancelled.http_status == 500
    assert cancelled.result is not None and cancelled.result.status == "failed"
    assert "cancelled by the client" in cancelled.error.message
    again = client.job(job_id)
    assert again.status == "failed" and "cancelled by the client" in again.error.message


def test_infrastructure_failure_is_a_result(client):
    # The job's timeout ends it (HTTP 500): keval's failure, returned with its body.
    r = client.evaluate(evaluate_request(SLEEPER, "sleeper", timeout=3))
    assert r.http_status == 500 and r.status == "failed" and r.failed_infrastructure
    assert not r.ok and r.error is not None and r.error.error_class
    assert r.error.message and r.job_id


# -- transports ----------------------------------------------------------------------------------

def test_tcp_needs_the_token(keval_daemon):
    url, token_file = keval_daemon.tcp_url, keval_daemon.token_file
    assert url and url.startswith("http://127.0.0.1:")
    with Client(url=url, token_file=token_file) as c:
        assert c.health().ok
        with pytest.raises(KevalHTTPError) as e:
            c.evaluate(bad_shape_request())
        assert e.value.status == 400 and e.value.path == "kernel.io.args[0].tensor_spec.shape[1]"
    with open(token_file) as f:
        assert Client(url=url, token=f.read().strip()).stats()["connections"]
    for anonymous in (Client(url=url), Client(url=url, token="not-the-token-" * 3)):
        with pytest.raises(KevalHTTPError) as e:
            anonymous.health()
        assert e.value.status == 401 and e.value.error_class == "unauthorized"
        assert e.value.headers.get("www-authenticate", "").startswith("Bearer")


def test_no_daemon_is_daemon_unavailable(short_tmp):
    c = Client(socket_path=os.path.join(short_tmp, "absent.sock"), timeout=5)
    with pytest.raises(DaemonUnavailable, match="absent.sock"):
        c.health()
    with pytest.raises(ValueError):
        Client(socket_path="/x.sock", url="http://127.0.0.1:1")
    with pytest.raises(ValueError):
        Client(token="t")


def test_local_attaches_to_a_running_daemon(keval_daemon):
    with Client.local(socket_path=keval_daemon.socket_path) as c:
        assert c.daemon is None and c.address == keval_daemon.socket_path
        assert c.health().ok
    assert keval_daemon.running  # closing an attached client leaves the daemon alone


def test_default_socket_follows_keval_socket(keval_daemon, monkeypatch):
    monkeypatch.setenv("KEVAL_SOCKET", keval_daemon.socket_path)
    assert Client().address == keval_daemon.socket_path
    with Client.local() as c:
        assert c.daemon is None and c.address == keval_daemon.socket_path
    monkeypatch.delenv("KEVAL_SOCKET")
    monkeypatch.setenv("KEVAL_STATE_DIR", "/srv/kv")
    assert Client().address == "/srv/kv/daemon/keval.sock"


def test_local_starts_a_daemon_when_none_runs(short_tmp):
    keval_bin = os.environ.get("KEVAL_BIN")
    if not keval_bin:
        pytest.skip("KEVAL_BIN is not set")
    socket_path = os.path.join(short_tmp, "started.sock")
    c = Client.local(keval_bin=keval_bin, socket_path=socket_path)
    try:
        assert c.daemon is not None and c.daemon.running
        assert c.address == socket_path and c.health().ok
        # Another local() finds it and attaches.
        with Client.local(socket_path=socket_path) as attached:
            assert attached.daemon is None and attached.health().ok
    finally:
        daemon = c.daemon
        c.close()
    assert daemon is not None and not daemon.running and c.daemon is None


def test_local_reports_a_daemon_that_cannot_start(short_tmp):
    with pytest.raises(DaemonUnavailable, match="not an executable file"):
        Client.local(keval_bin=os.path.join(short_tmp, "no-keval"),
                     socket_path=os.path.join(short_tmp, "s.sock"))


# -- asyncio -------------------------------------------------------------------------------------

def test_async_client(keval_daemon):
    async def main():
        async with AsyncClient(socket_path=keval_daemon.socket_path) as ac:
            health, plugins = await asyncio.gather(ac.health(), ac.plugins())
            assert health.ok and "plugins" in plugins
            job_id = await ac.submit(compare_request(), mode="compare")
            job = await ac.wait(job_id, timeout=300, poll_interval=0.05)
            assert job.status == "completed" and job.result.ok and job.result.speedup
            try:
                await ac.job("no-such-job")
            except KevalHTTPError as e:
                assert e.status == 404
            else:
                raise AssertionError("no 404")
            try:
                await ac.compare(bad_shape_request())
            except KevalHTTPError as e:
                assert e.status == 400 and e.path
            else:
                raise AssertionError("no 400")
            return job_id

    job_id = asyncio.run(main())
    assert Client(socket_path=keval_daemon.socket_path).job(job_id).status == "completed"


# -- error mapping (the fake daemon) ----------------------------------------------------------

def test_busy_daemon_carries_retry_after(fake_daemon):
    fake_daemon.answer = lambda request, attempt: (
        503, {"status": "failed", "error": {"class": "unavailable", "message": "queue full"}},
        {"Retry-After": "7"})
    with pytest.raises(KevalHTTPError) as e:
        Client(socket_path=fake_daemon.socket_path).evaluate(evaluate_request())
    assert e.value.status == 503 and e.value.retry_after == 7.0
    assert e.value.error_class == "unavailable" and "queue full" in str(e.value)


def test_async_flag_in_the_request_does_not_decide(fake_daemon):
    fake_daemon.answer = lambda request, attempt: (
        200, {"job_id": "j1", "status": "success", "seen_async": request.get("async", "absent"),
              "kernel_exec_result": {"compiled": True, "correctness": False, "runtime": -1,
                                     "metadata": {"flags": [{"name": "precision",
                                                             "reason": "r", "strict": True}]}}},
        {"X-GPU-Type": "H100"})
    r = Client(socket_path=fake_daemon.socket_path).evaluate(evaluate_request(**{"async": True}))
    assert r.raw["seen_async"] == "absent"
    assert r.runtime is None and r.runtime_stats is None and r.gpu_type == "H100"
    assert r.flags == [Flag(name="precision", reason="r", details=None, strict=True)]
    assert r.flag("precision").strict and r.flag("static") is None


def test_500_without_a_job_raises(fake_daemon):
    fake_daemon.answer = lambda request, attempt: (
        500, {"status": "failed", "error": {"class": "infrastructure", "message": "boom"}}, {})
    with pytest.raises(KevalHTTPError) as e:
        Client(socket_path=fake_daemon.socket_path).evaluate(evaluate_request())
    assert e.value.status == 500 and e.value.message == "boom"
