// Taking turns to open the device (worker/engine/device_open_turn.hpp): one holder at a time, the
// turn free again once its holder gives it up, a bounded wait, and never a file that is not the
// user's own or reached through a link.
#include "worker/engine/device_open_turn.hpp"

#include "support/test_env.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace keval::worker {
namespace {

using std::chrono::milliseconds;

TEST(DeviceOpenTurn, OneHolderAtATimeAndFreeOnceGivenUp) {
  test::TempDir tmp;
  const auto file = tmp.path() / "turn.lock";
  {
    DeviceOpenTurn first(file, milliseconds(0));
    ASSERT_TRUE(first.held()) << first.why_not();
    EXPECT_TRUE(first.why_not().empty());
    // Another opener (its own open file description, as another process has) waits out its
    // patience and goes on without the turn.
    DeviceOpenTurn second(file, milliseconds(20));
    EXPECT_FALSE(second.held());
    EXPECT_NE(second.why_not().find("longer than 20 ms"), std::string::npos) << second.why_not();
    EXPECT_GE(second.waited_ms(), 20.0);
  }
  DeviceOpenTurn third(file, milliseconds(0));
  EXPECT_TRUE(third.held()) << third.why_not();
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u); // created for this user alone
}

TEST(DeviceOpenTurn, TheTurnOfAHolderThatWentIsFree) {
  test::TempDir tmp;
  const auto file = tmp.path() / "turn.lock";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    DeviceOpenTurn held(file, milliseconds(0));
    ::_exit(held.held() ? 0 : 1); // exits holding it
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  DeviceOpenTurn after(file, milliseconds(0));
  EXPECT_TRUE(after.held()) << after.why_not();
}

TEST(DeviceOpenTurn, ALinkIsNeverFollowed) {
  test::TempDir tmp;
  const auto target = tmp.path() / "elsewhere";
  std::ofstream(target) << "kept";
  const auto link = tmp.path() / "turn.lock";
  std::filesystem::create_symlink(target, link);
  DeviceOpenTurn turn(link, milliseconds(0));
  EXPECT_FALSE(turn.held());
  EXPECT_NE(turn.why_not().find("turn.lock"), std::string::npos) << turn.why_not();
  // Nothing of the target was touched, and it was never locked.
  EXPECT_EQ(std::filesystem::file_size(target), 4u);
  const int fd = ::open(target.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  ::close(fd);
}

TEST(DeviceOpenTurn, AnotherUsersFileIsNotUsed) {
  if (::geteuid() != 0)
    GTEST_SKIP() << "needs root to make a file of another user's";
  test::TempDir tmp;
  const auto file = tmp.path() / "turn.lock";
  std::ofstream(file) << "";
  ASSERT_EQ(::chown(file.c_str(), 65534, 65534), 0);
  DeviceOpenTurn turn(file, milliseconds(0));
  EXPECT_FALSE(turn.held());
  EXPECT_NE(turn.why_not().find("not a regular file of this user"), std::string::npos)
      << turn.why_not();
}

TEST(DeviceOpenTurn, TheDefaultFileIsThisUsersInTheTemporaryDirectory) {
  const auto file = DeviceOpenTurn::default_lock_file();
  EXPECT_EQ(file.parent_path(), std::filesystem::temp_directory_path());
  EXPECT_EQ(file.filename().string(), "keval-device-open-" + std::to_string(::geteuid()) + ".lock");
}

} // namespace
} // namespace keval::worker
