// The Python plugin SDK as a third party uses it: examples/python_plugin_template (kernel type
// "numpy", 60 lines of driver, entry and CMake) built against an installed keval with
// keval_sdk_add_python_plugin, listed and run by the installed keval, and put through the
// conformance suite by its own CTest test.
#include "out_of_tree.hpp"

#include <fstream>
#include <sstream>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

namespace keval::test {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

const fs::path kExample = fs::path(KEVAL_TEST_SOURCE_DIR) / "examples/python_plugin_template";

class PythonPluginTemplate : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
#ifdef KEVAL_TEST_HAVE_PYTHON
    build_ = new OutOfTreeBuild("python_plugin_template");
#endif
  }
  static void TearDownTestSuite() {
    delete build_;
  }
  void SetUp() override {
    if (build_ == nullptr)
      GTEST_SKIP() << "keval was built without its Python runtime (KEVAL_HAVE_PYTHON off)";
    ASSERT_TRUE(build_->error().empty()) << build_->error();
  }
  static json::object request(const std::string& custom_source = "") {
    std::ifstream in(kExample / "request_compare.json");
    std::stringstream ss;
    ss << in.rdbuf();
    auto r = json::parse(ss.str()).as_object();
    if (!custom_source.empty())
      r["custom_kernel"].as_object()["source_code"] = custom_source;
    return r;
  }

  static OutOfTreeBuild* build_;
};

OutOfTreeBuild* PythonPluginTemplate::build_ = nullptr;

TEST_F(PythonPluginTemplate, TheDriverIsCopiedBesideThePluginAndListed) {
  EXPECT_TRUE(fs::exists(build_->build() / "python" / "keval_numpy" / "__init__.py"));
  auto r = build_->installed_keval({"plugins", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  bool found = false;
  const json::value listing = json::parse(r.out);
  for (const auto& p : listing.at("plugins").as_array()) {
    const auto& o = p.as_object();
    if (o.contains("kernel_type") && o.at("kernel_type") == "numpy") {
      found = true;
      EXPECT_TRUE(o.at("usable").as_bool()) << json::serialize(o);
      EXPECT_EQ(o.at("api_version"), "1.1") << "Python plugins prewarm: SDK 1.1";
    }
  }
  EXPECT_TRUE(found) << r.out;
}

TEST_F(PythonPluginTemplate, InstalledKevalComparesNumpyKernels) {
  auto r = build_->installed_keval({"compare", (kExample / "request_compare.json").string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto body = json::parse(r.out).as_object();
  const auto& exec = body.at("kernel_exec_result").as_object();
  EXPECT_TRUE(exec.at("correctness").as_bool()) << r.out;
  EXPECT_EQ(exec.at("runtime_stats").at("method"), "cpu_wall_clock") << r.out;
}

TEST_F(PythonPluginTemplate, AWrongResultAndAnExceptionAreTheKernelsFailures) {
  const auto wrong = write_request(build_->tmp(), "wrong.json",
                                   request("def run(x, y, alpha):\n    return alpha * x - y\n"));
  auto r = build_->installed_keval({"compare", wrong.string()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_FALSE(json::parse(r.out).at("kernel_exec_result").at("correctness").as_bool());

  const auto raising =
      write_request(build_->tmp(), "raising.json",
                    request("def run(x, y, alpha):\n    raise ValueError('no such luck')\n"));
  r = build_->installed_keval({"compare", raising.string()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("no such luck"), std::string::npos) << r.out;
}

TEST_F(PythonPluginTemplate, PassesTheConformanceSuiteThroughCTest) {
  EXPECT_TRUE(build_->ctest_passes());
}

} // namespace
} // namespace keval::test
