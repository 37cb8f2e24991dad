// Fault-injection plugin, kernel_type "fault". Normally a CPU kernel computing
// out[i] = in[i] * scale over the first input and first output float32 tensors
// (metadata.scale, default 2). metadata.fault makes it misbehave:
//
//   compile_error        compile fails with a multi-line log
//   throw_in_launch      launch throws (a C++ exception inside the plugin)
//   segfault_in_launch   launch dereferences a null pointer
//   abort_in_launch      launch calls abort()
//   hang_after_compile   bind_device (right after the compiled phase) never returns
//   hang_in_launch       launch never returns
//   flood_stdout         launch writes metadata.flood_bytes (default 32 MiB) to stdout, then works
//   exit_after_compile   bind_device calls _exit(7): the worker vanishes between phases
//   garbage_protocol     launch writes junk into the worker's protocol socket
//   skip_half_outputs    launch writes only the first half of the output
//   modify_input         launch also overwrites its input
//   fork_and_hang        launch forks a child that sleeps forever, then works (process-group kill)
//
// The plugin has an SDK 1.1 prewarm hook; info_json reports whether it ran in this process
// ("prewarmed") and at which nice value ("prewarm_nice"), so tests see that a job landed in a
// prestarted worker, and that its prewarm ran in the background.
//
// Only metadata.fault_side ("ref" or "custom", default both) misbehaves, so a compare can pair
// a healthy reference with a faulty candidate.
#include <keval/plugin.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

namespace {

using keval::sdk::Error;

bool g_prewarmed = false; // set by FaultPlugin::prewarm in a worker started ahead of its job
int g_prewarm_nice = 0;   // this process's nice value as its prewarm ran

// The plugin reads two flat metadata fields; a full JSON parser would be a dependency the
// SDK does not need. Values are simple: "key": "text" or "key": number.
std::string metadata_field(std::string_view json, const std::string& key) {
  const std::string needle = "\"" + key + "\"";
  const size_t at = json.find(needle);
  if (at == std::string_view::npos)
    return {};
  size_t pos = json.find(':', at + needle.size());
  if (pos == std::string_view::npos)
    return {};
  ++pos;
  while (pos < json.size() && json[pos] == ' ')
    ++pos;
  if (pos < json.size() && json[pos] == '"') {
    const size_t end = json.find('"', pos + 1);
    return std::string(json.substr(pos + 1, end - pos - 1));
  }
  size_t end = pos;
  while (end < json.size() && json[end] != ',' && json[end] != '}')
    ++end;
  return std::string(json.substr(pos, end - pos));
}

int64_t numel(const keval_dl_tensor& t) {
  int64_t n = 1;
  for (int32_t i = 0; i < t.ndim; ++i)
    n *= t.shape[i];
  return n;
}

float* float_data(const keval_dl_tensor& t, const char* what) {
  if (t.dtype.code != KEVAL_DTYPE_FLOAT || t.dtype.bits != 32)
    throw Error(KEVAL_ERROR_RUNTIME,
                std::string("fault plugin supports float32 only (") + what + ")");
  if (t.device.device_type != KEVAL_DEVICE_CPU)
    throw Error(KEVAL_ERROR_UNSUPPORTED, "fault plugin runs on the CPU only");
  return reinterpret_cast<float*>(static_cast<char*>(t.data) + t.byte_offset);
}

[[noreturn]] void hang() {
  for (;;)
    std::this_thread::sleep_for(std::chrono::seconds(1));
}

void write_garbage_to_sockets() {
  // The runner's protocol channel is a socket it holds (at the top of its descriptor table);
  // user code finds it among its open descriptors.
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const int fd = std::atoi(entry.path().filename().c_str());
    struct stat st {};
    if (fd > 2 && ::fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) {
      const char junk[] = "\x00\x01garbage from a kernel\xff\xfe";
      (void)!::write(fd, junk, sizeof junk);
    }
  }
}

class FaultKernel final : public keval::sdk::Kernel {
public:
  FaultKernel(std::string fault, float scale, size_t flood_bytes)
      : fault_(std::move(fault)), scale_(scale), flood_bytes_(flood_bytes) {}

  void bind_device(const keval_device_args&) override {
    if (fault_ == "hang_after_compile")
      hang();
    if (fault_ == "exit_after_compile")
      ::_exit(7);
  }

  void launch(keval::sdk::LaunchContext& ctx) override {
    const keval_dl_tensor* in = nullptr;
    const keval_dl_tensor* out = nullptr;
    for (size_t i = 0; i < ctx.num_args(); ++i) {
      const keval_arg& a = ctx.arg(i);
      if (a.kind != KEVAL_ARG_TENSOR)
        continue;
      if (a.role == KEVAL_ROLE_INPUT && in == nullptr)
        in = a.tensor;
      else if (a.role != KEVAL_ROLE_INPUT && out == nullptr)
        out = a.tensor;
    }
    if (in == nullptr || out == nullptr)
      throw Error(KEVAL_ERROR_INVALID_REQUEST,
                  "fault plugin needs one input and one output tensor argument");
    if (numel(*in) != numel(*out))
      throw Error(KEVAL_ERROR_RUNTIME, "input and output sizes differ");

    if (fault_ == "throw_in_launch")
      throw std::runtime_error("injected failure in launch");
    if (fault_ == "segfault_in_launch") {
      volatile int* null = nullptr;
      *null = 1;
    }
    if (fault_ == "abort_in_launch")
      std::abort();
    if (fault_ == "hang_in_launch")
      hang();
    if (fault_ == "garbage_protocol")
      write_garbage_to_sockets();
    if (fault_ == "fork_and_hang" && ::fork() == 0)
      hang();
    if (fault_ == "flood_stdout" && !flooded_) {
      flooded_ = true;
      std::string line(1023, 'x');
      line += '\n';
      for (size_t written = 0; written < flood_bytes_; written += line.size())
        std::fwrite(line.data(), 1, line.size(), stdout);
      std::fflush(stdout);
    }

    const float* src = float_data(*in, "input");
    float* dst = float_data(*out, "output");
    int64_t n = numel(*out);
    if (fault_ == "skip_half_outputs")
      n /= 2;
    for (int64_t i = 0; i < n; ++i)
      dst[i] = src[i] * scale_;
    if (fault_ == "modify_input")
      const_cast<float*>(src)[0] += 1.0f;
  }

  std::string info_json() const override {
    return "{\"fault\": \"" + fault_ + "\", \"scale\": " + std::to_string(scale_) +
           ", \"prewarmed\": " + (g_prewarmed ? "true" : "false") +
           ", \"prewarm_nice\": " + std::to_string(g_prewarm_nice) + "}";
  }

private:
  std::string fault_;
  float scale_;
  size_t flood_bytes_;
  bool flooded_ = false;
};

struct FaultPlugin {
  static keval_manifest manifest() {
    return keval::sdk::make_manifest("fault", "1.0.0",
                                     "fault injection for keval's own tests (CPU)",
                                     KEVAL_CAP_DEVICE_CPU | KEVAL_CAP_REQUIRES_IO_CONTRACT);
  }

  static void prewarm() {
    g_prewarmed = true;
    g_prewarm_nice = ::getpriority(PRIO_PROCESS, 0);
  }

  static std::unique_ptr<keval::sdk::Kernel> compile(const keval::sdk::CompileInput& in) {
    std::string fault = metadata_field(in.metadata_json, "fault");
    const std::string side = metadata_field(in.metadata_json, "fault_side");
    if (!side.empty() && side != in.side)
      fault.clear();
    if (fault == "compile_error")
      throw Error(KEVAL_ERROR_COMPILE, "injected compile error",
                  "kernel.cu(3): error: identifier \"undefined_thing\" is undefined\n"
                  "1 error detected in the compilation of \"kernel.cu\".");
    const std::string scale = metadata_field(in.metadata_json, "scale");
    const std::string flood = metadata_field(in.metadata_json, "flood_bytes");
    return std::make_unique<FaultKernel>(fault, scale.empty() ? 2.0f : std::stof(scale),
                                         flood.empty() ? size_t{32} << 20 : std::stoull(flood));
  }
};

} // namespace

KEVAL_PLUGIN(FaultPlugin)
