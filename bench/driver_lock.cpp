// Does another process's cuInit or context creation hold up this process's driver calls? Why
// prestarted workers open the device in turns (core/worker/engine/device_turn.hpp).
//
// A victim process loops for a few seconds over: an 8 MiB cuMemAlloc + cuMemFree, a 1 MiB memset
// and stream synchronise, a 1 MiB device-to-host copy, an event create + destroy. Beside it run,
// in turn: nothing; one process creating contexts over and over (each a fresh process: cuInit,
// primary context, a 64 MiB allocation and memset); four such processes; four processes that
// only call cuInit. Printed per setting and call: median, 90th and 99th percentile and max in ms,
// and the median's ratio to the victim alone.
//
//   g++ -O2 -std=c++17 -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -o /tmp/driver_lock
//       bench/driver_lock.cpp -lcuda   (one command)
//   /tmp/driver_lock [seconds=5]
#include "driver_bench.hpp"

#include <cstring>
#include <string>

namespace {

using namespace driver_bench;

// Fresh processes, one after another until killed: each initialises the driver and, for
// `contexts`, creates the primary context and uses it.
[[noreturn]] void disturb(bool contexts) {
  for (;;) {
    const pid_t child = ::fork();
    if (child == 0) {
      if (!contexts) {
        check(cuInit(0), "cuInit");
      } else {
        open_context(false); // the driver's default work queues, as before keval used one
        CUdeviceptr memory;
        check(cuMemAlloc(&memory, 64 << 20), "cuMemAlloc");
        check(cuMemsetD8(memory, 0, 64 << 20), "cuMemsetD8");
        check(cuCtxSynchronize(), "cuCtxSynchronize");
      }
      ::_exit(0);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
  }
}

struct Calls {
  std::vector<double> alloc, memset, copy, event;
};

// The victim's loop, in a fresh process of its own (the driver must not be initialised in this
// one before it forks the disturbers); its times come back through a pipe.
Calls measure(int disturbers, bool contexts, double seconds) {
  const std::vector<double> all = measure_in_child(
      disturbers, [contexts] { disturb(contexts); },
      [seconds] {
        open_context(false); // the driver's default work queues, as before keval used one
        CUstream stream;
        CUdeviceptr buffer;
        check(cuStreamCreate(&stream, 0), "cuStreamCreate");
        check(cuMemAlloc(&buffer, 1 << 20), "cuMemAlloc");
        std::vector<char> host(1 << 20);
        ::usleep(300000); // the disturbers under way
        std::vector<double> out;
        const auto until = Clock::now() + std::chrono::duration<double>(seconds);
        while (Clock::now() < until) {
          const auto a = Clock::now();
          CUdeviceptr x;
          check(cuMemAlloc(&x, 8 << 20), "cuMemAlloc");
          check(cuMemFree(x), "cuMemFree");
          const auto b = Clock::now();
          check(cuMemsetD8Async(buffer, 1, 1 << 20, stream), "cuMemsetD8Async");
          check(cuStreamSynchronize(stream), "cuStreamSynchronize");
          const auto c = Clock::now();
          check(cuMemcpyDtoH(host.data(), buffer, host.size()), "cuMemcpyDtoH");
          const auto d = Clock::now();
          CUevent event;
          check(cuEventCreate(&event, 0), "cuEventCreate");
          check(cuEventDestroy(event), "cuEventDestroy");
          const auto e = Clock::now();
          for (double t : {ms(a, b), ms(b, c), ms(c, d), ms(d, e)})
            out.push_back(t);
        }
        return out;
      });
  auto four = columns(all, 4);
  return {std::move(four[0]), std::move(four[1]), std::move(four[2]), std::move(four[3])};
}

} // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 5.0;
  struct Setting {
    const char* name;
    int disturbers;
    bool contexts;
  };
  const Setting settings[] = {{"alone", 0, false},
                              {"1 creating contexts", 1, true},
                              {"4 creating contexts", 4, true},
                              {"4 calling cuInit", 4, false}};
  std::vector<double> alone(4, 0);
  for (const Setting& s : settings) {
    const Calls calls = measure(s.disturbers, s.contexts, seconds);
    if (calls.alloc.empty()) {
      std::fprintf(stderr, "the victim measured nothing (no device?)\n");
      return 1;
    }
    std::printf("%s: %zu rounds\n", s.name, calls.alloc.size());
    const std::vector<double>* each[] = {&calls.alloc, &calls.memset, &calls.copy, &calls.event};
    const char* names[] = {"cuMemAlloc+cuMemFree 8 MiB", "memset 1 MiB + synchronise",
                           "copy 1 MiB to the host", "event create+destroy"};
    for (int k = 0; k < 4; ++k) {
      const double median = percentile(*each[k], 0.5);
      if (s.disturbers == 0)
        alone[k] = median;
      std::printf("  %-28s p50 %8.3f  p90 %8.3f  p99 %8.3f  max %8.3f ms  p50 x%.1f\n", names[k],
                  median, percentile(*each[k], 0.9), percentile(*each[k], 0.99),
                  percentile(*each[k], 1.0), alone[k] > 0 ? median / alone[k] : 0.0);
    }
  }
  return 0;
}
