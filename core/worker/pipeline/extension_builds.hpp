// Builds that a runner asks the trusted worker for while it compiles (runner_protocol.hpp:
// build_request): the torch_cuda type's load_inline extensions, for a runner that may not write
// the shared build cache — the candidate's, where most builds are (/evaluate has no other side).
//
// Why the trusted worker and not the runner: a runner that ran user code cannot vouch for what it
// built, so what it built can serve no other job; before this, every candidate rebuilt its
// extensions (tens of seconds) in every job. Here:
//   - the key is computed here, over everything the request says (module name, every unit's
//     text, every flag, the toolchain it claims, the granted architecture): whatever ends up in
//     an entry, only a request saying exactly that gets it;
//   - the build runs in a runner of the trusted worker's own (side "build"), which runs no user
//     code: it refuses a toolchain other than its own, compiles in its own directory and cannot
//     write anywhere else (the sandbox); flags that run code in a compiler run there;
//   - the library is read out of that directory beneath it and kept in an ArtifactCache in the
//     state directory, which no runner can read; the asking runner gets a read-only descriptor.
// A failed build is not kept: the compiler's output goes back to the runner, as its own build's
// would. An infrastructure failure answers `unavailable` and the runner builds for itself, as it
// did before.
#pragma once

#include "worker/pipeline/pipeline.hpp"

#include <filesystem>
#include <optional>
#include <string>

#include <boost/json/object.hpp>

namespace keval::worker {

// One build_request, checked: every field typed, sizes bounded.
struct ExtensionRequest {
  std::string module; // the Python module the library defines (PyInit_<module>)
  boost::json::object toolchain;
  boost::json::object extension; // name, cpp_units, cuda_units, extra_*flags, with_cuda
};

// A build_request's fields, or why not (the field's path: "build_request.extension.cuda_units[0]").
struct ParsedExtensionRequest {
  std::optional<ExtensionRequest> request;
  std::string error;
};
ParsedExtensionRequest parse_extension_request(const boost::json::object& message);

// SHA-256 (hex) over the request in canonical form (objects' keys sorted) and the architecture.
std::string extension_key(const ExtensionRequest& request, int cuda_arch);

// At most this many builds a runner may ask for in its life (KernelBench sources make one to
// three); more fails the runner.
inline constexpr size_t kMaxBuildRequests = 32;
// What a request's units and flags may hold in all.
inline constexpr size_t kMaxExtensionRequestBytes = 16u << 20;

class ExtensionBuilds {
public:
  // `plugin`: the torch_cuda plugin, loaded by the builder runner; `cache_root`: where entries
  // are kept (empty: nowhere, `why_no_cache` says why, and each request is built).
  ExtensionBuilds(RunnerSource& runners, std::filesystem::path plugin, int cuda_arch,
                  std::filesystem::path cache_root, std::string why_no_cache);

  // Answers one build_request (runner_protocol.hpp). Never throws for what it holds.
  RunnerClient::Answer answer(const boost::json::object& request);

private:
  RunnerClient::Answer build_and_answer(const ExtensionRequest& request, const std::string& key);

  RunnerSource& runners_;
  std::filesystem::path plugin_;
  int cuda_arch_;
  std::filesystem::path cache_root_;
  std::string why_no_cache_;
};

} // namespace keval::worker
