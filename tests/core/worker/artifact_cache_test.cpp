// The trusted worker's build caches (worker/artifacts/artifact_cache.hpp): an entry is built once
// and reused, a damaged one rebuilt, and past the bound the least recently used entries go, never
// the one just built nor one another job holds.
#include "worker/artifacts/artifact_cache.hpp"

#include "common/beneath.hpp"
#include "store/detail/blob_store.hpp"
#include "support/test_env.hpp"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace keval::worker {
namespace {

namespace fs = std::filesystem;

std::string key_of(const std::string& name) {
  return store::detail::sha256_hex(name);
}

// Builds `bytes` bytes under "library", counting the builds.
ArtifactCache::Builder builder(size_t bytes, int& builds) {
  return [bytes, &builds]() -> std::optional<std::map<std::string, std::string>> {
    ++builds;
    return std::map<std::string, std::string>{{"library", std::string(bytes, 'x')}};
  };
}

fs::path entry_dir(const fs::path& root, const std::string& key) {
  return root / key.substr(0, 2) / key;
}

// Sets an entry's last use `seconds_ago`.
void used(const fs::path& root, const std::string& key, int seconds_ago) {
  const auto when = fs::file_time_type::clock::now() - std::chrono::seconds(seconds_ago);
  fs::last_write_time(entry_dir(root, key), when);
}

TEST(ArtifactCache, BuiltOnceThenReusedAndADamagedEntryIsRebuilt) {
  keval::test::TempDir tmp;
  ArtifactCache cache(tmp.path(), {}, 0);
  int builds = 0;
  const std::string key = key_of("a");
  auto first = cache.get_or_build(key, builder(100, builds));
  ASSERT_TRUE(first);
  EXPECT_FALSE(first->reused);
  auto second = cache.get_or_build(key, builder(100, builds));
  ASSERT_TRUE(second);
  EXPECT_TRUE(second->reused);
  EXPECT_EQ(builds, 1);
  EXPECT_EQ(read_descriptor(second->files.at("library").get(), 1000), std::string(100, 'x'));
  // A flipped byte: refused by its checksum, rebuilt.
  for (const auto& file : fs::directory_iterator(entry_dir(tmp.path(), key)))
    if (file.path().extension() == ".bin") {
      fs::permissions(file.path(), fs::perms::owner_write, fs::perm_options::add);
      std::fstream(file.path(), std::ios::in | std::ios::out | std::ios::binary) << 'y';
    }
  auto third = cache.get_or_build(key, builder(100, builds));
  ASSERT_TRUE(third);
  EXPECT_FALSE(third->reused);
  EXPECT_EQ(builds, 2);
}

TEST(ArtifactCache, PastItsBoundTheLeastRecentlyUsedEntriesGo) {
  keval::test::TempDir tmp;
  // Three entries of about 1200 bytes (a 1000-byte library and its manifest) fit; a fourth
  // does not.
  ArtifactCache cache(tmp.path(), {}, 4000);
  int builds = 0;
  const std::string a = key_of("a"), b = key_of("b"), c = key_of("c"), d = key_of("d");
  for (const auto& key : {a, b, c})
    ASSERT_TRUE(cache.get_or_build(key, builder(1000, builds)));
  used(tmp.path(), a, 30);
  used(tmp.path(), b, 20);
  used(tmp.path(), c, 10);
  // Using `a` makes `b` the least recently used.
  ASSERT_TRUE(cache.get_or_build(a, builder(1000, builds))->reused);
  auto held = cache.get_or_build(c, builder(1000, builds)); // a descriptor a job still has
  ASSERT_TRUE(cache.get_or_build(d, builder(1000, builds)));
  EXPECT_FALSE(fs::exists(entry_dir(tmp.path(), b)));
  for (const auto& key : {a, c, d})
    EXPECT_TRUE(fs::exists(entry_dir(tmp.path(), key))) << key;
  EXPECT_EQ(builds, 4);
  ASSERT_TRUE(held);
  EXPECT_EQ(read_descriptor(held->files.at("library").get(), 2000), std::string(1000, 'x'));
}

TEST(ArtifactCache, NeitherTheEntryJustBuiltNorOneAnotherJobHoldsIsRemoved) {
  keval::test::TempDir tmp;
  ArtifactCache cache(tmp.path(), {}, 1500);
  int builds = 0;
  const std::string a = key_of("a"), b = key_of("b");
  ASSERT_TRUE(cache.get_or_build(a, builder(1000, builds)));
  used(tmp.path(), a, 30);
  // Another job holds a's lock (it is reading or rebuilding it): a stays, over the bound.
  const int lock = ::open((tmp.path() / a.substr(0, 2) / (a + ".lock")).c_str(), O_RDWR);
  ASSERT_GE(lock, 0);
  ASSERT_EQ(::flock(lock, LOCK_EX), 0);
  ASSERT_TRUE(cache.get_or_build(b, builder(1000, builds)));
  EXPECT_TRUE(fs::exists(entry_dir(tmp.path(), a)));
  EXPECT_TRUE(fs::exists(entry_dir(tmp.path(), b)));
  ::close(lock);
  // A single entry larger than the bound is still kept: it is the one just built.
  ArtifactCache small(tmp.path() / "small", {}, 10);
  ASSERT_TRUE(small.get_or_build(a, builder(1000, builds)));
  EXPECT_TRUE(fs::exists(entry_dir(tmp.path() / "small", a)));
}

TEST(ArtifactCache, TheBoundComesFromTheEnvironment) {
  const char* saved = std::getenv("KEVAL_BUILD_CACHE_MAX_BYTES");
  const std::string restore = saved != nullptr ? saved : "";
  ::unsetenv("KEVAL_BUILD_CACHE_MAX_BYTES");
  EXPECT_EQ(ArtifactCache::default_max_bytes(), ArtifactCache::kDefaultMaxBytes);
  ::setenv("KEVAL_BUILD_CACHE_MAX_BYTES", "1048576", 1);
  EXPECT_EQ(ArtifactCache::default_max_bytes(), 1048576u);
  ::setenv("KEVAL_BUILD_CACHE_MAX_BYTES", "0", 1);
  EXPECT_EQ(ArtifactCache::default_max_bytes(), 0u);
  for (const char* bad : {"lots", "-1", "12k", "1e9"}) {
    ::setenv("KEVAL_BUILD_CACHE_MAX_BYTES", bad, 1);
    EXPECT_EQ(ArtifactCache::default_max_bytes(), ArtifactCache::kDefaultMaxBytes) << bad;
  }
  if (saved != nullptr)
    ::setenv("KEVAL_BUILD_CACHE_MAX_BYTES", restore.c_str(), 1);
  else
    ::unsetenv("KEVAL_BUILD_CACHE_MAX_BYTES");
}

} // namespace
} // namespace keval::worker
