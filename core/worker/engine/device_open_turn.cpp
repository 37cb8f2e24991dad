#include "worker/engine/device_open_turn.hpp"

#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>
#include <thread>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace keval::worker {

namespace {

std::string errno_text(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

} // namespace

DeviceOpenTurn::DeviceOpenTurn(const std::filesystem::path& lock_file,
                               std::chrono::milliseconds patience) {
  const auto start = std::chrono::steady_clock::now();
  // Never through a link, and only a file of ours: another user's could be held forever.
  file_.reset(::open(lock_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!file_) {
    why_not_ = errno_text(("opening " + lock_file.string()).c_str());
    return;
  }
  struct stat st {};
  if (::fstat(file_.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
    why_not_ = lock_file.string() + " is not a regular file of this user";
    file_.reset();
    return;
  }
  // flock has no timed wait: tried again every 2 ms, which costs nothing beside an open that
  // takes a tenth of a second.
  const auto deadline = start + patience;
  for (;;) {
    if (::flock(file_.get(), LOCK_EX | LOCK_NB) == 0) {
      held_ = true;
      break;
    }
    if (errno != EWOULDBLOCK && errno != EINTR) {
      why_not_ = errno_text("flock");
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      why_not_ =
          "another process kept the turn longer than " + std::to_string(patience.count()) + " ms";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  waited_ms_ =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!held_)
    file_.reset();
}

std::filesystem::path DeviceOpenTurn::default_lock_file() {
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::temp_directory_path(ec);
  if (ec)
    dir = "/tmp";
  return dir / ("keval-device-open-" + std::to_string(::geteuid()) + ".lock");
}

} // namespace keval::worker
