// Message types of the host <-> worker protocol and the order they come in:
//
//   host:   taken        {}   -- first, to a prestarted worker: a job has it (its device-open
//                               turn goes before the pool's spares); a worker skips it later
//   worker: hello        {worker_version, pid}
//   host:   job          {job_id, mode, request, plugins{type: path}, work_dir, cuda_arch, seed}
//   worker: phase        {phase: "compiled", result}        -- persisted by the host at once
//   worker: need_device  {device_types: ["cuda"|"cpu", ...], reason}
//   host:   grant        {device: {type: "cuda"|"cpu", index}, quiet?, handover?}   (or {error}
//                         when none fits); quiet false: the GPU's last job is still ending;
//                         handover true: the host takes a device_handover
//   worker: progress     {phase, done, total, message}          -- any time; proves liveness
//   worker: phase        {phase: "validated", result}
//   host:   device_quiet {}   -- after a grant with quiet false, once that job is gone; the
//                               worker reads it before it times anything
//   worker: phase        {phase: "profiled", result}
//   worker: device_handover {}  -- its job's processes are stopped for good and the GPU has
//                                  half its memory free: the next job may have it (not time on it)
//   worker: done         {}
//   worker: fatal        {message, details}   -- the worker itself failed (not the kernel)
//
// Compilation happens before need_device, so compiling never holds a device.
#pragma once

namespace keval::protocol::msg {

inline constexpr const char* kTaken = "taken";
inline constexpr const char* kHello = "hello";
inline constexpr const char* kJob = "job";
inline constexpr const char* kPhase = "phase";
inline constexpr const char* kNeedDevice = "need_device";
inline constexpr const char* kGrant = "grant";
inline constexpr const char* kDeviceQuiet = "device_quiet";
inline constexpr const char* kDeviceHandover = "device_handover";
inline constexpr const char* kProgress = "progress";
inline constexpr const char* kDone = "done";
inline constexpr const char* kFatal = "fatal";

inline constexpr const char* kPhaseCompiled = "compiled";
inline constexpr const char* kPhaseValidated = "validated";
inline constexpr const char* kPhaseProfiled = "profiled";

} // namespace keval::protocol::msg
