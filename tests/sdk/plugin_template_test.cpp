// The SDK as a third party uses it: install keval to a prefix, build examples/plugin_template
// as a separate CMake project against the installed keval_sdk package, and run it with the
// installed keval.
#include "out_of_tree.hpp"

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

class PluginTemplate : public ::testing::Test {
protected:
  static void SetUpTestSuite() { build_ = new OutOfTreeBuild("plugin_template"); }
  static void TearDownTestSuite() { delete build_; }
  void SetUp() override { ASSERT_TRUE(build_->error().empty()) << build_->error(); }

  supervisor::CommandResult installed_keval(std::vector<std::string> args) {
    return build_->installed_keval(std::move(args));
  }

  static OutOfTreeBuild* build_;
};

OutOfTreeBuild* PluginTemplate::build_ = nullptr;

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
  const fs::path project = build_->tmp() / ("wants-" + major + "." + minor);
  fs::create_directories(project);
  std::ofstream(project / "CMakeLists.txt")
      << "cmake_minimum_required(VERSION 3.16)\nproject(wants NONE)\nfind_package(keval_sdk "
      << major << "." << minor << " REQUIRED)\n";
  auto r = run_tool({KEVAL_TEST_CMAKE, "-S", project.string(), "-B", (project / "build").string(),
                     "-DCMAKE_PREFIX_PATH=" + build_->prefix().string()});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto newer = std::to_string(std::stoi(minor) + 1);
  std::ofstream(project / "CMakeLists.txt")
      << "cmake_minimum_required(VERSION 3.16)\nproject(wants NONE)\nfind_package(keval_sdk "
      << major << "." << newer << " REQUIRED)\n";
  fs::remove_all(project / "build");
  r = run_tool({KEVAL_TEST_CMAKE, "-S", project.string(), "-B", (project / "build").string(),
                "-DCMAKE_PREFIX_PATH=" + build_->prefix().string()});
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
  const auto path = write_request(build_->tmp(), "wrong.json", request);
  auto r = installed_keval({"compare", path.string()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
}

// keval_sdk_add_conformance_test: the template's CTest test runs keval conformance and passes.
TEST_F(PluginTemplate, PassesTheConformanceSuiteThroughCTest) {
  EXPECT_TRUE(build_->ctest_passes());
}

} // namespace
} // namespace keval::test
