// One job's compile -> (device grant) -> validate -> profile pipeline inside keval-worker.
// Each phase's result is sent to the host the moment it exists; the host persists it, so a
// crash later in the job never loses an earlier phase.
#pragma once

#include "protocol/blocking_channel.hpp"
#include "request/model.hpp"
#include "worker/engine/engine.hpp"
#include "worker/runner/runner_client.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

namespace keval::worker {

// TensorData that the worker could not decode: it did not inflate to its tensor's size.
struct InputDataError {
  std::string path;    // "custom_kernel.io.args[0].tensor_spec.data.data_b64"
  std::string message; // "path: what is wrong"
};

// What the host's `job` frame carries.
struct JobSpec {
  std::string job_id;
  request::EvalRequest request;
  std::map<std::string, std::filesystem::path> plugins; // kernel_type -> plugin library
  std::filesystem::path work_dir;
  int cuda_arch = 0;
  uint64_t seed = 0; // base for arguments without an explicit seed
  // Set when TensorData did not decode: the job compiles, then reports it as its validation
  // result (a bad request).
  std::optional<InputDataError> input_data_error;
  int64_t timeout_ms = 0;
  // The grant will name a device verifier (JobFrame::device_verifier): no context of this
  // process's own is opened ahead.
  bool device_verifier = false;
};

// Parses a `job` frame; throws std::runtime_error (the host sent something invalid).
JobSpec parse_job(const boost::json::object& frame);

// Where a job's runners come from: started ahead of the job (prewarmed) or now.
class RunnerSource {
public:
  virtual ~RunnerSource() = default;
  // A runner for `side` ("ref" or "custom", or "build": the builder of extension_builds.hpp,
  // which runs no user code) whose hello has arrived. Throws when none can start.
  virtual std::unique_ptr<RunnerClient> take(const std::string& side) = 0;
  // What the runner said in its hello about the layers it applied to itself.
  virtual boost::json::object hello_of(const RunnerClient& runner) = 0;
  // An engine opened before the job for device `type`/`index` (a prestarted worker opens its
  // context ahead on the GPU the host named), or nullptr. The job's own process made it.
  virtual std::unique_ptr<Engine> prepared_engine(const std::string& type, int index) = 0;
  // The CUDA device prepared_engine holds open (its ordinal), which the job asks the host for
  // first (protocol::NeedDevice::opened_cuda); nullopt when none is.
  virtual std::optional<int> prepared_cuda_device() { return std::nullopt; }
  // Whether a CUDA engine is being opened ahead (prepared_engine may return it): the job then
  // opens no second one beside it.
  virtual bool opens_cuda_engine_ahead() const = 0;
  // A prestarted worker's warm-up of the GPU before the job came (protocol::Done::warm_up), or
  // why it did not run; empty for a worker started for its job.
  virtual boost::json::object device_warm_up() const { return {}; }
};

// Runs the job to completion over `channel`, its user code in runners from `runners`. Kernel
// failures become phase results; only a failure of the worker itself escapes as an exception.
// Every runner, and every process their user code started, has ended when this returns.
void run_pipeline(protocol::BlockingChannel& channel, const JobSpec& job, RunnerSource& runners);

} // namespace keval::worker
