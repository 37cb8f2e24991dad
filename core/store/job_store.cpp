#include "store/job_store.hpp"

#include "store/detail/blob_store.hpp"
#include "store/detail/request_blobs.hpp"

#include <cerrno>
#include <map>
#include <mutex>
#include <set>
#include <string_view>
#include <system_error>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <fcntl.h>
#include <unistd.h>

namespace keval::store {

namespace fs = std::filesystem;

namespace {

// The record's last member, as save() writes it: `,"mac":"<64 hex digits>"}`.
constexpr std::string_view kMacOpening = ",\"mac\":\"";
constexpr size_t kMacDigits = 64;
constexpr size_t kMacSuffixSize = kMacOpening.size() + kMacDigits + 2; // + `"}`

bool is_hex(std::string_view text) {
  return text.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

// The whole file; nullopt when it does not exist. Close-on-exec: a worker forked meanwhile must
// not inherit it.
std::optional<std::string> read_file(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT)
      return std::nullopt;
    throw std::system_error(errno, std::generic_category(), "reading " + path.string());
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
      throw std::system_error(error, std::generic_category(), "reading " + path.string());
    }
    if (n == 0)
      break;
    text.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

// The blobs a record file names, read without verifying it: for counting references only, where
// keeping a blob for a record that turns out not to be ours is the safe mistake.
std::set<std::string> blobs_named_by(const fs::path& record_file) {
  std::set<std::string> hashes;
  std::optional<std::string> text;
  try {
    text = read_file(record_file);
  } catch (const std::exception&) {
    return hashes;
  }
  if (!text)
    return hashes;
  boost::json::error_code ec;
  const auto value = boost::json::parse(*text, ec);
  const auto* refs =
      !ec && value.is_object() ? value.as_object().if_contains("request_blobs") : nullptr;
  if (refs != nullptr && refs->is_array())
    for (const auto& ref : refs->as_array())
      if (const auto* o = ref.if_object())
        if (const auto* sha = o->if_contains("sha256");
            sha != nullptr && sha->is_string() && detail::is_sha256_hex(sha->as_string()))
          hashes.emplace(sha->as_string());
  return hashes;
}

} // namespace

// References are counted in memory (see job_store.hpp): a blob is removed when the last record
// naming it is removed or rewritten without it. A blob is pinned (counted) before its record is
// written, so a concurrent release never removes a blob that a record about to land names.
struct JobStore::Index {
  struct Blob {
    size_t refs = 0;
    uint64_t bytes = 0;
    bool on_disk = false; // written by us, or found at start-up
  };
  struct Record {
    uint64_t bytes = 0;
    std::set<std::string> blobs;
  };

  explicit Index(fs::path dir) : store(std::move(dir)) {}

  // The mutators below keep `totals` in step (callers hold mutex): usage() is read on every
  // finished job and every size-cap step, so it must not walk thousands of entries.
  void blob_on_disk(const std::string& hash, uint64_t bytes) {
    Blob& blob = blobs[hash];
    blob_gone(blob);
    blob.on_disk = true;
    blob.bytes = bytes;
    ++totals.blobs;
    totals.blob_bytes += bytes;
  }
  void blob_gone(Blob& blob) {
    if (!blob.on_disk)
      return;
    blob.on_disk = false;
    --totals.blobs;
    totals.blob_bytes -= blob.bytes;
  }
  // Returns the blobs the record named before.
  std::set<std::string> record_written(const std::string& job_id, uint64_t bytes,
                                       std::set<std::string> hashes) {
    auto [it, added] = records.try_emplace(job_id);
    if (added)
      ++totals.records;
    else
      totals.record_bytes -= it->second.bytes;
    it->second.bytes = bytes;
    totals.record_bytes += bytes;
    std::swap(it->second.blobs, hashes);
    return hashes;
  }

  // Removes the blobs that `hashes` were the last references to.
  void release(const std::set<std::string>& hashes) {
    for (const auto& hash : hashes) {
      auto it = blobs.find(hash);
      if (it == blobs.end() || --it->second.refs > 0)
        continue;
      store.remove(hash); // under the mutex: nobody pins it again between the count and this
      blob_gone(it->second);
      blobs.erase(it);
    }
  }

  void forget_record(const std::string& job_id) {
    std::lock_guard lock(mutex);
    auto it = records.find(job_id);
    if (it == records.end())
      return;
    release(it->second.blobs);
    --totals.records;
    totals.record_bytes -= it->second.bytes;
    records.erase(it);
  }

  detail::BlobStore store;
  std::mutex mutex; // everything below
  std::map<std::string, Blob> blobs;
  std::map<std::string, Record> records;
  StoreUsage totals;
};

JobStore::JobStore(fs::path root)
    : JobStore(root, RecordKey::load_or_create(root.parent_path() / "keys")) {}

JobStore::JobStore(fs::path root, RecordKey key) : root_(std::move(root)), key_(std::move(key)) {
  fs::create_directories(root_);
  fs::permissions(root_, fs::perms::owner_all, fs::perm_options::replace);
  index_ = std::make_unique<Index>(root_.parent_path() / "blobs");
  Index& index = *index_;
  // Exclusive: no other process is between writing a blob and renaming the record naming it.
  const detail::BlobStore::Lock lock(index.store, /*exclusive=*/true);
  for (const auto& id : list()) {
    const fs::path path = record_path(id);
    std::error_code ec;
    const uint64_t bytes = fs::file_size(path, ec);
    if (ec)
      continue;
    std::set<std::string> hashes = blobs_named_by(path);
    for (const auto& hash : hashes)
      ++index.blobs[hash].refs;
    index.record_written(id, bytes, std::move(hashes));
  }
  for (const auto& blob : index.store.list()) {
    auto it = index.blobs.find(blob.sha256);
    if (it == index.blobs.end()) {
      index.store.remove(blob.sha256); // no record names it
      continue;
    }
    index.blob_on_disk(blob.sha256, blob.bytes);
  }
  // Temporary files of writers that died (none is writing now: we hold the lock).
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(index.store.dir(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() == 64 + 7 && name[64] == '.' && detail::is_sha256_hex(name.substr(0, 64)))
      fs::remove(entry.path(), ec);
  }
}

JobStore::~JobStore() = default;
JobStore::JobStore(JobStore&&) noexcept = default;
JobStore& JobStore::operator=(JobStore&&) noexcept = default;

const fs::path& JobStore::blob_dir() const {
  return index_->store.dir();
}

StoreUsage JobStore::usage() const {
  std::lock_guard lock(index_->mutex);
  return index_->totals;
}

fs::path JobStore::record_path(const std::string& job_id) const {
  // Job ids are validated ([A-Za-z0-9._-]) or generated; never let one escape the root.
  if (job_id.empty() || job_id.find('/') != std::string::npos || job_id == "." || job_id == "..")
    throw std::invalid_argument("invalid job id '" + job_id + "'");
  return root_ / (job_id + ".json");
}

std::string JobStore::save(const std::string& job_id, const boost::json::object& record) const {
  const fs::path final_path = record_path(job_id);
  const fs::path tmp = final_path.string() + ".tmp";
  boost::json::object stored = record;
  stored.erase("mac");
  stored.erase("request_blobs");
  std::vector<detail::ExtractedBlob> blobs;
  if (auto* request = stored.if_contains("request"))
    blobs = detail::extract_blobs(*request);
  stored["request_blobs"] = detail::refs_to_json(blobs);
  stored["format_version"] = kRecordFormatVersion;
  std::string text = boost::json::serialize(stored); // "{...}": never empty
  const std::string mac = key_.mac_hex(text);
  text.pop_back();
  text.append(kMacOpening).append(mac).append("\"}");

  Index& index = *index_;
  std::set<std::string> hashes;
  for (const auto& blob : blobs)
    hashes.insert(blob.ref.sha256);
  // Shared: another process's start-up sweep waits until this record names its blobs.
  const detail::BlobStore::Lock blob_lock(index.store, /*exclusive=*/false);
  {
    std::lock_guard lock(index.mutex);
    for (const auto& hash : hashes)
      ++index.blobs[hash].refs; // pinned: nothing removes them until released
  }
  try {
    for (const auto& blob : blobs) {
      {
        std::lock_guard lock(index.mutex);
        if (index.blobs[blob.ref.sha256].on_disk && index.store.exists(blob.ref.sha256))
          continue; // written once (a copy moved aside as refused is written again)
      }
      const uint64_t bytes = index.store.write(blob.ref.sha256, blob.content);
      std::lock_guard lock(index.mutex);
      index.blob_on_disk(blob.ref.sha256, bytes);
    }
    write_record(tmp, final_path, text);
  } catch (...) {
    std::lock_guard lock(index.mutex);
    index.release(hashes);
    throw;
  }
  std::lock_guard lock(index.mutex);
  index.release(index.record_written(job_id, text.size(), std::move(hashes)));
  return mac;
}

void JobStore::write_record(const fs::path& tmp, const fs::path& final_path,
                            const std::string& text) const {
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    throw std::system_error(errno, std::generic_category(), "writing " + tmp.string());
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw std::system_error(err, std::generic_category(), "writing " + tmp.string());
    }
    written += static_cast<size_t>(n);
  }
  ::fdatasync(fd);
  ::close(fd);
  fs::rename(tmp, final_path); // atomic: readers see the old or the new record, never half
}

std::optional<StoredRecord> JobStore::load(const std::string& job_id) const {
  const auto text = read_file(record_path(job_id));
  if (!text)
    return std::nullopt;
  // The MAC first, on the bytes as they are: nothing unverified is parsed.
  const std::string_view whole(*text);
  if (whole.size() < kMacSuffixSize + 2 || whole.front() != '{' ||
      whole.substr(whole.size() - kMacSuffixSize, kMacOpening.size()) != kMacOpening ||
      whole.substr(whole.size() - 2) != "\"}")
    throw RecordRefused("it is unsigned (no MAC as its last member): not written by keval");
  const std::string_view mac = whole.substr(whole.size() - kMacDigits - 2, kMacDigits);
  std::string signed_text(whole.substr(0, whole.size() - kMacSuffixSize));
  signed_text += '}';
  if (!is_hex(mac) || !key_.verifies(signed_text, mac))
    throw RecordRefused("its MAC does not verify: it was modified, or written with another key");

  boost::json::error_code ec;
  auto value = boost::json::parse(signed_text, ec);
  if (ec || !value.is_object())
    throw RecordRefused("it is signed but is not a JSON object");
  auto& record = value.as_object();
  const auto* version = record.if_contains("format_version");
  if (version == nullptr || !version->is_int64() ||
      version->as_int64() < kOldestReadableRecordFormatVersion ||
      version->as_int64() > kRecordFormatVersion)
    throw RecordRefused("its format version is " +
                        (version != nullptr ? boost::json::serialize(*version) : "missing") +
                        "; this keval reads versions " +
                        std::to_string(kOldestReadableRecordFormatVersion) + " to " +
                        std::to_string(kRecordFormatVersion));
  const auto* id = record.if_contains("job_id");
  if (id == nullptr || !id->is_string() || id->as_string() != job_id)
    throw RecordRefused("it is the record of another job (" +
                        (id != nullptr ? boost::json::serialize(*id) : "no job_id") +
                        "), filed under '" + job_id + "'");
  if (version->as_int64() >= 2)
    restore_request(record);
  return StoredRecord{std::move(record), std::string(mac)};
}

void JobStore::restore_request(boost::json::object& record) const {
  const auto* refs_json = record.if_contains("request_blobs");
  auto* request = record.if_contains("request");
  if (refs_json == nullptr)
    throw RecordRefused("it is signed but has no request_blobs");
  std::vector<detail::BlobRef> refs;
  try {
    refs = detail::refs_from_json(*refs_json);
  } catch (const std::runtime_error& e) {
    throw RecordRefused(std::string("it is signed but ") + e.what());
  }
  if (!refs.empty() && request == nullptr)
    throw RecordRefused("it is signed but names blobs without a request");
  for (const auto& ref : refs) {
    std::string content;
    try {
      content = index_->store.read(ref.sha256, ref.bytes);
    } catch (const detail::BlobInvalid& e) {
      // Never served, and moved aside so that the next record with this content writes it anew.
      index_->store.quarantine(ref.sha256);
      {
        std::lock_guard lock(index_->mutex);
        if (auto it = index_->blobs.find(ref.sha256); it != index_->blobs.end())
          index_->blob_gone(it->second);
      }
      throw RecordRefused("its blob " + ref.sha256 + " (" + detail::describe(ref) +
                          ") is refused: " + e.what() + "; moved aside to " + ref.sha256 +
                          ".refused");
    }
    try {
      detail::restore_blob(*request, ref, std::move(content));
    } catch (const std::runtime_error& e) {
      throw RecordRefused(std::string("it is signed but ") + e.what());
    }
  }
  record.erase("request_blobs");
}

std::vector<std::string> JobStore::list() const {
  std::vector<std::string> ids;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root_, ec))
    if (entry.path().extension() == ".json")
      ids.push_back(entry.path().stem().string());
  return ids;
}

void JobStore::remove(const std::string& job_id) const {
  std::error_code ec;
  fs::remove(record_path(job_id), ec);
  index_->forget_record(job_id);
}

void JobStore::quarantine(const std::string& job_id) const {
  const fs::path path = record_path(job_id);
  std::error_code ec;
  fs::rename(path, path.string() + ".refused", ec);
  index_->forget_record(job_id);
}

} // namespace keval::store
