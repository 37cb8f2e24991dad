// The device engine: everything the core does to tensors on the granted device — allocation,
// deterministic generation, poisoning, comparison, synchronisation and timing. The pipeline is
// written against this interface once; the CPU engine (here) and the CUDA engine implement it.
#pragma once

#include "common/unique_fd.hpp"
#include "request/model.hpp"
#include "tensor/compare.hpp"
#include "worker/engine/device_counters.hpp"
#include "worker/engine/device_work.hpp"

#include <keval/plugin.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

namespace keval::worker {

// The kernel broke the device or ran into an error while executing (sticky CUDA error, ...).
// Reported as the kernel's failure, not the system's.
class KernelFault : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// Who may see a tensor's memory. The trusted worker and the processes that run user code share
// nothing but the tensors it hands them: each of those is allocated `shared` and crosses as a
// descriptor (a sealed memfd on the CPU, a CUDA POSIX-fd allocation handle on a GPU), so a
// process can reach exactly the buffers it was given and no other memory of the job.
enum class Sharing { private_memory, shared };

// A tensor another process shared: its descriptor (empty for a tensor of no bytes), how many bytes
// it was exported with, and what it holds. Comes from a peer, so nothing in it is trusted: the
// engines check the descriptor against the dtype and shape before using it.
struct SharedTensorHandle {
  UniqueFd fd;
  uint64_t bytes = 0;
  request::DType dtype = request::DType::f32;
  std::vector<int64_t> shape;
  // No descriptor: the peer wrote this tensor into the buffer it sent at the same place of its
  // previous reply of this kind (exported with `bytes`), which the receiver still has mapped.
  // Runners keep returning outputs through the same buffers sample after sample, so that no
  // sample creates, exports, imports or maps device memory (each a call that takes the driver's
  // device-wide lock).
  bool reuses_previous = false;
};

// A tensor living on the engine's device. `dl()` stays valid for the tensor's lifetime; it is a
// handle (pointers to the data), so a const Tensor still hands out a mutable view.
class Tensor {
public:
  virtual ~Tensor() = default;
  virtual keval_dl_tensor& dl() const = 0;
  request::DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  // For Sharing::shared tensors: the descriptor that shares the memory (owned by the tensor; -1
  // for a tensor of no bytes) and the exported size. -1 and 0 for private tensors.
  virtual int shared_fd() const { return -1; }
  virtual uint64_t shared_bytes() const { return 0; }
  virtual bool is_shared() const { return false; }

protected:
  Tensor(request::DType dtype, std::vector<int64_t> shape)
      : dtype_(dtype), shape_(std::move(shape)) {}

private:
  request::DType dtype_;
  std::vector<int64_t> shape_;
};

// Repeated timing of one launch; see Engine::make_timer.
class Timer {
public:
  virtual ~Timer() = default;
  // One timed run in milliseconds. Caches are flushed before it, outside the timed region.
  virtual double sample() = 0;
  // How samples are taken: "cpu_wall_clock", "cuda_event" or "cuda_graph".
  virtual std::string method() const = 0;
  // Why the device work of this timer's samples is not traced; empty when it is (CUDA devices
  // with CUPTI: worker/engine/device_work.hpp).
  virtual std::string untraced_reason() const = 0;
  // Marks the latest sample's end in the trace: call once its work has finished (after
  // Engine::synchronize). What it did on the device is read later, with the samples marked
  // before it: reading the trace costs the next device work about half a millisecond.
  // std::logic_error for a timer that traces nothing.
  virtual void end_sample() {
    throw std::logic_error("end_sample() of a timer that traces nothing");
  }
  // What each sample marked since the last call did on the device, in order (one per
  // end_sample()). Throws TraceLost; std::logic_error for a timer that traces nothing.
  virtual std::vector<SampleActivity> take_activities() {
    throw std::logic_error("take_activities() of a timer that traces nothing");
  }
  // How many samples end_sample() marked that take_activities() has not returned yet: none once
  // a read, or a new timer, emptied the trace (also where the read lost them).
  virtual size_t unread_samples() const { return 0; }
  // Where making it took its time, in milliseconds by part (kSetupParts), a diagnostic for the
  // job's account of its profiling (sampling.time_ms.setup_parts; a runner's timer reply carries
  // it as host_ms).
  virtual std::map<std::string, double> setup_ms() const { return {}; }
  static constexpr const char* kSetupTraceLoad = "trace_load";     // the device tracer loaded
  static constexpr const char* kSetupTraceEnable = "trace_enable"; // ... and turned on
  static constexpr const char* kSetupCapture = "capture";          // the launch captured
  static constexpr const char* kSetupParts[] = {kSetupTraceLoad, kSetupTraceEnable, kSetupCapture};
};

class Engine {
public:
  virtual ~Engine() = default;

  virtual keval_dl_device device() const = 0;
  // For an engine opened on another thread: makes its device context current on this one, which
  // then uses it. (Nothing to do on the CPU.)
  virtual void use_on_this_thread() {}
  // The stream kernels are enqueued on and timed (NULL on the CPU).
  virtual void* stream() const = 0;
  // Identity for the result metadata (device name, architecture, memory, versions, ...).
  virtual boost::json::object describe() const = 0;

  virtual std::unique_ptr<Tensor> allocate(request::DType dtype, const std::vector<int64_t>& shape,
                                           Sharing sharing = Sharing::private_memory) = 0;
  virtual void fill(Tensor& tensor, const request::TensorInit& init, uint64_t seed) = 0;
  virtual void upload(Tensor& tensor, const std::vector<uint8_t>& bytes) = 0;
  // Copies a contiguous clone of `source` (same dtype and shape) into a new tensor.
  virtual std::unique_ptr<Tensor> clone(const keval_dl_tensor& source,
                                        Sharing sharing = Sharing::private_memory) = 0;
  // Copies `source` into `destination`, two tensors of this engine with the same dtype and shape
  // (std::invalid_argument otherwise), and returns once the copy is complete: how fresh inputs
  // reach buffers a runner already holds (a captured graph reads them where they are).
  virtual void copy_into(Tensor& destination, const Tensor& source) = 0;
  // Copies `source` (any layout, on this engine's device or the host) into `destination`, a
  // tensor of this engine with its dtype and shape (std::invalid_argument otherwise), and returns
  // once the copy is complete: clone() without the allocation.
  virtual void copy_view_into(Tensor& destination, const keval_dl_tensor& source) = 0;
  // Maps a tensor another process shared: both see each other's writes. Throws
  // std::invalid_argument when the descriptor does not hold the dtype and shape it claims.
  virtual std::unique_ptr<Tensor> open_shared(SharedTensorHandle handle) = 0;
  virtual void poison(Tensor& tensor) = 0;
  virtual tensor::Comparison compare(const keval_dl_tensor& expected, const keval_dl_tensor& actual,
                                     const request::Tolerance& tolerance) = 0;
  // Bitwise equality of two tensors of the same dtype and shape (input tampering check).
  virtual bool same_bytes(const keval_dl_tensor& a, const keval_dl_tensor& b) = 0;
  // Waits for all queued work; throws KernelFault if the device reports an error.
  virtual void synchronize() = 0;

  // The SM clock the device runs at now, measured on it, and its rated maximum, in MHz; nullopt
  // where there is no such clock (the CPU). How timed samples taken while the device throttled
  // are told apart.
  struct SmClock {
    double mhz = 0;
    double max_mhz = 0;
  };
  virtual std::optional<SmClock> read_sm_clock() { return std::nullopt; }

  // The device's memory as its driver counts it, every process's allocations together; nullopt
  // where there is no such count (the CPU). Throws as synchronize() does.
  struct DeviceMemory {
    uint64_t free_bytes = 0;
    uint64_t total_bytes = 0;
  };
  virtual std::optional<DeviceMemory> device_memory() { return std::nullopt; }

  // Prepares repeated timing of `launch`, which enqueues exactly one kernel invocation on
  // stream() with fixed arguments. Engines that can capture it once (a CUDA graph) and replay it;
  // otherwise each sample calls it. Exceptions from `launch` propagate out of make_timer() (when
  // it runs during capture) or sample(). `capture` false: never a graph, each sample calls
  // `launch` (how both sides of a compare get one method when one side cannot be captured).
  // Waits for the device work the process did since the last traced sample and leaves it out of
  // the next sample's trace: what a runner does for keval between samples (the provider's
  // get_inputs generating a trial's inputs on the device) is no sample's work. Nothing to do
  // where nothing is traced.
  virtual void forget_traced_work() {}

  // `trace` false: samples are not traced even where they could be (untraced_reason says so).
  virtual std::unique_ptr<class Timer> make_timer(std::function<void()> launch, bool capture = true,
                                                  bool trace = true) = 0;

  // The hardware counters `metrics` (Perfworks names) of each kernel `run` issues, at most
  // `max_kernels` of them: `run` launches and waits, and is called once, after an L2 flush (the
  // profiler replays each kernel as often as the counters need). Never while a timed sample is
  // taken. Throws CountersUnavailable where counters cannot be read (always on the CPU).
  // `expected_ms`: about how long one run takes (it sizes the sampling of DRAM traffic).
  virtual DeviceCounters collect_counters(const std::vector<std::string>& metrics,
                                          size_t max_kernels, double expected_ms,
                                          const std::function<void()>& run) {
    (void)metrics, (void)max_kernels, (void)expected_ms, (void)run;
    throw CountersUnavailable("device metrics need a CUDA device: this kernel ran on the CPU");
  }

  // The hardware's own time (ns) of each kernel `run` issues, in each of `runs` runs, each after
  // an L2 flush and unreplayed: ncu's gpu__time_duration, at most `max_kernels` a run. Never
  // while a timed sample is taken. Throws CountersUnavailable where it cannot be read.
  virtual std::vector<std::vector<double>> time_kernels(size_t runs, size_t max_kernels,
                                                        const std::function<void()>& run) {
    (void)runs, (void)max_kernels, (void)run;
    throw CountersUnavailable("the hardware's kernel time needs a CUDA device: this kernel ran "
                              "on the CPU");
  }
};

// The engine for the CPU: plain host memory, steady_clock timing.
std::unique_ptr<Engine> make_cpu_engine();

} // namespace keval::worker
