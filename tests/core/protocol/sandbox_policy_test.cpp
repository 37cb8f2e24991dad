// The sandbox policy crosses two process boundaries on command lines (host -> worker -> runner):
// what is written must come back the same, and what is malformed must be refused by name.
#include "protocol/sandbox_policy.hpp"

#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

namespace keval::protocol {
namespace {

SandboxPolicy sample() {
  SandboxPolicy p;
  p.mode = SandboxMode::strict;
  p.job_uid = 1234;
  p.job_gid = 5678;
  p.memory_bytes = 3ull << 30;
  p.max_processes = 77;
  p.max_file_bytes = 1ull << 20;
  p.max_open_files = 99;
  p.work_root = "/state/work";
  p.private_dir = "/state";
  p.shared_writable = {"/var/cache/keval", "/other"};
  p.shared_readonly = {"/read/only"};
  p.cgroup_parent = "/sys/fs/cgroup/keval";
  p.cgroup_skipped = "";
  p.runner_dir = "/state/work/runner-1-0";
  p.cgroup = "/sys/fs/cgroup/keval/runner-1-0";
  p.uid_of_pid = 4242;
  p.background_nice = 10;
  return p;
}

TEST(SandboxPolicy, RoundTripsThroughItsJson) {
  const SandboxPolicy back =
      parse_sandbox_policy(std::string_view(boost::json::serialize(to_json(sample()))));
  EXPECT_EQ(back.mode, SandboxMode::strict);
  EXPECT_EQ(back.job_uid, 1234u);
  EXPECT_EQ(back.job_gid, 5678u);
  EXPECT_EQ(back.memory_bytes, 3ull << 30);
  EXPECT_EQ(back.max_processes, 77u);
  EXPECT_EQ(back.max_file_bytes, 1ull << 20);
  EXPECT_EQ(back.max_open_files, 99u);
  EXPECT_EQ(back.uid_of_pid, 4242u); // a program step takes its runner's uid
  EXPECT_EQ(back.work_root, "/state/work");
  EXPECT_EQ(back.private_dir, "/state");
  EXPECT_EQ(back.shared_writable, (std::vector<std::string>{"/var/cache/keval", "/other"}));
  EXPECT_EQ(back.shared_readonly, (std::vector<std::string>{"/read/only"}));
  EXPECT_EQ(back.cgroup_parent, "/sys/fs/cgroup/keval");
  EXPECT_EQ(back.runner_dir, "/state/work/runner-1-0");
  EXPECT_EQ(back.cgroup, "/sys/fs/cgroup/keval/runner-1-0");
  EXPECT_EQ(back.background_nice, 10);
}

TEST(SandboxPolicy, MalformedPoliciesAreRefusedByField) {
  auto o = to_json(sample());
  o["mode"] = "lenient";
  EXPECT_THROW(
      {
        try {
          parse_sandbox_policy(o);
        } catch (const std::invalid_argument& e) {
          EXPECT_NE(std::string(e.what()).find("'mode'"), std::string::npos) << e.what();
          throw;
        }
      },
      std::invalid_argument);
  o = to_json(sample());
  o.erase("memory_bytes");
  EXPECT_THROW(parse_sandbox_policy(o), std::invalid_argument);
  o = to_json(sample());
  o["max_processes"] = -1;
  EXPECT_THROW(parse_sandbox_policy(o), std::invalid_argument);
  o = to_json(sample());
  o["shared_writable"] = boost::json::array{1};
  EXPECT_THROW(parse_sandbox_policy(o), std::invalid_argument);
  o = to_json(sample());
  o["shared_readonly"] = "/not/a/list";
  EXPECT_THROW(parse_sandbox_policy(o), std::invalid_argument);
  o = to_json(sample());
  o.erase("shared_readonly"); // a policy written before the field: none read-only
  EXPECT_TRUE(parse_sandbox_policy(o).shared_readonly.empty());
  o = to_json(sample());
  o["background_nice"] = 20; // beyond any nice value
  EXPECT_THROW(parse_sandbox_policy(o), std::invalid_argument);
  o["background_nice"] = -5; // a runner may not ask to be raised
  EXPECT_THROW(parse_sandbox_policy(o), std::invalid_argument);
  o.erase("background_nice"); // a policy written before the field: no background
  EXPECT_EQ(parse_sandbox_policy(o).background_nice, 0);
  EXPECT_THROW(parse_sandbox_policy(std::string_view("[1, 2]")), std::invalid_argument);
  EXPECT_THROW(parse_sandbox_policy(std::string_view("{not json")), std::invalid_argument);
}

TEST(SandboxPolicy, ModesHaveTheirCommandLineNames) {
  for (SandboxMode m : {SandboxMode::standard, SandboxMode::strict, SandboxMode::off})
    EXPECT_EQ(parse_sandbox_mode(sandbox_mode_name(m)), m);
  EXPECT_FALSE(parse_sandbox_mode("on").has_value());
}

TEST(ByteSize, ReadsSuffixesAndRefusesWhatIsNotASize) {
  EXPECT_EQ(parse_byte_size("1024"), 1024u);
  EXPECT_EQ(parse_byte_size("512M"), 512ull << 20);
  EXPECT_EQ(parse_byte_size("4G"), 4ull << 30);
  EXPECT_EQ(parse_byte_size("4GiB"), 4ull << 30);
  EXPECT_EQ(parse_byte_size("2k"), 2048u);
  EXPECT_EQ(parse_byte_size("1T"), 1ull << 40);
  EXPECT_FALSE(parse_byte_size("").has_value());
  EXPECT_FALSE(parse_byte_size("G").has_value());
  EXPECT_FALSE(parse_byte_size("4X").has_value());
  EXPECT_FALSE(parse_byte_size("-1").has_value());
  EXPECT_FALSE(parse_byte_size("99999999999999999999").has_value());
  EXPECT_FALSE(parse_byte_size("20000000000000T").has_value()); // overflows 64 bits
}

TEST(DefaultJobMemory, IsHalfTheMachineAtMostSixteenGiB) {
  const uint64_t m = default_job_memory();
  EXPECT_GT(m, 0u);
  EXPECT_LE(m, 16ull << 30);
}

} // namespace
} // namespace keval::protocol
