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
