#include "supervisor/sandbox_setup.hpp"

#include "common/control_file.hpp"
#include "common/remove_tree.hpp"

#include "supervisor/process.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <fcntl.h>
#include <linux/magic.h>
#include <pwd.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

namespace keval::supervisor {

namespace fs = std::filesystem;
namespace json = boost::json;
using protocol::SandboxMode;
using protocol::SandboxPolicy;

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool has_word(const std::string& text, const std::string& word) {
  std::istringstream in(text);
  std::string w;
  while (in >> w)
    if (w == word)
      return true;
  return false;
}

// "nobody", "1000", "1000:1000" -> uid, gid.
std::pair<uint32_t, uint32_t> resolve_job_user(const std::string& spec) {
  const auto colon = spec.find(':');
  const std::string user = spec.substr(0, colon);
  const auto numeric = [](const std::string& s) {
    return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos && s.size() <= 10;
  };
  uint32_t uid = 0, gid = 0;
  if (numeric(user)) {
    uid = static_cast<uint32_t>(std::stoul(user));
    gid = uid;
  } else {
    const passwd* pw = ::getpwnam(user.c_str());
    if (pw == nullptr)
      throw SandboxOptionError("--job-user: no user named '" + user + "' on this machine");
    uid = pw->pw_uid;
    gid = pw->pw_gid;
  }
  if (colon != std::string::npos) {
    const std::string group = spec.substr(colon + 1);
    if (!numeric(group))
      throw SandboxOptionError("--job-user: the group after ':' must be a number, not '" + group +
                               "'");
    gid = static_cast<uint32_t>(std::stoul(group));
  }
  return {uid, gid};
}

// Memory and pids limits per runner need a cgroup v2 whose parent delegates both controllers.
// Runners get cgroups beside ours, so ours must be a leaf of a parent that enables them: when
// this process is alone in its cgroup C (a systemd unit or container of its own), it moves into
// C/keval-host and enables +memory +pids in C; runners then live in C/runner-*. Returns C, or
// empty with `why`.
std::string delegate_cgroup(std::string& why) {
  std::string own;
  {
    std::ifstream in("/proc/self/cgroup");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("0::", 0) == 0)
        own = line.substr(3);
  }
  struct statfs fs_info {};
  if (own.empty() || ::statfs("/sys/fs/cgroup", &fs_info) != 0 ||
      fs_info.f_type != CGROUP2_SUPER_MAGIC) {
    why = "no cgroup v2 hierarchy at /sys/fs/cgroup (cgroup v1 or none)";
    return {};
  }
  const fs::path base = fs::path("/sys/fs/cgroup") / fs::path(own).relative_path();
  const fs::path cgroup = base.filename() == "keval-host" ? base.parent_path() : base;
  const std::string controllers = read_text(cgroup / "cgroup.controllers");
  if (!has_word(controllers, "memory") || !has_word(controllers, "pids")) {
    why = "cgroup " + cgroup.string() +
          " is not given the memory and pids controllers by its parent (not delegated)";
    return {};
  }
  if (has_word(read_text(cgroup / "cgroup.subtree_control"), "memory") &&
      has_word(read_text(cgroup / "cgroup.subtree_control"), "pids") && cgroup != base)
    return cgroup.string(); // set up by us before (keval run after keval run in one unit)
  std::istringstream procs(read_text(cgroup / "cgroup.procs"));
  size_t others = 0;
  for (pid_t pid = 0; procs >> pid;)
    if (pid != ::getpid())
      ++others;
  if (others > 0) {
    why = "cgroup " + cgroup.string() + " holds " + std::to_string(others) +
          " other processes, so it cannot delegate to runners: start keval in a cgroup of its "
          "own (e.g. systemd-run --scope -p Delegate=yes, or a container) for per-runner memory "
          "and pids limits";
    return {};
  }
  const fs::path leaf = cgroup / "keval-host";
  if ((::mkdir(leaf.c_str(), 0755) != 0 && errno != EEXIST) ||
      !write_control_file(leaf / "cgroup.procs", std::to_string(::getpid()))) {
    why = "cannot move keval into " + leaf.string() + ": " + std::strerror(errno);
    return {};
  }
  if (!write_control_file(cgroup / "cgroup.subtree_control", "+memory +pids")) {
    why = "cannot enable memory and pids in " + (cgroup / "cgroup.subtree_control").string() +
          ": " + std::strerror(errno);
    return {};
  }
  return cgroup.string();
}

} // namespace

SandboxPolicy prepare_host_sandbox(const SandboxOptions& options, const fs::path& state_dir) {
  SandboxPolicy policy;
  policy.mode = options.mode;
  const auto [uid, gid] = resolve_job_user(options.job_user);
  policy.job_uid = uid;
  policy.job_gid = gid;
  policy.memory_bytes =
      options.memory_bytes != 0 ? options.memory_bytes : protocol::default_job_memory();
  policy.max_processes = options.max_processes;
  policy.runner_uid_base = options.runner_uid_base;
  const fs::path state = fs::absolute(state_dir);
  policy.private_dir = state.string();
  policy.work_root = (state / "work").string();
  fs::create_directories(policy.work_root);

  const bool switches_user = protocol::switches_user(policy);
  // The torch_cuda build cache is shared by jobs (a build is tens of seconds; a hit, none):
  // $KEVAL_CACHE_DIR, else $XDG_CACHE_HOME/keval or ~/.cache/keval as before, except when the job
  // uid could not reach that (root's home): then /var/cache/keval, the job uid's (or, where that
  // cannot be made, a directory beside the state directory).
  const char* explicit_cache = std::getenv("KEVAL_CACHE_DIR");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  fs::path cache;
  if (explicit_cache != nullptr && *explicit_cache != '\0')
    cache = explicit_cache;
  else if (!switches_user && xdg != nullptr && *xdg != '\0')
    cache = fs::path(xdg) / "keval";
  else if (!switches_user && home != nullptr && *home != '\0')
    cache = fs::path(home) / ".cache" / "keval";
  else
    cache = "/var/cache/keval";
  std::error_code ec;
  if (!fs::create_directories(cache, ec) && !fs::is_directory(cache)) {
    cache = state.parent_path() / (state.filename().string() + "-cache");
    fs::create_directories(cache, ec);
  }
  policy.shared_writable.push_back(fs::absolute(cache).string());

  if (switches_user) {
    // The job uid walks through the state directory to its runner's directory but can list
    // nothing there; records and keys keep their owner-only modes (and Landlock hides them).
    ::chmod(state.c_str(), 0711);
    ::chmod(policy.work_root.c_str(), 0711);
    // Structured bindings cannot be captured before C++20 compilers caught up (clang < 16).
    const uid_t job_uid = uid;
    const gid_t job_gid = gid;
    // Runners of uids of their own (runner_uid_base) share the cache through the job gid: every
    // entry group-writable (they run with umask 002), so one runner can rebuild what another
    // built.
    const auto own = [job_uid, job_gid](const fs::path& path) {
      struct stat st {};
      if (::lstat(path.c_str(), &st) != 0 || S_ISLNK(st.st_mode))
        return;
      if (st.st_uid != job_uid || st.st_gid != job_gid)
        ::lchown(path.c_str(), job_uid, job_gid);
      if ((st.st_mode & S_IWGRP) == 0 || (S_ISDIR(st.st_mode) && (st.st_mode & S_IXGRP) == 0))
        ::chmod(path.c_str(), (st.st_mode & 07777) | S_IRGRP | S_IWGRP |
                                  (S_ISDIR(st.st_mode) || (st.st_mode & S_IXUSR) ? S_IXGRP : 0));
    };
    own(cache);
    for (auto it = fs::recursive_directory_iterator(cache, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
      own(it->path());
  }
  if (options.mode != SandboxMode::off)
    policy.cgroup_parent = delegate_cgroup(policy.cgroup_skipped);
  return policy;
}

size_t remove_runner_places(const SandboxPolicy& policy) {
  if (policy.worker_tag.empty())
    return 0;
  const std::string& worker = policy.worker_tag;
  const std::string prefix = "runner-" + worker + "-"; // as place_runner names them
  const auto ours = [&prefix](const fs::path& p) {
    const std::string name = p.filename().string();
    return name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
           name.find_first_not_of("0123456789", prefix.size()) == std::string::npos;
  };
  size_t removed = 0;
  std::error_code ec;
  const fs::path work_root =
      policy.work_root.empty() ? fs::temp_directory_path(ec) : fs::path(policy.work_root);
  std::vector<fs::path> dirs, cgroups;
  for (fs::directory_iterator it(work_root, ec), end; !ec && it != end; it.increment(ec))
    if (ours(it->path()))
      dirs.push_back(it->path());
  if (!policy.cgroup_parent.empty())
    for (fs::directory_iterator it(policy.cgroup_parent, ec), end; !ec && it != end;
         it.increment(ec))
      if (ours(it->path()))
        cgroups.push_back(it->path());
  for (const auto& dir : dirs) {
    std::string why;
    if (remove_tree(dir, &why))
      ++removed;
    else
      spdlog::warn("runner directory of worker {} left behind: {}", worker, why);
  }
  // A cgroup goes with rmdir once its processes are gone (the group was killed before).
  for (const auto& cgroup : cgroups) {
    if (::rmdir(cgroup.c_str()) == 0 || errno == ENOENT)
      ++removed;
    else
      spdlog::warn("cgroup of worker {} left behind: {}: {}", worker, cgroup.string(),
                   std::strerror(errno));
  }
  return removed;
}

json::object probe_sandbox(const fs::path& worker_exe, const SandboxPolicy& policy,
                           std::chrono::milliseconds timeout) {
  json::object out;
  try {
    const CommandResult r = run_command(
        worker_exe, {"--sandbox-probe", json::serialize(protocol::to_json(policy))}, timeout);
    boost::system::error_code ec;
    const json::value v = json::parse(r.out, ec);
    if (!ec && v.is_object())
      return v.as_object();
    out["error"] = "the sandbox probe printed no report (" +
                   (r.timed_out ? std::string("timed out") : r.err.substr(0, 500)) + ")";
  } catch (const std::exception& e) {
    out["error"] = std::string("cannot start the sandbox probe: ") + e.what();
  }
  return out;
}

std::string describe_sandbox(const json::object& report) {
  if (const json::value* error = report.if_contains("error"))
    return "unknown (" + json::serialize(*error) + ")";
  std::string text;
  if (const json::value* mode = report.if_contains("mode"); mode && mode->is_string())
    text = std::string(mode->as_string()) + ":";
  std::string active;
  if (const json::value* a = report.if_contains("active"); a && a->is_array())
    for (const auto& name : a->as_array())
      if (name.is_string())
        active += (active.empty() ? " " : ", ") + std::string(name.as_string());
  text += " active" + (active.empty() ? std::string(" none") : active);
  if (const json::value* s = report.if_contains("skipped"); s && s->is_object())
    for (const auto& [name, why] : s->as_object())
      text += "; skipped " + std::string(name) + " (" +
              (why.is_string() ? std::string(why.as_string()) : "?") + ")";
  return text;
}

} // namespace keval::supervisor
