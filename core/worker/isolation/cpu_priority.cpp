#include "worker/isolation/cpu_priority.hpp"

#include "common/process_tree.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <string>

#include <sys/resource.h>

namespace keval::worker::isolation {

namespace {

constexpr int kCapSysNice = 23; // linux/capability.h

// Whether CAP_SYS_NICE is in this process's effective set (/proc/self/status CapEff).
bool has_cap_sys_nice() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("CapEff:", 0) == 0) {
      const unsigned long long mask = std::strtoull(line.c_str() + 7, nullptr, 16);
      return ((mask >> kCapSysNice) & 1ull) != 0;
    }
  return false;
}

std::string find_unavailable_reason() {
  if (const char* v = std::getenv("KEVAL_BACKGROUND_RUNNERS");
      v != nullptr && std::string(v) == "0")
    return "off (KEVAL_BACKGROUND_RUNNERS=0)";
  if (!has_cap_sys_nice())
    return "not applied: bringing a runner back to nice 0 needs CAP_SYS_NICE, which this worker "
           "lacks (keval not root)";
  return "";
}

} // namespace

const std::string& background_unavailable() {
  static const std::string why = find_unavailable_reason();
  return why;
}

int background_nice_for_runners() {
  return background_unavailable().empty() ? kBackgroundNice : 0;
}

std::string set_tree_nice(const std::vector<pid_t>& roots, int nice) {
  std::set<pid_t> processes;
  for (const pid_t root : roots)
    add_process_tree(root, processes);
  std::string failures;
  for (const pid_t pid : processes)
    for (const pid_t tid : threads_of(pid)) {
      // PRIO_PROCESS names one thread on Linux: each is set on its own.
      if (::setpriority(PRIO_PROCESS, static_cast<id_t>(tid), nice) == 0 || errno == ESRCH)
        continue;
      if (!failures.empty())
        failures += "; ";
      failures += "thread " + std::to_string(tid) + " of process " + std::to_string(pid) + ": " +
                  std::strerror(errno);
    }
  return failures;
}

} // namespace keval::worker::isolation
