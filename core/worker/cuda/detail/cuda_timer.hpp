// Timing on a CUDA device: CUDA-graph replay where the launch can be captured, CUDA events around
// each launch otherwise, with the L2 cache flushed before every sample outside the timed region.
#pragma once

#include "worker/cuda/detail/device_session.hpp"
#include "worker/engine/engine.hpp"

#include <functional>
#include <memory>

namespace keval::worker::detail {

// Captures `launch` once on the session's stream (thread-local capture mode) into a graph that
// every sample replays; method() is then "cuda_graph". When capture is refused, invalidated (the
// launch synchronised, allocated, or used another stream), records nothing, or the graph cannot
// be instantiated, each sample calls `launch` between events instead ("cuda_event"). An
// exception from `launch` during capture ends the capture and propagates from here; later ones
// propagate from sample(). sample() throws KernelFault for any device error. The timer must not
// outlive `session`. With `capture` false it never captures: events from the start.
//
// Each sample's device work is traced (ActivityTrace; end_sample(), take_activities()) unless
// `trace` is false or CUPTI is unavailable, which untraced_reason() then says.
std::unique_ptr<Timer> make_cuda_timer(DeviceSession& session, std::function<void()> launch,
                                       bool capture = true, bool trace = true);

} // namespace keval::worker::detail
