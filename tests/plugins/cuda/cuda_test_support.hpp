// Shared helpers of the cuda plugin tests: compile inputs, a private work dir, error capture.
#pragma once

#include "cuda_plugin/cuda_kernel.hpp"
#include "support/scoped_env.hpp"

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>
#include <unistd.h>

namespace keval::cuda_plugin::test {

// A directory of its own for each compile, as the worker gives each kernel.
class WorkDir {
public:
  WorkDir() {
    static std::atomic<int> counter{0};
    path_ =
        std::filesystem::temp_directory_path() /
        ("keval-cuda-plugin-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~WorkDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

private:
  std::filesystem::path path_;
};

using keval::test::ScopedEnv;

// One float vector, an output and a count, as most tests here pass.
inline const char* kVectorIo = R"({
  "args": [
    {"name": "x", "type": "tensor", "tensor_spec": {"shape": [1024], "dtype": "float32"}},
    {"name": "out", "type": "tensor", "role": "output",
     "tensor_spec": {"shape": [1024], "dtype": "float32"}},
    {"name": "n", "type": "int", "value": 1024}],
  "launch": {"grid": {"x": 4}, "block": {"x": 256}}})";

struct Source {
  std::string code;
  std::string metadata = "{}";
  std::string io = kVectorIo;
  int cuda_arch = 90;
};

// Compiles with a fresh work dir, as the worker would.
inline CompiledKernel compile(const Source& source) {
  WorkDir dir;
  const std::string work_dir = dir.path().string();
  sdk::CompileInput in;
  in.source_code = source.code;
  in.metadata_json = source.metadata;
  in.io_contract_json = source.io.empty() ? nullptr : source.io.c_str();
  in.work_dir = work_dir;
  in.cuda_arch = source.cuda_arch;
  in.side = "custom";
  return compile_cuda_source(in);
}

// The sdk::Error `body` throws; a test failure when it throws none.
template <class Body> sdk::Error error_of(Body&& body) {
  try {
    body();
  } catch (const sdk::Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a keval::sdk::Error";
  return sdk::Error(KEVAL_ERROR_INTERNAL, "(no error thrown)");
}

inline sdk::Error compile_error(const Source& source) {
  return error_of([&] { compile(source); });
}

inline boost::json::object info_of(const CompiledKernel& k) {
  return boost::json::parse(k.info_json).as_object();
}

} // namespace keval::cuda_plugin::test
