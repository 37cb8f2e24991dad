// Files beneath a workspace, reached without following links: what a trusted process writes
// into a runner's directory, or reads back from it, can never be redirected by a symlink that
// user code planted there.
#include "common/beneath.hpp"

#include <gmock/gmock.h>

#include <fstream>
#include <random>

#include <sys/stat.h>
#include <unistd.h>

namespace keval {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class Beneath : public ::testing::Test {
protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("keval-beneath-" + std::to_string(::getpid()) + "-" +
                                         std::to_string(std::random_device{}()));
    fs::create_directories(root_ / "work");
    fs::create_directories(root_ / "secret");
    std::ofstream(root_ / "secret" / "key") << "top secret";
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path work() const { return root_ / "work"; }
  fs::path root_;
};

TEST_F(Beneath, WritesMakeDirectoriesAndReadBack) {
  write_file_beneath(work(), "include/deep/k.h", "int k;\n");
  std::string why;
  EXPECT_EQ(read_file_beneath(work(), "include/deep/k.h", 100, &why).value_or("?"), "int k;\n");
  write_file_beneath(work(), "include/deep/k.h", "x"); // truncates
  EXPECT_EQ(read_file_beneath(work(), "include/deep/k.h", 100, &why).value_or("?"), "x");
}

TEST_F(Beneath, ASymlinkedDirectoryIsNeverWrittenThrough) {
  fs::create_directory_symlink(root_ / "secret", work() / "include");
  EXPECT_THROW(write_file_beneath(work(), "include/key", "overwritten"), std::system_error);
  std::ifstream in(root_ / "secret" / "key");
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "top secret");
}

TEST_F(Beneath, ASymlinkedFileIsNeitherWrittenNorRead) {
  fs::create_symlink(root_ / "secret" / "key", work() / "profile.json");
  EXPECT_THROW(write_file_beneath(work(), "profile.json", "x"), std::system_error);
  std::string why;
  EXPECT_FALSE(read_file_beneath(work(), "profile.json", 100, &why).has_value());
  EXPECT_THAT(why, HasSubstr("is a symlink"));
  fs::create_directory_symlink(root_ / "secret", work() / "d");
  EXPECT_FALSE(read_file_beneath(work(), "d/key", 100, &why).has_value());
  EXPECT_THAT(why, HasSubstr("not a directory"));
}

// A name the runner chose (a builder's library, a profile's path) that climbs out with "..":
// openat would follow it like any other name.
TEST_F(Beneath, AParentComponentIsRefusedWhereverItStands) {
  fs::create_directories(work() / "a");
  std::string why;
  for (const char* path : {"../secret/key", "a/../../secret/key", "a/..", ".."}) {
    EXPECT_FALSE(read_file_beneath(work(), path, 100, &why).has_value()) << path;
    EXPECT_THAT(why, HasSubstr("leaves")) << path;
    EXPECT_THROW(write_file_beneath(work(), path, "x"), std::system_error) << path;
  }
  std::ifstream key(root_ / "secret" / "key");
  std::string content((std::istreambuf_iterator<char>(key)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "top secret");
  // A name that only contains dots is a name.
  write_file_beneath(work(), "a/..x", "fine");
  EXPECT_EQ(read_file_beneath(work(), "a/..x", 100, &why), std::optional<std::string>("fine"));
}

TEST_F(Beneath, AFifoOrAnOversizedFileIsRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo((work() / "fifo").c_str(), 0600), 0);
  std::string why;
  EXPECT_FALSE(read_file_beneath(work(), "fifo", 100, &why).has_value());
  EXPECT_THAT(why, HasSubstr("not a regular file"));
  write_file_beneath(work(), "big", std::string(200, 'x'));
  EXPECT_FALSE(read_file_beneath(work(), "big", 100, &why).has_value());
  EXPECT_THAT(why, HasSubstr("larger than 100 bytes"));
  EXPECT_FALSE(read_file_beneath(work(), "absent", 100, &why).has_value());
  EXPECT_THAT(why, HasSubstr("does not exist"));
}

} // namespace
} // namespace keval
