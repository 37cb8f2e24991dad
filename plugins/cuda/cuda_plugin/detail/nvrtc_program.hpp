// NVRTC, wrapped: one CUDA C++ source compiled to a CUBIN for one real architecture. A CUBIN
// (not PTX) so that loading it on the device involves no JIT and no surprises in timing.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace keval::cuda_plugin::detail {

struct NvrtcVersion {
  int major = 0;
  int minor = 0;
  std::string text() const { return std::to_string(major) + "." + std::to_string(minor); }
};

NvrtcVersion nvrtc_version();
// The real architectures this NVRTC can emit code for, as major*10+minor (75, 80, 90, ...).
std::vector<int> nvrtc_supported_archs();

struct NvrtcInput {
  std::string source;
  std::string program_name = "kernel.cu"; // appears in the log's file positions
  std::vector<std::string> options;
  // C++ name expressions ("scale<float>") to instantiate and lower (nvrtcAddNameExpression).
  std::vector<std::string> name_expressions;
};

struct NvrtcOutput {
  bool ok = false;
  std::string status; // nvrtcGetErrorString of the compile call ("NVRTC_SUCCESS", ...)
  std::string log;    // the full program log, possibly empty
  std::vector<char> cubin;
  std::map<std::string, std::string> lowered_names; // name expression -> mangled symbol
};

// Compiles; a source or option the compiler rejects gives ok == false with the log. Failures of
// NVRTC itself (out of memory, no CUBIN produced) throw keval::sdk::Error(KEVAL_ERROR_INTERNAL).
NvrtcOutput nvrtc_compile(const NvrtcInput& input);

} // namespace keval::cuda_plugin::detail
