// `keval conformance PLUGIN.so [--request FILE] [--json]`: does a plugin keep the SDK's promises?
//
// Two halves. The table's: keval-worker --conformance calls the plugin directly (manifest,
// versioning, prewarm, compile errors reported as such, argument structs of a newer host,
// the sample's compile and release), in a process of its own so that a crash is a finding, not
// the end of the run. The job's: the sample request (FILE) runs through keval's own job path with
// the plugin first on the search path, and must compile, launch on the provided inputs and come
// out correct. A plugin that needs a CUDA device is not launched on a machine without one: that
// check is skipped with the reason, or fails when KEVAL_REQUIRE_GPU=1.
#pragma once

#include <filesystem>
#include <optional>

namespace keval::cli {

struct ConformanceOptions {
  std::filesystem::path plugin;
  std::optional<std::filesystem::path> request;
  bool as_json = false;
  std::filesystem::path keval_exe;  // this keval, to run the sample request
  std::filesystem::path worker_exe; // keval-worker
};

// Prints the report; 0 when no check failed, 1 when one did, 2 for a plugin path that is not a
// file, 3 when the checks could not be run.
int run_conformance(const ConformanceOptions& options);

} // namespace keval::cli
