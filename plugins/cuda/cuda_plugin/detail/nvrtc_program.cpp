#include "cuda_plugin/detail/nvrtc_program.hpp"

#include <keval/plugin.hpp>

#include <nvrtc.h>

namespace keval::cuda_plugin::detail {

namespace {

using sdk::Error;

void check(nvrtcResult result, const char* what) {
  if (result != NVRTC_SUCCESS)
    throw Error(KEVAL_ERROR_INTERNAL,
                std::string(what) + " failed: " + nvrtcGetErrorString(result));
}

// Owns an nvrtcProgram; destroyed on every path.
class Program {
public:
  Program(const std::string& source, const std::string& name) {
    check(nvrtcCreateProgram(&program_, source.c_str(), name.c_str(), 0, nullptr, nullptr),
          "nvrtcCreateProgram");
  }
  ~Program() { nvrtcDestroyProgram(&program_); }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram get() const { return program_; }

private:
  nvrtcProgram program_ = nullptr;
};

std::string program_log(nvrtcProgram program) {
  size_t size = 0;
  check(nvrtcGetProgramLogSize(program, &size), "nvrtcGetProgramLogSize");
  std::string log(size, '\0');
  if (size > 0)
    check(nvrtcGetProgramLog(program, log.data()), "nvrtcGetProgramLog");
  // The size counts the terminating NUL; an empty log is a single NUL.
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n' || log.back() == ' '))
    log.pop_back();
  return log;
}

} // namespace

NvrtcVersion nvrtc_version() {
  NvrtcVersion v;
  check(nvrtcVersion(&v.major, &v.minor), "nvrtcVersion");
  return v;
}

std::vector<int> nvrtc_supported_archs() {
  int count = 0;
  check(nvrtcGetNumSupportedArchs(&count), "nvrtcGetNumSupportedArchs");
  std::vector<int> archs(static_cast<size_t>(count));
  if (count > 0)
    check(nvrtcGetSupportedArchs(archs.data()), "nvrtcGetSupportedArchs");
  return archs;
}

NvrtcOutput nvrtc_compile(const NvrtcInput& input) {
  Program program(input.source, input.program_name);
  for (const auto& expression : input.name_expressions)
    check(nvrtcAddNameExpression(program.get(), expression.c_str()), "nvrtcAddNameExpression");

  std::vector<const char*> options;
  options.reserve(input.options.size());
  for (const auto& option : input.options)
    options.push_back(option.c_str());
  const nvrtcResult compiled =
      nvrtcCompileProgram(program.get(), static_cast<int>(options.size()), options.data());

  NvrtcOutput out;
  out.status = nvrtcGetErrorString(compiled);
  out.log = program_log(program.get());
  // Rejected sources and rejected options are the request's fault; anything else is NVRTC's.
  if (compiled == NVRTC_ERROR_COMPILATION || compiled == NVRTC_ERROR_INVALID_OPTION ||
      compiled == NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID)
    return out;
  check(compiled, "nvrtcCompileProgram");

  size_t size = 0;
  check(nvrtcGetCUBINSize(program.get(), &size), "nvrtcGetCUBINSize");
  if (size == 0)
    throw Error(KEVAL_ERROR_INTERNAL,
                "NVRTC produced no CUBIN (was a virtual architecture such as compute_90 "
                "requested? keval needs a real one, sm_90)",
                out.log);
  out.cubin.resize(size);
  check(nvrtcGetCUBIN(program.get(), out.cubin.data()), "nvrtcGetCUBIN");
  for (const auto& expression : input.name_expressions) {
    const char* lowered = nullptr;
    check(nvrtcGetLoweredName(program.get(), expression.c_str(), &lowered), "nvrtcGetLoweredName");
    out.lowered_names[expression] = lowered;
  }
  out.ok = true;
  return out;
}

} // namespace keval::cuda_plugin::detail
