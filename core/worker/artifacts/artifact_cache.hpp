// What a job builds that another job can reuse, content-addressed by a key the trusted worker
// computes from what determines the build: a cuda_program problem's held-out harness objects and
// a solution's whole build (pass@k samples and resubmissions repeat), and the torch_cuda
// extensions a candidate's load_inline asks for (extension_builds.hpp). Written only by the
// trusted worker, in a directory no runner may read (the state directory): a job's user code gets
// copies of the files, handed over as descriptors, and can never change an entry another job
// will use.
//
// An entry is <root>/<key[:2]>/<key>/ with the files and a manifest of their SHA-256, published
// by an atomic rename and checked before every use (a damaged entry is rebuilt and replaced).
// Jobs that build the same key at once serialise on <key>.lock: one builds, the others wait and
// take its entry.
//
// Bounded: past `max_bytes` (KEVAL_BUILD_CACHE_MAX_BYTES, default 4 GiB per cache), publishing
// an entry removes the least recently used others (an entry's directory time is its last use)
// until the cache fits; an entry whose lock another job holds is left alone, and a descriptor a
// job already has stays readable. A daemon that grades thousands of kernels keeps the builds it
// is likely to see again, not all of them.
#pragma once

#include "common/unique_fd.hpp"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace keval::worker {

class ArtifactCache {
public:
  // Empty root: no cache (every job builds for itself), `why_disabled` saying why. `max_bytes`
  // 0: unbounded.
  explicit ArtifactCache(std::filesystem::path root, std::string why_disabled = {},
                         uint64_t max_bytes = default_max_bytes());

  static constexpr uint64_t kDefaultMaxBytes = 4ull << 30;
  // KEVAL_BUILD_CACHE_MAX_BYTES when it is a number (0: unbounded), else kDefaultMaxBytes.
  static uint64_t default_max_bytes();

  struct Entry {
    // Workspace path -> an open, read-only descriptor of the file's bytes in the cache.
    std::map<std::string, UniqueFd> files;
    bool reused = false; // found, not built by this job
  };

  // The entry for `key`, built with `build` when absent or damaged. `build` returns the files'
  // bytes by workspace path, or nullopt (with why in its own report) when there is nothing to
  // keep (the build failed). Returns nullopt then. Throws std::system_error when the cache
  // itself fails.
  using Builder = std::function<std::optional<std::map<std::string, std::string>>()>;
  std::optional<Entry> get_or_build(const std::string& key, const Builder& build);

  bool enabled() const { return !root_.empty(); }
  const std::string& why_disabled() const { return why_disabled_; }

private:
  std::optional<Entry> open_entry(const std::filesystem::path& dir, const std::string& key) const;
  void publish(const std::filesystem::path& dir, const std::string& key,
               const std::map<std::string, std::string>& files) const;
  // Removes the least recently used entries but `keep` until the cache fits max_bytes_.
  void evict_past_the_bound(const std::string& keep) const;

  std::filesystem::path root_;
  std::string why_disabled_;
  uint64_t max_bytes_;
};

} // namespace keval::worker
