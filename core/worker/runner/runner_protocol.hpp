// The channel between the trusted keval-worker and a runner: the process that loads one side's
// plugin and runs its user code (the reference's or the candidate's), and nothing else.
//
// The trusted worker asks, the runner answers. Every command carries a sequence number that the
// reply echoes under "for"/"seq"; a reply that does not match is a broken runner. What a runner
// answers after user code has run (from `compile` on) is data the trusted worker checks, never a
// verdict: outputs are compared there, inputs re-checked there, times bounded there.
//
//   runner:  hello           {pid, isolation{...}, prewarmed[], prewarm_errors[], opens_device,
//                            warms_device} (no user code yet; opens_device: a prewarmed plugin
//                            runs on CUDA; warms_device: one has SDK 1.4's warm_device)
//   trusted: open_device     {}                         -> {cuda}  (a runner started ahead of
//                            its job opens its context now, in the trusted worker's turn among
//                            the machine's openers: engine/device_turn.hpp; cuda false: no
//                            plugin of its runs on CUDA)
//   trusted: warm_device     {}                         -> {warmed[], errors?[], skipped?}
//                            (after open_device, before any user code, only while no job is
//                            timed on the GPU: engine/device_turn.hpp's timing turn; each CUDA
//                            plugin's warm_device on the device opened ahead)
//   trusted: load            {plugin}                   -> {manifest{kernel_type, capabilities}}
//   trusted: compile         {source_code, metadata, io, work_dir, cuda_arch, side}
//                                                       -> {time_ms, info?} | error
//   trusted: companion       {plugin, source_code, metadata, io, work_dir, cuda_arch}
//                                                       -> {}  (the reference's source, compiled
//                            as side "ref" in the candidate's runner before the candidate's own:
//                            KernelBench keeps get_inputs/get_init_inputs there only)
//   trusted: bind            {device{type, index}, nvtx_range?} -> {}  (the runner opens its own
//                            context; nvtx_range: the NVTX range its launches run in)
//   trusted: args            {binding, args[...]} + fds -> {}  (tensors: its shared buffers)
//   trusted: launch          {binding}                  -> {outputs[...]} + fds (returned ones)
//   trusted: default_inputs  {seed, share?}             -> {tensors[...]} + fds  (share false:
//                                                          produced for their layout only, none
//                                                          sent or kept)
//   trusted: timer           {binding, capture?, trace?} -> {method, untraced?, host_ms}
//                                                          (capture false: events; trace false:
//                                                          no device trace; untraced: why there
//                                                          is none; host_ms: where making it
//                                                          took its time, a diagnostic:
//                                                          Timer::setup_ms, Timer::kSetupParts)
//   trusted: sample          {binding}                  -> {ms, activities? | activity_lost?,
//                                                          outputs[...]} + fds (returned ones;
//                            activities: worker/engine/device_work.hpp's SampleActivity of each
//                            traced sample of the binding not sent yet, in order, this one last;
//                            absent while the runner lets them gather: it reads its trace once
//                            for several samples, as many as its last read's busiest sample
//                            allows, up to 16)
//   trusted: activity        {binding}                  -> {activities[...] | activity_lost}
//                            (those not sent yet, [] when none: before the trusted worker
//                            decides on the samples taken, and after the last)
//   trusted: metrics         {binding, metrics[], max_kernels, expected_ms?} -> {counters} |
//   {unavailable}
//                            (after the timed samples: worker/engine/device_counters.hpp)
//   trusted: hardware_time   {binding, runs, max_kernels} -> {runs: [[ns, ...], ...]} |
//   {unavailable}
//                            (after the timed samples: each run's kernels' gpu__time_duration)
//   trusted: unbind          {binding}                  -> {}
//
// A failed command answers {ok: false, error{type, message, details}}; type "device_error" means
// the kernel broke its device.
//
// One request goes the other way, while a command runs (the runner is inside `compile` or
// `companion`, its plugin's load_inline asking):
//   runner:  build_request   {kind: "torch_cuda_extension", module, toolchain{...},
//                             extension{...}}
//   trusted: build_reply     {ok: true, module, cache: "reused" | "built", key, seconds,
//                             steps?, not_kept?} + fd (the library, read-only)
//                             | {ok: false, failed{message, output, steps}} (the build failed:
//                             the compiler's output) | {ok: false, unavailable} (keval cannot
//                             build it: the runner may) | {ok: false, refused} (malformed: the
//                             field's path)
// The trusted worker builds it in a runner of its own that runs no user code, keeps it in a cache
// only it writes, keyed by everything the request says (pipeline/extension_builds.hpp), and
// answers at most kMaxBuildRequests of one runner; a runner it serves no builds to, or one that
// asks more often, is failed.
// The runner learns its channel's descriptor from KEVAL_RUNNER_CHANNEL_FD.
//
// The trusted worker's own builder runner is asked `load {plugin, device: false}` (no context
// opened) and `compile {..., side: "build"}`, whose source_code is the request above; its
// info.build.library names the library it left in its directory.
//
// Returned tensors ({dtype, shape, bytes, fd: bool, reuse?: bool}, detail/wire.hpp) travel in
// shared buffers. A runner keeps the buffers of its last reply of each kind ("outputs" of launch
// and sample, "tensors" of default_inputs) and writes the next reply's tensor at the same place,
// of the same dtype and shape, into the same buffer: `reuse: true`, no descriptor. The trusted
// worker keeps those mapped and refuses a reuse its mirror does not back (RunnerBuffers).
#pragma once

#include "protocol/frame.hpp"

namespace keval::worker::runner_msg {

inline constexpr const char* kHello = "hello";
inline constexpr const char* kReply = "reply";

inline constexpr const char* kLoad = "load";
inline constexpr const char* kCompile = "compile";
inline constexpr const char* kCompanion = "companion";
inline constexpr const char* kBind = "bind";
inline constexpr const char* kArgs = "args";
inline constexpr const char* kLaunch = "launch";
inline constexpr const char* kOpenDevice = "open_device";
inline constexpr const char* kWarmDevice = "warm_device";
inline constexpr const char* kDefaultInputs = "default_inputs";
inline constexpr const char* kTimer = "timer";
inline constexpr const char* kSample = "sample";
inline constexpr const char* kActivity = "activity";
inline constexpr const char* kUnbind = "unbind";
inline constexpr const char* kMetrics = "metrics";
inline constexpr const char* kHardwareTime = "hardware_time";
inline constexpr const char* kBuildRequest = "build_request";
inline constexpr const char* kBuildReply = "build_reply";
inline constexpr const char* kBuildSide = "build";
// A sample reply's host_ms: where the call's time went in the runner (a diagnostic).
namespace sample_account {
inline constexpr const char* kSample = "sample";           // the plugin's timed run
inline constexpr const char* kSynchronize = "synchronize"; // the device's work after it
inline constexpr const char* kTrace = "trace";             // reading the run's activity trace
inline constexpr const char* kShare = "share";             // handing the outputs over
inline constexpr const char* kAll[] = {kSample, kSynchronize, kTrace, kShare};
} // namespace sample_account
// Where a runner finds its channel (apply_sandbox moves it to a high descriptor).
inline constexpr const char* kChannelFdVariable = "KEVAL_RUNNER_CHANNEL_FD";

// Frames between the two carry descriptions and summaries, never tensor data, but for `compile`:
// it carries the side's IOContract, inline tensor data included, as the host's job frame does.
inline constexpr size_t kMaxRunnerFrameBytes = protocol::kMaxJobFrameBytes;

} // namespace keval::worker::runner_msg
