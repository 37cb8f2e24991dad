// Job records on disk: one JSON file per job, replaced atomically (write, fsync, rename) each
// time a phase arrives, so whatever a job computed survives a crash of the worker or the host.
//
// Only the host writes records, and a record is loaded only if it verifies as the host's: each
// carries "format_version" and, as its last member, "mac": the HMAC-SHA256 (record_key.hpp) of
// the exact bytes of the record as serialized before "mac" was appended. Verifying needs no
// re-serialization, so it cannot be thrown off by how numbers or strings round-trip.
//
// The request's large strings (sources, inline tensor data) are not in the record: they are
// blobs (STATE/blobs/<sha256>, zlib-compressed, written once; detail/request_blobs.hpp says why),
// and the record lists them in "request_blobs" (where each was, its SHA-256 and size), under its
// MAC. A record loads only whole: a blob that is missing or whose content does not match its
// digest refuses the record. Blobs are reference-counted by the records that name them and
// removed with the last one.
//
// The counts are this process's, built from the directory when the store opens: one process
// keeps a state directory (the daemon holds its lock; `keval evaluate` has its own by default).
// A second one using the same directory at once is safe against losing a blob it is writing
// (a file lock), not against the other removing a blob both of them refer to.
#pragma once

#include "store/record_key.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

namespace keval::store {

// The layout of a stored record. 2: the request's large strings are blobs. 1 (request inline)
// still loads: same key, same MAC, a subset of the layout; it is rewritten as 2 if saved again.
// A record of any other version is refused.
inline constexpr int64_t kRecordFormatVersion = 2;
inline constexpr int64_t kOldestReadableRecordFormatVersion = 1;

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

// What the store holds on disk: records (refused ones excepted) and blobs, in bytes of files.
struct StoreUsage {
  uint64_t records = 0, record_bytes = 0;
  uint64_t blobs = 0, blob_bytes = 0;
  uint64_t total_bytes() const { return record_bytes + blob_bytes; }
};

class JobStore {
public:
  // Creates `root` if needed (mode 0700: records hold users' source code). The key is the state
  // directory's: `root`/../keys/record.key, made on first use; blobs are in `root`/../blobs.
  // Counts the records and blobs there, and removes blobs no record refers to (left by a crash
  // between a blob and its record).
  explicit JobStore(std::filesystem::path root);
  JobStore(std::filesystem::path root, RecordKey key);
  ~JobStore();
  JobStore(JobStore&&) noexcept;
  JobStore& operator=(JobStore&&) noexcept;

  const std::filesystem::path& root() const { return root_; }
  std::filesystem::path record_path(const std::string& job_id) const;
  // Atomically replaces the job's record, signed, its request's large strings in blobs;
  // returns its MAC.
  std::string save(const std::string& job_id, const boost::json::object& record) const;
  // The job's record with its request whole, or nullopt when there is none. Throws
  // RecordRefused when the file is not a record this host wrote for this job, or when one of
  // its blobs does not verify (that blob is moved aside to <sha256>.refused).
  std::optional<StoredRecord> load(const std::string& job_id) const;
  std::vector<std::string> list() const;
  // Removes the record and the blobs only it referred to.
  void remove(const std::string& job_id) const;
  // Moves a refused record aside (`<id>.json.refused`, replacing an earlier one): kept for
  // whoever investigates, out of list() and load(); its blobs are released as by remove().
  void quarantine(const std::string& job_id) const;

  StoreUsage usage() const;
  const std::filesystem::path& blob_dir() const;

private:
  struct Index;
  void write_record(const std::filesystem::path& tmp, const std::filesystem::path& final_path,
                    const std::string& text) const;
  // Puts a version-2 record's blobs back into its request. Throws RecordRefused.
  void restore_request(boost::json::object& record) const;

  std::filesystem::path root_;
  RecordKey key_;
  std::unique_ptr<Index> index_; // the blob store and the counts, under its own mutex
};

} // namespace keval::store
