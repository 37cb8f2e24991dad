// The SDK as a third party uses it: install keval to a prefix, build examples/plugin_template
// as a separate CMake project against the installed keval_sdk package, and run it with the
// installed keval.
#include "support/test_env.hpp"

#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

namespace keval::test {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

supervisor::CommandResult run(const std::vector<std::string>& argv) {
  return supervisor::run_command("/usr/bin/env", argv, std::chrono::minutes(5));
}

class PluginTemplate : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir;
    prefix_ = tmp_->path() / "prefix";
    build_ = tmp_->path() / "template-build";
    // A failure here is recorded and asserted by every test: gtest would otherwise report the
    // tests as skipped, not failed.
    const std::vector<std::vector<std::string>> steps{
        {KEVAL_TEST_CMAKE, "--install", KEVAL_TEST_BINARY_DIR, "--prefix", prefix_.string()},
        {KEVAL_TEST_CMAKE, "-S", std::string(KEVAL_TEST_SOURCE_DIR) + "/examples/plugin_template",
         "-B", build_.string(), "-G", KEVAL_TEST_GENERATOR,
         "-DCMAKE_PREFIX_PATH=" + prefix_.string()},
        {KEVAL_TEST_CMAKE, "--build", build_.string()}};
    for (const auto& step : steps) {
      auto r = run(step);
      if (r.exit_code != 0) {
        setup_error_ = step[1] + " failed:\n" + r.out + r.err;
        return;
      }
    }
  }
  static void TearDownTestSuite() { delete tmp_; }

  supervisor::CommandResult installed_keval(std::vector<std::string> args) {
    std::vector<std::string> argv{"KEVAL_PLUGIN_PATH=" + build_.string(),
                                  (prefix_ / "bin" / "keval").string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv);
  }

  void SetUp() override { ASSERT_TRUE(setup_error_.empty()) << setup_error_; }

  static TempDir* tmp_;
  static fs::path prefix_, build_;
  static std::string setup_error_;
};

TempDir* PluginTemplate::tmp_ = nullptr;
fs::path PluginTemplate::prefix_, PluginTemplate::build_;
std::string PluginTemplate::setup_error_;

// find_package(keval_sdk X.Y) succeeds for the API version plugin.h declares (the package used
// to say 1.0.0 while the header said 1.1).
TEST_F(PluginTemplate, ThePackageVersionIsTheHeadersApiVersion) {
  std::ifstream header(std::string(KEVAL_TEST_SOURCE_DIR) + "/sdk/include/keval/plugin.h");
  const std::string text((std::istreambuf_iterator<char>(header)),
                         std::istreambuf_iterator<char>());
  std::smatch m;
  std::string major, minor;
  if (std::regex_search(text, m, std::regex("#define KEVAL_PLUGIN_API_MAJOR ([0-9]+)")))
    major = m[1];
  if (std::regex_search(text, m, std::regex("#define KEVAL_PLUGIN_API_MINOR ([0-9]+)")))
    minor = m[1];
  ASSERT_FALSE(major.empty() || minor.empty()) << "plugin.h declares no API version";
  const fs::path project = tmp_->path() / ("wants-" + major + "." + minor);
  fs::create_directories(project);
  std::ofstream(project / "CMakeLists.txt")
      << "cmake_minimum_required(VERSION 3.16)\nproject(wants NONE)\nfind_package(keval_sdk "
      << major << "." << minor << " REQUIRED)\n";
  auto r = run({KEVAL_TEST_CMAKE, "-S", project.string(), "-B", (project / "build").string(),
                "-DCMAKE_PREFIX_PATH=" + prefix_.string()});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto newer = std::to_string(std::stoi(minor) + 1);
  std::ofstream(project / "CMakeLists.txt")
      << "cmake_minimum_required(VERSION 3.16)\nproject(wants NONE)\nfind_package(keval_sdk "
      << major << "." << newer << " REQUIRED)\n";
  fs::remove_all(project / "build");
  r = run({KEVAL_TEST_CMAKE, "-S", project.string(), "-B", (project / "build").string(),
           "-DCMAKE_PREFIX_PATH=" + prefix_.string()});
  EXPECT_NE(r.exit_code, 0) << "a plugin needing " << major << "." << newer
                            << " must not find this SDK";
}

TEST_F(PluginTemplate, InstalledKevalListsTheOutOfTreePlugin) {
  auto r = installed_keval({"plugins", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto listing = json::parse(r.out).as_object();
  bool found = false;
  for (const auto& p : listing.at("plugins").as_array()) {
    const auto& o = p.as_object();
    if (o.contains("kernel_type") && o.at("kernel_type") == "axpy") {
      found = true;
      EXPECT_TRUE(o.at("usable").as_bool()) << json::serialize(o);
      // It uses no 1.1 feature (no prewarm): it says it runs on 1.0 hosts too, whatever
      // header it was built with.
      EXPECT_EQ(o.at("api_version"), "1.0");
    }
  }
  EXPECT_TRUE(found) << r.out;
}

TEST_F(PluginTemplate, InstalledKevalRunsTheTemplateComparison) {
  const std::string request =
      std::string(KEVAL_TEST_SOURCE_DIR) + "/examples/plugin_template/request_compare.json";
  auto r = installed_keval({"compare", request});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto body = json::parse(r.out).as_object();
  EXPECT_TRUE(body.at("kernel_exec_result").as_object().at("correctness").as_bool());
}

TEST_F(PluginTemplate, WrongCustomOperationFailsCorrectness) {
  const fs::path original =
      fs::path(KEVAL_TEST_SOURCE_DIR) / "examples/plugin_template/request_compare.json";
  std::ifstream in(original);
  std::stringstream ss;
  ss << in.rdbuf();
  auto request = json::parse(ss.str()).as_object();
  request["custom_kernel"].as_object()["source_code"] = "axmy";
  const auto path = write_request(tmp_->path(), "wrong.json", request);
  auto r = installed_keval({"compare", path.string()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
}

} // namespace
} // namespace keval::test
