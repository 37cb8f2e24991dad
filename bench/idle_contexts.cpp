// Do idle processes that hold CUDA contexts slow the driver calls of a job beside them? A daemon's
// prestarted workers hold their contexts while they wait for a job (the torch sets' always; a
// third attempt at prestarted cuda workers made every GPU phase of the jobs beside them slower:
// README, "cuda jobs get no prestarted worker"). This measures it apart from everything else.
//
// With the driver held by another process (as keval serve holds it), K idle processes (K = 0, 4,
// 16) each make a context (one work queue, as keval's), allocate 64 MiB in it and wait, holding
// it. Once all are ready, a victim in a fresh process makes its own context ("create"), then for a
// few seconds loops over: an 8 MiB cuMemAlloc + cuMemFree, a 1 MiB memset and stream synchronise,
// and a 64 MiB memset captured in a CUDA graph timed between two events (as keval's cuda_graph
// timer); then releases its context ("release"). Printed per K: each median and 99th percentile
// in ms, and the median's ratio to K = 0.
//
// On an H200 (2026-11-28) every median was within x0.82 to x1.01 of K = 0: idle contexts cost the
// processes beside them nothing (README, "cuda jobs get no prestarted worker").
//
//   g++ -O2 -std=c++17 -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -o /tmp/idle_contexts
//       bench/idle_contexts.cpp -lcuda   (one command)
//   /tmp/idle_contexts [seconds=3]
#include "driver_bench.hpp"

#include <array>
#include <string>

#include <poll.h>

namespace {

using namespace driver_bench;

// `count` idle processes, each holding a context and 64 MiB, once they have all said so.
std::vector<pid_t> idle_holders(int count) {
  std::vector<pid_t> pids;
  int ready[2];
  if (::pipe(ready) != 0)
    std::exit(1);
  for (int k = 0; k < count; ++k) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(ready[0]);
      open_context(true);
      CUdeviceptr memory;
      check(cuMemAlloc(&memory, 64 << 20), "cuMemAlloc");
      check(cuMemsetD8(memory, 0, 64 << 20), "cuMemsetD8");
      check(cuCtxSynchronize(), "cuCtxSynchronize");
      const char byte = 1;
      if (::write(ready[1], &byte, 1) != 1)
        ::_exit(1);
      for (;;)
        ::pause();
    }
    pids.push_back(pid);
  }
  ::close(ready[1]);
  for (int k = 0; k < count; ++k) {
    // A holder that failed never writes while the others hold their end open: not forever.
    pollfd one{ready[0], POLLIN, 0};
    char byte = 0;
    if (::poll(&one, 1, 60000) != 1 || ::read(ready[0], &byte, 1) != 1) {
      std::fprintf(stderr, "an idle holder failed or was not ready within 60 s (no device?)\n");
      for (pid_t pid : pids)
        ::kill(pid, SIGKILL);
      std::exit(1);
    }
  }
  ::close(ready[0]);
  return pids;
}

// What the victim measured: create and release once, the loop's calls many times.
struct Victim {
  std::vector<double> create, release, alloc, memset, sample;
};

// The victim in a fresh process; its times come back through measure_in_child as tagged pairs.
Victim victim(double seconds) {
  enum Tag { kCreate, kRelease, kAlloc, kMemset, kSample };
  const std::vector<double> all = measure_in_child(
      0, [] { std::exit(1); },
      [seconds] {
        std::vector<double> out;
        const auto tagged = [&out](Tag tag, double value) {
          out.push_back(tag);
          out.push_back(value);
        };
        const auto a = Clock::now();
        const CUdevice device = open_context(true);
        tagged(kCreate, ms(a, Clock::now()));
        CUdeviceptr small;
        check(cuMemAlloc(&small, 1 << 20), "cuMemAlloc");
        {
          TimedGraph graph(64u << 20);
          const auto until = Clock::now() + std::chrono::duration<double>(seconds);
          while (Clock::now() < until) {
            const auto b = Clock::now();
            CUdeviceptr x;
            check(cuMemAlloc(&x, 8 << 20), "cuMemAlloc");
            check(cuMemFree(x), "cuMemFree");
            const auto c = Clock::now();
            check(cuMemsetD8Async(small, 1, 1 << 20, graph.stream()), "cuMemsetD8Async");
            check(cuStreamSynchronize(graph.stream()), "cuStreamSynchronize");
            const auto d = Clock::now();
            const double sample = graph.sample();
            tagged(kAlloc, ms(b, c));
            tagged(kMemset, ms(c, d));
            tagged(kSample, sample);
          }
        }
        check(cuMemFree(small), "cuMemFree");
        const auto e = Clock::now();
        check(cuDevicePrimaryCtxRelease(device), "cuDevicePrimaryCtxRelease");
        tagged(kRelease, ms(e, Clock::now()));
        return out;
      });
  Victim v;
  std::array<std::vector<double>*, 5> into{&v.create, &v.release, &v.alloc, &v.memset, &v.sample};
  for (size_t i = 0; i + 1 < all.size(); i += 2)
    into.at(static_cast<size_t>(all[i]))->push_back(all[i + 1]);
  return v;
}

} // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 3.0;
  std::printf("a victim's driver calls beside K idle processes holding a context and 64 MiB each "
              "(median ms, and its ratio to K = 0)\n");
  // As keval serve's driver hold: K = 0 must not pay the machine's driver initialisation.
  const pid_t holder = hold_driver();
  std::array<double, 5> alone{};
  for (const int idle : {0, 4, 16}) {
    const std::vector<pid_t> holders = idle_holders(idle);
    const Victim v = victim(seconds);
    for (pid_t pid : holders) {
      int status = 0;
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
    if (v.sample.empty()) {
      std::fprintf(stderr, "the victim measured nothing (no device?)\n");
      return 1;
    }
    const std::vector<double>* each[] = {&v.create, &v.release, &v.alloc, &v.memset, &v.sample};
    const char* names[] = {"context made", "context released", "8 MiB alloc+free",
                           "1 MiB memset+sync", "64 MiB graph sample (events)"};
    std::printf("K = %d idle holders (%zu rounds)\n", idle, v.sample.size());
    for (size_t k = 0; k < 5; ++k) {
      const double median = percentile(*each[k], 0.5);
      if (idle == 0)
        alone[k] = median;
      std::printf("  %-30s p50 %8.3f  p99 %8.3f  x%.2f\n", names[k], median,
                  percentile(*each[k], 0.99), alone[k] > 0 ? median / alone[k] : 0.0);
    }
  }
  int status = 0;
  ::kill(holder, SIGKILL);
  ::waitpid(holder, &status, 0);
  return 0;
}
