// What the daemon tests share: a real `keval serve` process (its own state directory and
// socket, the fault plugin), an HTTP/1.1 client over its Unix socket (keep-alive, every
// operation bounded by a timeout), and bounded polling for conditions.
#pragma once

#include "support/test_env.hpp"

#include <chrono>
#include <csignal>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

namespace keval::test::daemon {

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace std::chrono_literals;

// Polls `condition` until it holds or `limit` passes; true when it held. The pause between
// polls grows from 5 to 100 ms: a poll, not a guess at how long something takes.
template <class Condition>
bool eventually(Condition condition, std::chrono::milliseconds limit = 60s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (auto pause = 5ms;; pause = std::min<std::chrono::milliseconds>(pause * 2, 100ms)) {
    if (condition())
      return true;
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(pause);
  }
}

// What a scripted worker (a Python script given to the daemon as KEVAL_WORKER) needs after its own
// start: keval's framing on descriptor 3 (`send`, `receive`), `compiled_then_granted(opened_cuda)`
// (a compiled phase for a fault kernel, need_device, saying the GPU opened ahead when given, and
// the grant, which it returns; a fatal and exit without one) and `validated_and_profiled()` (both
// phases, a one-sample timing). The script prepends its own handling of `--devices` and of what is
// not a job's worker, and ends with `send({"type": "done", ...})`.
inline constexpr const char* kScriptedWorkerProtocol = R"(
fd = 3
def send(obj):
    body = json.dumps(dict(obj, v=1)).encode()
    os.write(fd, b"KEV1" + struct.pack(">I", len(body)) + body)
def read_exact(n):
    data = bytearray()
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            sys.exit(3)
        data += chunk
    return bytes(data)
def receive():
    header = read_exact(8)
    return json.loads(read_exact(struct.unpack(">I", header[4:])[0]))
def compiled_then_granted(opened_cuda=None):
    side = {"kernel_type": "fault", "ok": True, "time_ms": 1}
    send({"type": "phase", "phase": "compiled", "result": {"ok": True, "custom": side}})
    need = {"type": "need_device", "device_types": ["cuda"]}
    if opened_cuda is not None:  # the GPU its processes opened ahead
        need["opened_cuda"] = opened_cuda
    send(need)
    grant = receive()
    if "device" not in grant:
        send({"type": "fatal", "message": "no device: " + grant.get("error", "")})
        sys.exit(1)
    return grant
def validated_and_profiled():
    send({"type": "phase", "phase": "validated", "result": {"ok": True, "mode": "executable"}})
    timing = {"mean": 1, "std": 0, "min": 1, "max": 1, "median": 1, "percentile_95": 1,
              "percentile_99": 1, "count": 1, "method": "cuda_event"}
    send({"type": "phase", "phase": "profiled",
          "result": {"ok": True, "method": "cuda_event", "custom": timing}})
)";

// A scripted worker's start for a machine of one GPU (a fake H100 80GB at index 0): it says so to
// `--devices` and hands anything but a job's worker (plugin descriptions, the sandbox probe) to
// the real keval-worker, which the daemon's environment names as KEVAL_REAL_WORKER.
inline constexpr const char* kOneFakeGpuWorkerStart = R"(#!/usr/bin/env python3
import json, os, struct, sys, time
args = sys.argv[1:]
if "--devices" in args:
    print(json.dumps({"devices": [{"index": 0, "name": "NVIDIA H100 80GB HBM3",
                                   "gpu_type": "H100", "arch": 90, "memory_bytes": 80 << 30}]}))
    sys.exit(0)
if "--protocol-fd" not in args:
    real = os.environ["KEVAL_REAL_WORKER"]
    os.execv(real, [real] + args)
)";

// Writes the scripted worker `dir`/fake-worker.py, its `start`, kScriptedWorkerProtocol and its
// `job` in that order, runnable by its owner; its path.
inline fs::path write_scripted_worker(const fs::path& dir, const char* start, const char* job) {
  const fs::path worker = dir / "fake-worker.py";
  std::ofstream(worker) << start << kScriptedWorkerProtocol << job;
  fs::permissions(worker, fs::perms::owner_all);
  return worker;
}

struct HttpResult {
  unsigned status = 0;
  std::string text;                                         // the body
  std::vector<std::pair<std::string, std::string>> headers; // as they came, in order

  const std::string& body() const { return text; }
  // The first header of that name (case-insensitive), or "".
  std::string header(const std::string& name) const;
  // The body as a JSON object; throws std::runtime_error when it is not one.
  json::object json_body() const;
};

// One keep-alive connection to the daemon's Unix socket. Throws std::runtime_error when the
// daemon cannot be reached or does not answer within the timeout. (Beast lives in the .cpp: each
// test file that includes this header compiles in seconds, not in the twenty its templates took.)
class HttpClient {
public:
  explicit HttpClient(const fs::path& socket, std::chrono::seconds timeout = 180s);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // `method` as HTTP spells it ("GET", "DELETE").
  HttpResult request(const std::string& method, const std::string& target,
                     const std::string& body = {},
                     const std::vector<std::pair<std::string, std::string>>& headers = {});
  HttpResult get(const std::string& target) { return request("GET", target); }
  HttpResult post(const std::string& target, const json::object& body,
                  const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    return request("POST", target, json::serialize(body), headers);
  }

  // POSTs as curl does for bodies over 1 MiB: the headers with "Expect: 100-continue", then the
  // body only once the server has answered. Returns the interim status and the response.
  std::pair<unsigned, HttpResult> post_expecting_continue(const std::string& target,
                                                          const json::object& body);

private:
  struct Connection;
  std::unique_ptr<Connection> connection_;
};

// A `keval serve` process with the fault plugin, its state in `state_dir`, its socket at
// `socket`, stdout and stderr in `log_path`. Killed (SIGKILL) by the destructor if still running.
class DaemonProcess {
public:
  DaemonProcess(fs::path state_dir, fs::path socket, std::vector<std::string> extra_args = {},
                std::vector<std::string> extra_env = {});
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  pid_t pid() const { return pid_; }
  const fs::path& socket() const { return socket_; }
  std::string log() const;
  // The last `bytes` of the log: for failures after many jobs, where the whole log is long.
  std::string log_tail(size_t bytes = 16 * 1024) const;

  // True once /health answers; false when the daemon exited or did not answer in time.
  bool wait_ready(std::chrono::milliseconds limit = 120s);
  // True when the process has ended (reaped).
  bool exited();
  // Waits for the exit; the wait status (for WIFEXITED & co.), or nullopt after `limit`.
  std::optional<int> wait_exit(std::chrono::milliseconds limit = 120s);
  void signal(int signal_number);
  // Kills the daemon as a crash would (no shutdown) and reaps it.
  void crash();

private:
  fs::path state_dir_;
  fs::path socket_;
  fs::path log_path_;
  pid_t pid_ = -1;
  std::optional<int> exit_status_;
};

// A temporary directory with a daemon's usual places in it.
struct DaemonDirs {
  TempDir tmp;
  fs::path state() const { return tmp.path() / "state"; }
  fs::path socket() const { return tmp.path() / "keval.sock"; }
};

// The whole content of a file ("" when it cannot be read).
inline std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Polls GET /jobs/{id} until the job has finished; its view.
inline json::object wait_finished(const fs::path& socket, const std::string& job_id,
                                  std::chrono::milliseconds limit = 120s) {
  json::object view;
  const bool finished = eventually(
      [&] {
        view = HttpClient(socket).get("/jobs/" + job_id).json_body();
        const auto& status = view.at("status").as_string();
        return status == "completed" || status == "failed";
      },
      limit);
  if (!finished)
    throw std::runtime_error("job " + job_id + " did not finish: " + json::serialize(view));
  return view;
}

// Polls GET /jobs/{id} until its status is `status`.
inline bool wait_status(const fs::path& socket, const std::string& job_id,
                        const std::string& status, std::chrono::milliseconds limit = 120s) {
  return eventually(
      [&] {
        const auto view = HttpClient(socket).get("/jobs/" + job_id).json_body();
        return view.at("status").as_string() == status;
      },
      limit);
}

inline json::object with_async(json::object request) {
  request["async"] = true;
  return request;
}

inline json::object hang(const char* fault = "hang_in_launch", double timeout_s = 600) {
  return fault_evaluate(json::object{{"fault", fault}}, timeout_s);
}

} // namespace keval::test::daemon
