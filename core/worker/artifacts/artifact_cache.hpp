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
#pragma once

#include "common/unique_fd.hpp"

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace keval::worker {

class ArtifactCache {
public:
  // Empty root: no cache (every job builds for itself), `why_disabled` saying why.
  explicit ArtifactCache(std::filesystem::path root, std::string why_disabled = {});

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

  std::filesystem::path root_;
  std::string why_disabled_;
};

} // namespace keval::worker
