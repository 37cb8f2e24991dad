#include "common/control_file.hpp"

#include <cerrno>
#include <fcntl.h>
#include <unistd.h>

namespace keval {

bool write_control_file(const std::filesystem::path& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int saved = errno;
  ::close(fd);
  errno = saved;
  return ok;
}

} // namespace keval
