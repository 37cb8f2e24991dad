// Helpers shared by the host-side tests: where the built binaries and plugins are, request
// builders for the fault-injection plugin, and running jobs or the CLI.
#pragma once

#include "registry/registry.hpp"
#include "result/response.hpp"
#include "supervisor/process.hpp"

#include <filesystem>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

namespace keval::test {

std::filesystem::path bin_dir();
std::filesystem::path worker_exe();
std::filesystem::path keval_exe();
std::filesystem::path plugin_dir();      // build/lib/keval/plugins
std::filesystem::path test_plugin_dir(); // build/lib/keval/test-plugins (fault plugin)

// A fresh temporary directory, removed by the destructor.
class TempDir {
public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

private:
  std::filesystem::path path_;
};

// IOContract: x (input, randn seed 7, [n]) and y (output, [n]), float32.
boost::json::object scale_io(int64_t n = 64);
// An evaluate request for the fault plugin; `metadata` goes to kernel.metadata.
boost::json::object fault_evaluate(boost::json::object metadata, double timeout_s = 60,
                                   int64_t num_trials = 5);
// A compare request: fault reference vs fault custom.
boost::json::object fault_compare(boost::json::object ref_metadata,
                                  boost::json::object custom_metadata, double timeout_s = 60);

// Registry over the fault plugin's directory only (discovered once).
const registry::Registry& fault_registry();
// Registry over the build's real plugins (discovered once).
const registry::Registry& built_registry();

// Runs a request through keval's job runner (the CLI's path, in-process); the device granted is
// the first type the worker offers, index 0. `state_dir`: the state directory (its build caches
// kept between requests), else a fresh one removed afterwards.
result::Response run_request(const boost::json::object& request, bool compare,
                             const registry::Registry& registry = fault_registry(),
                             const std::filesystem::path& state_dir = {});

// Runs the keval CLI with `args`; returns its exit code and output.
supervisor::CommandResult run_keval(const std::vector<std::string>& args,
                                    std::vector<std::string> env = {});

// Writes `request` to `dir/name` and returns the path.
std::filesystem::path write_request(const std::filesystem::path& dir, const std::string& name,
                                    const boost::json::object& request);

} // namespace keval::test
