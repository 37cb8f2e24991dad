#include "worker/cuda/detail/cuda_timer.hpp"

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
  CudaTimer(DeviceSession& session, std::function<void()> launch, bool capture_it)
      : session_(session), launch_(std::move(launch)), start_(session), stop_(session) {
    if (capture_it)
      capture();
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
    // Stream order puts the flush before the start event: it is never part of the sample.
    const DeviceMemory& flush = session_.l2_flush_buffer();
    session_.check_execution(d.cuMemsetD8Async(flush.address(), 0, flush.bytes(), stream));
    session_.check_execution(d.cuEventRecord(start_.get(), stream));
    if (graph_ != nullptr)
      session_.check_execution(d.cuGraphLaunch(graph_, stream));
    else
      launch_();
    session_.check_execution(d.cuEventRecord(stop_.get(), stream));
    session_.check_execution(d.cuEventSynchronize(stop_.get()));
    float milliseconds = 0.0f;
    session_.check_execution(d.cuEventElapsedTime(&milliseconds, start_.get(), stop_.get()));
    return milliseconds;
  }

  std::string method() const override { return graph_ != nullptr ? "cuda_graph" : "cuda_event"; }

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
};

} // namespace

std::unique_ptr<Timer> make_cuda_timer(DeviceSession& session, std::function<void()> launch,
                                       bool capture) {
  return std::make_unique<CudaTimer>(session, std::move(launch), capture);
}

} // namespace keval::worker::detail
