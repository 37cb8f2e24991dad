#include "store/job_store.hpp"

#include <cerrno>
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

} // namespace

JobStore::JobStore(fs::path root)
    : JobStore(root, RecordKey::load_or_create(root.parent_path() / "keys")) {}

JobStore::JobStore(fs::path root, RecordKey key) : root_(std::move(root)), key_(std::move(key)) {
  fs::create_directories(root_);
  fs::permissions(root_, fs::perms::owner_all, fs::perm_options::replace);
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
  stored["format_version"] = kRecordFormatVersion;
  std::string text = boost::json::serialize(stored); // "{...}": never empty
  const std::string mac = key_.mac_hex(text);
  text.pop_back();
  text.append(kMacOpening).append(mac).append("\"}");

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
  return mac;
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
  if (version == nullptr || !version->is_int64() || version->as_int64() != kRecordFormatVersion)
    throw RecordRefused("its format version is " +
                        (version != nullptr ? boost::json::serialize(*version) : "missing") +
                        "; this keval reads version " + std::to_string(kRecordFormatVersion));
  const auto* id = record.if_contains("job_id");
  if (id == nullptr || !id->is_string() || id->as_string() != job_id)
    throw RecordRefused("it is the record of another job (" +
                        (id != nullptr ? boost::json::serialize(*id) : "no job_id") +
                        "), filed under '" + job_id + "'");
  return StoredRecord{std::move(record), std::string(mac)};
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
}

void JobStore::quarantine(const std::string& job_id) const {
  const fs::path path = record_path(job_id);
  std::error_code ec;
  fs::rename(path, path.string() + ".refused", ec);
}

} // namespace keval::store
