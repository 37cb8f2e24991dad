// From a parsed request to a finished job: checks against the registry, the worker launch,
// persisting every phase as it arrives, and the response. Shared by the CLI and the daemon.
#pragma once

#include "registry/registry.hpp"
#include "request/model.hpp"
#include "result/response.hpp"
#include "store/job_store.hpp"
#include "supervisor/worker_session.hpp"

#include <filesystem>
#include <functional>
#include <string>

namespace keval::job {

// Rejects (request::RequestError, HTTP 400) what the registry makes invalid: an unknown
// kernel_type (the message lists the available ones) or a missing IOContract where the kernel
// type requires one.
void check_against_registry(const request::EvalRequest& request,
                            const registry::Registry& registry);

// A fresh job id: 32 hex digits from a random source.
std::string new_job_id();

// The default seed for arguments without one: fixed, so unseeded requests are reproducible.
// A job's secret: the seed its inputs are drawn from when the request names none. Drawn from
// the kernel's random source per job, so a candidate can precompute nothing; reported after the
// job (metadata.seed), so a run can be reproduced with the request's `seed`.
uint64_t secret_job_seed();

struct RunOptions {
  std::filesystem::path worker_exe;
  std::filesystem::path work_root; // job work directories are created (and removed) here
  protocol::SandboxPolicy sandbox; // for every worker (supervisor/sandbox_setup.hpp)
  // Decides a device for a worker's need_device (CLI: the first offered type, device 0).
  std::function<void(const boost::json::array& device_types,
                     std::function<void(boost::json::object)> grant)>
      grant_device;
  std::function<void(const boost::json::object& progress)> on_progress;
};

supervisor::JobLaunch make_launch(const request::EvalRequest& request,
                                  const registry::Registry& registry, const std::string& job_id,
                                  const RunOptions& options);

// Runs one job to the end on a private event loop, saving the record to `store` after every
// phase. The request must have passed check_against_registry.
result::Response run_job(const request::EvalRequest& request, const registry::Registry& registry,
                         const store::JobStore& store, const RunOptions& options);

// The V2 job status once `phase` ("compiled", "validated", "profiled") has arrived:
// "validating" after compiling, "profiling" after validating and until the worker is done.
const char* status_after_phase(const std::string& phase);
// The status of a finished job: "failed" when keval or the machine failed (HTTP 500), else
// "completed" (the kernel may still have failed: that is a result, not a job failure).
const char* final_status(result::Verdict verdict);

// The record as stored: the request, every phase so far, the outcome and the response.
boost::json::object record_json(const result::JobRecord& record, const boost::json::object& request,
                                const std::string& status);

} // namespace keval::job
