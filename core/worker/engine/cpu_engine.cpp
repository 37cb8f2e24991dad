#include "worker/engine/engine.hpp"

#include "tensor/dtype.hpp"
#include "tensor/generate.hpp"
#include "tensor/host_tensor.hpp"
#include "tensor/poison.hpp"
#include "worker/engine/detail/shared_host_memory.hpp"
#include "worker/engine/detail/tensor_bytes.hpp"

#include <chrono>
#include <cstring>
#include <thread>

namespace keval::worker {

namespace {

class CpuTensor final : public Tensor {
public:
  explicit CpuTensor(tensor::HostTensor host)
      : Tensor(host.dtype(), host.shape()), host_(std::move(host)) {}
  keval_dl_tensor& dl() const override { return host_.dl(); }
  tensor::HostTensor& host() { return host_; }

private:
  mutable tensor::HostTensor host_;
};

// A tensor in a memfd that another process maps too. The view is compact row-major.
class CpuSharedTensor final : public Tensor {
public:
  CpuSharedTensor(request::DType dtype, std::vector<int64_t> shape, detail::SharedHostMemory memory)
      : Tensor(dtype, shape), dl_shape_(std::move(shape)), memory_(std::move(memory)) {
    view_.data = memory_.data();
    view_.device = {KEVAL_DEVICE_CPU, 0};
    view_.ndim = static_cast<int32_t>(dl_shape_.size());
    view_.dtype = tensor::to_dl(dtype);
    view_.shape = dl_shape_.data();
  }
  keval_dl_tensor& dl() const override { return view_; }
  int shared_fd() const override { return memory_.fd(); }
  uint64_t shared_bytes() const override { return memory_.bytes(); }
  bool is_shared() const override { return true; }
  size_t nbytes() const { return memory_.bytes(); }

private:
  std::vector<int64_t> dl_shape_; // the view points into it
  detail::SharedHostMemory memory_;
  mutable keval_dl_tensor view_{};
};

// CPU kernels run synchronously inside launch(): the wall clock around it is the kernel's time.
class WallClockTimer final : public Timer {
public:
  explicit WallClockTimer(std::function<void()> launch) : launch_(std::move(launch)) {}
  double sample() override {
    const auto start = std::chrono::steady_clock::now();
    launch_();
    const auto stop = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::milli>(stop - start).count();
  }
  std::string method() const override { return "cpu_wall_clock"; }
  std::string untraced_reason() const override {
    return "no CUDA device: device work is traced (CUPTI) on CUDA devices only";
  }

private:
  std::function<void()> launch_;
};

CpuTensor& as_cpu(Tensor& t) {
  return static_cast<CpuTensor&>(t);
}

class CpuEngine final : public Engine {
public:
  keval_dl_device device() const override { return {KEVAL_DEVICE_CPU, 0}; }
  void* stream() const override { return nullptr; }

  boost::json::object describe() const override {
    boost::json::object o;
    o["type"] = "cpu";
    o["name"] = "host CPU";
    o["hardware_threads"] = std::thread::hardware_concurrency();
    return o;
  }

  std::unique_ptr<Tensor> allocate(request::DType dtype, const std::vector<int64_t>& shape,
                                   Sharing sharing) override {
    if (sharing == Sharing::shared)
      return std::make_unique<CpuSharedTensor>(
          dtype, shape, detail::SharedHostMemory::create(detail::tensor_bytes(dtype, shape)));
    return std::make_unique<CpuTensor>(tensor::HostTensor::empty(dtype, shape));
  }

  void fill(Tensor& t, const request::TensorInit& init, uint64_t seed) override {
    if (!t.is_shared())
      return tensor::fill(as_cpu(t).host(), init, seed);
    tensor::HostTensor values = tensor::HostTensor::empty(t.dtype(), t.shape());
    tensor::fill(values, init, seed);
    if (values.nbytes() > 0)
      std::memcpy(t.dl().data, values.data(), values.nbytes());
  }

  void upload(Tensor& t, const std::vector<uint8_t>& bytes) override {
    const size_t nbytes = detail::tensor_bytes(t.dtype(), t.shape());
    if (bytes.size() != nbytes)
      throw std::invalid_argument("upload of " + std::to_string(bytes.size()) +
                                  " bytes into a tensor of " + std::to_string(nbytes));
    if (!bytes.empty())
      std::memcpy(t.dl().data, bytes.data(), bytes.size());
  }

  std::unique_ptr<Tensor> clone(const keval_dl_tensor& source, Sharing sharing) override {
    tensor::HostTensor copy = tensor::HostTensor::copy_of(source);
    if (sharing == Sharing::private_memory)
      return std::make_unique<CpuTensor>(std::move(copy));
    auto shared = allocate(copy.dtype(), copy.shape(), Sharing::shared);
    if (copy.nbytes() > 0)
      std::memcpy(shared->dl().data, copy.data(), copy.nbytes());
    return shared;
  }

  void copy_view_into(Tensor& destination, const keval_dl_tensor& source) override {
    tensor::HostTensor copy = tensor::HostTensor::copy_of(source);
    if (destination.dtype() != copy.dtype() || destination.shape() != copy.shape())
      throw std::invalid_argument("copy_view_into: a view of another dtype or shape");
    if (copy.nbytes() > 0)
      std::memcpy(destination.dl().data, copy.data(), copy.nbytes());
  }

  void copy_into(Tensor& destination, const Tensor& source) override {
    if (destination.dtype() != source.dtype() || destination.shape() != source.shape())
      throw std::invalid_argument("copy_into: tensors of different dtype or shape");
    const size_t nbytes = detail::tensor_bytes(source.dtype(), source.shape());
    if (nbytes > 0)
      std::memmove(destination.dl().data, source.dl().data, nbytes);
  }

  std::unique_ptr<Tensor> open_shared(SharedTensorHandle handle) override {
    const size_t bytes = detail::checked_shared_bytes(handle);
    if (!handle.fd)
      return allocate(handle.dtype, handle.shape, Sharing::private_memory);
    return std::make_unique<CpuSharedTensor>(
        handle.dtype, handle.shape, detail::SharedHostMemory::open(std::move(handle.fd), bytes));
  }

  // Fills the tensor's bytes with tensor::poison's pattern, whichever memory holds them.
  void poison(Tensor& t) override {
    if (!t.is_shared())
      return tensor::poison(as_cpu(t).host());
    tensor::poison(t.dl());
  }

  tensor::Comparison compare(const keval_dl_tensor& expected, const keval_dl_tensor& actual,
                             const request::Tolerance& tolerance) override {
    return tensor::compare(expected, actual, tolerance);
  }

  bool same_bytes(const keval_dl_tensor& a, const keval_dl_tensor& b) override {
    if (a.strides == nullptr && b.strides == nullptr && a.ndim == b.ndim &&
        std::memcmp(&a.dtype, &b.dtype, sizeof a.dtype) == 0) { // compact: compare in place
      size_t n = a.dtype.bits / 8;
      for (int32_t i = 0; i < a.ndim; ++i) {
        if (a.shape[i] != b.shape[i])
          return false;
        n *= static_cast<size_t>(a.shape[i]);
      }
      return std::memcmp(static_cast<const char*>(a.data) + a.byte_offset,
                         static_cast<const char*>(b.data) + b.byte_offset, n) == 0;
    }
    return tensor::HostTensor::copy_of(a).same_bytes(tensor::HostTensor::copy_of(b));
  }

  void synchronize() override {}

  std::unique_ptr<Timer> make_timer(std::function<void()> launch, bool /*capture*/,
                                    bool /*trace*/) override {
    return std::make_unique<WallClockTimer>(std::move(launch));
  }
};

} // namespace

std::unique_ptr<Engine> make_cpu_engine() {
  return std::make_unique<CpuEngine>();
}

} // namespace keval::worker
