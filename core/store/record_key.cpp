#include "store/record_key.hpp"

#include <cerrno>
#include <stdexcept>
#include <system_error>

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

namespace keval::store {

namespace fs = std::filesystem;

namespace {

constexpr const char* kKeyFile = "record.key";

[[noreturn]] void fail(int error, const std::string& what) {
  throw std::system_error(error, std::generic_category(), what);
}

// Reads exactly `size` bytes; false on a short file.
bool read_exactly(int fd, unsigned char* out, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, out + done, size - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

void write_all(int fd, const unsigned char* data, size_t size, const fs::path& path) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      fail(errno, "writing " + path.string());
    done += static_cast<size_t>(n);
  }
}

// A new random key, put in place with link(): it fails if another process made one first, and a
// reader never sees a half-written key.
void create_key(const fs::path& dir, const fs::path& path) {
  std::array<unsigned char, 32> key{};
  if (RAND_bytes(key.data(), static_cast<int>(key.size())) != 1)
    throw std::runtime_error("cannot draw a random record key (OpenSSL RAND_bytes failed)");
  std::string tmp = (dir / "record.key.XXXXXX").string();
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC); // mode 0600
  if (fd < 0)
    fail(errno, "creating a key file in " + dir.string());
  try {
    write_all(fd, key.data(), key.size(), tmp);
    if (::fsync(fd) != 0)
      fail(errno, "syncing " + tmp);
  } catch (...) {
    OPENSSL_cleanse(key.data(), key.size());
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  OPENSSL_cleanse(key.data(), key.size());
  ::close(fd);
  const int rc = ::link(tmp.c_str(), path.c_str());
  const int error = errno;
  ::unlink(tmp.c_str());
  if (rc != 0 && error != EEXIST)
    fail(error, "creating " + path.string());
  if (const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

std::string to_hex(const unsigned char* data, size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex(size * 2, '0');
  for (size_t i = 0; i < size; ++i) {
    hex[2 * i] = kDigits[data[i] >> 4];
    hex[2 * i + 1] = kDigits[data[i] & 0xf];
  }
  return hex;
}

} // namespace

RecordKey RecordKey::load_or_create(const fs::path& keys_dir) {
  fs::create_directories(keys_dir);
  fs::permissions(keys_dir, fs::perms::owner_all, fs::perm_options::replace);
  const fs::path path = keys_dir / kKeyFile;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
      if (errno != ENOENT)
        fail(errno, "opening " + path.string());
      create_key(keys_dir, path);
      continue; // read what is there now: ours, or the one another process made first
    }
    struct stat st {};
    RecordKey key;
    const bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
                    (st.st_mode & 077) == 0 &&
                    st.st_size == static_cast<off_t>(key.bytes_.size()) &&
                    read_exactly(fd, key.bytes_.data(), key.bytes_.size());
    ::close(fd);
    if (!ok)
      throw std::runtime_error("the record key " + path.string() +
                               " is not a 32-byte file readable by its owner (us) only; "
                               "remove it to have a new one made (records it signed will be "
                               "refused)");
    return key;
  }
  throw std::runtime_error("cannot create the record key " + path.string());
}

RecordKey::~RecordKey() {
  OPENSSL_cleanse(bytes_.data(), bytes_.size());
}

std::string RecordKey::mac_hex(std::string_view bytes) const {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (HMAC(EVP_sha256(), bytes_.data(), static_cast<int>(bytes_.size()),
           reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), mac,
           &size) == nullptr)
    throw std::runtime_error("HMAC-SHA256 failed (OpenSSL)");
  return to_hex(mac, size);
}

bool RecordKey::verifies(std::string_view bytes, std::string_view mac_hex) const {
  const std::string expected = this->mac_hex(bytes);
  return mac_hex.size() == expected.size() &&
         CRYPTO_memcmp(expected.data(), mac_hex.data(), expected.size()) == 0;
}

} // namespace keval::store
