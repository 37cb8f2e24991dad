// The built plugin module through its C ABI, as keval-worker loads it: one exported entry
// point, the manifest, compile results and errors crossing the boundary.
#include "cuda_test_support.hpp"

#include <cstring>

#include <dlfcn.h>
#include <gmock/gmock.h>

namespace keval::cuda_plugin::test {
namespace {

using ::testing::HasSubstr;

class CudaPluginModule : public ::testing::Test {
protected:
  void SetUp() override {
    handle_ = ::dlopen(KEVAL_TEST_CUDA_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(handle_, nullptr) << ::dlerror();
    auto entry = reinterpret_cast<keval_plugin_entry_fn>(::dlsym(handle_, KEVAL_PLUGIN_ENTRY_NAME));
    ASSERT_NE(entry, nullptr) << "the module must export " << KEVAL_PLUGIN_ENTRY_NAME;
    api_ = entry();
    ASSERT_NE(api_, nullptr);
  }
  void TearDown() override {
    if (handle_ != nullptr)
      ::dlclose(handle_);
  }

  keval_error* compile(const char* source, const char* io, keval_compile_result& result) {
    args_.struct_size = sizeof args_;
    args_.source_code = source;
    args_.metadata_json = "{}";
    args_.io_contract_json = io;
    args_.work_dir = work_dir_text_.c_str();
    args_.cuda_arch = 90;
    args_.side = "custom";
    result = {};
    result.struct_size = sizeof result;
    return api_->compile(&args_, &result);
  }

  void* handle_ = nullptr;
  const keval_plugin_api* api_ = nullptr;
  WorkDir work_dir_;
  std::string work_dir_text_ = work_dir_.path().string();
  keval_compile_args args_{};
};

TEST_F(CudaPluginModule, ExportsOnlyItsEntryPointAndDescribesItself) {
  EXPECT_EQ(api_->api_major, static_cast<uint32_t>(KEVAL_PLUGIN_API_MAJOR));
  EXPECT_EQ(::dlsym(handle_, "_ZN5keval4cuda6driverEv"), nullptr)
      << "static libraries stay private to the module";
  const keval_manifest* m = api_->manifest();
  ASSERT_NE(m, nullptr);
  EXPECT_STREQ(m->kernel_type, "cuda");
  EXPECT_EQ(m->capabilities,
            KEVAL_CAP_DEVICE_CUDA | KEVAL_CAP_REQUIRES_IO_CONTRACT | KEVAL_CAP_ONE_STREAM)
      << "device code only, launched on keval's stream: one work queue suffices";
  EXPECT_EQ(api_->default_inputs, nullptr);
}

TEST_F(CudaPluginModule, CompilesAndReportsItsInfo) {
  keval_compile_result result;
  keval_error* error = compile(R"(
extern "C" __global__ void vector_add(const float* x, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i];
})",
                               kVectorIo, result);
  ASSERT_EQ(error, nullptr) << error->message;
  ASSERT_NE(result.kernel, nullptr);
  ASSERT_NE(result.info_json, nullptr);
  const auto info = boost::json::parse(result.info_json).as_object();
  EXPECT_EQ(info.at("kernel_name").as_string(), "vector_add");
  api_->kernel_destroy(result.kernel);
}

TEST_F(CudaPluginModule, CompileErrorsCarryTheLog) {
  keval_compile_result result;
  keval_error* error =
      compile("extern \"C\" __global__ void k(float* x) { x[0] = y; }", kVectorIo, result);
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(error->code, KEVAL_ERROR_COMPILE);
  EXPECT_STREQ(error->message, "NVRTC compilation failed");
  ASSERT_NE(error->details, nullptr);
  EXPECT_THAT(error->details, HasSubstr("identifier \"y\" is undefined"));
  EXPECT_EQ(result.kernel, nullptr);
  api_->error_destroy(error);
}

TEST_F(CudaPluginModule, MissingLaunchDimensionsAreAnInvalidRequest) {
  keval_compile_result result;
  keval_error* error = compile("extern \"C\" __global__ void k() {}", R"({"args": []})", result);
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(error->code, KEVAL_ERROR_INVALID_REQUEST);
  EXPECT_STREQ(error->message, "cuda kernels need io.launch.grid and io.launch.block");
  api_->error_destroy(error);
}

TEST_F(CudaPluginModule, BindingWithoutADeviceContextFailsCleanly) {
  keval_compile_result result;
  keval_error* error =
      compile("extern \"C\" __global__ void k(float* x, float* out, int n) {}", kVectorIo, result);
  ASSERT_EQ(error, nullptr) << error->message;
  keval_device_args device{};
  device.struct_size = sizeof device;
  device.device = {KEVAL_DEVICE_CUDA, 0};
  // No context is current on this thread (and here, perhaps no driver at all): an error, never
  // a crash.
  error = api_->bind_device(result.kernel, &device);
  ASSERT_NE(error, nullptr);
  EXPECT_TRUE(error->code == KEVAL_ERROR_UNSUPPORTED || error->code == KEVAL_ERROR_INTERNAL)
      << error->code << ": " << error->message;
  api_->error_destroy(error);
  api_->kernel_destroy(result.kernel);
}

} // namespace
} // namespace keval::cuda_plugin::test
