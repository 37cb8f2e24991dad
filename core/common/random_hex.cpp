#include "common/random_hex.hpp"

#include <cerrno>
#include <cstring>
#include <system_error>
#include <vector>

#include <sys/random.h>

namespace keval {

std::string random_hex(size_t bytes) {
  std::vector<unsigned char> raw(bytes);
  for (size_t done = 0; done < bytes;) {
    const ssize_t n = ::getrandom(raw.data() + done, bytes - done, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      throw std::system_error(errno, std::generic_category(), "getrandom");
    done += static_cast<size_t>(n);
  }
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * bytes);
  for (unsigned char byte : raw) {
    hex += kDigits[byte >> 4];
    hex += kDigits[byte & 0xf];
  }
  ::explicit_bzero(raw.data(), raw.size()); // a secret's bytes do not stay in freed memory
  return hex;
}

} // namespace keval
