#include "worker/isolation/detail/landlock.hpp"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string_view>

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace keval::worker::isolation::detail {

namespace fs = std::filesystem;

namespace {

// The kernel's ABI, declared here rather than taken from <linux/landlock.h>: the build machines'
// headers are older than the kernels they run on (Debian 12's know ABI 2, the GPU machine's 4).
// The struct sizes tell the kernel which version we speak.
constexpr long kCreateRuleset = 444, kAddRule = 445, kRestrictSelf = 446;
constexpr uint32_t kCreateRulesetVersion = 1u << 0;
constexpr int kRulePathBeneath = 1;

constexpr uint64_t kExecute = 1ull << 0, kWriteFile = 1ull << 1, kReadFile = 1ull << 2,
                   kReadDir = 1ull << 3, kRefer = 1ull << 13, kTruncate = 1ull << 14;
constexpr uint64_t kAllV1 = (1ull << 13) - 1; // execute ... make_sym
constexpr uint64_t kNetBindTcp = 1ull << 0, kNetConnectTcp = 1ull << 1;
constexpr uint64_t kScopeAbstractUnixSocket = 1ull << 0, kScopeSignal = 1ull << 1;

struct RulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net; // ABI 4
  uint64_t scoped;             // ABI 6
};

struct __attribute__((packed)) PathBeneathAttr {
  uint64_t allowed_access;
  int32_t parent_fd;
};

class Fd {
public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0)
      ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

private:
  int fd_;
};

bool is_within(const fs::path& path, const fs::path& dir) {
  const auto rel = path.lexically_relative(dir);
  return !rel.empty() && *rel.begin() != "..";
}

// Adds `access` beneath `path`; false (with errno) when the path cannot be opened or the kernel
// refuses the rule.
bool add_path_rule(int ruleset, const fs::path& path, uint64_t access) {
  Fd fd(::open(path.c_str(), O_PATH | O_CLOEXEC));
  if (fd.get() < 0)
    return false;
  PathBeneathAttr attr{access, fd.get()};
  return ::syscall(kAddRule, ruleset, kRulePathBeneath, &attr, 0) == 0;
}

// Read access to everything but `private_dir`: Landlock grants, it cannot deny, so every sibling
// along the path from "/" to the private directory is granted instead. Its ancestors themselves
// stay unlistable (a grant on "/" would reach it), which nothing we run needs.
void grant_read_except(int ruleset, const fs::path& private_dir, uint64_t read) {
  if (private_dir.empty()) {
    add_path_rule(ruleset, "/", read);
    return;
  }
  fs::path ancestor = "/";
  for (const auto& component : private_dir.relative_path()) {
    std::error_code ec;
    for (fs::directory_iterator it(ancestor, ec), end; !ec && it != end; it.increment(ec)) {
      const fs::path entry = it->path();
      if (entry.filename() == component)
        continue;
      // A symbolic link is granted where it leads, unless that is the private directory.
      std::error_code resolve_ec;
      const fs::path target = fs::canonical(entry, resolve_ec);
      if (!resolve_ec && (target == private_dir || is_within(target, private_dir) ||
                          is_within(private_dir, target)))
        continue;
      add_path_rule(ruleset, entry, read);
    }
    ancestor /= component;
  }
}

std::string errno_text(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

} // namespace

int landlock_abi(std::string* why) {
  const long abi = ::syscall(kCreateRuleset, nullptr, 0, kCreateRulesetVersion);
  if (abi >= 1)
    return static_cast<int>(abi);
  if (why != nullptr)
    *why = errno == ENOSYS
               ? "this kernel has no Landlock (Linux 5.13 or later, CONFIG_SECURITY_LANDLOCK)"
           : errno == EOPNOTSUPP ? "Landlock is built in but disabled (boot with lsm=...,landlock)"
                                 : errno_text("landlock_create_ruleset");
  return 0;
}

LandlockOutcome restrict_with_landlock(const LandlockRequest& request) {
  LandlockOutcome out;
  std::string why;
  out.abi = landlock_abi(&why);
  if (out.abi == 0) {
    out.filesystem.detail = out.tcp.detail = out.scope.detail = why;
    return out;
  }
  uint64_t handled_fs = kAllV1;
  if (out.abi >= 2)
    handled_fs |= kRefer;
  if (out.abi >= 3)
    handled_fs |= kTruncate;
  // ioctl on devices (ABI 5) stays unhandled: CUDA's whole interface to /dev/nvidia* is ioctl.
  RulesetAttr attr{handled_fs, 0, 0};
  size_t attr_size = sizeof(uint64_t);
  if (out.abi >= 4) {
    attr.handled_access_net = kNetBindTcp | kNetConnectTcp; // and no rule allows any port
    attr_size = 2 * sizeof(uint64_t);
  }
  if (out.abi >= 6) {
    attr.scoped = kScopeAbstractUnixSocket | kScopeSignal;
    attr_size = sizeof(RulesetAttr);
  }
  const int ruleset = static_cast<int>(::syscall(kCreateRuleset, &attr, attr_size, 0));
  if (ruleset < 0) {
    out.filesystem.detail = out.tcp.detail = out.scope.detail =
        errno_text("landlock_create_ruleset");
    return out;
  }
  Fd ruleset_fd(ruleset);
  const uint64_t read = kExecute | kReadFile | kReadDir;
  const uint64_t file_write = kReadFile | kWriteFile | (out.abi >= 3 ? kTruncate : 0);

  std::error_code ec;
  const fs::path private_dir =
      request.private_dir.empty() ? fs::path() : fs::weakly_canonical(request.private_dir, ec);
  grant_read_except(ruleset, private_dir, read);
  std::string writable;
  for (const auto& dir : request.writable_dirs) {
    if (!add_path_rule(ruleset, dir, handled_fs)) {
      out.filesystem.detail = errno_text(("cannot allow writes beneath " + dir).c_str());
      return out;
    }
    writable += (writable.empty() ? "" : ", ") + dir;
  }
  std::string readonly;
  for (const auto& dir : request.readable_dirs)
    if (add_path_rule(ruleset, dir, read))
      readonly += (readonly.empty() ? "" : ", ") + dir;
  for (const auto& file : request.writable_files)
    add_path_rule(ruleset, file, file_write); // a device this machine lacks is simply not there

  if (::syscall(kRestrictSelf, ruleset, 0) != 0) {
    out.filesystem.detail = out.tcp.detail = out.scope.detail =
        errno_text("landlock_restrict_self");
    return out;
  }
  out.filesystem.active = true;
  out.filesystem.detail = "Landlock ABI " + std::to_string(out.abi) + ": reads everywhere but " +
                          (private_dir.empty() ? std::string("(none)") : private_dir.string()) +
                          "; writes only beneath " + writable + " and to devices it needs" +
                          (readonly.empty() ? std::string() : "; read-only: " + readonly);
  if (out.abi >= 4) {
    out.tcp.active = true;
    out.tcp.detail = "Landlock ABI " + std::to_string(out.abi) + ": no TCP bind or connect";
  } else {
    out.tcp.detail = "Landlock ABI " + std::to_string(out.abi) + " cannot restrict TCP (needs 4)";
  }
  if (out.abi >= 6) {
    out.scope.active = true;
    out.scope.detail = "no signals to, and no abstract Unix sockets of, processes outside the "
                       "runner";
  } else {
    out.scope.detail = "Landlock ABI " + std::to_string(out.abi) +
                       " cannot scope signals (needs 6): a runner may signal other processes "
                       "of its uid";
  }
  return out;
}

} // namespace keval::worker::isolation::detail
