#include "store/detail/blob_store.hpp"

#include "request/detail/zlib_inflate.hpp"

#include <cerrno>
#include <system_error>

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <unistd.h>
#include <zlib.h>

namespace keval::store::detail {

namespace fs = std::filesystem;

namespace {

constexpr const char* kLockFile = ".lock";

[[noreturn]] void fail(int error, const std::string& what) {
  throw std::system_error(error, std::generic_category(), what);
}

std::string read_all(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT)
      throw BlobInvalid("it is missing");
    fail(errno, "reading " + path.string());
  }
  std::string text;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      fail(error, "reading " + path.string());
    }
    if (n == 0)
      break;
    text.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

void write_all(int fd, const unsigned char* data, size_t size, const std::string& path) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      fail(errno, "writing " + path);
    done += static_cast<size_t>(n);
  }
}

} // namespace

std::string sha256_hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &size, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("SHA-256 failed (OpenSSL)");
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex(size * 2, '0');
  for (unsigned int i = 0; i < size; ++i) {
    hex[2 * i] = kDigits[digest[i] >> 4];
    hex[2 * i + 1] = kDigits[digest[i] & 0xf];
  }
  return hex;
}

bool is_sha256_hex(std::string_view text) {
  return text.size() == 64 && text.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

BlobStore::BlobStore(fs::path dir) : dir_(std::move(dir)) {
  fs::create_directories(dir_);
  fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::replace);
}

fs::path BlobStore::path(const std::string& sha256) const {
  if (!is_sha256_hex(sha256)) // never a name that leaves the directory
    throw std::invalid_argument("invalid blob name '" + sha256 + "'");
  return dir_ / sha256;
}

uint64_t BlobStore::write(const std::string& sha256, std::string_view content) const {
  const fs::path final_path = path(sha256);
  uLongf size = compressBound(static_cast<uLong>(content.size()));
  std::vector<unsigned char> compressed(size);
  // Level 6 (zlib's default): sources shrink 3-5x; base64 of zlib data still loses its 4/3.
  if (compress2(compressed.data(), &size, reinterpret_cast<const Bytef*>(content.data()),
                static_cast<uLong>(content.size()), Z_DEFAULT_COMPRESSION) != Z_OK)
    throw std::runtime_error("cannot compress blob " + sha256 + " (zlib)");
  std::string tmp = (dir_ / (sha256 + ".XXXXXX")).string();
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC); // mode 0600; unique: writers may race
  if (fd < 0)
    fail(errno, "creating a blob in " + dir_.string());
  try {
    write_all(fd, compressed.data(), size, tmp);
    if (::fdatasync(fd) != 0)
      fail(errno, "syncing " + tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    const int error = errno;
    ::unlink(tmp.c_str());
    fail(error, "writing " + final_path.string());
  }
  return size;
}

std::string BlobStore::read(const std::string& sha256, uint64_t size) const {
  const std::string compressed = read_all(path(sha256));
  std::vector<uint8_t> content;
  try {
    // Capped at the size the signed record states: a blob cannot make us inflate more.
    content = request::detail::inflate_zlib(
        {reinterpret_cast<const uint8_t*>(compressed.data()), compressed.size()}, size);
  } catch (const std::runtime_error& e) {
    throw BlobInvalid(std::string("it does not inflate: ") + e.what());
  }
  if (content.size() != size)
    throw BlobInvalid("it inflates to " + std::to_string(content.size()) + " bytes, not " +
                      std::to_string(size));
  std::string text(content.begin(), content.end());
  if (sha256_hex(text) != sha256)
    throw BlobInvalid("its content does not match its SHA-256");
  return text;
}

bool BlobStore::exists(const std::string& sha256, uint64_t* bytes) const {
  std::error_code ec;
  const auto status = fs::symlink_status(path(sha256), ec);
  if (ec || !fs::is_regular_file(status))
    return false;
  if (bytes != nullptr)
    *bytes = fs::file_size(path(sha256), ec);
  return !ec;
}

void BlobStore::remove(const std::string& sha256) const {
  std::error_code ec;
  fs::remove(path(sha256), ec);
}

void BlobStore::quarantine(const std::string& sha256) const {
  const fs::path p = path(sha256);
  std::error_code ec;
  fs::rename(p, p.string() + ".refused", ec);
}

std::vector<BlobStore::Entry> BlobStore::list() const {
  std::vector<Entry> blobs;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    std::error_code size_ec;
    if (!is_sha256_hex(name) || !entry.is_regular_file(size_ec))
      continue;
    const uint64_t bytes = entry.file_size(size_ec);
    if (!size_ec)
      blobs.push_back({name, bytes});
  }
  return blobs;
}

BlobStore::Lock::Lock(const BlobStore& store, bool exclusive) {
  const fs::path path = store.dir_ / kLockFile;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd_ < 0)
    fail(errno, "opening " + path.string());
  while (::flock(fd_, exclusive ? LOCK_EX : LOCK_SH) != 0) {
    if (errno == EINTR)
      continue;
    const int error = errno;
    ::close(fd_);
    fail(error, "locking " + path.string());
  }
}

BlobStore::Lock::~Lock() {
  ::close(fd_); // releases the lock
}

} // namespace keval::store::detail
