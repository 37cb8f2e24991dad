#include "common/beneath.hpp"

#include "common/unique_fd.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace keval {

namespace {

[[noreturn]] void fail(int error, const std::string& what) {
  throw std::system_error(error, std::generic_category(), what);
}

// The directory that holds the last component of `relative`, opened component by component with
// O_NOFOLLOW; `create` makes missing ones. Sets `leaf` to the last component.
UniqueFd open_parent(const std::filesystem::path& root, std::string_view relative, bool create,
                     std::string& leaf, std::string* why) {
  UniqueFd dir(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir) {
    if (why == nullptr)
      fail(errno, "cannot open " + root.string());
    *why = "cannot open " + root.string() + ": " + std::strerror(errno);
    return {};
  }
  // Refused, or thrown where the caller takes no reason.
  const auto refuse = [why](int error, const std::string& what) -> UniqueFd {
    if (why == nullptr)
      fail(error, what);
    *why = what;
    return {};
  };
  std::vector<std::string_view> parts;
  for (size_t at = 0; at <= relative.size();) {
    const size_t end = std::min(relative.find('/', at), relative.size());
    parts.push_back(relative.substr(at, end - at));
    at = end + 1;
  }
  // ".." would leave `root` (openat follows it like any name): refused wherever it stands, before
  // anything is created, so that no path a runner named can reach past its directory.
  if (std::find(parts.begin(), parts.end(), "..") != parts.end())
    return refuse(EACCES, std::string(relative) + " leaves " + root.string() + " (\"..\")");
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const std::string part(parts[i]);
    const std::string_view so_far =
        relative.substr(0, static_cast<size_t>(parts[i].data() - relative.data()) + part.size());
    if (create && ::mkdirat(dir.get(), part.c_str(), 0755) != 0 && errno != EEXIST)
      fail(errno, "cannot create directory " + std::string(so_far));
    UniqueFd next(
        ::openat(dir.get(), part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next) {
      const int error = errno;
      return refuse(error, std::string(so_far) + (error == ELOOP || error == ENOTDIR
                                                      ? " is not a directory (a symlink?)"
                                                      : std::string(": ") + std::strerror(error)));
    }
    dir = std::move(next);
  }
  leaf = std::string(parts.back());
  return dir;
}

} // namespace

void write_file_beneath(const std::filesystem::path& root, std::string_view relative,
                        std::string_view content, unsigned mode) {
  std::string leaf;
  UniqueFd dir = open_parent(root, relative, true, leaf, nullptr);
  UniqueFd file(::openat(dir.get(), leaf.c_str(),
                         O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!file)
    fail(errno, "cannot write " + std::string(relative));
  const char* data = content.data();
  size_t left = content.size();
  while (left > 0) {
    const ssize_t n = ::write(file.get(), data, left);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      fail(errno, "cannot write " + std::string(relative));
    data += n;
    left -= static_cast<size_t>(n);
  }
}

std::optional<std::string> read_file_beneath(const std::filesystem::path& root,
                                             std::string_view relative, size_t max_bytes,
                                             std::string* why) {
  std::string leaf, reason;
  UniqueFd dir = open_parent(root, relative, false, leaf, &reason);
  if (!dir) {
    if (why)
      *why = reason;
    return std::nullopt;
  }
  // O_NONBLOCK: a FIFO planted under the name must not hang the reader.
  UniqueFd file(::openat(dir.get(), leaf.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  struct stat st {};
  if (!file || ::fstat(file.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    if (why)
      *why = std::string(relative) + (!file && errno == ENOENT  ? " does not exist"
                                      : !file && errno == ELOOP ? " is a symlink"
                                                                : " is not a regular file");
    return std::nullopt;
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    if (why)
      *why = std::string(relative) + " is larger than " + std::to_string(max_bytes) + " bytes";
    return std::nullopt;
  }
  std::string content;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(file.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    content.append(buffer, static_cast<size_t>(n));
    if (content.size() > max_bytes) {
      if (why)
        *why = std::string(relative) + " grew past " + std::to_string(max_bytes) + " bytes";
      return std::nullopt;
    }
  }
  return content;
}

std::string read_descriptor(int fd, size_t max_bytes) {
  std::string content;
  char buffer[65536];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buffer, sizeof buffer, at);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      throw std::system_error(errno, std::generic_category(), "cannot read a handed-over file");
    if (n == 0)
      return content;
    if (content.size() + static_cast<size_t>(n) > max_bytes)
      throw std::length_error("a handed-over file is larger than " + std::to_string(max_bytes) +
                              " bytes");
    content.append(buffer, static_cast<size_t>(n));
    at += n;
  }
}

} // namespace keval
