#include "daemon/detail/state_lock.hpp"

#include <cerrno>
#include <stdexcept>
#include <system_error>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace keval::daemon::detail {

StateLock::StateLock(const std::filesystem::path& state_dir) {
  std::filesystem::create_directories(state_dir);
  const auto path = state_dir / "daemon.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0)
    throw std::system_error(errno, std::generic_category(), "opening " + path.string());
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    ::close(fd_);
    if (error == EWOULDBLOCK)
      throw std::runtime_error("another keval daemon is using the state directory '" +
                               state_dir.string() + "'");
    throw std::system_error(error, std::generic_category(), "locking " + path.string());
  }
}

StateLock::~StateLock() {
  ::close(fd_);
}

} // namespace keval::daemon::detail
