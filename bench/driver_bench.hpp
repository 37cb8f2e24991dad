// What the driver benches (driver_lock.cpp, context_cost.cpp, idle_contexts.cpp) share: a victim
// process measured beside disturbing ones, each a fresh child of the bench, and the driver held
// initialised by a process of its own as keval serve holds it.
#pragma once

#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <csignal>
#include <sys/wait.h>
#include <unistd.h>

namespace driver_bench {

using Clock = std::chrono::steady_clock;

inline double ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

inline void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "%s failed: %d\n", what, static_cast<int>(r));
    std::exit(1);
  }
}

inline double percentile(std::vector<double> v, double p) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// Device 0's primary context, made current on this thread after cuInit; with one hardware work
// queue where `one_queue` (as keval's trusted worker and one-stream runners have). Call before any
// other CUDA call of the process.
inline CUdevice open_context(bool one_queue) {
  if (one_queue)
    ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1", 1);
  CUdevice device;
  CUcontext context;
  check(cuInit(0), "cuInit");
  check(cuDeviceGet(&device, 0), "cuDeviceGet");
  check(cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(context), "cuCtxSetCurrent");
  return device;
}

// A memset of `bytes` captured in a CUDA graph on a stream of its own and timed between two
// events, as keval's cuda_graph timer times a launch; in the current context.
class TimedGraph {
public:
  explicit TimedGraph(size_t bytes) {
    const size_t words = bytes / 4;
    check(cuStreamCreate(&stream_, 0), "cuStreamCreate");
    check(cuMemAlloc(&buffer_, words * 4), "cuMemAlloc");
    check(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "capture");
    check(cuMemsetD32Async(buffer_, 7, words, stream_), "cuMemsetD32Async");
    check(cuStreamEndCapture(stream_, &graph_), "cuStreamEndCapture");
    check(cuGraphInstantiateWithFlags(&exec_, graph_, 0), "cuGraphInstantiate");
    check(cuEventCreate(&start_, 0), "cuEventCreate");
    check(cuEventCreate(&stop_, 0), "cuEventCreate");
  }
  TimedGraph(const TimedGraph&) = delete;
  TimedGraph& operator=(const TimedGraph&) = delete;
  ~TimedGraph() {
    cuEventDestroy(stop_);
    cuEventDestroy(start_);
    cuGraphExecDestroy(exec_);
    cuGraphDestroy(graph_);
    cuMemFree(buffer_);
    cuStreamDestroy(stream_);
  }
  CUstream stream() const { return stream_; }
  // One sample: the ms between its events; the host's cuGraphLaunch call's in *launch_ms.
  double sample(double* launch_ms = nullptr) {
    check(cuEventRecord(start_, stream_), "cuEventRecord");
    const auto a = Clock::now();
    check(cuGraphLaunch(exec_, stream_), "cuGraphLaunch");
    const auto b = Clock::now();
    check(cuEventRecord(stop_, stream_), "cuEventRecord");
    check(cuEventSynchronize(stop_), "cuEventSynchronize");
    float elapsed = 0;
    check(cuEventElapsedTime(&elapsed, start_, stop_), "cuEventElapsedTime");
    if (launch_ms != nullptr)
      *launch_ms = ms(a, b);
    return elapsed;
  }

private:
  CUstream stream_ = nullptr;
  CUdeviceptr buffer_ = 0;
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
  CUevent start_ = nullptr, stop_ = nullptr;
};

// The driver initialised in a process of its own until killed (keval serve's driver hold).
inline pid_t hold_driver() {
  int ready[2];
  if (::pipe(ready) != 0)
    std::exit(1);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);
    check(cuInit(0), "cuInit");
    const char byte = 1;
    if (::write(ready[1], &byte, 1) != 1)
      ::_exit(1);
    for (;;)
      ::pause();
  }
  ::close(ready[1]);
  char byte = 0;
  if (::read(ready[0], &byte, 1) != 1) {
    std::fprintf(stderr, "the driver holder failed (no device?)\n");
    std::exit(1);
  }
  ::close(ready[0]);
  return pid;
}

// A victim's measurements sent as consecutive groups of `width` (one group per round), as
// `width` columns of one measurement each.
inline std::vector<std::vector<double>> columns(const std::vector<double>& all, size_t width) {
  std::vector<std::vector<double>> out(width);
  for (size_t i = 0; i + width <= all.size(); i += width)
    for (size_t k = 0; k < width; ++k)
      out[k].push_back(all[i + k]);
  return out;
}

// Runs `victim` (returning its measurements) in a fresh child process, beside `disturbers`
// children that run `disturb` (which never returns) until the victim has ended, and returns the
// victim's measurements. In children because the driver must not be initialised in the bench's
// own process before it forks.
template <class Victim, class Disturb>
std::vector<double> measure_in_child(int disturbers, Disturb disturb, Victim victim) {
  std::vector<pid_t> others;
  for (int k = 0; k < disturbers; ++k) {
    const pid_t pid = ::fork();
    if (pid == 0)
      disturb();
    others.push_back(pid);
  }
  int fds[2];
  if (::pipe(fds) != 0)
    std::exit(1);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(fds[0]);
    const std::vector<double> out = victim();
    const size_t bytes = out.size() * sizeof(double);
    if (::write(fds[1], out.data(), bytes) != static_cast<ssize_t>(bytes))
      ::_exit(1);
    ::_exit(0);
  }
  ::close(fds[1]);
  std::vector<double> all;
  double chunk[512];
  for (ssize_t n; (n = ::read(fds[0], chunk, sizeof chunk)) > 0;)
    all.insert(all.end(), chunk, chunk + n / static_cast<ssize_t>(sizeof(double)));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  for (pid_t pid : others) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  return all;
}

} // namespace driver_bench
