// One job's compile -> (device grant) -> validate -> profile pipeline inside keval-worker.
// Each phase's result is sent to the host the moment it exists; the host persists it, so a
// crash later in the job never loses an earlier phase.
#pragma once

#include "protocol/blocking_channel.hpp"
#include "request/model.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

namespace keval::worker {

// What the host's `job` frame carries.
struct JobSpec {
  std::string job_id;
  request::EvalRequest request;
  std::map<std::string, std::filesystem::path> plugins; // kernel_type -> plugin library
  std::filesystem::path work_dir;
  int cuda_arch = 0;
  uint64_t seed = 0; // base for arguments without an explicit seed
};

// Parses a `job` frame; throws std::runtime_error (the host sent something invalid).
JobSpec parse_job(const boost::json::object& frame);

// Runs the job to completion over `channel`. Kernel failures become phase results; only a
// failure of the worker itself escapes as an exception.
void run_pipeline(protocol::BlockingChannel& channel, const JobSpec& job);

} // namespace keval::worker
