#include "cuda_plugin/cuda_kernel.hpp"

#include "cuda/driver.hpp"
#include "cuda_plugin/detail/compile_settings.hpp"
#include "cuda_plugin/detail/kernel_discovery.hpp"
#include "cuda_plugin/detail/nvrtc_program.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <boost/json/array.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

namespace keval::cuda_plugin {

namespace json = boost::json;
using sdk::Error;

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kDefaultSharedMemoryLimit = 48 * 1024; // above it, a kernel must opt in

json::object parse_metadata(std::string_view text) {
  json::error_code ec;
  json::value metadata = json::parse(text.empty() ? std::string_view("{}") : text, ec);
  if (ec || !metadata.is_object())
    throw Error(KEVAL_ERROR_INVALID_REQUEST, "metadata must be a JSON object");
  return std::move(metadata.get_object());
}

std::optional<std::string> requested_kernel_name(const json::object& metadata,
                                                 const detail::Contract& contract) {
  if (const json::value* name = metadata.if_contains("kernel_name");
      name != nullptr && !name->is_null()) {
    if (!name->is_string() || name->get_string().empty())
      throw Error(KEVAL_ERROR_INVALID_REQUEST, "metadata.kernel_name must be a non-empty string");
    return std::string(name->get_string());
  }
  return contract.kernel_name;
}

const char* env(const char* name) {
  return std::getenv(name);
}

json::array dim_json(const detail::Dim3& d) {
  return {d.x, d.y, d.z};
}

std::string dim_text(const detail::Dim3& d) {
  return "(" + std::to_string(d.x) + ", " + std::to_string(d.y) + ", " + std::to_string(d.z) + ")";
}

// One NVRTC compilation and the kernels in its CUBIN.
struct Compilation {
  detail::NvrtcOutput output;
  std::vector<detail::KernelSymbol> kernels;
};

class Compiler {
public:
  Compiler(const sdk::CompileInput& input, std::vector<std::string> options)
      : input_(input), options_(std::move(options)) {
    if (input.work_dir.empty())
      throw Error(KEVAL_ERROR_INTERNAL, "compile needs a work_dir for the CUBIN");
  }

  // Throws KEVAL_ERROR_COMPILE with the full log when NVRTC rejects the source.
  Compilation run(std::vector<std::string> name_expressions, const std::string& context = {}) {
    detail::NvrtcInput nvrtc;
    nvrtc.source = std::string(input_.source_code);
    nvrtc.program_name = std::string(input_.side) + ".cu";
    nvrtc.options = options_;
    nvrtc.name_expressions = std::move(name_expressions);
    const auto start = Clock::now();
    Compilation c{detail::nvrtc_compile(nvrtc), {}};
    compile_ms_ += std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (!c.output.ok)
      throw Error(KEVAL_ERROR_COMPILE, "NVRTC compilation failed",
                  context + (c.output.log.empty() ? c.output.status : c.output.log));
    log_ = c.output.log;
    c.kernels = detail::discover_kernels(write_cubin(c.output.cubin));
    return c;
  }

  double compile_ms() const { return compile_ms_; }
  const std::string& log() const { return log_; }

private:
  // The symbol table is read from a file: Boost.DLL's ELF reader works on paths. The work_dir is
  // private to this kernel and removed after the job; the CUBIN stays there for inspection.
  std::filesystem::path write_cubin(const std::vector<char>& cubin) const {
    const auto path = std::filesystem::path(input_.work_dir) / "kernel.cubin";
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(cubin.data(), static_cast<std::streamsize>(cubin.size()));
    out.close();
    if (!out)
      throw Error(KEVAL_ERROR_INTERNAL, "cannot write the CUBIN to " + path.string());
    return path;
  }

  const sdk::CompileInput& input_;
  std::vector<std::string> options_;
  double compile_ms_ = 0;
  std::string log_;
};

const detail::KernelSymbol& choose_kernel(Compiler& compiler, Compilation& compilation,
                                          const std::optional<std::string>& requested,
                                          std::optional<std::string>& name_expression) {
  const auto& kernels = compilation.kernels;
  if (!requested) {
    if (kernels.empty())
      throw Error(KEVAL_ERROR_COMPILE, "No __global__ functions found",
                  "the source compiled, but its CUBIN has no kernel entry point; a template "
                  "kernel is compiled only when instantiated, or when metadata.kernel_name names "
                  "an instantiation such as \"scale<float>\"");
    if (kernels.size() > 1)
      throw Error(KEVAL_ERROR_COMPILE, "source defines " + std::to_string(kernels.size()) +
                                           " kernels (" + detail::describe_kernels(kernels) +
                                           "); set metadata.kernel_name");
    return kernels.front();
  }

  const detail::KernelMatch match = detail::find_kernel(kernels, *requested);
  if (match.kernels.size() == 1)
    return *match.kernels.front();
  if (match.kernels.size() > 1)
    throw Error(KEVAL_ERROR_COMPILE, "kernel_name '" + *requested + "' matches " +
                                         std::to_string(match.kernels.size()) + " kernels (" +
                                         detail::describe_kernels(match.kernels) +
                                         "); name one by its full signature or mangled name");
  if (detail::is_name_expression(*requested)) {
    // Not compiled yet: instantiate it. NVRTC reports an expression naming nothing as an error
    // in the log, which is the clearest answer to give.
    compilation = compiler.run({*requested}, "while instantiating kernel_name '" + *requested +
                                                 "' as a name expression:\n");
    const std::string& lowered = compilation.output.lowered_names.at(*requested);
    for (const auto& k : compilation.kernels)
      if (k.lowered == lowered) {
        name_expression = *requested;
        return k;
      }
    throw Error(KEVAL_ERROR_COMPILE, "kernel_name '" + *requested + "' names '" +
                                         detail::demangle(lowered) +
                                         "', which is not a __global__ function");
  }
  if (kernels.empty())
    throw Error(KEVAL_ERROR_COMPILE, "No __global__ functions found",
                "metadata.kernel_name is '" + *requested + "', but the source defines no kernel");
  throw Error(KEVAL_ERROR_COMPILE, "kernel_name '" + *requested + "' not found: source defines " +
                                       std::to_string(kernels.size()) + " kernel" +
                                       (kernels.size() == 1 ? "" : "s") + " (" +
                                       detail::describe_kernels(kernels) + ")");
}

std::string load_hint(CUresult code, const std::string& target) {
  switch (code) {
  case CUDA_ERROR_NO_BINARY_FOR_GPU:
  case CUDA_ERROR_INVALID_IMAGE:
  case CUDA_ERROR_INVALID_SOURCE:
    return " (the CUBIN targets " + target +
           "; set KEVAL_CUDA_ARCH or compile_options to the device's architecture)";
  default:
    return {};
  }
}

std::string launch_hint(CUresult code) {
  switch (code) {
  case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
    return " (registers or shared memory per block exceed the device's; try a smaller block)";
  case CUDA_ERROR_INVALID_VALUE:
    return " (the grid, block or shared memory size is beyond the device's limits)";
  default:
    return {};
  }
}

} // namespace

keval_manifest cuda_manifest() {
  return sdk::make_manifest("cuda", "1.0.0",
                            "CUDA C++ kernels: NVRTC to a CUBIN, launched with the IOContract's "
                            "grid and block",
                            KEVAL_CAP_DEVICE_CUDA | KEVAL_CAP_REQUIRES_IO_CONTRACT |
                                KEVAL_CAP_ONE_STREAM);
}

CompiledKernel compile_cuda_source(const sdk::CompileInput& input) {
  // Everything the request can get wrong is checked before spending time in NVRTC.
  const json::object metadata = parse_metadata(input.metadata_json);
  const detail::Contract contract = detail::parse_contract(input.io_contract_json);
  CompiledKernel compiled;
  compiled.launch = contract.launch;
  compiled.params = detail::declare_params(contract.args, metadata);
  const std::optional<std::string> requested = requested_kernel_name(metadata, contract);

  const detail::ArchChoice arch = detail::resolve_arch(input.cuda_arch, env("KEVAL_CUDA_ARCH"));
  const detail::NvrtcOptions options = detail::build_nvrtc_options(
      arch.arch, detail::toolkit_include_dirs(env("KEVAL_CUDA_INCLUDE")),
      detail::user_compile_options(metadata));
  const detail::NvrtcVersion version = detail::nvrtc_version();
  if (!options.user_chose_target) {
    const auto archs = detail::nvrtc_supported_archs();
    if (std::find(archs.begin(), archs.end(), arch.arch) == archs.end())
      throw Error(KEVAL_ERROR_UNSUPPORTED,
                  "NVRTC " + version.text() + " cannot compile for " + options.target +
                      (archs.empty() ? std::string()
                                     : " (it targets sm_" + std::to_string(archs.front()) +
                                           " to sm_" + std::to_string(archs.back()) + ")"));
  }

  Compiler compiler(input, options.options);
  Compilation compilation = compiler.run({});
  std::optional<std::string> name_expression;
  const detail::KernelSymbol& kernel =
      choose_kernel(compiler, compilation, requested, name_expression);

  compiled.cubin = std::move(compilation.output.cubin);
  compiled.lowered_name = kernel.lowered;
  compiled.name = kernel.name;
  compiled.target = options.target;

  json::object info;
  info["kernel_name"] = kernel.name;
  info["lowered_name"] = kernel.lowered;
  if (kernel.signature != kernel.name)
    info["signature"] = kernel.signature;
  if (name_expression)
    info["name_expression"] = *name_expression;
  json::array candidates;
  for (const auto& k : compilation.kernels)
    candidates.emplace_back(k.name);
  info["kernels"] = std::move(candidates);
  info["target"] = options.target;
  info["cuda_arch"] = arch.arch;
  info["cuda_arch_source"] = options.user_chose_target ? "compile_options" : arch.source;
  info["nvrtc_version"] = version.text();
  info["compile_time_ms"] = compiler.compile_ms();
  json::array option_list;
  for (const auto& option : options.options)
    option_list.emplace_back(option);
  info["compile_options"] = std::move(option_list);
  if (!compiler.log().empty())
    info["compile_log"] = compiler.log();
  info["launch"] = {{"grid", dim_json(contract.launch.grid)},
                    {"block", dim_json(contract.launch.block)},
                    {"shared_mem_bytes", contract.launch.shared_mem_bytes}};
  compiled.info_json = json::serialize(info);
  return compiled;
}

CudaKernel::CudaKernel(CompiledKernel compiled) : compiled_(std::move(compiled)) {}

CudaKernel::~CudaKernel() {
  // Unload only from the context it was loaded into, while that is still current; once the
  // worker has let the context go, the module went with it.
  if (module_ == nullptr || !cuda::driver_available())
    return;
  const auto& d = cuda::driver();
  CUcontext current = nullptr;
  if (d.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == context_)
    d.cuModuleUnload(module_);
}

void CudaKernel::bind_device(const keval_device_args& device) {
  std::string why;
  if (!cuda::driver_available(&why))
    throw Error(KEVAL_ERROR_UNSUPPORTED, why);
  const auto& d = cuda::driver();
  CUcontext context = nullptr;
  if (d.cuCtxGetCurrent(&context) != CUDA_SUCCESS || context == nullptr)
    throw Error(KEVAL_ERROR_INTERNAL, "bind_device needs a current CUDA context");
  if (module_ != nullptr)
    throw Error(KEVAL_ERROR_INTERNAL, "the kernel is already bound to a device");

  if (CUresult r = d.cuModuleLoadData(&module_, compiled_.cubin.data()); r != CUDA_SUCCESS) {
    module_ = nullptr;
    throw Error(KEVAL_ERROR_RUNTIME, "loading the kernel's CUBIN failed: " + cuda::error_text(r) +
                                         load_hint(r, compiled_.target));
  }
  context_ = context;
  if (CUresult r = d.cuModuleGetFunction(&function_, module_, compiled_.lowered_name.c_str());
      r != CUDA_SUCCESS)
    throw Error(KEVAL_ERROR_RUNTIME, "finding kernel '" + compiled_.name +
                                         "' in the loaded module failed: " + cuda::error_text(r));

  // The kernel's own parameter list settles the scalars' widths and catches a contract that does
  // not fit it. An index past the last parameter answers CUDA_ERROR_INVALID_VALUE.
  std::vector<size_t> sizes;
  for (size_t i = 0;; ++i) {
    size_t offset = 0, size = 0;
    const CUresult r = d.cuFuncGetParamInfo(function_, i, &offset, &size);
    if (r == CUDA_ERROR_INVALID_VALUE)
      break;
    if (r != CUDA_SUCCESS)
      throw Error(KEVAL_ERROR_RUNTIME, "reading the parameters of kernel '" + compiled_.name +
                                           "' failed: " + cuda::error_text(r));
    sizes.push_back(size);
  }
  detail::fit_params_to_kernel(compiled_.params, sizes, compiled_.name);

  const uint32_t shared = compiled_.launch.shared_mem_bytes;
  if (shared > kDefaultSharedMemoryLimit) {
    const CUresult r = d.cuFuncSetAttribute(
        function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(shared));
    if (r != CUDA_SUCCESS)
      throw Error(KEVAL_ERROR_RUNTIME,
                  "kernel '" + compiled_.name + "' cannot have " + std::to_string(shared) +
                      " bytes of dynamic shared memory on this device: " + cuda::error_text(r));
  }
}

void CudaKernel::launch(sdk::LaunchContext& ctx) {
  if (function_ == nullptr)
    throw Error(KEVAL_ERROR_INTERNAL, "launch before bind_device");
  const keval_arg* args = ctx.num_args() > 0 ? &ctx.arg(0) : nullptr;
  detail::pack_params(compiled_.params, args, ctx.num_args(), packed_);
  const auto& l = compiled_.launch;
  const CUresult r = cuda::driver().cuLaunchKernel(
      function_, l.grid.x, l.grid.y, l.grid.z, l.block.x, l.block.y, l.block.z, l.shared_mem_bytes,
      static_cast<CUstream>(ctx.stream()), packed_.pointers(), nullptr);
  if (r != CUDA_SUCCESS)
    throw Error(KEVAL_ERROR_RUNTIME,
                "launching kernel '" + compiled_.name + "' with grid " + dim_text(l.grid) +
                    ", block " + dim_text(l.block) + ", " + std::to_string(l.shared_mem_bytes) +
                    " bytes of dynamic shared memory failed: " + cuda::error_text(r) +
                    launch_hint(r));
}

std::unique_ptr<sdk::Kernel> compile_cuda_kernel(const sdk::CompileInput& input) {
  return std::make_unique<CudaKernel>(compile_cuda_source(input));
}

} // namespace keval::cuda_plugin
