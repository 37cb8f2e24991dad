// The daemon's driver hold (daemon/driver_hold.hpp), with scripts in keval-worker's place: one
// that holds until its standard input ends, one that holds nothing, one that never answers, one
// that answers nonsense, one that dies while holding. The real `keval-worker --hold-driver` runs on
// the GPU machine (DaemonMultiGpu holds through a scripted one; the GPU suites through the real).
#include "daemon/driver_hold.hpp"
#include "supervisor/owned_children.hpp"
#include "support/daemon_harness.hpp"

#include <csignal>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <sys/stat.h>

namespace keval::test::daemon {
namespace {

using keval::daemon::DriverHold;

class DriverHoldTest : public ::testing::Test {
protected:
  // `body` after a shell's start, in its own file, runnable.
  fs::path script(const std::string& body) {
    const fs::path path = dir_.path() / ("holder-" + std::to_string(++scripts_) + ".sh");
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    fs::permissions(path, fs::perms::owner_all);
    return path;
  }
  fs::path marker() const { return dir_.path() / "released"; }

  TempDir dir_;
  int scripts_ = 0;
};

TEST_F(DriverHoldTest, AHolderHoldsUntilItsInputEndsAsTheHoldEnds) {
  pid_t pid = -1;
  {
    const DriverHold hold(script("echo '{\"held\": true, \"init_ms\": 12.5}'\n"
                                 "cat > /dev/null\n"
                                 "echo $$ > '" +
                                 marker().string() + "'"));
    ASSERT_TRUE(hold.held()) << json::serialize(hold.status());
    const json::object status = hold.status();
    EXPECT_EQ(status.at("held"), true);
    EXPECT_EQ(status.at("init_ms"), 12.5);
    pid = static_cast<pid_t>(status.at("pid").as_int64());
    EXPECT_EQ(::kill(pid, 0), 0) << "the holder is not running";
    EXPECT_TRUE(supervisor::OwnedChildren::contains(pid)) << "the orphan reaper would kill it";
    EXPECT_FALSE(fs::exists(marker()));
  }
  // It ended by itself once its input closed (the marker), and it was reaped (no zombie left).
  EXPECT_EQ(read_file(marker()), std::to_string(pid) + "\n");
  EXPECT_NE(::kill(pid, 0), 0);
  EXPECT_FALSE(supervisor::OwnedChildren::contains(pid));
}

TEST_F(DriverHoldTest, AHolderWithoutADriverSaysWhy) {
  const DriverHold hold(
      script("echo '{\"held\": false, \"reason\": \"no CUDA driver: cannot load libcuda.so.1\"}'"));
  EXPECT_FALSE(hold.held());
  EXPECT_EQ(hold.status(), (json::object{{"held", false},
                                         {"reason", "no CUDA driver: cannot load libcuda.so.1"}}));
}

TEST_F(DriverHoldTest, AHolderThatNeverAnswersIsKilledAtTheDeadline) {
  const DriverHold hold(script("exec sleep 60"), std::chrono::milliseconds(300));
  EXPECT_FALSE(hold.held());
  const std::string reason(hold.status().at("reason").as_string());
  EXPECT_NE(reason.find("holder-1.sh --hold-driver did not answer within 0.3 s"), std::string::npos)
      << reason;
  EXPECT_NE(reason.find("SIGKILL"), std::string::npos) << reason;
}

TEST_F(DriverHoldTest, AnAnswerThatIsNotAHoldIsReportedAsItCame) {
  const DriverHold garbled(script("echo 'cuInit: all good'"));
  EXPECT_FALSE(garbled.held());
  EXPECT_EQ(garbled.status().at("reason"),
            "holder-1.sh --hold-driver answered 'cuInit: all good', not a hold");
  const DriverHold silent(script("exit 4"));
  EXPECT_EQ(silent.status().at("reason"),
            "holder-2.sh --hold-driver ended without answering (exit code 4)");
}

TEST_F(DriverHoldTest, AHolderThatDiesIsNoLongerHeldAndSaysHowItEnded) {
  const DriverHold hold(script("echo '{\"held\": true}'\nexit 3"));
  EXPECT_TRUE(eventually([&] { return !hold.held(); }, std::chrono::seconds(30)));
  const std::string reason(hold.status().at("reason").as_string());
  EXPECT_NE(reason.find(") ended: exit code 3"), std::string::npos) << reason;
  const pid_t pid = std::stoi(reason.substr(reason.find("pid ") + 4));
  EXPECT_FALSE(supervisor::OwnedChildren::contains(pid));
}

TEST_F(DriverHoldTest, NoHoldSaysWhyNoneWasAskedFor) {
  const DriverHold hold = DriverHold::none("no GPU");
  EXPECT_FALSE(hold.held());
  EXPECT_EQ(hold.status(), (json::object{{"held", false}, {"reason", "no GPU"}}));
}

} // namespace
} // namespace keval::test::daemon
