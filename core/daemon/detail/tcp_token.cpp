#include "daemon/detail/tcp_token.hpp"

#include "common/random_hex.hpp"

#include <cerrno>
#include <stdexcept>
#include <system_error>

#include <boost/beast/core/string.hpp>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <sys/stat.h>
#include <unistd.h>

namespace keval::daemon::detail {

namespace fs = std::filesystem;

namespace {

constexpr size_t kRandomBytes = 32;
constexpr size_t kMinTokenChars = 32;
constexpr size_t kMaxTokenChars = 1024;

[[noreturn]] void fail(int error, const std::string& what) {
  throw std::system_error(error, std::generic_category(), what);
}

std::string random_hex_token() {
  try {
    return random_hex(kRandomBytes);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("cannot draw a random TCP token: ") + e.what());
  }
}

// O_EXCL: when two daemons start at once, one creates the file and the other reads it.
bool create_token_file(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    if (errno == EEXIST)
      return false;
    fail(errno, "creating the TCP token file " + path.string());
  }
  std::string text = random_hex_token() + "\n";
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      ::unlink(path.c_str());
      fail(error, "writing the TCP token file " + path.string());
    }
    done += static_cast<size_t>(n);
  }
  OPENSSL_cleanse(text.data(), text.size());
  ::fsync(fd);
  ::close(fd);
  return true;
}

std::string read_token_file(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    fail(errno, "opening the TCP token file " + path.string());
  struct stat st {};
  const bool ours = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
                    (st.st_mode & 077) == 0;
  std::string text;
  if (ours && st.st_size <= static_cast<off_t>(kMaxTokenChars + 2)) {
    text.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      done += static_cast<size_t>(n);
    }
    text.resize(done);
  }
  ::close(fd);
  if (!ours)
    throw std::runtime_error("the TCP token file " + path.string() +
                             " must be a regular file owned by this user with no group or other "
                             "permissions (chmod 600), or be removed to have a new one made");
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r'))
    text.pop_back();
  const bool visible =
      text.find_first_not_of("!\"#$%&'()*+,-./0123456789:;<=>?@"
                             "ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`"
                             "abcdefghijklmnopqrstuvwxyz{|}~") == std::string::npos;
  if (text.size() < kMinTokenChars || text.size() > kMaxTokenChars || !visible)
    throw std::runtime_error("the TCP token file " + path.string() + " must hold one token of " +
                             std::to_string(kMinTokenChars) + " to " +
                             std::to_string(kMaxTokenChars) +
                             " visible ASCII characters (no spaces); remove it to have one made");
  return text;
}

} // namespace

std::string load_or_create_token(const fs::path& path) {
  if (const fs::path dir = path.parent_path(); !dir.empty() && !fs::exists(dir)) {
    fs::create_directories(dir);
    fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace);
  }
  create_token_file(path);
  return read_token_file(path);
}

bool bearer_token_matches(std::string_view header, std::string_view token) {
  constexpr std::string_view kScheme = "bearer ";
  if (header.size() < kScheme.size() ||
      !boost::beast::iequals(header.substr(0, kScheme.size()), kScheme))
    return false;
  std::string_view presented = header.substr(kScheme.size());
  while (!presented.empty() && presented.front() == ' ')
    presented.remove_prefix(1);
  while (!presented.empty() && (presented.back() == ' ' || presented.back() == '\t'))
    presented.remove_suffix(1);
  // The length is no secret (a generated token is always 64 characters); the contents are.
  return !token.empty() && presented.size() == token.size() &&
         CRYPTO_memcmp(presented.data(), token.data(), token.size()) == 0;
}

} // namespace keval::daemon::detail
