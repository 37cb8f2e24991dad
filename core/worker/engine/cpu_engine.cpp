#include "worker/engine/engine.hpp"

#include "tensor/generate.hpp"
#include "tensor/host_tensor.hpp"
#include "tensor/poison.hpp"

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

  std::unique_ptr<Tensor> allocate(request::DType dtype,
                                   const std::vector<int64_t>& shape) override {
    return std::make_unique<CpuTensor>(tensor::HostTensor::empty(dtype, shape));
  }

  void fill(Tensor& t, const request::TensorInit& init, uint64_t seed) override {
    tensor::fill(as_cpu(t).host(), init, seed);
  }

  void upload(Tensor& t, const std::vector<uint8_t>& bytes) override {
    auto& host = as_cpu(t).host();
    if (bytes.size() != host.nbytes())
      throw std::invalid_argument("upload of " + std::to_string(bytes.size()) +
                                  " bytes into a tensor of " + std::to_string(host.nbytes()));
    std::memcpy(host.dl().data, bytes.data(), bytes.size());
  }

  std::unique_ptr<Tensor> clone(const keval_dl_tensor& source) override {
    return std::make_unique<CpuTensor>(tensor::HostTensor::copy_of(source));
  }

  void poison(Tensor& t) override { tensor::poison(as_cpu(t).host()); }

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

  std::unique_ptr<Timer> make_timer(std::function<void()> launch) override {
    return std::make_unique<WallClockTimer>(std::move(launch));
  }
};

} // namespace

std::unique_ptr<Engine> make_cpu_engine() {
  return std::make_unique<CpuEngine>();
}

} // namespace keval::worker
