#include "worker/isolation/sandbox.hpp"

#include "common/address_sanitizer.hpp"
#include "common/control_file.hpp"
#include "common/remove_tree.hpp"
#include "worker/engine/work_queues.hpp"
#include "worker/isolation/cpu_priority.hpp"

#include "worker/isolation/detail/landlock.hpp"
#include "worker/isolation/detail/seccomp.hpp"
#include "worker/isolation/isolation.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <system_error>

#include <boost/json/serialize.hpp>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

extern char** environ;

namespace keval::worker::isolation {

namespace fs = std::filesystem;
namespace json = boost::json;
using protocol::SandboxMode;
using protocol::SandboxPolicy;

namespace {

std::string errno_text(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

std::string bytes_text(uint64_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  uint64_t value = bytes;
  while (unit < 4 && value >= 1024 && value % 1024 == 0) {
    value /= 1024;
    ++unit;
  }
  return std::to_string(value) + " " + units[unit];
}

// `key value` lines (memory.events, pids.events): the value of `key`, or 0.
uint64_t event_count(const fs::path& path, const std::string& key) {
  std::ifstream in(path);
  std::string name;
  uint64_t value = 0;
  while (in >> name >> value)
    if (name == key)
      return value;
  return 0;
}

class Report {
public:
  void add(const char* name, bool active, std::string detail) {
    json::object entry;
    entry["active"] = active;
    entry["detail"] = detail;
    layers_[name] = std::move(entry);
    if (!active)
      skipped_[name] = std::move(detail);
  }
  json::object finish(SandboxMode mode) {
    json::object out;
    out["mode"] = protocol::sandbox_mode_name(mode);
    json::array active;
    for (const auto& [name, entry] : layers_)
      if (entry.as_object().at("active").as_bool())
        active.emplace_back(name);
    out["active"] = std::move(active);
    out["skipped"] = std::move(skipped_);
    out["layers"] = std::move(layers_);
    if (mode == SandboxMode::off)
      out["warning"] = "--sandbox off: user code ran with keval's own uid, network, filesystem "
                       "access and limits (for debugging only)";
    return out;
  }

private:
  json::object layers_, skipped_;
};

// Sets both the soft and the hard limit (never above the current hard limit, which an
// unprivileged process cannot raise): user code cannot raise it back.
bool lower_limit(int resource, uint64_t value, std::string& error) {
  struct rlimit current {};
  ::getrlimit(resource, &current);
  rlim_t v = static_cast<rlim_t>(value);
  if (current.rlim_max != RLIM_INFINITY && v > current.rlim_max)
    v = current.rlim_max;
  struct rlimit wanted {
    v, v
  };
  if (::setrlimit(resource, &wanted) == 0)
    return true;
  error = errno_text("setrlimit");
  return false;
}

size_t thread_count() {
  size_t n = 0;
  std::error_code ec;
  for (fs::directory_iterator it("/proc/self/task", ec), end; !ec && it != end; it.increment(ec))
    ++n;
  return n;
}

// Its own network namespace: no interface is up, so nothing is reachable, loopback included.
// Root can make one directly; anyone else inside a user namespace of their own (one uid mapped).
void own_network(Report& report) {
  const uid_t uid = ::geteuid();
  const gid_t gid = ::getegid();
  if (uid == 0) {
    if (::unshare(CLONE_NEWNET) == 0)
      return report.add("network", true, "own network namespace, no interface up");
    return report.add("network", false, errno_text("unshare(CLONE_NEWNET)"));
  }
  if (::unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0)
    return report.add("network", false,
                      errno_text("unshare(CLONE_NEWUSER | CLONE_NEWNET) (unprivileged user "
                                 "namespaces disabled?)"));
  const bool mapped = write_control_file("/proc/self/setgroups", "deny") &&
                      write_control_file("/proc/self/uid_map", std::to_string(uid) + " " +
                                                                   std::to_string(uid) + " 1\n") &&
                      write_control_file("/proc/self/gid_map",
                                         std::to_string(gid) + " " + std::to_string(gid) + " 1\n");
  report.add(
      "network", true,
      std::string("own user and network namespace, no interface up") +
          (mapped ? "" : " (uid map not written: " + std::string(std::strerror(errno)) + ")"));
}

// A uid of this runner's own (SandboxPolicy::runner_uid_base + pid), its directory made that
// uid's; nullopt, with why, where the machine cannot give it one (a user namespace that maps only
// some uids, as containers' do): the job uid then, shared with every other runner. Still root
// here, and nothing but the trusted worker has written the directory yet.
std::optional<uid_t> own_uid(const SandboxPolicy& policy, std::string& why) {
  if (policy.runner_uid_base == 0)
    return std::nullopt;
  const pid_t pid = policy.uid_of_pid != 0 ? static_cast<pid_t>(policy.uid_of_pid) : ::getpid();
  if (pid <= 0 || static_cast<uint32_t>(pid) >= SandboxPolicy::kLargestPid ||
      policy.runner_uid_base > SandboxPolicy::kLargestRunnerUidBase) {
    why = "pid " + std::to_string(pid) + " is past the uids from " +
          std::to_string(policy.runner_uid_base);
    return std::nullopt;
  }
  const uid_t uid = policy.runner_uid_base + static_cast<uid_t>(pid);
  const auto chown_all = [&policy](uid_t to, std::string& error) {
    std::error_code ec;
    std::vector<fs::path> paths{policy.runner_dir};
    for (fs::recursive_directory_iterator it(policy.runner_dir, ec), end; !ec && it != end;
         it.increment(ec))
      paths.push_back(it->path());
    for (const auto& path : paths)
      if (::lchown(path.c_str(), to, policy.job_gid) != 0) {
        error = errno_text("chown " + path.string() + " to uid " + std::to_string(to));
        return false;
      }
    return true;
  };
  if (chown_all(uid, why))
    return uid;
  std::string ignored;
  chown_all(policy.job_uid, ignored); // back to the job uid's, as the trusted worker left it
  return std::nullopt;
}

// The job uid, when we are root. Tried on the effective ids first (the saved uid 0 lets us come
// back): a uid that cannot read keval's own files or write the runner's directory would only make
// every job fail, so the layer is reported skipped instead.
void switch_user(const SandboxPolicy& policy, const std::vector<std::string>& must_read,
                 Report& report) {
  if (::getuid() != 0)
    return report.add("user", false,
                      "keval runs as uid " + std::to_string(::getuid()) +
                          ", not root: user code runs as that uid (a dedicated uid needs root)");
  uid_t uid = policy.job_uid;
  const gid_t gid = policy.job_gid;
  if (uid == 0)
    return report.add("user", false, "--job-user is root");
  std::string shared_uid_why;
  if (const auto own = own_uid(policy, shared_uid_why))
    uid = *own;
  if (::setgroups(0, nullptr) != 0 || ::setresgid(-1, gid, -1) != 0 ||
      ::setresuid(-1, uid, -1) != 0)
    return report.add("user", false, errno_text("switching to uid " + std::to_string(uid)));
  std::string problem;
  for (const auto& path : must_read)
    if (::faccessat(AT_FDCWD, path.c_str(), R_OK, AT_EACCESS) != 0) {
      problem = path + " is not readable by uid " + std::to_string(uid);
      break;
    }
  if (problem.empty() &&
      ::faccessat(AT_FDCWD, policy.runner_dir.c_str(), R_OK | W_OK | X_OK, AT_EACCESS) != 0)
    problem = policy.runner_dir + " is not writable by uid " + std::to_string(uid);
  if (!problem.empty()) {
    ::setresuid(-1, 0, -1);
    ::setresgid(-1, 0, -1);
    // The trusted worker made the directory the job uid's; root without capabilities (what this
    // runner becomes) could not write it.
    for (const auto& dir : {fs::path(policy.runner_dir), fs::path(policy.runner_dir) / "tmp"})
      if (::chown(dir.c_str(), 0, 0) != 0)
        problem += "; chown " + dir.string() + ": " + std::strerror(errno);
    return report.add("user", false, problem + ": user code runs as root (without capabilities)");
  }
  if (::setresgid(gid, gid, gid) != 0 || ::setresuid(uid, uid, uid) != 0)
    ::_exit(121); // half-switched ids are not a state to run anything in
  const bool own = uid != policy.job_uid;
  if (own)
    ::umask(002); // what it adds to the shared build cache stays writable by the job gid
  report.add("user", true,
             "uid " + std::to_string(uid) +
                 (own ? " (its own: " + std::to_string(policy.runner_uid_base) + " + its pid)"
                      : " (the job user's, shared by every runner" +
                            (shared_uid_why.empty() ? "" : ": " + shared_uid_why) + ")") +
                 ", gid " + std::to_string(gid) + ", no supplementary groups");
}

std::vector<std::string> writable_devices() {
  std::vector<std::string> files{"/dev/null", "/dev/zero", "/dev/full", "/dev/random",
                                 "/dev/urandom"};
  std::error_code ec;
  for (fs::directory_iterator it("/dev", ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().rfind("nvidia", 0) == 0 && !it->is_directory())
      files.push_back(it->path().string());
  for (fs::directory_iterator it("/dev/nvidia-caps", ec), end; !ec && it != end; it.increment(ec))
    files.push_back(it->path().string());
  return files;
}

// The memory limit a runner's rlimit enforces, for explain_allocation_failure (0: none).
std::atomic<uint64_t> rlimit_memory_bytes{0};

const char* const kAllowedVariables[] = {"PATH",
                                         "LANG",
                                         "LANGUAGE",
                                         "TZ",
                                         "LD_LIBRARY_PATH",
                                         "PYTHONPATH",
                                         "PYTHONHOME",
                                         "VIRTUAL_ENV",
                                         "CONDA_PREFIX",
                                         "CC",
                                         "CXX",
                                         "CUDAHOSTCXX",
                                         "TORCH_CUDA_ARCH_LIST",
                                         "OMP_NUM_THREADS",
                                         "MKL_NUM_THREADS",
                                         "OPENBLAS_NUM_THREADS",
                                         "KEVAL_PYTHON",
                                         "KEVAL_LOG_LEVEL",
                                         "KEVAL_ONE_WORK_QUEUE",
                                         "ASAN_OPTIONS",
                                         "UBSAN_OPTIONS",
                                         "LSAN_OPTIONS"};
const char* const kAllowedPrefixes[] = {"LC_", "CUDA_", "NVIDIA_", "NVCC_", "TRITON_"};
// Set by us below, never taken from our environment.
const char* const kOwnVariables[] = {
    "HOME",           "TMPDIR", "XDG_CACHE_HOME", "TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR",
    "KEVAL_CACHE_DIR"};

bool allowed(std::string_view name) {
  for (const char* own : kOwnVariables)
    if (name == own)
      return false;
  for (const char* v : kAllowedVariables)
    if (name == v)
      return true;
  for (const char* prefix : kAllowedPrefixes)
    if (name.rfind(prefix, 0) == 0)
      return true;
  return false;
}

} // namespace

// -------------------------------------------------------------------------------------------
// Trusted worker

SandboxPolicy place_runner(const SandboxPolicy& policy) {
  static std::atomic<int> counter{0};
  SandboxPolicy runner = policy;
  if (runner.memory_bytes == 0)
    runner.memory_bytes = protocol::default_job_memory();
  const fs::path root =
      policy.work_root.empty() ? fs::temp_directory_path() : fs::path(policy.work_root);
  fs::create_directories(root);
  const std::string tag =
      policy.worker_tag.empty() ? std::to_string(::getpid()) : policy.worker_tag;
  const std::string name = "runner-" + tag + "-" + std::to_string(counter.fetch_add(1));
  const fs::path dir = root / name;
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::system_error(errno, std::generic_category(), "mkdir " + dir.string());
  ::mkdir((dir / "tmp").c_str(), 0700);
  runner.runner_dir = dir.string();
  runner.background_nice = background_nice_for_runners();
  remove_on_termination(dir);
  if (protocol::switches_user(policy)) {
    for (const auto& path : {dir, dir / "tmp"})
      if (::chown(path.c_str(), policy.job_uid, policy.job_gid) != 0)
        throw std::system_error(errno, std::generic_category(), "chown " + path.string());
  }
  if (policy.mode != SandboxMode::off && !policy.cgroup_parent.empty()) {
    const fs::path cgroup = fs::path(policy.cgroup_parent) / name;
    std::string why;
    if (::mkdir(cgroup.c_str(), 0755) != 0) {
      why = errno_text("mkdir " + cgroup.string());
    } else if (!write_control_file(cgroup / "memory.max", std::to_string(policy.memory_bytes))) {
      why = errno_text("writing " + (cgroup / "memory.max").string());
    } else if (!write_control_file(cgroup / "pids.max", std::to_string(policy.max_processes))) {
      why = errno_text("writing " + (cgroup / "pids.max").string());
    } else {
      write_control_file(cgroup / "memory.swap.max", "0"); // absent without swap accounting
      runner.cgroup = cgroup.string();
    }
    if (runner.cgroup.empty()) {
      ::rmdir(cgroup.c_str());
      runner.cgroup_skipped = why;
    }
  }
  return runner;
}

SandboxPolicy policy_for_side(SandboxPolicy policy, const std::string& side) {
  if (side == "ref")
    return policy;
  for (auto& dir : policy.shared_writable)
    policy.shared_readonly.push_back(std::move(dir));
  policy.shared_writable.clear();
  return policy;
}

namespace {

// Where a runner with the shared cache read-only builds instead (its own directory, gone with
// it), and the switch that tells the torch_cuda type's builder so.
void add_cache_view(const SandboxPolicy& policy, std::vector<std::string>& env) {
  if (policy.shared_readonly.empty())
    return;
  env.emplace_back("KEVAL_CACHE_READ_ONLY=1");
  env.push_back("KEVAL_PRIVATE_CACHE_DIR=" +
                (fs::path(policy.runner_dir) / ".keval-cache").string());
}

} // namespace

std::vector<std::string> sandbox_environment(const SandboxPolicy& policy) {
  std::vector<std::string> env;
  if (policy.mode == SandboxMode::off) {
    // Nothing is enforced, but keval's own builder still keeps a candidate's builds to itself.
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
      const std::string_view entry(*e);
      if (entry.rfind("KEVAL_CACHE_READ_ONLY=", 0) != 0 &&
          entry.rfind("KEVAL_PRIVATE_CACHE_DIR=", 0) != 0 && !is_own_work_queue_setting(entry))
        env.emplace_back(entry);
    }
    add_cache_view(policy, env);
    return env;
  }
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const auto eq = entry.find('=');
    if (eq != std::string_view::npos && allowed(entry.substr(0, eq)) &&
        !is_own_work_queue_setting(entry))
      env.emplace_back(entry);
  }
  const fs::path dir = policy.runner_dir;
  env.push_back("HOME=" + dir.string());
  env.push_back("TMPDIR=" + (dir / "tmp").string());
  env.push_back("XDG_CACHE_HOME=" + (dir / ".cache").string());
  env.push_back("TRITON_CACHE_DIR=" + (dir / ".triton").string());
  env.push_back("TORCH_EXTENSIONS_DIR=" + (dir / "torch_extensions").string());
  if (!policy.shared_writable.empty())
    env.push_back("KEVAL_CACHE_DIR=" + policy.shared_writable.front());
  else if (!policy.shared_readonly.empty())
    env.push_back("KEVAL_CACHE_DIR=" + policy.shared_readonly.front());
  add_cache_view(policy, env);
  return env;
}

void remove_runner_place(const SandboxPolicy& policy) {
  if (!policy.cgroup.empty()) {
    write_control_file(fs::path(policy.cgroup) / "cgroup.kill", "1");
    ::rmdir(policy.cgroup.c_str());
  }
  if (!policy.runner_dir.empty()) {
    remove_tree(policy.runner_dir); // what is left, the host's sweep reports
    forget_on_termination(policy.runner_dir);
  }
}

std::string limit_that_ended(const SandboxPolicy& policy) {
  if (policy.cgroup.empty())
    return {};
  const fs::path cgroup = policy.cgroup;
  if (event_count(cgroup / "memory.events", "oom_kill") > 0)
    return "exceeded its memory limit of " + bytes_text(policy.memory_bytes) +
           " (cgroup memory.max) and was killed";
  if (event_count(cgroup / "pids.events", "max") > 0)
    return "reached its limit of " + std::to_string(policy.max_processes) +
           " processes and threads (cgroup pids.max)";
  return {};
}

std::vector<std::string> missing_layers(const json::object& report) {
  std::vector<std::string> lines;
  const json::value* skipped = report.if_contains("skipped");
  if (skipped == nullptr || !skipped->is_object())
    return {"the runner reported no sandbox"};
  for (const auto& [name, why] : skipped->as_object())
    lines.push_back(std::string(name) + ": " +
                    (why.is_string() ? std::string(why.as_string()) : "unavailable"));
  return lines;
}

namespace {

// A table grown to a soft limit of a million descriptors would cost the runner megabytes.
constexpr rlim_t kChannelCeiling = 1 << 16;

// Moves `fd` to the highest free descriptor below the soft RLIMIT_NOFILE (and kChannelCeiling),
// close-on-exec, and closes it. Lowest-free allocation reaches that number only in a process
// that holds every other one, so user code and the tools it starts (which inherit the limit and
// the channel guard) never meet it. Returns the new descriptor, or -1 with `error` set.
int move_to_top(int fd, std::string& error) {
  struct rlimit files {};
  if (::getrlimit(RLIMIT_NOFILE, &files) != 0 || files.rlim_cur < 16) {
    error = "no usable RLIMIT_NOFILE to place the channel under";
    return -1;
  }
  const int top = static_cast<int>(std::min<rlim_t>(files.rlim_cur, kChannelCeiling)) - 1;
  for (int target = top; target > top - 16; --target) {
    if (target == fd) {
      ::fcntl(fd, F_SETFD, FD_CLOEXEC);
      return fd;
    }
    if (::fcntl(target, F_GETFD) != -1 || errno != EBADF)
      continue; // in use
    if (::dup3(fd, target, O_CLOEXEC) != target) {
      error = errno_text("dup3 of the channel to descriptor " + std::to_string(target));
      return -1;
    }
    ::close(fd);
    return target;
  }
  error =
      "descriptors " + std::to_string(top - 15) + " to " + std::to_string(top) + " are all in use";
  return -1;
}

} // namespace

// -------------------------------------------------------------------------------------------
// Runner

json::object apply_sandbox(const SandboxPolicy& policy, int* channel_fd) {
  Report report;
  const size_t threads = thread_count();
  const bool off = policy.mode == SandboxMode::off;
  const char* off_reason = "--sandbox off";

  // Limits: a cgroup holds this process and all it starts; otherwise per-process rlimits.
  std::string error;
  bool in_cgroup = false;
  if (off) {
    report.add("memory", false, off_reason);
    report.add("processes", false, off_reason);
  } else if (!policy.cgroup.empty()) {
    in_cgroup = write_control_file(fs::path(policy.cgroup) / "cgroup.procs", "0");
    if (in_cgroup) {
      report.add("memory", true, bytes_text(policy.memory_bytes) + " (cgroup v2 memory.max)");
      report.add("processes", true,
                 std::to_string(policy.max_processes) +
                     " processes and threads (cgroup v2 pids.max)");
    } else {
      error = errno_text("joining " + policy.cgroup);
    }
  }
  if (!off && !in_cgroup) {
    const std::string why_not_cgroup = !error.empty()                   ? error
                                       : !policy.cgroup_skipped.empty() ? policy.cgroup_skipped
                                                                        : "no delegated cgroup v2";
    std::string e;
    // AddressSanitizer maps terabytes of shadow memory as private writable mappings, all of
    // which RLIMIT_DATA counts: a sanitized runner could not even start under it.
    if (kAddressSanitizer) {
      report.add("memory", false,
                 "this keval-worker is built with AddressSanitizer, whose shadow memory "
                 "RLIMIT_DATA would count (" +
                     why_not_cgroup + ")");
    } else if (lower_limit(RLIMIT_DATA, policy.memory_bytes, e)) {
      rlimit_memory_bytes = policy.memory_bytes;
      report.add("memory", true,
                 bytes_text(policy.memory_bytes) +
                     " of heap and private mappings per process (RLIMIT_DATA; " + why_not_cgroup +
                     ")");
    } else {
      report.add("memory", false, e);
    }
  }
  if (!off) {
    std::string e;
    const bool files = lower_limit(RLIMIT_FSIZE, policy.max_file_bytes, e) &&
                       lower_limit(RLIMIT_NOFILE, policy.max_open_files, e);
    report.add("files", files,
               files ? "files up to " + bytes_text(policy.max_file_bytes) + ", " +
                           std::to_string(policy.max_open_files) + " open descriptors"
                     : e);
  } else {
    report.add("files", false, off_reason);
  }

  // Namespaces and the uid need a single thread (and the uid switch precedes the dropping of
  // capabilities it needs).
  if (off) {
    report.add("network", false, off_reason);
    report.add("user", false, off_reason);
  } else if (threads > 1) {
    const std::string why = "the runner already had " + std::to_string(threads) + " threads";
    report.add("network", false, why);
    report.add("user", false, why);
  } else {
    own_network(report);
    std::vector<std::string> must_read;
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec)
      must_read.push_back(exe.string());
    switch_user(policy, must_read, report);
  }
  if (!off && !in_cgroup) {
    std::string e;
    if (::getuid() == 0)
      report.add("processes", false,
                 "runs as root, which RLIMIT_NPROC does not bind, and no delegated cgroup v2");
    else if (lower_limit(RLIMIT_NPROC, policy.max_processes, e))
      report.add("processes", true,
                 std::to_string(policy.max_processes) +
                     " processes and threads (RLIMIT_NPROC: counts every process of uid " +
                     std::to_string(::getuid()) +
                     (::getuid() == policy.job_uid || policy.runner_uid_base == 0
                          ? ", which every runner shares"
                          : ", this runner's own") +
                     ")");
    else
      report.add("processes", false, e);
  }

  if (!policy.runner_dir.empty() && ::chdir(policy.runner_dir.c_str()) == 0)
    report.add("directory", true, "works in " + policy.runner_dir);
  else
    report.add("directory", false, errno_text("chdir " + policy.runner_dir));
  report.add("environment", !off,
             off ? std::string(off_reason)
                 : "allow-listed variables only; HOME, TMPDIR and the tools' caches in its own "
                   "directory");

  // Privileges: always, also with --sandbox off (they keep the verdict out of reach).
  const json::object privileges = restrict_user_code_process();
  const bool privileged_ok = !privileges.contains("errors");
  report.add("privileges", privileged_ok,
             privileged_ok ? "no_new_privs, no capabilities, not dumpable"
                           : json::serialize(privileges.at("errors")));

  // Last of all, in every mode (the guard denies seccomp() itself), once the descriptor limit is
  // final.
  const auto guard_channel = [&] {
    if (channel_fd == nullptr)
      return;
    std::string error;
    const int moved = move_to_top(*channel_fd, error);
    if (moved < 0) {
      report.add("channel", false, error);
      return;
    }
    *channel_fd = moved;
    const detail::SeccompLayer guard = detail::install_channel_guard(moved);
    report.add("channel", guard.active, guard.detail);
  };
  if (off) {
    for (const char* name : {"filesystem", "tcp", "signals", "seccomp"})
      report.add(name, false, off_reason);
    guard_channel();
    return report.finish(policy.mode);
  }
  detail::LandlockRequest landlock;
  landlock.private_dir = policy.private_dir;
  landlock.writable_dirs.push_back(policy.runner_dir);
  for (const auto& dir : policy.shared_writable)
    if (fs::is_directory(dir))
      landlock.writable_dirs.push_back(dir);
  for (const auto& dir : policy.shared_readonly)
    if (fs::is_directory(dir))
      landlock.readable_dirs.push_back(dir);
  if (fs::is_directory("/dev/shm"))
    landlock.writable_dirs.push_back("/dev/shm");
  // Its own /proc/<pid>: the CUDA driver names its threads through /proc/self/task/*/comm, and
  // cuInit fails (CUDA_ERROR_OPERATING_SYSTEM) when it cannot. Nothing there reaches another
  // process (other processes' entries are not beneath it).
  landlock.writable_dirs.push_back("/proc/" + std::to_string(::getpid()));
  // A whole program's step (uid_of_pid set, worker/program/step_process.hpp) is usually a shell
  // whose children run CUDA: each needs its own /proc entry, and their pids are not known yet,
  // so /proc itself is writable to it. What that opens is little: another process's entry needs
  // ptrace access, which Landlock denies outside this domain, and the sysctls under /proc/sys
  // stay root's by their file modes; hence never for a step that kept uid 0 (--job-user root),
  // whose programs then have only their shell's entry.
  if (policy.uid_of_pid != 0 && ::geteuid() != 0)
    landlock.writable_dirs.push_back("/proc");
  landlock.writable_files = writable_devices();
  if (threads > 1) {
    const std::string why = "the runner already had " + std::to_string(threads) + " threads";
    for (const char* name : {"filesystem", "tcp", "signals"})
      report.add(name, false, why);
  } else {
    const detail::LandlockOutcome outcome = detail::restrict_with_landlock(landlock);
    report.add("filesystem", outcome.filesystem.active, outcome.filesystem.detail);
    report.add("tcp", outcome.tcp.active, outcome.tcp.detail);
    report.add("signals", outcome.scope.active, outcome.scope.detail);
  }
  const detail::SeccompLayer seccomp = detail::install_seccomp_filter();
  report.add("seccomp", seccomp.active, seccomp.detail);
  guard_channel();
  return report.finish(policy.mode);
}

uint64_t limit_cpu_time(uint64_t seconds) {
  struct rlimit current {};
  ::getrlimit(RLIMIT_CPU, &current);
  rlim_t soft = static_cast<rlim_t>(seconds);
  if (current.rlim_max != RLIM_INFINITY && soft >= current.rlim_max)
    return current.rlim_cur;
  // SIGXCPU at the soft limit, SIGKILL at the hard one.
  struct rlimit wanted {
    soft, soft + 5
  };
  ::setrlimit(RLIMIT_CPU, &wanted);
  return seconds;
}

std::string explain_allocation_failure(const std::string& message) {
  const uint64_t limit = rlimit_memory_bytes.load();
  if (limit == 0)
    return message;
  const bool device =
      message.find("CUDA") != std::string::npos || message.find("cuda") != std::string::npos;
  bool host_allocation = false;
  // "failed to map segment": a shared library (torch's are GiBs) that no longer fits.
  for (const char* marker : {"Cannot allocate memory", "can't allocate memory", "MemoryError",
                             "std::bad_alloc", "Unable to allocate", "failed to map segment"})
    host_allocation = host_allocation || message.find(marker) != std::string::npos;
  if (!host_allocation || device)
    return message;
  return "exceeded its memory limit of " + bytes_text(limit) + " (RLIMIT_DATA): " + message;
}

} // namespace keval::worker::isolation
