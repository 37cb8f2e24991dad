#include "worker/cuda/cuda_engine.hpp"

#include "cuda/driver.hpp"
#include "tensor/dtype.hpp"
#include "tensor/generate.hpp"
#include "tensor/host_tensor.hpp"
#include "tensor/poison.hpp"
#include "worker/cuda/detail/activity_trace.hpp"
#include "worker/cuda/detail/counter_profiler.hpp"
#include "worker/cuda/detail/cuda_timer.hpp"
#include "worker/cuda/detail/device_session.hpp"
#include "worker/cuda/detail/device_view.hpp"
#include "worker/engine/detail/shared_host_memory.hpp"
#include "worker/engine/detail/tensor_bytes.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>

namespace keval::worker {

namespace {

using detail::DeviceMemory;
using detail::DeviceSession;
using detail::DeviceView;
using detail::Kernel;
using request::DType;

const cuda::DriverApi& api() {
  return cuda::driver();
}

size_t checked_nbytes(DType dtype, const std::vector<int64_t>& shape) {
  return detail::tensor_bytes(dtype, shape);
}

// "13.0" from the driver's 13000.
std::string cuda_version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

class CudaTensor final : public Tensor {
public:
  // Private memory, from the session (DeviceSession::allocate).
  CudaTensor(DType dtype, std::vector<int64_t> shape, DeviceSession& session)
      : Tensor(dtype, shape), dl_shape_(std::move(shape)),
        nbytes_(checked_nbytes(dtype, dl_shape_)), memory_(session.allocate(nbytes_)) {
    init_view(memory_.address(), session.ordinal());
  }
  // Memory shared with another process: `shared` holds at least the tensor's bytes.
  CudaTensor(DType dtype, std::vector<int64_t> shape, int ordinal,
             detail::SharedDeviceMemory shared)
      : Tensor(dtype, shape), dl_shape_(std::move(shape)),
        nbytes_(checked_nbytes(dtype, dl_shape_)), shared_(std::move(shared)) {
    init_view(shared_->address(), ordinal);
  }

  keval_dl_tensor& dl() const override { return view_; }
  int shared_fd() const override { return shared_ ? shared_->fd() : -1; }
  uint64_t shared_bytes() const override { return shared_ ? shared_->bytes() : 0; }
  bool is_shared() const override { return shared_.has_value(); }
  CUdeviceptr address() const { return reinterpret_cast<CUdeviceptr>(view_.data); }
  size_t nbytes() const { return nbytes_; }
  uint64_t numel() const { return nbytes_ / request::dtype_size(dtype()); }

private:
  void init_view(CUdeviceptr address, int ordinal) {
    view_.data = reinterpret_cast<void*>(address);
    view_.device = {KEVAL_DEVICE_CUDA, ordinal};
    view_.ndim = static_cast<int32_t>(dl_shape_.size());
    view_.dtype = tensor::to_dl(dtype());
    view_.shape = dl_shape_.data();
    view_.strides = nullptr;
    view_.byte_offset = 0;
  }

  std::vector<int64_t> dl_shape_; // the view points into it
  size_t nbytes_;
  DeviceMemory memory_;
  std::optional<detail::SharedDeviceMemory> shared_;
  mutable keval_dl_tensor view_{};
};

CudaTensor& as_cuda(Tensor& tensor) {
  return static_cast<CudaTensor&>(tensor);
}
const CudaTensor& as_cuda(const Tensor& tensor) {
  return static_cast<const CudaTensor&>(tensor);
}

detail::FillKind fill_kind(request::InitKind kind) {
  switch (kind) {
  case request::InitKind::randn:
    return detail::FillKind::randn;
  case request::InitKind::uniform:
    return detail::FillKind::uniform;
  case request::InitKind::zeros:
    return detail::FillKind::zeros;
  case request::InitKind::ones:
    return detail::FillKind::ones;
  case request::InitKind::full:
    return detail::FillKind::full;
  case request::InitKind::arange:
    return detail::FillKind::arange;
  }
  throw std::invalid_argument("TensorInit: invalid kind");
}

boost::json::object describe_device(const DeviceSession& session) {
  const cuda::DriverApi& d = api();
  const CUdevice device = session.device();
  const auto attribute = [&](CUdevice_attribute which) -> std::optional<int> {
    int value = 0;
    if (d.cuDeviceGetAttribute(&value, which, device) != CUDA_SUCCESS || value <= 0)
      return std::nullopt;
    return value;
  };
  boost::json::object o;
  o["type"] = "cuda";
  o["index"] = session.ordinal();
  char name[256] = {};
  cuda::check(d.cuDeviceGetName(name, sizeof name - 1, device), "cuDeviceGetName");
  o["name"] = name;
  o["gpu_type"] = detail::gpu_type_from_name(name);
  const int major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).value_or(0);
  const int minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR).value_or(0);
  o["sm_arch"] = "sm_" + std::to_string(major * 10 + minor);
  o["compute_capability"] = std::to_string(major) + "." + std::to_string(minor);
  size_t total_memory = 0;
  cuda::check(d.cuDeviceTotalMem(&total_memory, device), "cuDeviceTotalMem");
  o["total_memory_bytes"] = total_memory;
  const std::pair<const char*, CUdevice_attribute> reported[] = {
      {"multiprocessors", CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT},
      {"l2_cache_bytes", CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE},
      {"sm_clock_khz", CU_DEVICE_ATTRIBUTE_CLOCK_RATE},
      {"memory_clock_khz", CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE},
      {"memory_bus_width_bits", CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH}};
  for (const auto& [key, which] : reported) // drivers may stop reporting some (clock rates)
    if (const std::optional<int> value = attribute(which))
      o[key] = *value;
  char bus_id[32] = {};
  if (d.cuDeviceGetPCIBusId(bus_id, sizeof bus_id - 1, device) == CUDA_SUCCESS)
    o["pci_bus_id"] = bus_id;
  int driver_version = 0;
  if (d.cuDriverGetVersion(&driver_version) == CUDA_SUCCESS)
    o["driver_version"] = cuda_version_text(driver_version);
  o["built_with_cuda"] = cuda_version_text(CUDA_VERSION);
  return o;
}

class CudaEngine final : public Engine {
public:
  CudaEngine(int ordinal, detail::PrivateMemory memory)
      : session_(ordinal, memory), description_(describe_device(session_)) {}

  keval_dl_device device() const override { return {KEVAL_DEVICE_CUDA, session_.ordinal()}; }
  void* stream() const override { return session_.stream(); }
  void use_on_this_thread() override { session_.make_current(); }
  boost::json::object describe() const override { return description_; }

  std::unique_ptr<Tensor> allocate(DType dtype, const std::vector<int64_t>& shape,
                                   Sharing sharing) override {
    return allocate_tensor(dtype, shape, sharing);
  }

  std::unique_ptr<Tensor> open_shared(SharedTensorHandle handle) override {
    session_.throw_if_faulted();
    const size_t bytes = detail::checked_shared_bytes(handle);
    if (bytes == 0)
      return allocate_tensor(handle.dtype, handle.shape, Sharing::private_memory);
    return std::make_unique<CudaTensor>(
        handle.dtype, handle.shape, session_.ordinal(),
        detail::SharedDeviceMemory::open(session_.ordinal(), std::move(handle.fd), handle.bytes));
  }

  void copy_into(Tensor& destination, const Tensor& source) override {
    session_.throw_if_faulted();
    if (destination.dtype() != source.dtype() || destination.shape() != source.shape())
      throw std::invalid_argument("copy_into: tensors of different dtype or shape");
    CudaTensor& to = as_cuda(destination);
    const CudaTensor& from = as_cuda(source);
    if (to.nbytes() == 0)
      return;
    session_.check(
        api().cuMemcpyDtoDAsync(to.address(), from.address(), to.nbytes(), session_.stream()),
        "cuMemcpyDtoDAsync");
    session_.check(api().cuStreamSynchronize(session_.stream()), "cuStreamSynchronize");
  }

  void fill(Tensor& t, const request::TensorInit& init, uint64_t seed) override {
    session_.throw_if_faulted();
    CudaTensor& tensor = as_cuda(t);
    // tensor::fill checks `init` before it writes any element, so on an empty host tensor it
    // rejects exactly the parameters the CPU engine rejects, with the same message, and nothing
    // else.
    tensor::HostTensor no_elements = tensor::HostTensor::empty(tensor.dtype(), {0});
    tensor::fill(no_elements, init, seed);
    if (tensor.numel() == 0)
      return;
    detail::FillParams params{};
    params.out = tensor.address();
    params.numel = tensor.numel();
    params.seed = seed;
    params.type = detail::element_type(tensor.dtype());
    params.kind = fill_kind(init.kind);
    params.mean = init.mean;
    params.std = init.std;
    params.low = init.low;
    params.high = init.high;
    params.fill_value = init.fill_value;
    params.start = init.start;
    params.step = init.step;
    params.keep_below_high = init.kind == request::InitKind::uniform &&
                             tensor::is_floating(tensor.dtype()) && init.low < init.high;
    session_.launch(Kernel::fill, params.numel, params);
  }

  void upload(Tensor& t, const std::vector<uint8_t>& bytes) override {
    session_.throw_if_faulted();
    CudaTensor& tensor = as_cuda(t);
    if (bytes.size() != tensor.nbytes())
      throw std::invalid_argument("upload of " + std::to_string(bytes.size()) +
                                  " bytes into a tensor of " + std::to_string(tensor.nbytes()));
    session_.copy_from_host(tensor.address(), bytes.data(), bytes.size());
  }

  // Host sources (a plugin may hand out CPU tensors) are copied up; device sources are copied on
  // the device, strided ones through the gather kernel. Returns once the copy is complete, so the
  // source may be released right away.
  std::unique_ptr<Tensor> clone(const keval_dl_tensor& source, Sharing sharing) override {
    session_.throw_if_faulted();
    if (source.device.device_type == KEVAL_DEVICE_CPU) {
      const tensor::HostTensor host = tensor::HostTensor::copy_of(source);
      auto copy = allocate_tensor(host.dtype(), host.shape(), sharing);
      session_.copy_from_host(copy->address(), host.data(), host.nbytes());
      return copy;
    }
    detail::make_device_view(source, session_.ordinal(), "clone"); // checks it before allocating
    auto copy =
        allocate_tensor(*tensor::from_dl(source.dtype),
                        std::vector<int64_t>(source.shape, source.shape + source.ndim), sharing);
    copy_view_into(*copy, source);
    return copy;
  }

  void copy_view_into(Tensor& destination, const keval_dl_tensor& source) override {
    session_.throw_if_faulted();
    CudaTensor& copy = as_cuda(destination);
    const auto shape = std::vector<int64_t>(source.shape, source.shape + source.ndim);
    const std::optional<DType> dtype = tensor::from_dl(source.dtype);
    if (!dtype || *dtype != copy.dtype() || shape != copy.shape())
      throw std::invalid_argument("copy_view_into: a view of another dtype or shape");
    if (source.device.device_type == KEVAL_DEVICE_CPU) {
      const tensor::HostTensor host = tensor::HostTensor::copy_of(source);
      session_.copy_from_host(copy.address(), host.data(), host.nbytes());
      return;
    }
    const DeviceView view = detail::make_device_view(source, session_.ordinal(), "copy");
    if (copy.numel() == 0)
      return;
    if (view.dense)
      session_.check(
          api().cuMemcpyDtoDAsync(copy.address(), view.data, copy.nbytes(), session_.stream()),
          "cuMemcpyDtoDAsync");
    else
      gather(view, copy.dtype(), 0, copy.numel(), copy.address());
    session_.check(api().cuStreamSynchronize(session_.stream()), "cuStreamSynchronize");
  }

  // The pattern is tensor::poison's own, taken from a one-element host tensor, so both engines
  // poison alike by construction; the device then repeats it with a memset of its width.
  void poison(Tensor& t) override {
    session_.throw_if_faulted();
    CudaTensor& tensor = as_cuda(t);
    if (tensor.numel() == 0)
      return;
    tensor::HostTensor one = tensor::HostTensor::empty(tensor.dtype(), {1});
    tensor::poison(one);
    const cuda::DriverApi& d = api();
    const CUstream stream = session_.stream();
    const auto pattern = [&]<typename Bits>(Bits) {
      Bits bits;
      std::memcpy(&bits, one.data(), sizeof bits);
      return bits;
    };
    switch (one.nbytes()) {
    case 1:
      return session_.check(
          d.cuMemsetD8Async(tensor.address(), pattern(uint8_t{}), tensor.numel(), stream),
          "cuMemsetD8Async");
    case 2:
      return session_.check(
          d.cuMemsetD16Async(tensor.address(), pattern(uint16_t{}), tensor.numel(), stream),
          "cuMemsetD16Async");
    case 4:
      return session_.check(
          d.cuMemsetD32Async(tensor.address(), pattern(uint32_t{}), tensor.numel(), stream),
          "cuMemsetD32Async");
    default: // the driver has no 64-bit memset
      session_.launch(
          Kernel::fill_pattern64, tensor.numel(),
          detail::Pattern64Params{tensor.address(), tensor.numel(), pattern(uint64_t{})});
    }
  }

  // tensor::compare's result, computed on the device: counts and maxima by one reduction, then
  // the few elements the report names (the first mismatches, the largest difference) located by
  // index searches and brought over in small windows that tensor::compare itself scans.
  tensor::Comparison compare(const keval_dl_tensor& expected, const keval_dl_tensor& actual,
                             const request::Tolerance& tolerance) override {
    session_.throw_if_faulted();
    if (std::optional<tensor::Comparison> failed =
            detail::incomparable(expected, actual, tolerance))
      return *std::move(failed);
    std::unique_ptr<Tensor> staged_expected, staged_actual;
    const DeviceView expected_view = device_view(expected, staged_expected, "compare: expected");
    const DeviceView actual_view = device_view(actual, staged_actual, "compare: actual");

    tensor::Comparison result;
    result.tolerance = tolerance;
    result.dtype = tensor::from_dl(expected.dtype);
    result.numel = detail::view_numel(expected);
    const std::vector<int64_t> shape(expected.shape, expected.shape + expected.ndim);
    if (result.numel > 0)
      compare_elements(expected_view, actual_view, shape, result);
    result.compared = true;
    result.match = result.mismatches == 0;
    result.message = tensor::summary(result);
    return result;
  }

  bool same_bytes(const keval_dl_tensor& a, const keval_dl_tensor& b) override {
    session_.throw_if_faulted();
    std::unique_ptr<Tensor> staged_a, staged_b;
    const DeviceView a_view = device_view(a, staged_a, "same_bytes: a");
    const DeviceView b_view = device_view(b, staged_b, "same_bytes: b");
    if (std::memcmp(&a.dtype, &b.dtype, sizeof a.dtype) != 0 || a.ndim != b.ndim ||
        !std::equal(a.shape, a.shape + a.ndim, b.shape))
      return false;
    const uint64_t numel = static_cast<uint64_t>(detail::view_numel(a));
    if (numel == 0)
      return true;
    const CUstream stream = session_.stream();
    session_.check(api().cuMemsetD8Async(session_.flag(), 0, sizeof(uint32_t), stream),
                   "cuMemsetD8Async");
    detail::SameBytesParams params{};
    params.a = a_view;
    params.b = b_view;
    params.numel = numel;
    params.differs = session_.flag();
    params.element_size = static_cast<int32_t>(a.dtype.bits / 8);
    session_.launch(Kernel::same_bytes, numel, params);
    uint32_t differs = 0;
    session_.copy_to_host(&differs, session_.flag(), sizeof differs);
    return differs == 0;
  }

  // The engine's stream, which every plugin is given. A
  // fault in work a kernel put on streams of its own still loses the context, and the next call
  // that meets it throws KernelFault.
  void synchronize() override {
    session_.throw_if_faulted();
    session_.check_execution(api().cuStreamSynchronize(session_.stream()));
  }

  void forget_traced_work() override { drop_traced_work(true); }

  std::optional<SmClock> read_sm_clock() override {
    session_.throw_if_faulted();
    if (max_sm_clock_mhz_ == 0) {
      int khz = 0;
      session_.check(
          api().cuDeviceGetAttribute(&khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, session_.device()),
          "cuDeviceGetAttribute(CLOCK_RATE)");
      max_sm_clock_mhz_ = khz / 1000.0;
    }
    return SmClock{session_.sm_clock_mhz(), max_sm_clock_mhz_};
  }

  std::optional<DeviceMemory> device_memory() override {
    session_.throw_if_faulted();
    size_t free_bytes = 0, total_bytes = 0;
    session_.check(api().cuMemGetInfo(&free_bytes, &total_bytes), "cuMemGetInfo");
    return DeviceMemory{free_bytes, total_bytes};
  }

  std::unique_ptr<Timer> make_timer(std::function<void()> launch, bool capture,
                                    bool trace) override {
    session_.throw_if_faulted();
    auto timer = detail::make_cuda_timer(session_, std::move(launch), capture, trace);
    // What ran before its first sample (correctness runs, the capture) belongs to no sample, nor
    // do samples of a timer it replaces that were never read.
    drop_traced_work(false);
    return timer;
  }

  DeviceCounters collect_counters(const std::vector<std::string>& metrics, size_t max_kernels,
                                  double expected_ms, const std::function<void()>& run) override {
    session_.throw_if_faulted();
    session_.synchronize_context();
    // The trace names the kernels and says how each was launched (CUPTI numbers the profiler's
    // ranges): started here if the samples were not traced, emptied of what came before.
    detail::ActivityTrace* trace = nullptr;
    try {
      trace = &detail::ActivityTrace::start();
      trace->take();
    } catch (const detail::TraceUnavailable&) {
      trace = nullptr;
    } catch (const TraceLost&) {
    }
    // Counters are one per device: another process reading them (a job on the same GPU, an
    // external profiler) holds them for a second or two. Waited for, up to a bound.
    DeviceCounters counters;
    for (int attempt = 0;; ++attempt) {
      try {
        counters = detail::collect_counters(session_.context(), session_.ordinal(),
                                            detail::CounterRequest{metrics, max_kernels}, flushed(),
                                            waited_for(run));
        break;
      } catch (const detail::CountersBusy&) {
        if (attempt == kBusyAttempts)
          throw;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    std::vector<TracedWork> launched;
    if (trace != nullptr) {
      try {
        launched = launched_kernels(trace->take());
      } catch (const TraceLost&) {
        launched.clear();
      }
    }
    // The trace holds one record per kernel launched (replays are not launches), in the order
    // of the profiler's ranges. Where the two disagree the kernels are left unnamed.
    const size_t n = counters.kernels.size();
    const bool named = n > 0 && launched.size() == n;
    for (size_t i = 0; i < n; ++i) {
      CountedKernel& k = counters.kernels[i];
      if (named) {
        k.name = clean_work_name(launched[i].name);
        k.launch = launched[i].launch;
      } else {
        k.name = "kernel " + std::to_string(i + 1);
      }
    }
    counters.limits = sm_limits();
    if (named)
      measure_unreplayed(counters, expected_ms, *trace, run);
    else
      counters.traffic = "durations and DRAM bytes are the range profiler's: the trace did not "
                         "name the kernels";
    return counters;
  }

  std::vector<std::vector<double>> time_kernels(size_t runs, size_t max_kernels,
                                                const std::function<void()>& run) override {
    session_.throw_if_faulted();
    session_.synchronize_context();
    for (int attempt = 0;; ++attempt) {
      try {
        return detail::time_kernels(session_.context(), session_.ordinal(), runs, max_kernels,
                                    flushed(), waited_for(run));
      } catch (const detail::CountersBusy&) {
        if (attempt == kBusyAttempts)
          throw;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  }

private:
  // Waits for the process's device work and leaves it out of every sample's trace. Samples
  // marked but not read yet (a reference's runner making the next inputs between its samples)
  // are kept where `keep_unread_samples`: a cut drops this work when they are read, without
  // reading the trace now; otherwise the trace is read and dropped whole.
  void drop_traced_work(bool keep_unread_samples) {
    detail::ActivityTrace* trace = detail::ActivityTrace::if_started();
    if (trace == nullptr)
      return;
    session_.synchronize_context();
    if (keep_unread_samples && trace->samples_cut() > 0)
      return trace->cut(false);
    try {
      trace->take();
    } catch (const TraceLost&) {
      // Dropped records of work that is no sample's: nothing of a sample is lost.
    }
  }

  // What the profilers run before and as the launch: an L2 flush, and the launch, each waited for
  // on every stream of the context.
  std::function<void()> flushed() {
    return [this] {
      session_.flush_l2();
      session_.synchronize_context();
    };
  }
  std::function<void()> waited_for(const std::function<void()>& run) {
    return [this, &run] {
      run();
      session_.synchronize_context();
    };
  }
  // The kernels a trace holds that the launch issued (keval's own, the L2 flush, left out).
  static std::vector<TracedWork> launched_kernels(std::vector<TracedWork> work) {
    std::vector<TracedWork> kernels;
    for (auto& w : work)
      if (w.kind == TracedWork::Kind::kernel && w.name.rfind("keval_", 0) != 0)
        kernels.push_back(std::move(w));
    return kernels;
  }

  // The kernels' durations (from the trace) and DRAM bytes (PM sampling) in a run of their own,
  // neither replayed nor restored (CountedKernel::unreplayed; worker/metrics/ reports them):
  // what ncu reports with its cache control, and what a timed sample moves. Kernel replay's
  // restores leave the L2 warm and dirty, so its DRAM bytes count write-backs of the restore and
  // miss reads the L2 served (measured on an H100: a vector add's writes 32 % high, an SGEMM on
  // 8 MB reading 0.3 MB where it reads 8.4 MB).
  void measure_unreplayed(DeviceCounters& counters, double expected_ms,
                          detail::ActivityTrace& trace, const std::function<void()>& run) {
    const auto& m = counters.metrics;
    if (std::none_of(m.begin(), m.end(), [](const std::string& metric) {
          return metric == "dram__bytes_read.sum" || metric == "dram__bytes_write.sum" ||
                 metric == "gpu__time_duration.sum";
        }))
      return;
    std::vector<detail::TrafficSample> samples;
    std::vector<TracedWork> kernels;
    try {
      trace.take();
      samples =
          detail::sample_dram_traffic(session_.ordinal(), expected_ms, flushed(), waited_for(run));
      kernels = launched_kernels(trace.take());
    } catch (const CountersUnavailable& e) {
      counters.traffic =
          std::string("durations and DRAM bytes are the range profiler's: ") + e.what();
      return;
    } catch (const TraceLost& e) {
      counters.traffic =
          std::string("durations and DRAM bytes are the range profiler's: ") + e.what();
      return;
    }
    if (kernels.size() != counters.kernels.size()) {
      counters.traffic = "durations and DRAM bytes are the range profiler's: the run of their "
                         "own issued " +
                         std::to_string(kernels.size()) + " kernels, the profiled one " +
                         std::to_string(counters.kernels.size());
      return;
    }
    for (size_t k = 0; k < kernels.size(); ++k) {
      const TracedWork& w = kernels[k];
      UnreplayedRun measured;
      for (const auto& sample : samples) {
        const uint64_t from = std::max(sample.start_ns, w.start_ns);
        const uint64_t to = std::min(sample.end_ns, w.end_ns);
        if (to <= from || sample.end_ns <= sample.start_ns)
          continue;
        const double share =
            static_cast<double>(to - from) / static_cast<double>(sample.end_ns - sample.start_ns);
        measured.dram_read_bytes += share * sample.read_bytes;
        measured.dram_write_bytes += share * sample.write_bytes;
      }
      if (w.end_ns > w.start_ns)
        measured.duration_ns = static_cast<double>(w.end_ns - w.start_ns);
      counters.kernels[k].unreplayed = measured;
    }
    counters.traffic = "unreplayed";
    hardware_durations(counters, run);
  }

  // Each kernel's duration as ncu's, gpu__time_duration (the trace's interval leaves out the
  // front end's processing of the launch: a 1 M add read 4.96 us where ncu reads 6.13 on an
  // H100), the median of kDurationRuns runs of their own (time_kernels). Where it cannot be read
  // the trace's intervals stay and the counters say why.
  void hardware_durations(DeviceCounters& counters, const std::function<void()>& run) {
    constexpr size_t kDurationRuns = 5;
    const size_t n = counters.kernels.size();
    std::vector<std::vector<double>> runs;
    try {
      runs = detail::time_kernels(session_.context(), session_.ordinal(), kDurationRuns, n,
                                  flushed(), waited_for(run));
    } catch (const CountersUnavailable& e) {
      counters.trace_durations = e.what();
      return;
    }
    for (const auto& kernels : runs)
      if (kernels.size() != n) {
        counters.trace_durations = "the runs timed by the counters issued " +
                                   std::to_string(kernels.size()) + " kernels, the profiled one " +
                                   std::to_string(n);
        return;
      }
    for (size_t k = 0; k < n; ++k) {
      std::vector<double> durations;
      for (const auto& kernels : runs)
        durations.push_back(kernels[k]);
      std::nth_element(durations.begin(), durations.begin() + durations.size() / 2,
                       durations.end());
      counters.kernels[k].unreplayed->duration_ns = durations[durations.size() / 2];
    }
  }

  static constexpr int kBusyAttempts = 50; // 5 s: the pipeline's time check allows for it

  SmLimits sm_limits() {
    const auto attribute = [this](CUdevice_attribute which, const char* name) {
      int value = 0;
      session_.check(api().cuDeviceGetAttribute(&value, which, session_.device()), name);
      return static_cast<int64_t>(value);
    };
    SmLimits l;
    l.sm_count = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "MULTIPROCESSOR_COUNT");
    l.max_warps =
        attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, "MAX_THREADS_PER_SM") / 32;
    l.max_blocks =
        attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, "MAX_BLOCKS_PER_SM");
    l.registers =
        attribute(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, "MAX_REGISTERS_PER_SM");
    l.shared_bytes = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
                               "MAX_SHARED_MEMORY_PER_SM");
    l.reserved_shared_per_block = attribute(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK,
                                            "RESERVED_SHARED_MEMORY_PER_BLOCK");
    return l;
  }

  std::unique_ptr<CudaTensor> allocate_tensor(DType dtype, const std::vector<int64_t>& shape,
                                              Sharing sharing) {
    session_.throw_if_faulted();
    try {
      if (sharing == Sharing::shared && checked_nbytes(dtype, shape) > 0)
        return std::make_unique<CudaTensor>(
            dtype, shape, session_.ordinal(),
            detail::SharedDeviceMemory::create(session_.ordinal(), checked_nbytes(dtype, shape)));
      return std::make_unique<CudaTensor>(dtype, shape, session_);
    } catch (const cuda::CudaError& error) {
      session_.check_context(error.code(), "cuMemAlloc"); // a fault that surfaced here
      throw;
    }
  }

  // The kernels' view of `view`; a host tensor is first copied to the device into `staged`.
  DeviceView device_view(const keval_dl_tensor& view, std::unique_ptr<Tensor>& staged,
                         const char* what) {
    if (view.device.device_type != KEVAL_DEVICE_CPU)
      return detail::make_device_view(view, session_.ordinal(), what);
    staged = clone(view, Sharing::private_memory);
    return detail::make_device_view(staged->dl(), session_.ordinal(), what);
  }

  void gather(const DeviceView& source, DType dtype, uint64_t start, uint64_t count,
              CUdeviceptr destination) {
    detail::GatherParams params{};
    params.source = source;
    params.destination = destination;
    params.start = start;
    params.count = count;
    params.element_size = static_cast<int32_t>(request::dtype_size(dtype));
    session_.launch(Kernel::gather, count, params);
  }

  // Host copies of elements [start, start + count) of both views (count <= kWindowElements).
  std::pair<tensor::HostTensor, tensor::HostTensor> fetch_window(const DeviceView& expected,
                                                                 const DeviceView& actual,
                                                                 DType dtype, uint64_t start,
                                                                 uint64_t count) {
    gather(expected, dtype, start, count, session_.window(0));
    gather(actual, dtype, start, count, session_.window(1));
    auto expected_host = tensor::HostTensor::empty(dtype, {static_cast<int64_t>(count)});
    auto actual_host = tensor::HostTensor::empty(dtype, {static_cast<int64_t>(count)});
    session_.copy_to_host(expected_host.data(), session_.window(0), expected_host.nbytes());
    session_.copy_to_host(actual_host.data(), session_.window(1), actual_host.nbytes());
    return {std::move(expected_host), std::move(actual_host)};
  }

  detail::CompareTotals read_totals() {
    detail::CompareTotals totals{};
    session_.copy_to_host(&totals, session_.compare_totals(), sizeof totals);
    return totals;
  }

  // found_index starts at all ones ("none") and only ever decreases (atomicMin).
  void reset_found_index() {
    session_.check(api().cuMemsetD8Async(session_.compare_totals() +
                                             offsetof(detail::CompareTotals, found_index),
                                         0xFF, sizeof(uint64_t), session_.stream()),
                   "cuMemsetD8Async");
  }

  // Runs `kernel`, which reports the smallest index it matches into found_index.
  uint64_t find_index(Kernel kernel, const detail::CompareParams& params, uint64_t work_items) {
    reset_found_index();
    session_.launch(kernel, work_items, params);
    return read_totals().found_index;
  }

  void compare_elements(const DeviceView& expected, const DeviceView& actual,
                        const std::vector<int64_t>& shape, tensor::Comparison& result) {
    const DType dtype = *result.dtype;
    const auto numel = static_cast<uint64_t>(result.numel);
    detail::CompareParams params{};
    params.expected = expected;
    params.actual = actual;
    params.numel = numel;
    params.totals = session_.compare_totals();
    params.type = detail::element_type(dtype);
    params.atol = result.tolerance.atol;
    params.rtol = result.tolerance.rtol;

    session_.check(
        api().cuMemsetD8Async(params.totals, 0, sizeof(detail::CompareTotals), session_.stream()),
        "cuMemsetD8Async");
    reset_found_index();
    session_.launch(Kernel::compare_totals, numel, params);
    const detail::CompareTotals totals = read_totals();
    result.mismatches = static_cast<int64_t>(totals.mismatches);
    result.nan_in_expected = static_cast<int64_t>(totals.nan_in_expected);
    result.nan_in_actual = static_cast<int64_t>(totals.nan_in_actual);
    result.inf_in_actual = static_cast<int64_t>(totals.inf_in_actual);
    result.max_abs_diff = std::bit_cast<double>(totals.max_abs_diff_bits);
    result.max_rel_diff = std::bit_cast<double>(totals.max_rel_diff_bits);

    if (totals.finite_pairs > 0) {
      params.target_bits = totals.max_abs_diff_bits;
      const uint64_t at = find_index(Kernel::compare_find_max_abs, params, numel);
      auto [expected_host, actual_host] = fetch_window(expected, actual, dtype, at, 1);
      result.max_abs_diff_at = tensor::ElementReport{
          detail::unravel_index(at, shape), tensor::read_element(dtype, expected_host.data()),
          tensor::read_element(dtype, actual_host.data())};
    }

    // The first mismatches: tensor::compare scans a window from each next mismatching index
    // until it has reported enough.
    const size_t wanted = std::min<uint64_t>(tensor::kMaxReportedMismatches, totals.mismatches);
    uint64_t start = totals.found_index; // the first mismatch
    while (result.first_mismatches.size() < wanted && start < numel) {
      const uint64_t count = std::min<uint64_t>(DeviceSession::kWindowElements, numel - start);
      auto [expected_host, actual_host] = fetch_window(expected, actual, dtype, start, count);
      const tensor::Comparison window =
          tensor::compare(expected_host.dl(), actual_host.dl(), result.tolerance);
      for (const tensor::ElementReport& mismatch : window.first_mismatches) {
        if (result.first_mismatches.size() == wanted)
          break;
        const uint64_t flat = start + static_cast<uint64_t>(mismatch.index.front());
        result.first_mismatches.push_back(
            {detail::unravel_index(flat, shape), mismatch.expected, mismatch.actual});
      }
      if (result.first_mismatches.size() == wanted || start + count >= numel)
        break;
      params.start = start + count;
      start = find_index(Kernel::compare_find_mismatch, params, numel - params.start);
    }
  }

  DeviceSession session_;
  double max_sm_clock_mhz_ = 0; // CU_DEVICE_ATTRIBUTE_CLOCK_RATE, read once
  boost::json::object description_;
};

} // namespace

CudaAvailability probe_cuda() {
  CudaAvailability availability;
  try {
    availability.device_count = cuda::usable_device_count(&availability.reason);
    if (availability.device_count == 0)
      return availability;
    const cuda::DriverApi& d = cuda::driver();
    CUdevice first = 0;
    int major = 0, minor = 0;
    CUresult result = d.cuDeviceGet(&first, 0);
    if (result == CUDA_SUCCESS)
      result = d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, first);
    if (result == CUDA_SUCCESS)
      result = d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, first);
    if (result != CUDA_SUCCESS) {
      availability.reason =
          "reading CUDA device 0's compute capability failed: " + cuda::error_text(result);
      return availability;
    }
    availability.arch_of_first = major * 10 + minor;
    char name[256] = {};
    if (d.cuDeviceGetName(name, sizeof name - 1, first) == CUDA_SUCCESS)
      availability.name_of_first = name;
    availability.usable = true;
  } catch (const std::exception& error) { // a driver that loads but misbehaves
    availability.usable = false;
    availability.reason = std::string("probing CUDA failed: ") + error.what();
  }
  return availability;
}

std::unique_ptr<Engine> make_cuda_engine(int ordinal, EngineUse use) {
  return std::make_unique<CudaEngine>(ordinal, use == EngineUse::trusted
                                                   ? detail::PrivateMemory::pooled
                                                   : detail::PrivateMemory::direct);
}

void load_device_trace_ahead() {
  detail::ActivityTrace::load_ahead();
}

} // namespace keval::worker
