#include "worker/artifacts/artifact_cache.hpp"

#include "common/beneath.hpp"
#include "common/log.hpp"
#include "store/detail/blob_store.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <random>
#include <system_error>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace keval::worker {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

constexpr int kFormat = 2; // 2: a manifest lists "files" (harness objects and whole builds)
constexpr const char* kManifest = "manifest.json";
constexpr size_t kMaxFileBytes = 256u << 20;

bool is_key(const std::string& key) {
  if (key.size() != 64)
    return false;
  for (const char c : key)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return false;
  return true;
}

std::string random_suffix() {
  std::random_device rd;
  return std::to_string(rd()) + std::to_string(rd());
}

} // namespace

ArtifactCache::ArtifactCache(fs::path root, std::string why_disabled, uint64_t max_bytes)
    : root_(std::move(root)), why_disabled_(std::move(why_disabled)), max_bytes_(max_bytes) {}

uint64_t ArtifactCache::default_max_bytes() {
  const char* text = std::getenv("KEVAL_BUILD_CACHE_MAX_BYTES");
  if (text == nullptr || *text == '\0')
    return kDefaultMaxBytes;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-') {
    spdlog::warn("KEVAL_BUILD_CACHE_MAX_BYTES={} is not a number of bytes; the build caches "
                 "keep {} bytes each",
                 text, kDefaultMaxBytes);
    return kDefaultMaxBytes;
  }
  return value;
}

std::optional<ArtifactCache::Entry> ArtifactCache::open_entry(const fs::path& dir,
                                                              const std::string& key) const {
  std::string why;
  const auto manifest_text = read_file_beneath(dir, kManifest, 1 << 20, &why);
  if (!manifest_text)
    return std::nullopt;
  try {
    const json::object manifest = json::parse(*manifest_text).as_object();
    if (manifest.at("key").as_string() != key || manifest.at("format").to_number<int>() != kFormat)
      return std::nullopt;
    Entry entry;
    entry.reused = true;
    for (const auto& value : manifest.at("files").as_array()) {
      const json::object& o = value.as_object();
      const std::string file(o.at("file").as_string());
      const auto bytes = read_file_beneath(dir, file, kMaxFileBytes, &why);
      if (!bytes || store::detail::sha256_hex(*bytes) != o.at("sha256").as_string())
        return std::nullopt; // damaged: rebuilt and replaced
      UniqueFd fd(::open((dir / file).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
      if (!fd)
        return std::nullopt;
      entry.files.emplace(std::string(o.at("path").as_string()), std::move(fd));
    }
    return entry;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

void ArtifactCache::publish(const fs::path& dir, const std::string& key,
                            const std::map<std::string, std::string>& files) const {
  const fs::path staging = dir.string() + ".tmp-" + random_suffix();
  fs::create_directories(staging);
  json::array listed;
  size_t n = 0;
  for (const auto& [path, bytes] : files) {
    const std::string file = std::to_string(n++) + ".bin";
    write_file_beneath(staging, file, bytes, 0444);
    listed.push_back(json::object{{"path", path},
                                  {"file", file},
                                  {"sha256", store::detail::sha256_hex(bytes)},
                                  {"bytes", bytes.size()}});
  }
  write_file_beneath(staging, kManifest,
                     json::serialize(json::object{
                         {"format", kFormat}, {"key", key}, {"files", std::move(listed)}}),
                     0444);
  std::error_code ec;
  if (fs::exists(dir, ec)) { // a damaged entry: moved aside, then removed
    const fs::path trash = dir.string() + ".bad-" + random_suffix();
    fs::rename(dir, trash, ec);
    fs::remove_all(trash, ec);
  }
  fs::rename(staging, dir);
}

std::optional<ArtifactCache::Entry> ArtifactCache::get_or_build(const std::string& key,
                                                                const Builder& build) {
  if (!is_key(key))
    throw std::system_error(std::make_error_code(std::errc::invalid_argument),
                            "cache key is not a SHA-256 in hex");
  if (!enabled()) {
    auto files = build();
    if (!files)
      return std::nullopt;
    // No cache: the files go to the job's workspace from memfd copies.
    Entry entry;
    for (const auto& [path, bytes] : *files) {
      UniqueFd fd(::memfd_create("keval-built-file", MFD_CLOEXEC));
      if (!fd)
        throw std::system_error(errno, std::generic_category(), "memfd_create");
      if (::write(fd.get(), bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size()))
        throw std::system_error(errno, std::generic_category(), "writing a built file");
      ::lseek(fd.get(), 0, SEEK_SET);
      entry.files.emplace(path, std::move(fd));
    }
    return entry;
  }
  const fs::path shard = root_ / key.substr(0, 2);
  fs::create_directories(shard);
  const fs::path dir = shard / key;
  UniqueFd lock(::open((shard / (key + ".lock")).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock)
    throw std::system_error(errno, std::generic_category(), "cannot open a build cache lock");
  while (::flock(lock.get(), LOCK_EX) != 0)
    if (errno != EINTR)
      throw std::system_error(errno, std::generic_category(), "cannot lock the build cache");
  if (auto entry = open_entry(dir, key)) {
    ::utimensat(AT_FDCWD, dir.c_str(), nullptr, 0); // its last use, for the bound
    return entry;
  }
  auto files = build();
  if (!files)
    return std::nullopt;
  publish(dir, key, *files);
  auto entry = open_entry(dir, key);
  if (entry)
    entry->reused = false;
  if (max_bytes_ > 0)
    evict_past_the_bound(key);
  return entry;
}

void ArtifactCache::evict_past_the_bound(const std::string& keep) const {
  struct Kept {
    fs::path dir;
    std::string key;
    uint64_t bytes = 0;
    fs::file_time_type used;
  };
  std::vector<Kept> entries;
  uint64_t total = 0;
  std::error_code ec;
  for (auto shard = fs::directory_iterator(root_, ec); !ec && shard != fs::directory_iterator();
       shard.increment(ec)) {
    if (!shard->is_directory(ec) || shard->is_symlink(ec))
      continue;
    std::error_code inner;
    for (auto it = fs::directory_iterator(shard->path(), inner);
         !inner && it != fs::directory_iterator(); it.increment(inner)) {
      const std::string name = it->path().filename().string();
      if (!is_key(name) || !it->is_directory(inner) || it->is_symlink(inner))
        continue; // locks, and staging or damaged directories on their way out
      Kept entry{it->path(), name, 0, fs::last_write_time(it->path(), inner)};
      for (auto file = fs::directory_iterator(it->path(), inner);
           !inner && file != fs::directory_iterator(); file.increment(inner))
        if (file->is_regular_file(inner))
          entry.bytes += file->file_size(inner);
      total += entry.bytes;
      entries.push_back(std::move(entry));
    }
  }
  if (total <= max_bytes_)
    return;
  std::sort(entries.begin(), entries.end(),
            [](const Kept& a, const Kept& b) { return a.used < b.used; });
  for (const Kept& entry : entries) {
    if (total <= max_bytes_)
      break;
    if (entry.key == keep)
      continue;
    // Only an entry no other job is building or reading through its lock.
    UniqueFd lock(::open((entry.dir.parent_path() / (entry.key + ".lock")).c_str(),
                         O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!lock || ::flock(lock.get(), LOCK_EX | LOCK_NB) != 0)
      continue;
    const fs::path trash = entry.dir.string() + ".bad-" + random_suffix();
    std::error_code removed;
    fs::rename(entry.dir, trash, removed);
    if (removed)
      continue;
    fs::remove_all(trash, removed);
    total -= entry.bytes;
  }
}

} // namespace keval::worker
