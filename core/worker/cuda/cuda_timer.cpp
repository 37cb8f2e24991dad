#include "worker/cuda/detail/cuda_timer.hpp"

#include "worker/cuda/detail/activity_trace.hpp"

#include <chrono>
#include <map>
#include <utility>

namespace keval::worker::detail {

namespace {

const cuda::DriverApi& api() {
  return cuda::driver();
}

class Event {
public:
  explicit Event(DeviceSession& session) {
    session.check(api().cuEventCreate(&event_, CU_EVENT_DEFAULT), "cuEventCreate");
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() { api().cuEventDestroy(event_); }
  CUevent get() const { return event_; }

private:
  CUevent event_ = nullptr;
};

// A captured graph, destroyed when this goes out of scope (an instantiated graph keeps its own
// copy of what it needs).
class CapturedGraph {
public:
  CapturedGraph() = default;
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  ~CapturedGraph() {
    if (graph_ != nullptr)
      api().cuGraphDestroy(graph_);
  }
  CUgraph* out() { return &graph_; }
  CUgraph get() const { return graph_; }

private:
  CUgraph graph_ = nullptr;
};

class CudaTimer final : public Timer {
public:
  CudaTimer(DeviceSession& session, std::function<void()> launch, bool capture_it, bool trace)
      : session_(session), launch_(std::move(launch)), start_(session), stop_(session) {
    auto lap = std::chrono::steady_clock::now();
    const auto spent = [&lap] {
      const auto now = std::chrono::steady_clock::now();
      return std::chrono::duration<double, std::milli>(now - std::exchange(lap, now)).count();
    };
    try {
      if (trace) {
        ActivityTrace::load_ahead(); // done already where the runner loaded it ahead of its job
        setup_ms_[kSetupTraceLoad] = spent();
        trace_ = &ActivityTrace::start();
        setup_ms_[kSetupTraceEnable] = spent();
      } else {
        untraced_ = "turned off by the request (device_trace: false)";
      }
    } catch (const TraceUnavailable& e) {
      untraced_ = e.what();
    }
    spent();
    if (capture_it) {
      capture();
      setup_ms_[kSetupCapture] = spent();
    }
  }
  CudaTimer(const CudaTimer&) = delete;
  CudaTimer& operator=(const CudaTimer&) = delete;
  ~CudaTimer() override {
    if (graph_ != nullptr)
      api().cuGraphExecDestroy(graph_);
  }

  double sample() override {
    session_.throw_if_faulted();
    const cuda::DriverApi& d = api();
    const CUstream stream = session_.stream();
    // Stream order puts the flush and the start marker before the start event and the stop
    // marker after the stop event: none of them is ever part of the sample, and in the device
    // trace the markers bracket it.
    session_.flush_l2();
    session_.hold_sample_start();
    // A replay is let go once it is enqueued: what enqueueing costs the host (more with a tracer
    // hooked into the launch) is not the kernel's time. A launch that runs the plugin is let go
    // first: its enqueueing is part of what events have always timed there, and it may
    // synchronise.
    const bool replay = graph_ != nullptr;
    if (!replay)
      session_.release_sample_start();
    try {
      session_.check_execution(d.cuEventRecord(start_.get(), stream));
      if (replay)
        session_.check_execution(d.cuGraphLaunch(graph_, stream));
      else
        launch_();
      session_.check_execution(d.cuEventRecord(stop_.get(), stream));
      session_.mark_sample_stop();
    } catch (...) {
      session_.release_sample_start(); // never leave the stream held
      throw;
    }
    if (replay)
      session_.release_sample_start();
    session_.check_execution(d.cuEventSynchronize(stop_.get()));
    float milliseconds = 0.0f;
    session_.check_execution(d.cuEventElapsedTime(&milliseconds, start_.get(), stop_.get()));
    return milliseconds;
  }

  std::string method() const override { return graph_ != nullptr ? "cuda_graph" : "cuda_event"; }

  std::string untraced_reason() const override { return untraced_; }

  std::map<std::string, double> setup_ms() const override { return setup_ms_; }

  void end_sample() override {
    if (trace_ == nullptr)
      return Timer::end_sample();
    // Work the kernel left running on a stream of its own must have ended before the trace can
    // show it.
    session_.synchronize_context();
    trace_->cut(true);
  }

  size_t unread_samples() const override { return trace_ == nullptr ? 0 : trace_->samples_cut(); }

  std::vector<SampleActivity> take_activities() override {
    if (trace_ == nullptr)
      return Timer::take_activities();
    if (trace_->samples_cut() == 0)
      return {};
    std::vector<SampleActivity> out;
    for (const auto& records : trace_->take_samples())
      out.push_back(summarize_sample(records, kSampleStartKernel, kSampleStopKernel));
    return out;
  }

private:
  // Leaves graph_ null (events) unless every step succeeds.
  void capture() {
    session_.throw_if_faulted();
    const cuda::DriverApi& d = api();
    const CUstream stream = session_.stream();
    const CUresult began = d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    if (began != CUDA_SUCCESS) {
      session_.check_context(began, "cuStreamBeginCapture");
      return;
    }
    CapturedGraph graph;
    try {
      launch_();
    } catch (...) {
      d.cuStreamEndCapture(stream, graph.out()); // the stream must leave capture mode
      throw;
    }
    const CUresult ended = d.cuStreamEndCapture(stream, graph.out());
    if (ended != CUDA_SUCCESS || graph.get() == nullptr) {
      session_.check_context(ended, "cuStreamEndCapture");
      return;
    }
    size_t nodes = 0;
    session_.check_context(d.cuGraphGetNodes(graph.get(), nullptr, &nodes), "cuGraphGetNodes");
    if (nodes == 0) // the launch enqueued nothing on this stream: nothing to replay
      return;
    CUgraphExec instance = nullptr;
    const CUresult instantiated = d.cuGraphInstantiateWithFlags(&instance, graph.get(), 0);
    if (instantiated != CUDA_SUCCESS) {
      session_.check_context(instantiated, "cuGraphInstantiateWithFlags");
      return;
    }
    graph_ = instance;
  }

  DeviceSession& session_;
  std::function<void()> launch_;
  Event start_, stop_;
  CUgraphExec graph_ = nullptr;
  ActivityTrace* trace_ = nullptr; // null when untraced_ says why
  std::string untraced_;
  std::map<std::string, double> setup_ms_; // setup_ms()
};

} // namespace

std::unique_ptr<Timer> make_cuda_timer(DeviceSession& session, std::function<void()> launch,
                                       bool capture, bool trace) {
  return std::make_unique<CudaTimer>(session, std::move(launch), capture, trace);
}

} // namespace keval::worker::detail
