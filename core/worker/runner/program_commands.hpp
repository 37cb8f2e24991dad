// The runner's commands for whole-program kernel types (KEVAL_CAP_PROGRAM, docs/cuda_program.md):
// the plan from the plugin and the workspace's files, both before any user code. The program's
// own commands are not run here but as processes of their own in this runner's place
// (worker/program/step_process.hpp), which the trusted worker waits for itself.
//
//   trusted: plan   {program, which, environment}              -> {plan}
//   trusted: files  {files[{path, content}], from_fds[{path}]} + fds -> {}
#pragma once

#include "protocol/blocking_channel.hpp"
#include "worker/pipeline/plugin_loader.hpp"

#include <boost/json/object.hpp>

namespace keval::worker::program_commands {

inline constexpr const char* kPlan = "plan";
inline constexpr const char* kFiles = "files";

boost::json::object plan(const LoadedPlugin& plugin, const boost::json::object& command);
// Writes into the runner's own directory (its working directory), never through a symlink.
boost::json::object files(const boost::json::object& command, protocol::BlockingChannel& channel);

} // namespace keval::worker::program_commands
