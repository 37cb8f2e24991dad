// The host's key for signing job records: 32 random bytes in STATE/keys/record.key (directory
// 0700, file 0600, owned by us), made on first use. Only the host holds it, so a record whose
// HMAC-SHA256 under it verifies was written by a keval host of this state directory; one planted
// or rewritten by anything else (a process a kernel left behind) does not verify.
//
// The key is as secret as the state directory is unreadable to user code: user-code processes
// run under our uid, so the sandbox must deny them STATE (the daemon additionally serves only
// the record it wrote itself, whatever its MAC; see JobManager).
#pragma once

#include <array>
#include <filesystem>
#include <string>
#include <string_view>

namespace keval::store {

class RecordKey {
public:
  // Reads `keys_dir`/record.key, creating the directory and the key first if needed (atomically:
  // concurrent first uses all end with the same key). Throws std::runtime_error when it cannot,
  // or when the file is not a private 32-byte regular file of ours.
  static RecordKey load_or_create(const std::filesystem::path& keys_dir);

  ~RecordKey();
  RecordKey(const RecordKey&) = default;
  RecordKey& operator=(const RecordKey&) = default;

  // HMAC-SHA256 of `bytes`, 64 lowercase hex digits.
  std::string mac_hex(std::string_view bytes) const;
  // True when `mac_hex` is the MAC of `bytes` (compared in constant time).
  bool verifies(std::string_view bytes, std::string_view mac_hex) const;

private:
  RecordKey() = default;
  std::array<unsigned char, 32> bytes_{};
};

} // namespace keval::store
