#include "worker/engine/device_turn.hpp"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <optional>
#include <string>
#include <system_error>
#include <thread>

#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace keval::worker {

namespace {

std::string errno_text(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

// `lock_file` opened, created owner-only when missing; never through a link, and only a file of
// ours: another user's could be held forever. Empty, with `why_not` set, otherwise.
UniqueFd open_own_lock_file(const std::filesystem::path& lock_file, std::string& why_not) {
  UniqueFd file(::open(lock_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!file) {
    why_not = errno_text(("opening " + lock_file.string()).c_str());
    return file;
  }
  struct stat st {};
  if (::fstat(file.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
    why_not = lock_file.string() + " is not a regular file of this user";
    file.reset();
  }
  return file;
}

} // namespace

DeviceTurn::DeviceTurn(const std::filesystem::path& lock_file, std::chrono::milliseconds patience,
                       Hold hold) {
  wait(lock_file, std::chrono::steady_clock::now() + patience, -1, std::chrono::milliseconds(2),
       hold);
  if (!held_ && why_not_.empty())
    why_not_ =
        "another process kept the turn longer than " + std::to_string(patience.count()) + " ms";
}

DeviceTurn::DeviceTurn(const std::filesystem::path& lock_file, UntilReadable until) {
  wait(lock_file, std::chrono::steady_clock::time_point::max(), until.fd, until.interval,
       Hold::exclusive);
}

void DeviceTurn::wait(const std::filesystem::path& lock_file,
                      std::chrono::steady_clock::time_point deadline, int interrupt_fd,
                      std::chrono::milliseconds interval, Hold hold) {
  const auto start = std::chrono::steady_clock::now();
  const auto waited = [&] {
    waited_ms_ =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  };
  file_ = open_own_lock_file(lock_file, why_not_);
  if (!file_)
    return;
  // flock has no timed wait: tried again every `interval` (2 ms for an open or a job: nothing
  // beside what they wait for, a tenth of a second or more).
  const auto readable = [interrupt_fd](int timeout_ms) {
    pollfd fd{interrupt_fd, POLLIN, 0};
    return ::poll(&fd, 1, timeout_ms);
  };
  for (;;) {
    // What waits for the turn gives way to what it is interrupted for, also when the turn is
    // free (a worker's job that came as it said hello).
    if (interrupt_fd >= 0 && readable(0) > 0) {
      interrupted_ = true;
      why_not_ = "gave up waiting: there was something to read";
      break;
    }
    if (::flock(file_.get(), (hold == Hold::shared ? LOCK_SH : LOCK_EX) | LOCK_NB) == 0) {
      held_ = true;
      break;
    }
    if (errno != EWOULDBLOCK && errno != EINTR) {
      why_not_ = errno_text("flock");
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline)
      break;
    if (interrupt_fd < 0) {
      std::this_thread::sleep_for(interval);
      continue;
    }
    // Something to read, or the writer gone: either way, the next round gives up.
    if (readable(static_cast<int>(interval.count())) < 0 && errno != EINTR) {
      why_not_ = errno_text("poll");
      break;
    }
  }
  waited();
  if (!held_)
    file_.reset();
}

namespace {

std::filesystem::path lock_directory() {
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::temp_directory_path(ec);
  return ec ? std::filesystem::path("/tmp") : dir;
}

} // namespace

std::filesystem::path DeviceTurn::open_lock_file() {
  return lock_directory() / ("keval-device-open-" + std::to_string(::geteuid()) + ".lock");
}

std::filesystem::path OpenTurn::precedence_file() {
  return lock_directory() /
         ("keval-device-open-precedence-" + std::to_string(::geteuid()) + ".lock");
}

OpenTurn::OpenTurn(const std::filesystem::path& turn_file,
                   const std::filesystem::path& precedence_file, int taken_fd,
                   std::chrono::milliseconds patience) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline = start + patience;
  std::optional<Clock::time_point> taken_at;
  const auto ms_since = [](Clock::time_point from) {
    return std::chrono::duration<double, std::milli>(Clock::now() - from).count();
  };
  turn_ = open_own_lock_file(turn_file, why_not_);
  // Without the precedence file every waiter tries the turn as it comes: no order, as before.
  std::string no_precedence;
  UniqueFd precedence =
      precedence_file.empty() ? UniqueFd() : open_own_lock_file(precedence_file, no_precedence);
  bool precedence_held = false; // shared, while this taken worker waits
  const auto is_taken = [&] {
    if (taken_at)
      return true;
    pollfd fd{taken_fd, POLLIN, 0};
    if (taken_fd >= 0 && ::poll(&fd, 1, 0) > 0)
      taken_at = Clock::now();
    return taken_at.has_value();
  };
  // A spare's look: no taken worker waits (it holds the file shared, so it cannot be taken
  // exclusively). Let go at once: a taken worker that comes meanwhile waits for one try at most.
  const auto no_taken_worker_waits = [&] {
    if (!precedence || ::flock(precedence.get(), LOCK_EX | LOCK_NB) != 0)
      return !precedence;
    ::flock(precedence.get(), LOCK_UN);
    return true;
  };
  while (turn_) {
    const bool taken = is_taken();
    if (taken && precedence && !precedence_held)
      precedence_held = ::flock(precedence.get(), LOCK_SH | LOCK_NB) == 0;
    if (taken || no_taken_worker_waits()) {
      if (::flock(turn_.get(), LOCK_EX | LOCK_NB) == 0) {
        held_ = true;
        break;
      }
      if (errno != EWOULDBLOCK && errno != EINTR) {
        why_not_ = errno_text("flock");
        break;
      }
    }
    if (Clock::now() >= deadline) {
      why_not_ = "waited its patience of " + std::to_string(patience.count()) + " ms" +
                 (taken ? " (taken by a job)" : " (a spare)");
      break;
    }
    // Tried every 2 ms, as DeviceTurn: an open takes a tenth of a second or more.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  waited_ms_ = ms_since(start);
  if (taken_at)
    waited_taken_ms_ = ms_since(*taken_at);
  if (!held_)
    turn_.reset();
  // `precedence` closes here: a taken worker's shared hold goes once it holds the turn.
}

namespace {

// `keval-device-<kind>-<euid>-<gpu>.lock`, `gpu` with only letters and digits kept.
std::filesystem::path gpu_lock_file(const char* kind, const std::string& gpu) {
  std::string name = gpu.empty() ? "0" : gpu;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)))
      c = '_';
  return lock_directory() / ("keval-device-" + std::string(kind) + "-" +
                             std::to_string(::geteuid()) + "-" + name + ".lock");
}

} // namespace

std::filesystem::path DeviceTurn::timing_lock_file(const std::string& gpu) {
  return gpu_lock_file("timing", gpu);
}

std::filesystem::path DeviceTurn::timing_wish_file(const std::string& gpu) {
  return gpu_lock_file("timing-wish", gpu);
}

std::string DeviceTurn::gpu_of(const Engine& engine) {
  if (engine.device().device_type != KEVAL_DEVICE_CUDA)
    return {};
  const boost::json::object device = engine.describe();
  const boost::json::value* bus = device.if_contains("pci_bus_id");
  return bus != nullptr && bus->is_string() ? std::string(bus->as_string())
                                            : std::to_string(engine.device().device_id);
}

TimingWish::TimingWish(const std::filesystem::path& wish_file, std::chrono::milliseconds patience)
    : file_(wish_file), turn_(wish_file, patience, DeviceTurn::Hold::shared) {}

TimingWish::~TimingWish() {
  if (turn_.held()) // now, before the turn goes: the GPU's idle time starts here
    ::utimensat(AT_FDCWD, file_.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
}

bool TimingWish::idle_for(const std::filesystem::path& wish_file, std::chrono::milliseconds idle) {
  std::string why_not;
  const UniqueFd file = open_own_lock_file(wish_file, why_not);
  if (!file)
    return true;
  if (::flock(file.get(), LOCK_EX | LOCK_NB) != 0)
    return false; // a job holds the GPU
  struct stat st {};
  const bool stated = ::fstat(file.get(), &st) == 0;
  ::flock(file.get(), LOCK_UN);
  if (!stated)
    return true;
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  const double since_ms =
      (now.tv_sec - st.st_mtim.tv_sec) * 1e3 + (now.tv_nsec - st.st_mtim.tv_nsec) / 1e6;
  return since_ms >= static_cast<double>(idle.count());
}

} // namespace keval::worker
