// keval as a third party meets it: installed to a prefix, and one of examples/ built against the
// installed keval_sdk package as a separate CMake project. A set-up failure is kept and asserted
// by each test (gtest would otherwise report the tests as skipped, not failed).
#pragma once

#include "support/test_env.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace keval::test {

inline supervisor::CommandResult run_tool(const std::vector<std::string>& argv) {
  return supervisor::run_command("/usr/bin/env", argv, std::chrono::minutes(5));
}

class OutOfTreeBuild {
public:
  // Installs this build to tmp()/prefix and builds examples/<example> into tmp()/build.
  explicit OutOfTreeBuild(const std::string& example)
      : prefix_(tmp_.path() / "prefix"), build_(tmp_.path() / "build") {
    const std::vector<std::vector<std::string>> steps{
        {KEVAL_TEST_CMAKE, "--install", KEVAL_TEST_BINARY_DIR, "--prefix", prefix_.string()},
        {KEVAL_TEST_CMAKE, "-S", std::string(KEVAL_TEST_SOURCE_DIR) + "/examples/" + example, "-B",
         build_.string(), "-G", KEVAL_TEST_GENERATOR, "-DCMAKE_PREFIX_PATH=" + prefix_.string()},
        {KEVAL_TEST_CMAKE, "--build", build_.string()}};
    for (const auto& step : steps) {
      const auto r = run_tool(step);
      if (r.exit_code != 0) {
        error_ = step[1] + " failed:\n" + r.out + r.err;
        return;
      }
    }
  }

  const std::string& error() const { return error_; }
  const std::filesystem::path& tmp() const { return tmp_.path(); }
  const std::filesystem::path& prefix() const { return prefix_; }
  const std::filesystem::path& build() const { return build_; }

  // The installed keval, with the example's build directory on its plugin path.
  supervisor::CommandResult installed_keval(std::vector<std::string> args) const {
    std::vector<std::string> argv{"KEVAL_PLUGIN_PATH=" + build_.string(),
                                  (prefix_ / "bin" / "keval").string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_tool(argv);
  }

  // The example's own CTest tests (keval_sdk_add_conformance_test) all ran and passed.
  ::testing::AssertionResult ctest_passes() const {
    const auto r =
        run_tool({KEVAL_TEST_CTEST, "--test-dir", build_.string(), "--output-on-failure"});
    if (r.exit_code == 0 && r.out.find("100% tests passed") != std::string::npos)
      return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "ctest " << r.out << r.err;
  }

private:
  TempDir tmp_;
  std::filesystem::path prefix_, build_;
  std::string error_;
};

} // namespace keval::test
