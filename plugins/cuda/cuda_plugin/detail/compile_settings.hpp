// How a source is compiled: the target architecture and the NVRTC options, from the compile
// arguments, the request's metadata and the environment. Pure functions of their inputs.
#pragma once

#include <boost/json/object.hpp>

#include <string>
#include <vector>

namespace keval::cuda_plugin::detail {

// Used when neither the worker nor KEVAL_CUDA_ARCH says which GPU is targeted (Hopper).
constexpr int kDefaultCudaArch = 90;

struct ArchChoice {
  int arch = kDefaultCudaArch; // major*10+minor
  // Where it came from: "worker" (the compile args: the granted device's family),
  // "KEVAL_CUDA_ARCH" (the environment), or "default".
  std::string source;
};

// `requested` is keval_compile_args.cuda_arch (0 when unknown); `env_value` is KEVAL_CUDA_ARCH
// (nullptr when unset), written 90, sm_90 or 9.0. Throws sdk::Error(KEVAL_ERROR_INTERNAL) for an
// unreadable environment value: a deployment mistake, not the user's.
ArchChoice resolve_arch(int requested, const char* env_value);

// The toolkit include directories: KEVAL_CUDA_INCLUDE (`env_value`, ':'-separated) when set,
// else those baked in at build time.
std::vector<std::string> toolkit_include_dirs(const char* env_value);

// metadata.compile_options: extra NVRTC options, an array of strings. Throws
// sdk::Error(KEVAL_ERROR_INVALID_REQUEST) for any other shape.
std::vector<std::string> user_compile_options(const boost::json::object& metadata);

struct NvrtcOptions {
  std::vector<std::string> options;
  // "sm_90", or the user's own -arch value when their options set one (sm_90a for Hopper's
  // arch-specific instructions, for instance).
  std::string target;
  bool user_chose_target = false;
};

// keval's options (-arch=sm_<arch>, -std=c++17, -I<toolkit>) followed by the user's. A user's -arch
// replaces keval's and must name a real architecture (sm_*), since keval loads a CUBIN; a user's
// -std replaces keval's. -default-device is never added: kernels say __global__/__device__.
NvrtcOptions build_nvrtc_options(int arch, const std::vector<std::string>& include_dirs,
                                 const std::vector<std::string>& user_options);

} // namespace keval::cuda_plugin::detail
