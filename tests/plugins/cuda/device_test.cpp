// Binding and launching on a real GPU. Every test here skips, with the reason, when this machine
// has no usable CUDA device; elsewhere they run against device 0's primary context.
#include "cuda_test_support.hpp"
#include "support/cuda_device.hpp"

#include "cuda/driver.hpp"

#include <cmath>
#include <vector>

#include <gmock/gmock.h>

namespace keval::cuda_plugin::test {
namespace {

using ::testing::HasSubstr;

// Why no CUDA device is usable here, or "" when one is.
// Device memory for one test.
class DeviceBuffer {
public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    cuda::check(cuda::driver().cuMemAlloc(&ptr_, bytes), "cuMemAlloc");
  }
  ~DeviceBuffer() { cuda::driver().cuMemFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <class T> void upload(const std::vector<T>& values) {
    cuda::check(cuda::driver().cuMemcpyHtoD(ptr_, values.data(), values.size() * sizeof(T)),
                "cuMemcpyHtoD");
  }
  template <class T> std::vector<T> download() const {
    std::vector<T> values(bytes_ / sizeof(T));
    cuda::check(cuda::driver().cuMemcpyDtoH(values.data(), ptr_, bytes_), "cuMemcpyDtoH");
    return values;
  }
  void* data() const { return reinterpret_cast<void*>(ptr_); }

private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_;
};

class CudaDevice : public ::testing::Test {
protected:
  void SetUp() override {
    KEVAL_SKIP_WITHOUT_CUDA_DEVICE();
    const auto& d = cuda::driver();
    cuda::check(d.cuDeviceGet(&device_, 0), "cuDeviceGet");
    cuda::check(d.cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain");
    cuda::check(d.cuCtxSetCurrent(context_), "cuCtxSetCurrent");
    cuda::check(d.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    int major = 0, minor = 0;
    d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_);
    d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device_);
    arch_ = major * 10 + minor;
  }
  void TearDown() override {
    if (context_ == nullptr)
      return;
    const auto& d = cuda::driver();
    kernels_.clear(); // modules unload while their context is current
    if (stream_ != nullptr)
      d.cuStreamDestroy(stream_);
    d.cuCtxSetCurrent(nullptr);
    d.cuDevicePrimaryCtxRelease(device_);
  }

  CudaKernel& bound(Source source) {
    source.cuda_arch = arch_;
    kernels_.push_back(std::make_unique<CudaKernel>(compile(source)));
    kernels_.back()->bind_device(device_args());
    return *kernels_.back();
  }
  keval_device_args device_args() const {
    keval_device_args args{};
    args.struct_size = sizeof args;
    args.device = {KEVAL_DEVICE_CUDA, 0};
    args.stream = stream_;
    return args;
  }
  void launch(CudaKernel& kernel, std::vector<keval_arg>& args) {
    keval_launch_args launch{};
    launch.struct_size = sizeof launch;
    launch.args = args.data();
    launch.num_args = args.size();
    launch.stream = stream_;
    sdk::LaunchContext ctx(launch);
    kernel.launch(ctx);
    cuda::check(cuda::driver().cuStreamSynchronize(stream_), "cuStreamSynchronize");
  }

  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  int arch_ = 0;
  std::vector<std::unique_ptr<CudaKernel>> kernels_;
};

// keval_args over device buffers, owning the tensor structs they point to.
struct Args {
  std::vector<std::unique_ptr<keval_dl_tensor>> tensors;
  std::vector<keval_arg> list;

  Args& tensor(const char* name, const DeviceBuffer& buffer, int32_t role = KEVAL_ROLE_INPUT) {
    auto t = std::make_unique<keval_dl_tensor>();
    t->data = buffer.data();
    t->device = {KEVAL_DEVICE_CUDA, 0};
    keval_arg a{};
    a.struct_size = sizeof a;
    a.name = name;
    a.kind = KEVAL_ARG_TENSOR;
    a.role = role;
    a.tensor = t.get();
    tensors.push_back(std::move(t));
    list.push_back(a);
    return *this;
  }
  Args& scalar(const char* name, int32_t kind, int64_t i, double f = 0) {
    keval_arg a{};
    a.struct_size = sizeof a;
    a.name = name;
    a.kind = kind;
    a.int_value = i;
    a.float_value = f;
    list.push_back(a);
    return *this;
  }
};

constexpr int kN = 1 << 20;

std::string vector_io(const std::string& scalars, const std::string& launch) {
  return R"({"args": [
    {"name": "x", "type": "tensor", "tensor_spec": {"shape": [1048576], "dtype": "float32"}},
    {"name": "out", "type": "tensor", "role": "output",
     "tensor_spec": {"shape": [1048576], "dtype": "float32"}})" +
         scalars + R"(], "launch": )" + launch + "}";
}

std::vector<float> ramp(int n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = static_cast<float>(i % 1000) * 0.5f;
  return v;
}

TEST_F(CudaDevice, LaunchesAnExternCKernelWithGridAndBlock) {
  Source s{R"(
extern "C" __global__ void add_one(const float* x, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] + 1.0f;
})"};
  s.io = vector_io(R"(, {"name": "n", "type": "int", "value": 1048576})",
                   R"({"grid": {"x": 4096}, "block": {"x": 256}})");
  CudaKernel& k = bound(s);
  DeviceBuffer x(kN * sizeof(float)), out(kN * sizeof(float));
  const auto input = ramp(kN);
  x.upload(input);
  Args args;
  args.tensor("x", x).tensor("out", out, KEVAL_ROLE_OUTPUT).scalar("n", KEVAL_ARG_INT, kN);
  launch(k, args.list);
  const auto result = out.download<float>();
  for (int i = 0; i < kN; i += 4099)
    ASSERT_EQ(result[static_cast<size_t>(i)], input[static_cast<size_t>(i)] + 1.0f) << i;
  EXPECT_EQ(result.back(), input.back() + 1.0f);
}

TEST_F(CudaDevice, ScalarsFollowTheKernelsParameterWidths) {
  // long and double parameters take the contract's int and float in 8 bytes.
  Source s{R"(
__global__ void axpb(const float* x, float* out, long n, double a, bool negate) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) out[i] = (negate ? -1.0f : 1.0f) * (float)(a * x[i]) + 2.0f;
})"};
  s.io = vector_io(R"(, {"name": "n", "type": "int", "value": 1048576},
                      {"name": "a", "type": "float", "value": 0.5},
                      {"name": "negate", "type": "bool", "value": true})",
                   R"({"grid": [1024], "block": [1024]})");
  CudaKernel& k = bound(s);
  DeviceBuffer x(kN * sizeof(float)), out(kN * sizeof(float));
  const auto input = ramp(kN);
  x.upload(input);
  Args args;
  args.tensor("x", x)
      .tensor("out", out, KEVAL_ROLE_OUTPUT)
      .scalar("n", KEVAL_ARG_INT, kN)
      .scalar("a", KEVAL_ARG_FLOAT, 0, 0.5)
      .scalar("negate", KEVAL_ARG_BOOL, 1);
  launch(k, args.list);
  const auto result = out.download<float>();
  for (int i = 0; i < kN; i += 7919)
    ASSERT_FLOAT_EQ(result[static_cast<size_t>(i)], -0.5f * input[static_cast<size_t>(i)] + 2.0f);
}

TEST_F(CudaDevice, LaunchesATemplateInstantiatedByNameExpression) {
  Source s{R"(
template <typename T, int K>
__global__ void scale(const T* x, T* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] * T(K);
})",
           R"({"kernel_name": "scale<float, 3>"})"};
  s.io = vector_io(R"(, {"name": "n", "type": "int", "value": 1048576})",
                   R"({"grid": 2048, "block": 512})");
  CudaKernel& k = bound(s);
  DeviceBuffer x(kN * sizeof(float)), out(kN * sizeof(float));
  const auto input = ramp(kN);
  x.upload(input);
  Args args;
  args.tensor("x", x).tensor("out", out, KEVAL_ROLE_OUTPUT).scalar("n", KEVAL_ARG_INT, kN);
  launch(k, args.list);
  EXPECT_EQ(out.download<float>()[999], input[999] * 3.0f);
}

TEST_F(CudaDevice, DynamicSharedMemoryAbove48KiBIsAllowed) {
  Source s{R"(
extern "C" __global__ void staged(const float* x, float* out, int n) {
  extern __shared__ float stage[];  // 64 KiB: 16384 floats, 16 per thread of a 1024 block
  int base = blockIdx.x * 16384;
  for (int j = threadIdx.x; j < 16384; j += blockDim.x) stage[j] = x[base + j];
  __syncthreads();
  for (int j = threadIdx.x; j < 16384; j += blockDim.x) out[base + j] = stage[16383 - j];
})"};
  s.io = vector_io(R"(, {"name": "n", "type": "int", "value": 1048576})",
                   R"({"grid": 64, "block": 1024, "shared_mem_bytes": 65536})");
  CudaKernel& k = bound(s);
  DeviceBuffer x(kN * sizeof(float)), out(kN * sizeof(float));
  const auto input = ramp(kN);
  x.upload(input);
  Args args;
  args.tensor("x", x).tensor("out", out, KEVAL_ROLE_OUTPUT).scalar("n", KEVAL_ARG_INT, kN);
  launch(k, args.list);
  const auto result = out.download<float>();
  EXPECT_EQ(result[0], input[16383]);
  EXPECT_EQ(result[16384 + 5], input[16384 + 16383 - 5]);
}

TEST_F(CudaDevice, MoreSharedMemoryThanTheDeviceHasFailsAtBind) {
  Source s{R"(extern "C" __global__ void k(const float* x, float* out, int n) {})"};
  s.io = vector_io(R"(, {"name": "n", "type": "int", "value": 1})",
                   R"({"grid": 1, "block": 1, "shared_mem_bytes": 4000000})");
  const auto e = error_of([&] { bound(s); });
  EXPECT_EQ(e.code(), KEVAL_ERROR_RUNTIME);
  EXPECT_THAT(e.what(), HasSubstr("4000000 bytes of dynamic shared memory"));
  EXPECT_THAT(e.what(), HasSubstr("CUDA_ERROR_"));
}

TEST_F(CudaDevice, AParameterCountMismatchFailsAtBind) {
  Source s{R"(extern "C" __global__ void k(const float* x, float* out) {})"};
  s.io = vector_io(R"(, {"name": "n", "type": "int", "value": 1})", R"({"grid": 1, "block": 1})");
  const auto e = error_of([&] { bound(s); });
  EXPECT_EQ(e.code(), KEVAL_ERROR_INVALID_REQUEST);
  EXPECT_THAT(e.what(), HasSubstr("kernel 'k' takes 2 parameters, but the IOContract passes 3"));
}

TEST_F(CudaDevice, AnImpossibleLaunchIsARuntimeErrorWithTheCudaText) {
  // Fine at compile (1024 threads), impossible at launch: each thread wants far more registers
  // than a 1024-thread block can have.
  Source s{R"(
extern "C" __global__ void __launch_bounds__(256) heavy(const float* x, float* out, int n) {
  out[threadIdx.x] = x[threadIdx.x];
})"};
  s.io =
      vector_io(R"(, {"name": "n", "type": "int", "value": 1})", R"({"grid": 1, "block": 1024})");
  CudaKernel& k = bound(s);
  DeviceBuffer x(kN * sizeof(float)), out(kN * sizeof(float));
  Args args;
  args.tensor("x", x).tensor("out", out, KEVAL_ROLE_OUTPUT).scalar("n", KEVAL_ARG_INT, 1);
  const auto e = error_of([&] { launch(k, args.list); });
  EXPECT_EQ(e.code(), KEVAL_ERROR_RUNTIME);
  EXPECT_THAT(e.what(),
              HasSubstr("launching kernel 'heavy' with grid (1, 1, 1), block (1024, 1, 1)"));
  EXPECT_THAT(e.what(), HasSubstr("CUDA_ERROR_"));
}

TEST_F(CudaDevice, ACubinForAnotherArchitectureFailsToLoadWithAHint) {
  Source s{R"(extern "C" __global__ void k(const float* x, float* out, int n) {})"};
  s.metadata = arch_ >= 100 ? R"({"compile_options": ["-arch=sm_90"]})"
                            : R"({"compile_options": ["-arch=sm_100"]})";
  kernels_.push_back(std::make_unique<CudaKernel>(compile(s)));
  const auto e = error_of([&] { kernels_.back()->bind_device(device_args()); });
  EXPECT_EQ(e.code(), KEVAL_ERROR_RUNTIME);
  EXPECT_THAT(e.what(), HasSubstr("loading the kernel's CUBIN failed"));
  EXPECT_THAT(e.what(), HasSubstr("KEVAL_CUDA_ARCH"));
}

} // namespace
} // namespace keval::cuda_plugin::test
