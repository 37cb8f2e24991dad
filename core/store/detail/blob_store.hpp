// Content-addressed storage for the large strings of job records (the request's sources and
// inline tensor data): STATE/blobs/<sha256 of the content>, zlib-compressed, written once and
// shared by every record that holds the same string.
//
// A blob is trusted for nothing: the record that refers to it is signed and carries the blob's
// SHA-256 and size, and get() returns the content only when it inflates to exactly that size and
// hashes to that digest.
#pragma once

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace keval::store::detail {

// 64 lowercase hex digits.
std::string sha256_hex(std::string_view bytes);
bool is_sha256_hex(std::string_view text);

// A blob that is missing, corrupt, or whose content is not the one its name claims.
class BlobInvalid : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

class BlobStore {
public:
  // Creates `dir` (0700) if needed.
  explicit BlobStore(std::filesystem::path dir);

  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path path(const std::string& sha256) const;

  // Writes `content` compressed under `sha256` (its digest, which the caller computed), replacing
  // whatever file had that name (atomically: write, fsync, rename). Returns the bytes on disk.
  uint64_t write(const std::string& sha256, std::string_view content) const;
  // The content of blob `sha256`, which must be `size` bytes. Throws BlobInvalid.
  std::string read(const std::string& sha256, uint64_t size) const;
  // Whether blob `sha256` is on disk; its size in `bytes` when it is.
  bool exists(const std::string& sha256, uint64_t* bytes = nullptr) const;
  void remove(const std::string& sha256) const;
  // Moves a blob that did not verify aside (<sha256>.refused), for whoever investigates.
  void quarantine(const std::string& sha256) const;

  struct Entry {
    std::string sha256;
    uint64_t bytes = 0;
  };
  // The blobs on disk (names that are digests; temporary and refused files are left out).
  std::vector<Entry> list() const;

  // Held shared by a writer from its first blob to its record's rename, and exclusively by a
  // sweep of unreferenced blobs: another process's sweep never removes a blob whose record is
  // not written yet. A file lock (flock), released when the object goes.
  class Lock {
  public:
    Lock(const BlobStore& store, bool exclusive);
    ~Lock();
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

  private:
    int fd_ = -1;
  };

private:
  std::filesystem::path dir_;
};

} // namespace keval::store::detail
