// Who may write the shared build cache (issue 11): a reference's runner gets it writable, every
// other runner (the candidate, a program's solution and harness) read-only, with its builder told
// where to build instead. The enforcement (Landlock) is tested on a real runner in
// tests/adversarial/cpu/sandbox_test.cpp.
#include "worker/isolation/sandbox.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace keval::worker::isolation {
namespace {

protocol::SandboxPolicy base() {
  protocol::SandboxPolicy p;
  p.mode = protocol::SandboxMode::standard;
  p.shared_writable = {"/var/cache/keval"};
  p.runner_dir = "/state/work/runner-1-0";
  return p;
}

bool has(const std::vector<std::string>& env, const std::string& entry) {
  return std::find(env.begin(), env.end(), entry) != env.end();
}

TEST(CacheView, OnlyTheReferenceWritesTheSharedCache) {
  const protocol::SandboxPolicy ref = policy_for_side(base(), "ref");
  EXPECT_EQ(ref.shared_writable, std::vector<std::string>{"/var/cache/keval"});
  EXPECT_TRUE(ref.shared_readonly.empty());
  for (const char* side : {"custom", "harness", "build", ""}) {
    const protocol::SandboxPolicy other = policy_for_side(base(), side);
    EXPECT_TRUE(other.shared_writable.empty()) << side;
    EXPECT_EQ(other.shared_readonly, std::vector<std::string>{"/var/cache/keval"}) << side;
  }
}

TEST(CacheView, TheCandidatesBuilderIsToldToBuildInItsOwnDirectory) {
  const std::vector<std::string> ref = sandbox_environment(policy_for_side(base(), "ref"));
  EXPECT_TRUE(has(ref, "KEVAL_CACHE_DIR=/var/cache/keval"));
  EXPECT_FALSE(has(ref, "KEVAL_CACHE_READ_ONLY=1"));
  for (const auto mode : {protocol::SandboxMode::standard, protocol::SandboxMode::off}) {
    protocol::SandboxPolicy p = base();
    p.mode = mode;
    const std::vector<std::string> custom = sandbox_environment(policy_for_side(p, "custom"));
    EXPECT_TRUE(has(custom, "KEVAL_CACHE_READ_ONLY=1"));
    EXPECT_TRUE(has(custom, "KEVAL_PRIVATE_CACHE_DIR=/state/work/runner-1-0/.keval-cache"));
    if (mode == protocol::SandboxMode::standard) {
      EXPECT_TRUE(has(custom, "KEVAL_CACHE_DIR=/var/cache/keval"));
    }
  }
}

} // namespace
} // namespace keval::worker::isolation
