// A candidate that speaks the build service's protocol by hand (runner_protocol.hpp:
// build_request) in a job whose kernel types build nothing: keval serves no builds to it, so the
// first request ends its runner and the candidate fails, with the reference untouched. The GPU
// half (a torch_cuda job, where builds are served) is in tests/adversarial/gpu/.
#include "adversarial_support.hpp"

namespace keval::test::adversarial {
namespace {

using BuildRequests = TorchAttack;

TEST_F(BuildRequests, AskingForABuildWhereNoneIsServedEndsTheCandidate) {
  for (const char* mode : {"lie", "flood"}) {
    TempDir tmp;
    const auto run = run_cli(relu_compare(source("forge_build_requests.py", {{"MODE", mode}}),
                                          unique_id(std::string("build-") + mode)),
                             tmp.path() / "state");
    ASSERT_FALSE(run.body.empty()) << describe(run);
    expect_cli_kernel_failure(run, mode);
    EXPECT_NE(shown(run.body, 100000).find("asked for a build, which keval does not serve"),
              std::string::npos)
        << mode << ": " << shown(run.body);
  }
}

} // namespace
} // namespace keval::test::adversarial
