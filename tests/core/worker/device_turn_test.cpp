// Taking turns on a device (worker/engine/device_turn.hpp): one holder at a time, the turn free
// again once its holder gives it up, a bounded wait (or one a prestarted worker's job ends), one
// timing turn per GPU, and never a file that is not the user's own or reached through a link.
#include "worker/engine/device_turn.hpp"

#include "support/test_env.hpp"

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace keval::worker {
namespace {

using std::chrono::milliseconds;

TEST(DeviceTurn, OneHolderAtATimeAndFreeOnceGivenUp) {
  test::TempDir tmp;
  const auto file = tmp.path() / "turn.lock";
  {
    DeviceTurn first(file, milliseconds(0));
    ASSERT_TRUE(first.held()) << first.why_not();
    EXPECT_TRUE(first.why_not().empty());
    // Another opener (its own open file description, as another process has) waits out its
    // patience and goes on without the turn.
    DeviceTurn second(file, milliseconds(20));
    EXPECT_FALSE(second.held());
    EXPECT_NE(second.why_not().find("longer than 20 ms"), std::string::npos) << second.why_not();
    EXPECT_GE(second.waited_ms(), 20.0);
  }
  DeviceTurn third(file, milliseconds(0));
  EXPECT_TRUE(third.held()) << third.why_not();
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u); // created for this user alone
}

TEST(DeviceTurn, JobsTimedOnOneGpuShareItsTimingTurnAndKeepAWarmUpOut) {
  test::TempDir tmp;
  const auto file = tmp.path() / "timing.lock";
  {
    DeviceTurn first_job(file, milliseconds(0), DeviceTurn::Hold::shared);
    DeviceTurn second_job(file, milliseconds(0), DeviceTurn::Hold::shared); // jobs_per_gpu 2
    EXPECT_TRUE(first_job.held()) << first_job.why_not();
    EXPECT_TRUE(second_job.held()) << second_job.why_not();
    DeviceTurn warm_up(file, milliseconds(0));
    EXPECT_FALSE(warm_up.held());
  }
  DeviceTurn warm_up(file, milliseconds(0));
  ASSERT_TRUE(warm_up.held()) << warm_up.why_not();
  DeviceTurn job(file, milliseconds(5), DeviceTurn::Hold::shared); // waits for the warm-up
  EXPECT_FALSE(job.held());
}

TEST(DeviceTurn, TheTurnOfAHolderThatWentIsFree) {
  test::TempDir tmp;
  const auto file = tmp.path() / "turn.lock";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    DeviceTurn held(file, milliseconds(0));
    ::_exit(held.held() ? 0 : 1); // exits holding it
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  DeviceTurn after(file, milliseconds(0));
  EXPECT_TRUE(after.held()) << after.why_not();
}

TEST(DeviceTurn, ALinkIsNeverFollowedByATurnOrAWish) {
  test::TempDir tmp;
  const auto target = tmp.path() / "elsewhere";
  std::ofstream(target) << "kept";
  const auto link = tmp.path() / "turn.lock";
  std::filesystem::create_symlink(target, link);
  DeviceTurn turn(link, milliseconds(0));
  EXPECT_FALSE(turn.held());
  EXPECT_NE(turn.why_not().find("turn.lock"), std::string::npos) << turn.why_not();
  TimingWish wish(link, milliseconds(0)); // nor by a job's timing wish
  EXPECT_FALSE(wish.held());
  // Nothing of the target was touched, and it was never locked.
  EXPECT_EQ(std::filesystem::file_size(target), 4u);
  const int fd = ::open(target.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  ::close(fd);
}

TEST(DeviceTurn, AnotherUsersFileIsNotUsed) {
  if (::geteuid() != 0)
    GTEST_SKIP() << "needs root to make a file of another user's";
  test::TempDir tmp;
  const auto file = tmp.path() / "turn.lock";
  std::ofstream(file) << "";
  ASSERT_EQ(::chown(file.c_str(), 65534, 65534), 0);
  DeviceTurn turn(file, milliseconds(0));
  EXPECT_FALSE(turn.held());
  EXPECT_NE(turn.why_not().find("not a regular file of this user"), std::string::npos)
      << turn.why_not();
}

TEST(DeviceTurn, TheDefaultFileIsThisUsersInTheTemporaryDirectory) {
  const auto file = DeviceTurn::open_lock_file();
  EXPECT_EQ(file.parent_path(), std::filesystem::temp_directory_path());
  EXPECT_EQ(file.filename().string(), "keval-device-open-" + std::to_string(::geteuid()) + ".lock");
}

TEST(DeviceTurn, EachGpuHasATimingTurnOfItsOwnNamedOnlyWithSafeCharacters) {
  const auto first = DeviceTurn::timing_lock_file("0000:00:06.0");
  const auto second = DeviceTurn::timing_lock_file("0000:00:07.0");
  EXPECT_NE(first, second);
  EXPECT_NE(first, DeviceTurn::open_lock_file());
  EXPECT_EQ(first.filename().string(),
            "keval-device-timing-" + std::to_string(::geteuid()) + "-0000_00_06_0.lock");
  // Whatever a device reports, the file stays in the temporary directory.
  const auto odd = DeviceTurn::timing_lock_file("../../etc/x");
  EXPECT_EQ(odd.parent_path(), std::filesystem::temp_directory_path());
  EXPECT_EQ(odd.filename().string().find('/'), std::string::npos);
}

// A pipe standing for a prestarted worker's channel from the host.
struct Channel {
  int fds[2] = {-1, -1};
  Channel() { EXPECT_EQ(::pipe(fds), 0); }
  ~Channel() {
    for (int fd : fds)
      if (fd >= 0)
        ::close(fd);
  }
};

TEST(DeviceTurn, AWaitUntilReadableTakesAFreeTurnAtOnce) {
  test::TempDir tmp;
  Channel channel;
  DeviceTurn turn(tmp.path() / "timing.lock", DeviceTurn::UntilReadable{channel.fds[0]});
  EXPECT_TRUE(turn.held()) << turn.why_not();
  EXPECT_FALSE(turn.interrupted());
}

TEST(DeviceTurn, AWaitUntilReadableEndsWithoutTheTurnWhenTheJobComes) {
  test::TempDir tmp;
  const auto file = tmp.path() / "timing.lock";
  DeviceTurn timed_job(file, milliseconds(0)); // a job times on the GPU
  ASSERT_TRUE(timed_job.held()) << timed_job.why_not();
  Channel channel;
  ASSERT_EQ(::write(channel.fds[1], "j", 1), 1); // and this worker's job has come
  DeviceTurn warm_up(file, DeviceTurn::UntilReadable{channel.fds[0]});
  EXPECT_FALSE(warm_up.held());
  EXPECT_TRUE(warm_up.interrupted());
  EXPECT_NE(warm_up.why_not().find("something to read"), std::string::npos) << warm_up.why_not();
  // The job's frame is still there for the worker to read.
  char c = 0;
  EXPECT_EQ(::read(channel.fds[0], &c, 1), 1);
  EXPECT_EQ(c, 'j');
}

TEST(DeviceTurn, AWaitUntilReadableEndsWhenTheHostIsGone) {
  test::TempDir tmp;
  const auto file = tmp.path() / "timing.lock";
  DeviceTurn timed_job(file, milliseconds(0));
  ASSERT_TRUE(timed_job.held()) << timed_job.why_not();
  Channel channel;
  ::close(channel.fds[1]);
  channel.fds[1] = -1;
  DeviceTurn warm_up(file, DeviceTurn::UntilReadable{channel.fds[0]});
  EXPECT_FALSE(warm_up.held());
  EXPECT_TRUE(warm_up.interrupted());
}

TEST(DeviceTurn, AWaitUntilReadableGetsTheTurnItsHolderGivesUp) {
  test::TempDir tmp;
  const auto file = tmp.path() / "timing.lock";
  Channel channel, held, release;
  const pid_t holder = ::fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    DeviceTurn timed_job(file, milliseconds(0));
    char c = timed_job.held() ? 'h' : 'n';
    if (::write(held.fds[1], &c, 1) != 1)
      ::_exit(2);
    ::_exit(::read(release.fds[0], &c, 1) == 1 ? 0 : 3); // exiting gives the turn up
  }
  char c = 0;
  ASSERT_EQ(::read(held.fds[0], &c, 1), 1);
  ASSERT_EQ(c, 'h');
  ASSERT_EQ(::write(release.fds[1], "r", 1), 1);
  // The holder is on its way out, most likely still holding the turn at the first try.
  DeviceTurn warm_up(file, DeviceTurn::UntilReadable{channel.fds[0]});
  EXPECT_TRUE(warm_up.held()) << warm_up.why_not();
  EXPECT_FALSE(warm_up.interrupted());
  int status = 0;
  ASSERT_EQ(::waitpid(holder, &status, 0), holder);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// A taken worker waiting for the open turn, as another process: a shared hold on the precedence
// file (OpenTurn's own, on an open file description of this test's).
UniqueFd waiting_taken_worker(const std::filesystem::path& precedence) {
  UniqueFd file(::open(precedence.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  EXPECT_TRUE(file);
  EXPECT_EQ(::flock(file.get(), LOCK_SH | LOCK_NB), 0);
  return file;
}

TEST(OpenTurn, APoolsSpareLeavesAFreeTurnToAWorkerAJobHasTaken) {
  test::TempDir tmp;
  const auto turn = tmp.path() / "open.lock", precedence = tmp.path() / "precedence.lock";
  {
    const UniqueFd taken = waiting_taken_worker(precedence);
    OpenTurn spare(turn, precedence, -1, milliseconds(20));
    EXPECT_FALSE(spare.held());
    EXPECT_NE(spare.why_not().find("(a spare)"), std::string::npos) << spare.why_not();
    EXPECT_GE(spare.waited_ms(), 20.0);
    EXPECT_EQ(spare.waited_taken_ms(), 0);
    // Another taken worker is not held back by the first: only the turn orders them.
    Channel channel;
    ASSERT_EQ(::write(channel.fds[1], "t", 1), 1);
    OpenTurn also_taken(turn, precedence, channel.fds[0], milliseconds(0));
    EXPECT_TRUE(also_taken.held()) << also_taken.why_not();
    // The host's frame is still there for the worker to read.
    char c = 0;
    EXPECT_EQ(::read(channel.fds[0], &c, 1), 1);
  }
  // No taken worker waits: a spare takes the free turn at once.
  OpenTurn spare(turn, precedence, -1, milliseconds(0));
  EXPECT_TRUE(spare.held()) << spare.why_not();
  EXPECT_LT(spare.waited_ms(), 1000.0);
}

TEST(OpenTurn, ASpareTakenWhileItWaitsGoesFirstOnceTheTurnIsFree) {
  test::TempDir tmp;
  const auto turn = tmp.path() / "open.lock", precedence = tmp.path() / "precedence.lock";
  std::optional<DeviceTurn> opening(std::in_place, turn, milliseconds(0)); // another worker opens
  ASSERT_TRUE(opening->held()) << opening->why_not();
  Channel channel;
  std::optional<OpenTurn> waiting;
  std::thread worker(
      [&] { waiting.emplace(turn, precedence, channel.fds[0], milliseconds(20000)); });
  ASSERT_EQ(::write(channel.fds[1], "t", 1), 1); // its job takes it
  // Once it waits as a taken worker, the precedence file cannot be taken exclusively. Bounded by
  // the waiter's patience: it holds the file from its next try (2 ms) until it has the turn.
  const UniqueFd probe(::open(precedence.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  ASSERT_TRUE(probe);
  bool taken_waits = false;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!taken_waits && std::chrono::steady_clock::now() < give_up) {
    if (::flock(probe.get(), LOCK_EX | LOCK_NB) == 0)
      ::flock(probe.get(), LOCK_UN);
    else
      taken_waits = true;
    std::this_thread::yield();
  }
  EXPECT_TRUE(taken_waits) << "the taken worker never held the precedence file";
  opening.reset(); // the other worker's opens are done
  worker.join();
  ASSERT_TRUE(waiting && waiting->held()) << (waiting ? waiting->why_not() : "no turn");
  EXPECT_GT(waiting->waited_taken_ms(), 0);
  EXPECT_LE(waiting->waited_taken_ms(), waiting->waited_ms());
  // Holding the turn, it no longer holds the precedence file: spares wait only for the turn.
  EXPECT_EQ(::flock(probe.get(), LOCK_EX | LOCK_NB), 0);
}

// The wish file's modification time set `seconds_ago`.
void mark_released(const std::filesystem::path& file, int seconds_ago) {
  timespec times[2]{};
  ::clock_gettime(CLOCK_REALTIME, &times[0]);
  times[0].tv_sec -= seconds_ago;
  times[1] = times[0];
  ASSERT_EQ(::utimensat(AT_FDCWD, file.c_str(), times, 0), 0);
}

TEST(TimingWish, AWarmUpSeesAJobThatHoldsTheGpuOrJustLetItGo) {
  test::TempDir tmp;
  const auto file = tmp.path() / "timing-wish.lock";
  constexpr milliseconds kNow{0};
  EXPECT_TRUE(TimingWish::idle_for(file, kNow)); // no job ever
  mark_released(file, 10);
  {
    TimingWish first(file, milliseconds(0));
    ASSERT_TRUE(first.held());
    EXPECT_FALSE(TimingWish::idle_for(file, kNow));
    TimingWish second(file, milliseconds(0)); // two jobs sharing one GPU may both wish
    EXPECT_TRUE(second.held());
    EXPECT_FALSE(TimingWish::idle_for(file, kNow));
  }
  // Let go just now: idle, but not for long, and a busy GPU's next job is likely on its way.
  EXPECT_TRUE(TimingWish::idle_for(file, kNow));
  EXPECT_FALSE(TimingWish::idle_for(file, TimingWish::kIdleBeforeWarmUp));
  mark_released(file, 10);
  EXPECT_TRUE(TimingWish::idle_for(file, TimingWish::kIdleBeforeWarmUp));
  // A look is momentary: a wish made after it is held.
  TimingWish later(file, milliseconds(0));
  EXPECT_TRUE(later.held());
  EXPECT_EQ(DeviceTurn::timing_wish_file("0000:00:06.0").filename().string(),
            "keval-device-timing-wish-" + std::to_string(::geteuid()) + "-0000_00_06_0.lock");
}

} // namespace
} // namespace keval::worker
