// What a fresh process's CUDA context costs, and whether making one disturbs another process's
// timed samples: the floor under a job that runs in fresh processes (README, "Where a cuda job's
// time goes").
//
// First, each process's context lifecycle, in fresh processes while a holder process keeps the
// driver initialised (as keval serve's driver hold does): cuInit, the primary context made current
// with a stream and a small allocation ("create"), the primary context released ("release"), and
// the process's whole life as its parent saw it, exit included ("life"). With one hardware work
// queue (CUDA_DEVICE_MAX_CONNECTIONS=1, as keval's trusted worker and one-stream runners use) and
// with the driver's default; one process at a time, two at once (an evaluate's trusted worker and
// its runner) and three (a compare's: two runners). Medians over the rounds, in ms.
//
// Then which step of the one-queue lifecycle takes the time, and whether anything a process can
// choose moves it: cuInit, making the context (primary retained, or cuCtxCreate), making it
// current, a first stream, allocation and memset, freeing them, releasing the context, and the
// exit as the parent saw it (from the child's report to its reaping); with CUDA_MODULE_LOADING
// EAGER or LAZY, a blocking-sync context, and each one once more exiting with its context held
// (the driver then releases it as the process exits). Medians over the rounds, in ms.
//
// Then a victim process times a memset (64 MiB, then 1 GiB) captured in a CUDA graph between two
// events (as keval's cuda_graph timer does), for a few seconds: alone, and while another process
// creates and releases contexts over and over (fresh processes, one queue). Printed: the
// event-timed sample and the host's cuGraphLaunch call, median, 99th percentile and max in ms.
//
//   g++ -O2 -std=c++17 -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -o /tmp/context_cost
//       bench/context_cost.cpp -lcuda   (one command)
//   /tmp/context_cost [rounds=8] [seconds=3]
#include "driver_bench.hpp"

#include <string>

namespace {

using namespace driver_bench;

struct Lifecycle {
  double init = 0, create = 0, release = 0;
};

// In a fresh process: the steps' times, written to `fd`.
[[noreturn]] void one_lifecycle(bool one_queue, int fd) {
  if (one_queue)
    ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1", 1);
  Lifecycle out;
  const auto a = Clock::now();
  check(cuInit(0), "cuInit");
  const auto b = Clock::now();
  CUdevice device;
  CUcontext context;
  CUstream stream;
  CUdeviceptr memory;
  check(cuDeviceGet(&device, 0), "cuDeviceGet");
  check(cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(context), "cuCtxSetCurrent");
  check(cuStreamCreate(&stream, 0), "cuStreamCreate");
  check(cuMemAlloc(&memory, 4096), "cuMemAlloc");
  const auto c = Clock::now();
  check(cuMemFree(memory), "cuMemFree");
  check(cuStreamDestroy(stream), "cuStreamDestroy");
  check(cuDevicePrimaryCtxRelease(device), "cuDevicePrimaryCtxRelease");
  const auto d = Clock::now();
  out = {ms(a, b), ms(b, c), ms(c, d)};
  if (::write(fd, &out, sizeof out) != sizeof out)
    ::_exit(1);
  ::_exit(0);
}

struct Rounds {
  std::vector<double> init, create, release, life;
};

// `rounds` rounds of `at_once` fresh processes started together.
Rounds lifecycles(bool one_queue, int at_once, int rounds) {
  Rounds r;
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::pair<pid_t, int>> children;
    std::vector<Clock::time_point> started;
    for (int k = 0; k < at_once; ++k) {
      int fds[2];
      if (::pipe(fds) != 0)
        std::exit(1);
      started.push_back(Clock::now());
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::close(fds[0]);
        one_lifecycle(one_queue, fds[1]);
      }
      ::close(fds[1]);
      children.emplace_back(pid, fds[0]);
    }
    for (size_t k = 0; k < children.size(); ++k) {
      int status = 0;
      ::waitpid(children[k].first, &status, 0);
      r.life.push_back(ms(started[k], Clock::now()));
      Lifecycle one;
      if (::read(children[k].second, &one, sizeof one) != sizeof one) {
        std::fprintf(stderr, "a lifecycle process failed\n");
        std::exit(1);
      }
      ::close(children[k].second);
      r.init.push_back(one.init);
      r.create.push_back(one.create);
      r.release.push_back(one.release);
    }
  }
  return r;
}

// The variants of the step-by-step lifecycle: what a process could choose about its context.
enum class Variant {
  primary,
  module_loading_eager,
  module_loading_lazy,
  not_primary,
  blocking_sync
};
constexpr Variant kVariants[] = {Variant::primary, Variant::module_loading_eager,
                                 Variant::module_loading_lazy, Variant::not_primary,
                                 Variant::blocking_sync};
const char* name_of(Variant v) {
  switch (v) {
  case Variant::primary:
    return "primary context";
  case Variant::module_loading_eager:
    return "CUDA_MODULE_LOADING=EAGER";
  case Variant::module_loading_lazy:
    return "CUDA_MODULE_LOADING=LAZY";
  case Variant::not_primary:
    return "cuCtxCreate (not primary)";
  case Variant::blocking_sync:
    return "blocking-sync primary";
  }
  return "?";
}

// The steps of one lifecycle, in the order they run (exit: measured by the parent).
constexpr const char* kSteps[] = {"cuInit", "context", "current", "stream", "alloc",
                                  "memset", "free",    "release", "exit"};
constexpr int kStepCount = sizeof kSteps / sizeof kSteps[0];

// In a fresh process, one queue: each step's ms but the exit, written to `fd`; the context left
// to the process's exit where `release` is false.
[[noreturn]] void stepwise_lifecycle(Variant variant, bool release, int fd) {
  ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1", 1);
  if (variant == Variant::module_loading_eager)
    ::setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  if (variant == Variant::module_loading_lazy)
    ::setenv("CUDA_MODULE_LOADING", "LAZY", 1);
  double steps[kStepCount - 1] = {};
  int step = 0;
  auto last = Clock::now();
  const auto lap = [&] {
    const auto now = Clock::now();
    steps[step++] = ms(last, now);
    last = now;
  };
  check(cuInit(0), "cuInit");
  lap();
  CUdevice device;
  CUcontext context;
  check(cuDeviceGet(&device, 0), "cuDeviceGet");
  if (variant == Variant::blocking_sync)
    check(cuDevicePrimaryCtxSetFlags(device, CU_CTX_SCHED_BLOCKING_SYNC), "set flags");
  if (variant == Variant::not_primary) {
    CUctxCreateParams params{};
    check(cuCtxCreate(&context, &params, 0, device), "cuCtxCreate");
  } else {
    check(cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
  }
  lap();
  check(cuCtxSetCurrent(context), "cuCtxSetCurrent");
  lap();
  CUstream stream;
  check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  lap();
  CUdeviceptr memory;
  check(cuMemAlloc(&memory, 1 << 20), "cuMemAlloc");
  lap();
  check(cuMemsetD8Async(memory, 1, 1 << 20, stream), "cuMemsetD8Async");
  check(cuStreamSynchronize(stream), "cuStreamSynchronize");
  lap();
  if (release) {
    check(cuMemFree(memory), "cuMemFree");
    check(cuStreamDestroy(stream), "cuStreamDestroy");
    lap();
    if (variant == Variant::not_primary)
      check(cuCtxDestroy(context), "cuCtxDestroy");
    else
      check(cuDevicePrimaryCtxRelease(device), "cuDevicePrimaryCtxRelease");
    lap();
  }
  if (::write(fd, steps, sizeof steps) != sizeof steps)
    ::_exit(1);
  ::_exit(0);
}

// `rounds` stepwise lifecycles, one process at a time: each step's times.
std::vector<std::vector<double>> stepwise(Variant variant, bool release, int rounds) {
  std::vector<std::vector<double>> times(kStepCount);
  for (int round = 0; round < rounds; ++round) {
    int fds[2];
    if (::pipe(fds) != 0)
      std::exit(1);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      stepwise_lifecycle(variant, release, fds[1]);
    }
    ::close(fds[1]);
    double steps[kStepCount - 1] = {};
    if (::read(fds[0], steps, sizeof steps) != sizeof steps) {
      std::fprintf(stderr, "a stepwise lifecycle failed\n");
      std::exit(1);
    }
    const auto reported = Clock::now();
    int status = 0;
    ::waitpid(pid, &status, 0);
    ::close(fds[0]);
    for (int k = 0; k < kStepCount - 1; ++k)
      times[k].push_back(steps[k]);
    times[kStepCount - 1].push_back(ms(reported, Clock::now()));
  }
  return times;
}

// Fresh processes, one after another until killed, each making and releasing a context.
[[noreturn]] void disturb() {
  for (;;) {
    const pid_t child = ::fork();
    if (child == 0) {
      int sink[2];
      if (::pipe(sink) != 0)
        ::_exit(1);
      one_lifecycle(true, sink[1]);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
  }
}

struct Samples {
  std::vector<double> event_ms, launch_ms;
};

// The victim times a `bytes` memset in a graph; its times come back as pairs.
Samples timed_samples(size_t bytes, int disturbers, double seconds) {
  const std::vector<double> all = measure_in_child(disturbers, disturb, [bytes, seconds] {
    open_context(true);
    TimedGraph graph(bytes);
    ::usleep(300000); // the disturbers under way
    std::vector<double> out;
    const auto until = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < until) {
      double launch_ms = 0;
      out.push_back(graph.sample(&launch_ms));
      out.push_back(launch_ms);
    }
    return out;
  });
  auto pairs = columns(all, 2);
  return {std::move(pairs[0]), std::move(pairs[1])};
}

} // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 8;
  const double seconds = argc > 2 ? std::atof(argv[2]) : 3.0;
  // Killed with this process's group at the end: every child is ours.
  const pid_t holder = hold_driver();
  std::printf("a context's lifecycle, the driver held by another process (median ms over %d "
              "rounds)\n",
              rounds);
  for (const bool one_queue : {true, false})
    for (const int at_once : {1, 2, 3}) {
      const Rounds r = lifecycles(one_queue, at_once, rounds);
      std::printf("  %-14s %d at once: cuInit %6.1f  create %6.1f  release %6.1f  life %6.1f  "
                  "(create max %6.1f)\n",
                  one_queue ? "one queue" : "default queues", at_once, percentile(r.init, 0.5),
                  percentile(r.create, 0.5), percentile(r.release, 0.5), percentile(r.life, 0.5),
                  percentile(r.create, 1.0));
    }
  std::printf("the one-queue lifecycle step by step, one process at a time (median ms over %d "
              "rounds)\n",
              rounds);
  for (const Variant variant : kVariants)
    for (const bool release : {true, false}) {
      const auto times = stepwise(variant, release, rounds);
      std::printf("  %-26s %-13s", name_of(variant), release ? "released" : "exit holding");
      for (int k = 0; k < kStepCount; ++k)
        std::printf(" %s %5.1f", kSteps[k], percentile(times[k], 0.5));
      std::printf("\n");
    }
  for (const size_t mib : {64, 1024}) {
    std::printf("a %zu MiB memset in a CUDA graph between two events, %.0f s each (ms)\n", mib,
                seconds);
    double alone_p50 = 0;
    for (const int disturbers : {0, 1}) {
      const Samples s = timed_samples(mib << 20, disturbers, seconds);
      const double p50 = percentile(s.event_ms, 0.5);
      if (disturbers == 0)
        alone_p50 = p50;
      std::printf("  %-34s %6zu samples: event p50 %7.4f (x%.3f)  p99 %7.4f  max %7.4f;  "
                  "cuGraphLaunch p50 %7.4f  p99 %7.4f  max %7.4f\n",
                  disturbers ? "beside one process making contexts" : "alone", s.event_ms.size(),
                  p50, alone_p50 > 0 ? p50 / alone_p50 : 0.0, percentile(s.event_ms, 0.99),
                  percentile(s.event_ms, 1.0), percentile(s.launch_ms, 0.5),
                  percentile(s.launch_ms, 0.99), percentile(s.launch_ms, 1.0));
    }
  }
  ::kill(holder, SIGKILL);
  int status = 0;
  ::waitpid(holder, &status, 0);
  return 0;
}
