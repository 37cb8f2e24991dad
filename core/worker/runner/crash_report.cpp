#include "worker/runner/crash_report.hpp"

#include <array>
#include <csignal>
#include <cstdint>
#include <cstring>

#include <execinfo.h>
#include <unistd.h>

namespace keval::worker {

namespace {

const char* g_who = "keval-worker";

// What the handler writes, with async-signal-safe calls only: write(2), no allocation, no stdio.
void put(const char* text) {
  size_t left = std::strlen(text);
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, text, left);
    if (n <= 0)
      return;
    text += n;
    left -= static_cast<size_t>(n);
  }
}

void put_number(uintmax_t value, unsigned base) {
  std::array<char, 2 + 64 + 1> digits{};
  size_t at = digits.size() - 1; // the last stays '\0'
  do {
    digits[--at] = "0123456789abcdef"[value % base];
    value /= base;
  } while (value != 0 && at > 2);
  if (base == 16) {
    digits[--at] = 'x';
    digits[--at] = '0';
  }
  put(&digits[at]);
}

void on_fatal_signal(int signal, siginfo_t* info, void*) {
  put(g_who);
  put(" (pid ");
  put_number(static_cast<uintmax_t>(::getpid()), 10);
  put("): SIG");
  // glibc's table of names (as describe_wait_status names the signal a process died of): a
  // pointer into static data, nothing allocated.
  const char* name = sigabbrev_np(signal);
  put(name != nullptr ? name : "?");
  // si_code above 0 is the kernel's (a fault); at or below it, a process sent the signal.
  if (info != nullptr && info->si_code > 0 && signal != SIGABRT) {
    put(" at address ");
    put_number(reinterpret_cast<uintptr_t>(info->si_addr), 16);
  } else if (info != nullptr) {
    put(" sent by pid ");
    put_number(static_cast<uintmax_t>(info->si_pid), 10);
  }
  put("; its stack:\n");
  std::array<void*, 64> frames{};
  const int depth = ::backtrace(frames.data(), static_cast<int>(frames.size()));
  ::backtrace_symbols_fd(frames.data(), depth, STDERR_FILENO);
  // Dies of the same signal, its default action back (SA_RESETHAND): a fault re-runs its
  // instruction on return, and a sent signal is raised once more.
  if (info == nullptr || info->si_code <= 0 || signal == SIGABRT)
    ::raise(signal);
}

} // namespace

void install_crash_report(const char* who) {
  g_who = who;
  // backtrace() loads libgcc's unwinder at its first call, which is not safe inside a handler:
  // made here once.
  std::array<void*, 1> warm{};
  ::backtrace(warm.data(), 1);
  // This thread's stack of its own for the handler, so that its stack overflowing still gets a
  // note (sigaltstack is per thread). Never freed: the process keeps it to its end.
  static std::array<char, 64 * 1024> alternate_stack;
  stack_t stack{};
  stack.ss_sp = alternate_stack.data();
  stack.ss_size = alternate_stack.size();
  ::sigaltstack(&stack, nullptr);
  struct sigaction action {};
  action.sa_sigaction = on_fatal_signal;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
  sigemptyset(&action.sa_mask);
  for (const int signal : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT})
    ::sigaction(signal, &action, nullptr);
}

} // namespace keval::worker
