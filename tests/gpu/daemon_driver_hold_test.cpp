// `keval serve` on a machine with a GPU keeps the CUDA driver initialised in one process of its
// own, the real `keval-worker --hold-driver` (daemon/driver_hold.hpp), for as long as it serves,
// and holds none when told not to. Skipped, with the reason, only when no CUDA device is usable.
#include "support/cuda_device.hpp"
#include "support/daemon_harness.hpp"

#include <algorithm>
#include <csignal>
#include <string>

#include <gtest/gtest.h>

namespace keval::test::daemon {
namespace {

json::object driver_of(const DaemonProcess& daemon) {
  return HttpClient(daemon.socket()).get("/health").json_body().at("driver").as_object();
}

TEST(DaemonDriverHold, OneProcessHoldsTheDriverForAsLongAsTheDaemonServes) {
  KEVAL_SKIP_WITHOUT_CUDA_DEVICE();
  DaemonDirs dirs;
  DaemonProcess daemon(dirs.state(), dirs.socket(), {"--warm-workers", "0"});
  ASSERT_TRUE(daemon.wait_ready()) << daemon.log_tail();
  const json::object driver = driver_of(daemon);
  ASSERT_EQ(driver.at("held"), true) << json::serialize(driver) << daemon.log_tail();
  EXPECT_GT(driver.at("init_ms").to_number<double>(), 0.0);
  const auto holder = static_cast<pid_t>(driver.at("pid").as_int64());
  std::string command = read_file("/proc/" + std::to_string(holder) + "/cmdline");
  std::replace(command.begin(), command.end(), '\0', ' ');
  EXPECT_NE(command.find("keval-worker --hold-driver"), std::string::npos) << command;
  daemon.signal(SIGTERM);
  ASSERT_TRUE(daemon.wait_exit(std::chrono::seconds(60))) << daemon.log_tail();
  EXPECT_NE(::kill(holder, 0), 0) << "the holder outlived the daemon";
}

TEST(DaemonDriverHold, NoneIsHeldWhenTheOperatorSaysSo) {
  KEVAL_SKIP_WITHOUT_CUDA_DEVICE();
  DaemonDirs dirs;
  DaemonProcess daemon(dirs.state(), dirs.socket(), {"--warm-workers", "0", "--no-driver-hold"});
  ASSERT_TRUE(daemon.wait_ready()) << daemon.log_tail();
  EXPECT_EQ(driver_of(daemon), (json::object{{"held", false}, {"reason", "--no-driver-hold"}}));
}

} // namespace
} // namespace keval::test::daemon
