// The runner: the process that loads one side's plugin and runs its user code, for the trusted
// keval-worker that started it. It holds nothing of the job but its own plugin, its own device
// context and the tensors it is handed; it decides nothing (see runner_protocol.hpp).
#pragma once

#include "protocol/sandbox_policy.hpp"

#include <string>
#include <vector>

namespace keval::worker {

// Serves the trusted worker on `channel_fd` until it says exit or goes away. `prewarm`: plugin
// libraries to load and prewarm before the hello (a runner started ahead of its job). Returns the
// process's exit code. `sandbox`: the layers it applies to itself first
// (worker/isolation/sandbox.hpp), reported in its hello as "isolation".
int run_runner(int channel_fd, const std::vector<std::string>& prewarm,
               const protocol::SandboxPolicy& sandbox);

} // namespace keval::worker
