#include "support/test_env.hpp"

#include "registry/registry.hpp"

#include <keval/plugin.h>

#include <fstream>

#include <gtest/gtest.h>

namespace keval::test {
namespace {

namespace fs = std::filesystem;
using registry::Registry;

fs::path registry_plugin(const std::string& name) {
  return test_plugin_dir() / "registry" / name / ("lib" + name + ".so");
}

// A search directory holding copies of the named test plugins.
fs::path plugin_dir_with(const TempDir& tmp, const std::string& sub,
                         const std::vector<std::string>& names) {
  const fs::path dir = tmp.path() / sub;
  fs::create_directories(dir);
  for (const auto& name : names)
    fs::copy_file(registry_plugin(name), dir / registry_plugin(name).filename());
  return dir;
}

TEST(Registry, GoodPluginIsUsableWithItsManifest) {
  TempDir tmp;
  const auto reg =
      Registry::discover({plugin_dir_with(tmp, "a", {"keval_test_good"})}, worker_exe());
  ASSERT_EQ(reg.plugins().size(), 1u);
  const auto* p = reg.find("registry_good");
  ASSERT_NE(p, nullptr) << reg.plugins()[0].error;
  EXPECT_EQ(p->plugin_version, "0.1.0");
  EXPECT_EQ(p->api_major, 1u);
  EXPECT_TRUE(p->has(KEVAL_CAP_DEVICE_CPU));
}

TEST(Registry, WrongMajorIsRejectedWithTheReason) {
  TempDir tmp;
  const auto reg =
      Registry::discover({plugin_dir_with(tmp, "a", {"keval_test_wrong_major"})}, worker_exe());
  ASSERT_EQ(reg.plugins().size(), 1u);
  EXPECT_FALSE(reg.plugins()[0].usable());
  EXPECT_NE(reg.plugins()[0].error.find("major version mismatch"), std::string::npos)
      << reg.plugins()[0].error;
  EXPECT_EQ(reg.find("wrong_major"), nullptr);
}

TEST(Registry, NewerMinorIsRejected) {
  TempDir tmp;
  const auto reg =
      Registry::discover({plugin_dir_with(tmp, "a", {"keval_test_newer_minor"})}, worker_exe());
  ASSERT_EQ(reg.plugins().size(), 1u);
  EXPECT_NE(reg.plugins()[0].error.find("newer API 1.7"), std::string::npos)
      << reg.plugins()[0].error;
}

// A plugin built against SDK 1.0 (a table that ends before `prewarm`) still loads in this host,
// which reads nothing past the table's struct_size.
TEST(Registry, ATableSizedForSdk10Loads) {
  TempDir tmp;
  const auto reg =
      Registry::discover({plugin_dir_with(tmp, "a", {"keval_test_v1_0"})}, worker_exe());
  ASSERT_EQ(reg.plugins().size(), 1u);
  const auto& info = reg.plugins()[0];
  EXPECT_TRUE(info.usable()) << info.error;
  EXPECT_EQ(info.api_major, 1u);
  EXPECT_EQ(info.api_minor, 0u);
  EXPECT_FALSE(info.prewarm) << "prewarm lies past a 1.0 table's struct_size";
  EXPECT_EQ(info.kernel_type, "v1_0");
}

TEST(Registry, MissingEntrySymbolIsRejectedWithoutLoading) {
  TempDir tmp;
  const auto reg =
      Registry::discover({plugin_dir_with(tmp, "a", {"keval_test_no_entry"})}, worker_exe());
  ASSERT_EQ(reg.plugins().size(), 1u);
  EXPECT_NE(reg.plugins()[0].error.find("missing entry symbol keval_plugin_entry_v1"),
            std::string::npos)
      << reg.plugins()[0].error;
}

TEST(Registry, DuplicateKernelTypeFirstInSearchOrderWins) {
  TempDir tmp;
  const auto first = plugin_dir_with(tmp, "first", {"keval_test_dup_b"});
  const auto second = plugin_dir_with(tmp, "second", {"keval_test_dup_a"});
  const auto reg = Registry::discover({first, second}, worker_exe());
  ASSERT_EQ(reg.plugins().size(), 2u);
  const auto* p = reg.find("dup");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->plugin_version, "2.0.0");
  EXPECT_NE(reg.plugins()[1].error.find("duplicate kernel type 'dup'"), std::string::npos);
}

TEST(Registry, PluginCrashingOnLoadDoesNotTakeTheHostDown) {
  TempDir tmp;
  const auto reg = Registry::discover(
      {plugin_dir_with(tmp, "a", {"keval_test_crash_on_load", "keval_test_good"})}, worker_exe());
  ASSERT_EQ(reg.plugins().size(), 2u);
  EXPECT_NE(reg.find("registry_good"), nullptr);
  bool crash_reported = false;
  for (const auto& p : reg.plugins())
    if (p.error.find("crashed the probe with SIGSEGV") != std::string::npos)
      crash_reported = true;
  EXPECT_TRUE(crash_reported);
}

TEST(Registry, NonLibraryFilesAreReported) {
  TempDir tmp;
  std::ofstream(tmp.path() / "libbogus.so") << "not an ELF file";
  const auto reg = Registry::discover({tmp.path()}, worker_exe());
  ASSERT_EQ(reg.plugins().size(), 1u);
  EXPECT_NE(reg.plugins()[0].error.find("not a readable shared library"), std::string::npos)
      << reg.plugins()[0].error;
}

TEST(Registry, MissingDirectoriesAreSkipped) {
  const auto reg = Registry::discover({"/nonexistent/keval/plugins"}, worker_exe());
  EXPECT_TRUE(reg.plugins().empty());
}

TEST(Registry, SearchPathPutsEnvironmentFirst) {
  ::setenv("KEVAL_PLUGIN_PATH", "/x/one:/x/two", 1);
  const auto dirs = registry::default_search_path("/opt/keval/bin");
  ::unsetenv("KEVAL_PLUGIN_PATH");
  ASSERT_EQ(dirs.size(), 3u);
  EXPECT_EQ(dirs[0], "/x/one");
  EXPECT_EQ(dirs[1], "/x/two");
  EXPECT_EQ(dirs[2], "/opt/keval/lib/keval/plugins");
}

} // namespace
} // namespace keval::test
