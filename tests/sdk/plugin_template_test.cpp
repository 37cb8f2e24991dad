// The SDK as a third party uses it: install keval to a prefix, build examples/plugin_template
// as a separate CMake project against the installed keval_sdk package, and run it with the
// installed keval.
#include "support/test_env.hpp"

#include <fstream>
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
    auto install = run({KEVAL_TEST_CMAKE, "--install", KEVAL_TEST_BINARY_DIR, "--prefix",
                        prefix_.string()});
    ASSERT_EQ(install.exit_code, 0) << install.out << install.err;
    auto configure =
        run({KEVAL_TEST_CMAKE, "-S", std::string(KEVAL_TEST_SOURCE_DIR) + "/examples/plugin_template",
             "-B", build_.string(), "-G", KEVAL_TEST_GENERATOR,
             "-DCMAKE_PREFIX_PATH=" + prefix_.string()});
    ASSERT_EQ(configure.exit_code, 0) << configure.out << configure.err;
    auto build = run({KEVAL_TEST_CMAKE, "--build", build_.string()});
    ASSERT_EQ(build.exit_code, 0) << build.out << build.err;
  }
  static void TearDownTestSuite() { delete tmp_; }

  supervisor::CommandResult installed_keval(std::vector<std::string> args) {
    std::vector<std::string> argv{"KEVAL_PLUGIN_PATH=" + build_.string(),
                                  (prefix_ / "bin" / "keval").string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv);
  }

  static TempDir* tmp_;
  static fs::path prefix_, build_;
};

TempDir* PluginTemplate::tmp_ = nullptr;
fs::path PluginTemplate::prefix_, PluginTemplate::build_;

TEST_F(PluginTemplate, InstalledKevalListsTheOutOfTreePlugin) {
  ASSERT_FALSE(HasFatalFailure());
  auto r = installed_keval({"plugins", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto listing = json::parse(r.out).as_object();
  bool found = false;
  for (const auto& p : listing.at("plugins").as_array()) {
    const auto& o = p.as_object();
    if (o.contains("kernel_type") && o.at("kernel_type") == "axpy") {
      found = true;
      EXPECT_TRUE(o.at("usable").as_bool()) << json::serialize(o);
      EXPECT_EQ(o.at("api_version"), "1.0");
    }
  }
  EXPECT_TRUE(found) << r.out;
}

TEST_F(PluginTemplate, InstalledKevalRunsTheTemplateComparison) {
  ASSERT_FALSE(HasFatalFailure());
  const std::string request =
      std::string(KEVAL_TEST_SOURCE_DIR) + "/examples/plugin_template/request_compare.json";
  auto r = installed_keval({"compare", request});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto body = json::parse(r.out).as_object();
  EXPECT_TRUE(body.at("kernel_exec_result").as_object().at("correctness").as_bool());
}

TEST_F(PluginTemplate, WrongCustomOperationFailsCorrectness) {
  ASSERT_FALSE(HasFatalFailure());
  auto request = json::parse(R"({"ref_kernel": null})").as_object();
  const fs::path original =
      fs::path(KEVAL_TEST_SOURCE_DIR) / "examples/plugin_template/request_compare.json";
  std::ifstream in(original);
  std::stringstream ss;
  ss << in.rdbuf();
  request = json::parse(ss.str()).as_object();
  request["custom_kernel"].as_object()["source_code"] = "axmy";
  const auto path = write_request(tmp_->path(), "wrong.json", request);
  auto r = installed_keval({"compare", path.string()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
}

} // namespace
} // namespace keval::test
