#include "worker/isolation/isolation.hpp"

#include "common/process_tree.hpp"
#include "common/remove_tree.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <linux/capability.h>
#include <mutex>
#include <system_error>
#include <thread>

#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace keval::worker::isolation {

namespace json = boost::json;

namespace {

std::string errno_text(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

// Drops every capability: the bounding set first (needs CAP_SETPCAP, which a root process
// has), then the ambient set, then effective/permitted/inheritable. Without capabilities a uid-0
// process cannot ptrace a non-dumpable process, override file permissions of other users, or
// regain capabilities by exec (no_new_privs).
bool drop_capabilities(json::array& errors) {
  bool ok = true;
  // A process holding no capability (an ordinary user) cannot drop the bounding set, and needs
  // not: with no_new_privs no exec can grant it any.
  __user_cap_header_struct query{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct held[_LINUX_CAPABILITY_U32S_3] = {};
  const bool holds_none = ::syscall(SYS_capget, &query, held) == 0 && held[0].permitted == 0 &&
                          held[1].permitted == 0 && held[0].effective == 0 &&
                          held[1].effective == 0;
  if (holds_none && ::prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1)
    return true;
  for (int cap = 0; cap <= CAP_LAST_CAP; ++cap)
    if (::prctl(PR_CAPBSET_READ, cap, 0, 0, 0) > 0 && ::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 &&
        errno != EINVAL) {
      errors.emplace_back(errno_text("PR_CAPBSET_DROP"));
      ok = false;
      break;
    }
  ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); // absent before Linux 4.3
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capset, &header, data) != 0) {
    errors.emplace_back(errno_text("capset"));
    ok = false;
  }
  return ok;
}

} // namespace

json::object restrict_user_code_process() {
  json::object layers;
  json::array errors;
  layers["no_new_privs"] = ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0;
  if (!layers["no_new_privs"].as_bool())
    errors.emplace_back(errno_text("PR_SET_NO_NEW_PRIVS"));
  layers["capabilities_dropped"] = drop_capabilities(errors);
  layers["not_dumpable"] = ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0;
  if (!layers["not_dumpable"].as_bool())
    errors.emplace_back(errno_text("PR_SET_DUMPABLE"));
  layers["own_process"] = true;
  if (!errors.empty())
    layers["errors"] = std::move(errors);
  return layers;
}

json::object protect_trusted_process() {
  json::object layers;
  json::array errors;
  layers["not_dumpable"] = ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0;
  if (!layers["not_dumpable"].as_bool())
    errors.emplace_back(errno_text("PR_SET_DUMPABLE"));
  layers["subreaper"] = ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0;
  if (!layers["subreaper"].as_bool())
    errors.emplace_back(errno_text("PR_SET_CHILD_SUBREAPER"));
  // The host started us with SIGKILL as the parent-death signal. SIGTERM instead: should the host
  // die, this process still ends its job's processes (end_descendants_on_sigterm) before it goes.
  const pid_t parent = ::getppid();
  if (::prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0) != 0)
    errors.emplace_back(errno_text("PR_SET_PDEATHSIG"));
  else if (::getppid() != parent)
    ::kill(::getpid(), SIGTERM); // the host died between the two calls (to the process: the
                                 // thread waiting for SIGTERM takes it)
  if (!errors.empty())
    layers["errors"] = std::move(errors);
  return layers;
}

size_t kill_descendants() {
  size_t ended = 0;
  // Each round ends the current children; their children become ours for the next. A process
  // forking as fast as it can still loses: its parent dies each round. Bounded all the same.
  for (int round = 0; round < 10000; ++round) {
    const std::vector<pid_t> children = children_of_self();
    if (children.empty())
      break;
    for (pid_t pid : children)
      ::kill(pid, SIGKILL);
    for (pid_t pid : children) {
      int status = 0;
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      ++ended;
    }
  }
  return ended;
}

namespace {

std::mutex& termination_mutex() {
  static std::mutex m;
  return m;
}
std::vector<std::filesystem::path>& termination_dirs() {
  static std::vector<std::filesystem::path> dirs;
  return dirs;
}

} // namespace

void remove_on_termination(const std::filesystem::path& dir) {
  std::lock_guard lock(termination_mutex());
  termination_dirs().push_back(dir);
}

void forget_on_termination(const std::filesystem::path& dir) {
  std::lock_guard lock(termination_mutex());
  auto& dirs = termination_dirs();
  dirs.erase(std::remove(dirs.begin(), dirs.end(), dir), dirs.end());
}

void end_descendants_on_sigterm() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    int signal = 0;
    while (sigwait(&set, &signal) != 0) {
    }
    kill_descendants();
    std::vector<std::filesystem::path> dirs;
    {
      std::lock_guard lock(termination_mutex());
      dirs = termination_dirs();
    }
    for (const auto& dir : dirs)
      remove_tree(dir);
    ::_exit(128 + SIGTERM);
  }).detach();
}

pid_t spawn_with_channel(const std::filesystem::path& exe, const std::vector<std::string>& args,
                         int channel_fd, const std::vector<std::string>& environment, int nice) {
  std::vector<std::string> storage{exe.string()};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : storage)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_storage = environment;
  std::vector<char*> envp;
  for (auto& e : env_storage)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0)
    throw std::system_error(errno, std::generic_category(), "fork");
  if (pid == 0) {
    // Async-signal-safe calls only from here on.
    if (channel_fd == 3) {
      ::fcntl(3, F_SETFD, 0);
    } else if (::dup2(channel_fd, 3) != 3) {
      ::_exit(127);
    }
    // Exactly stdin, stdout, stderr and the channel: nothing the trusted worker holds (the host
    // channel, the other side's runner, tensor buffers) crosses.
    if (::syscall(SYS_close_range, 4u, ~0u, 0u) != 0) {
      struct rlimit limit {};
      ::getrlimit(RLIMIT_NOFILE, &limit);
      for (rlim_t fd = 4; fd < limit.rlim_cur && fd < (1u << 20); ++fd)
        ::close(static_cast<int>(fd));
    }
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent)
      ::_exit(127);
    struct rlimit no_core {
      0, 0
    };
    ::setrlimit(RLIMIT_CORE, &no_core);
    // Not checked: raising a nice value needs no privilege, and lowering one (a worker above
    // `nice` itself) is asked for only with CAP_SYS_NICE (cpu_priority.hpp), which the child
    // still has here; a runner left at our own nice would only wait in the foreground.
    if (nice != 0)
      ::setpriority(PRIO_PROCESS, 0, nice);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr); // SIGTERM is blocked in the trusted worker
    ::signal(SIGPIPE, SIG_DFL);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status))
    return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* abbrev = sigabbrev_np(sig);
    std::string name = abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
    if (const char* text = strsignal(sig))
      name += std::string(" (") + text + ")";
    return "was killed by " + name;
  }
  return "ended with status " + std::to_string(status);
}

} // namespace keval::worker::isolation
