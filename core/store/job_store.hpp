// Job records on disk: one JSON file per job, replaced atomically (write, fsync, rename) each
// time a phase arrives, so whatever a job computed survives a crash of the worker or the host.
//
// Only the host writes records, and a record is loaded only if it verifies as the host's: each
// carries "format_version" and, as its last member, "mac": the HMAC-SHA256 (record_key.hpp) of
// the exact bytes of the record as serialized before "mac" was appended. Verifying needs no
// re-serialization, so it cannot be thrown off by how numbers or strings round-trip.
#pragma once

#include "store/record_key.hpp"

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

namespace keval::store {

// The layout of a stored record; a record of another version is refused.
inline constexpr int64_t kRecordFormatVersion = 1;

// A record on disk that does not verify as one this host wrote: unsigned, modified, signed with
// another key, of another format version, or filed under another job's id. what() says which.
class RecordRefused : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

struct StoredRecord {
  boost::json::object record; // as saved, plus "format_version" (without "mac")
  std::string mac;            // its MAC: equal MACs, equal records
};

class JobStore {
public:
  // Creates `root` if needed (mode 0700: records hold users' source code). The key is the state
  // directory's: `root`/../keys/record.key, made on first use.
  explicit JobStore(std::filesystem::path root);
  JobStore(std::filesystem::path root, RecordKey key);

  const std::filesystem::path& root() const { return root_; }
  std::filesystem::path record_path(const std::string& job_id) const;
  // Atomically replaces the job's record, signed; returns its MAC.
  std::string save(const std::string& job_id, const boost::json::object& record) const;
  // The job's record, or nullopt when there is none. Throws RecordRefused when the file is not
  // a record this host wrote for this job.
  std::optional<StoredRecord> load(const std::string& job_id) const;
  std::vector<std::string> list() const;
  void remove(const std::string& job_id) const;
  // Moves a refused record aside (`<id>.json.refused`, replacing an earlier one): kept for
  // whoever investigates, out of list() and load().
  void quarantine(const std::string& job_id) const;

private:
  std::filesystem::path root_;
  RecordKey key_;
};

} // namespace keval::store
