// keval-worker: runs exactly one job in a fresh process, talking to the host over the protocol
// descriptor it inherited. That process is trusted: it generates inputs, compares, keeps the
// timing books and speaks to the host, and never loads plugins or user code; each side's user code
// runs in a runner, `keval-worker --runner`, a child of its own (see worker/runner). Also answers
// `--describe PLUGIN...` for the host's registry, so the host learns manifests without ever loading
// plugin code itself, and `--devices` for the daemon's GPU pool, so the host learns the GPUs
// without ever loading the CUDA driver itself, and `--hold-driver` for the daemon's driver hold
// (daemon/driver_hold.hpp).
//
// Usage:
//   keval-worker --protocol-fd FD [--prewarm PLUGIN.so]... [--open-ahead-device N]
//     (--prewarm: started ahead of its job by `keval serve`; each plugin's SDK 1.1 prewarm runs
//      before the hello, so the job finds its interpreter and frameworks loaded; where they run on
//      CUDA, their contexts and this process's are opened ahead on device N, the one device there
//      is without it)
//   keval-worker --describe PLUGIN.so [PLUGIN.so ...]   (one JSON object per line on stdout)
//   keval-worker --devices                              (one JSON object on stdout)
//   keval-worker --hold-driver    (one JSON object on stdout, then waits for its stdin to end)
//   keval-worker --device-verifier N   (a token on stdin, one JSON object on stdout, then serves
//                                       the jobs' trusted workers until its stdin ends)
#include "common/log.hpp"
#include "common/version.hpp"
#include "protocol/blocking_channel.hpp"
#include "protocol/job_contract.hpp"
#include "protocol/sandbox_policy.hpp"
#include "worker/conformance/abi_checks.hpp"
#include "worker/engine/device_memory.hpp"
#include "worker/engine/device_turn.hpp"
#include "worker/engine/work_queues.hpp"
#include "worker/isolation/isolation.hpp"
#include "worker/isolation/sandbox.hpp"
#include "worker/pipeline/pipeline.hpp"
#include "worker/pipeline/plugin_loader.hpp"
#include "worker/program/step_process.hpp"
#include "worker/runner/crash_report.hpp"
#include "worker/runner/device_warm_up.hpp"
#include "worker/runner/runner.hpp"
#include "worker/runner/runner_client.hpp"
#include "worker/runner/runner_protocol.hpp"
#include "worker/verifier/device_verifier.hpp"

#ifdef KEVAL_HAVE_CUDA
#include "cuda/driver.hpp"
#include "worker/cuda/engine_opener.hpp"
#endif

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value_to.hpp>
#include <sys/prctl.h>
#include <unistd.h>

namespace {

namespace json = boost::json;

int describe(int argc, char** argv) {
  int status = 0;
  for (int i = 2; i < argc; ++i) {
    boost::json::object line;
    try {
      keval::worker::LoadedPlugin plugin(argv[i]);
      line = plugin.describe();
      line["ok"] = true;
    } catch (const std::exception& e) {
      line["path"] = argv[i];
      line["ok"] = false;
      line["error"] = e.what();
      status = 1;
    }
    std::cout << boost::json::serialize(line) << '\n';
  }
  std::cout.flush();
  return status;
}

#ifdef KEVAL_HAVE_CUDA
// The V2 contract's GPU types ("Server automatically detects A100, H100, H200"), else "other".
std::string gpu_type_of(const std::string& device_name) {
  for (const char* type : {"H200", "H100", "A100"})
    if (device_name.find(type) != std::string::npos)
      return type;
  return "other";
}
#endif

// The CUDA devices this process can see (CUDA_VISIBLE_DEVICES applies: the driver honours it, and
// the indices are the ordinals a job's grant names): {"devices": [{index, name, gpu_type, arch,
// memory_bytes}]}, plus "reason" when there are none.
int list_devices() {
  boost::json::array devices;
  std::string reason;
#ifdef KEVAL_HAVE_CUDA
  try {
    const int count = keval::cuda::usable_device_count(&reason);
    if (count > 0) {
      const keval::cuda::DriverApi& d = keval::cuda::driver();
      for (int ordinal = 0; ordinal < count; ++ordinal) {
        CUdevice device = 0;
        keval::cuda::check(d.cuDeviceGet(&device, ordinal), "cuDeviceGet");
        char name[256] = {};
        keval::cuda::check(d.cuDeviceGetName(name, sizeof name - 1, device), "cuDeviceGetName");
        int major = 0, minor = 0;
        keval::cuda::check(
            d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
            "cuDeviceGetAttribute");
        keval::cuda::check(
            d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device),
            "cuDeviceGetAttribute");
        size_t memory = 0;
        keval::cuda::check(d.cuDeviceTotalMem(&memory, device), "cuDeviceTotalMem");
        boost::json::object entry;
        entry["index"] = ordinal;
        entry["name"] = name;
        entry["gpu_type"] = gpu_type_of(name);
        entry["arch"] = major * 10 + minor;
        entry["memory_bytes"] = static_cast<uint64_t>(memory);
        devices.push_back(std::move(entry));
      }
    }
  } catch (const std::exception& e) { // no device (CUDA_ERROR_NO_DEVICE), a broken driver, ...
    devices.clear();
    reason = e.what();
  }
#else
  reason = "this keval-worker was built without the CUDA toolkit";
#endif
  boost::json::object out;
  out["devices"] = std::move(devices);
  if (out["devices"].as_array().empty())
    out["reason"] = reason;
  std::cout << boost::json::serialize(out) << std::endl;
  return 0;
}

// Starts one runner under POLICY (JSON), prints the sandbox it reports (one JSON object) and
// ends it: what `keval serve` logs at start, and how --sandbox strict learns a layer is missing
// before any job runs.
int sandbox_probe(const char* policy_json) {
  keval::worker::isolation::protect_trusted_process();
  boost::json::object out;
  int status = 0;
  try {
    const auto policy = keval::protocol::parse_sandbox_policy(std::string_view(policy_json));
    auto runner = keval::worker::RunnerClient::spawn(
        std::filesystem::read_symlink("/proc/self/exe"), {}, policy);
    const boost::json::object hello = runner->await_hello();
    if (const auto* isolation = hello.if_contains("isolation"); isolation && isolation->is_object())
      out = isolation->as_object();
  } catch (const std::exception& e) {
    out["error"] = e.what();
    status = 1;
  }
  keval::worker::isolation::kill_descendants();
  std::cout << boost::json::serialize(out) << std::endl;
  return status;
}

// The job's runners: started ahead of the job when the worker is (`--prewarm`: the plugins'
// prewarm hooks, importing torch say, run in them while the job is not yet known), otherwise
// started for the job.
class Runners final : public keval::worker::RunnerSource {
public:
  Runners(std::filesystem::path worker_exe, keval::protocol::SandboxPolicy sandbox)
      : worker_exe_(std::move(worker_exe)), sandbox_(std::move(sandbox)) {}

  // Starts a runner for each of `sides` that prewarms `plugins`, and waits for their hellos.
  // Each starts under its side's policy (isolation::policy_for_side): the candidate's cannot
  // write the shared build cache, which the reference's prewarm fills. `host_fd`: the host's
  // channel, readable once a job has taken this worker (its `taken`).
  // `device`: the CUDA device to open ahead, as the host named it (`--open-ahead-device`); none:
  // the one device there is, if there is exactly one.
  void prestart(const std::vector<std::string>& sides, const std::vector<std::string>& plugins,
                keval::protocol::Hello& hello, int host_fd, std::optional<int> device) {
    const auto started = std::chrono::steady_clock::now();
    for (const std::string& side : sides)
      ready_.emplace_back(side, keval::worker::RunnerClient::spawn(
                                    worker_exe_, plugins,
                                    keval::worker::isolation::policy_for_side(sandbox_, side)));
    for (auto& [side, runner] : ready_)
      greet(*runner);
    const boost::json::object& first = hellos_.begin()->second;
#ifdef KEVAL_HAVE_CUDA
    // Only a set whose runners run on CUDA opens the device: a CPU set's worker that touched the
    // driver held up every CUDA job's cuInit and took seconds to exit (the soak's CPU jobs: 15 s
    // each on the H100).
    if (const auto* opens = first.if_contains("opens_device");
        opens && opens->is_bool() && opens->as_bool())
      open_devices_in_turn(hello, host_fd, device);
#endif
    if (const auto* done = first.if_contains("prewarmed"); done != nullptr && done->is_array())
      hello.prewarmed = done->as_array();
    if (const auto* errors = first.if_contains("prewarm_errors");
        errors != nullptr && errors->is_array())
      hello.prewarm_errors = errors->as_array();
    hello.prewarm_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  }

  std::unique_ptr<keval::worker::RunnerClient> take(const std::string& side) override {
    std::unique_ptr<keval::worker::RunnerClient> runner;
    const auto prestarted = std::find_if(ready_.begin(), ready_.end(),
                                         [&](const auto& ready) { return ready.first == side; });
    if (prestarted != ready_.end()) {
      runner = std::move(prestarted->second);
      ready_.erase(prestarted);
    } else {
      runner = keval::worker::RunnerClient::spawn(
          worker_exe_, {}, keval::worker::isolation::policy_for_side(sandbox_, side));
      greet(*runner);
    }
    runner->set_side(side);
    return runner;
  }

  std::optional<int> prepared_cuda_device() override {
#ifdef KEVAL_HAVE_CUDA
    return opener_.opened_ordinal(); // nullopt when it opened none
#else
    return std::nullopt;
#endif
  }

  std::unique_ptr<keval::worker::Engine> prepared_engine(const std::string& type,
                                                         int index) override {
#ifdef KEVAL_HAVE_CUDA
    if (type == "cuda")
      return opener_.take(index);
#endif
    return nullptr;
  }

#ifdef KEVAL_HAVE_CUDA
  // This process's context and each runner's, one after another and in the machine's turn
  // (worker/engine/device_turn.hpp): a pool refilling does not open a dozen at once while a
  // job holds the GPU, and a worker that a job has taken goes before the spares. The worker says
  // hello (is ready for a job) once they are open.
  void open_devices_in_turn(keval::protocol::Hello& hello, int host_fd, std::optional<int> device) {
    // KEVAL_OPEN_TURN_PRECEDENCE=0: every worker waits as a spare, in no order (for a comparison).
    const char* precedence = std::getenv("KEVAL_OPEN_TURN_PRECEDENCE");
    const bool taken_first = precedence == nullptr || std::string_view(precedence) != "0";
    const keval::worker::OpenTurn turn(keval::worker::DeviceTurn::open_lock_file(),
                                       taken_first ? keval::worker::OpenTurn::precedence_file()
                                                   : std::filesystem::path(),
                                       host_fd, keval::worker::DeviceTurn::kOpenPatience);
    if (!turn.held())
      spdlog::debug("opening the device without a turn: {}", turn.why_not());
    hello.device_turn_wait_seconds = turn.waited_ms() / 1000;
    hello.device_turn_wait_taken_seconds = turn.waited_taken_ms() / 1000;
    const auto opening = std::chrono::steady_clock::now();
    // The three side by side, as a job's bind opens them: the turn is held for as long as they
    // take, and every spare and taken worker behind it waits that long (opened one after another,
    // 0.9 s a worker on a busy H100, which capped the pool near a worker a second).
    // The job meets a runner that died when it takes it; one that could not open the device
    // opens it again when bound, and says why not.
    const auto not_opened = [](const std::string& side, const std::exception& e) {
      spdlog::debug("the {} runner did not open its device ahead: {}", side, e.what());
    };
    struct Asked {
      const std::string& side;
      keval::worker::RunnerClient& runner;
      int64_t seq;
    };
    std::vector<Asked> asked;
    // The runners prewarmed in the background (cpu_priority.hpp); their opens hold the machine's
    // turn and the driver's lock, which the job being timed may be waiting for: in the foreground
    // (on a busy H200 the turn's mean wait fell from 2.8 to 0.5 s; README, "Prestarted workers").
    for (auto& [side, runner] : ready_)
      runner->set_background(false);
    for (auto& [side, runner] : ready_) {
      try {
        boost::json::object ask;
        ask["type"] = keval::worker::runner_msg::kOpenDevice;
        if (device)
          ask["index"] = *device;
        asked.push_back({side, *runner, runner->send(std::move(ask), "opening its device")});
      } catch (const std::exception& e) {
        not_opened(side, e);
      }
    }
    opener_.start(keval::worker::EngineUse::trusted, device);
    for (const Asked& one : asked) {
      try {
        one.runner.reply(keval::worker::runner_msg::kOpenDevice, one.seq, "opening its device");
      } catch (const std::exception& e) {
        not_opened(one.side, e);
      }
    }
    for (auto& [side, runner] : ready_)
      runner->set_background(true);
    opener_.wait();
    hello.device_open_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - opening).count();
    // What is left of the GPU with this worker's contexts open: the host grows its pools only
    // while idle workers leave a job half of it (supervisor/gpu_memory.hpp).
    if (keval::worker::Engine* engine = opener_.opened()) {
      engine->use_on_this_thread(); // opened on a thread of its own; the job's is this one
      hello.device_memory = keval::worker::read_device_memory(*engine);
    }
  }
#endif

#ifdef KEVAL_HAVE_CUDA
  // Before the job comes: the runners warm up the device they opened ahead
  // (worker/runner/device_warm_up.hpp), until the job comes. What happened is in the job's
  // `done` (device_warm_up). Nothing where no plugin of theirs has SDK 1.4's warm_device (their
  // hellos say so) or no device was opened ahead.
  void warm_device_before_job(int job_fd) {
    if (hellos_.empty() || !opener_.started())
      return;
    const auto* warms = hellos_.begin()->second.if_contains("warms_device");
    if (warms == nullptr || !warms->is_bool() || !warms->as_bool())
      return;
    const keval::worker::Engine* engine = opener_.opened();
    if (engine == nullptr) {
      warm_up_ = json::object{{ "not_run", "this worker's device was not opened ahead" }};
      return;
    }
    std::vector<std::pair<std::string, keval::worker::RunnerClient*>> runners;
    for (auto& [side, runner] : ready_)
      runners.emplace_back(side, runner.get());
    warm_up_ = keval::worker::warm_up_before_job(
        runners, keval::worker::DeviceTurn::gpu_of(*engine), job_fd,
        keval::worker::DeviceWarmUpSettings::from_environment());
  }
#endif

  boost::json::object device_warm_up() const override {
    return warm_up_;
  }

  bool opens_cuda_engine_ahead() const override {
#ifdef KEVAL_HAVE_CUDA
    return opener_.started();
#else
    return false;
#endif
  }

  boost::json::object hello_of(const keval::worker::RunnerClient& runner) override {
    const auto it = hellos_.find(runner.pid());
    if (it == hellos_.end() || !it->second.contains("isolation"))
      return {};
    return it->second.at("isolation").as_object();
  }

private:
  void greet(keval::worker::RunnerClient& runner) {
    hellos_[runner.pid()] = runner.await_hello();
  }

  std::filesystem::path worker_exe_;
  keval::protocol::SandboxPolicy sandbox_;
  std::vector<std::pair<std::string, std::unique_ptr<keval::worker::RunnerClient>>> ready_;
  std::map<pid_t, boost::json::object> hellos_;
  boost::json::object warm_up_; // warm_device_before_job's report
#ifdef KEVAL_HAVE_CUDA
  // A prestarted worker opens its device while its runners prewarm (see EngineOpener).
  keval::worker::EngineOpener opener_;
#endif
};

// The daemon's driver hold (daemon/driver_hold.hpp): the CUDA driver initialised in one process
// for as long as the daemon lives. While no process on the machine has it initialised, every
// cuInit does the machine's whole initialisation again (about 100 ms on an H200, against 10 with
// one process holding it) and every last process's exit undoes it; a daemon serving one client's
// cuda jobs, one fresh worker at a time, paid both for every job. Creates no context and holds no
// device memory. Prints {"held": true, "init_ms": ...} or {"held": false, "reason": ...}, then
// (held) waits until its standard input ends: the daemon closes it as it stops, and a daemon
// that dies takes it along (the parent-death signal of every child the host spawns).
int hold_driver() {
  ::prctl(PR_SET_DUMPABLE, 0); // like every trusted process: no user code may reach into it
  boost::json::object out;
#ifdef KEVAL_HAVE_CUDA
  const auto started = std::chrono::steady_clock::now();
  std::string reason;
  const int count = keval::cuda::usable_device_count(&reason);
  out["held"] = count > 0;
  if (count > 0)
    out["init_ms"] =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
            .count();
  else
    out["reason"] = reason;
#else
  out["held"] = false;
  out["reason"] = "this keval-worker was built without the CUDA toolkit";
#endif
  std::cout << boost::json::serialize(out) << std::endl;
  if (!out["held"].as_bool())
    return 0;
  char byte = 0;
  while (::read(STDIN_FILENO, &byte, 1) > 0 || errno == EINTR)
    errno = 0;
  return 0;
}

// The host's job frame. A prestarted worker is told `taken` first (its job waits for it), which
// mattered only while it waited for its device-open turn.
boost::json::object receive_job(keval::protocol::BlockingChannel& channel) {
  for (;;) {
    boost::json::object frame = channel.receive();
    const boost::json::value* type = frame.if_contains("type");
    if (type == nullptr || !type->is_string() || type->as_string() != keval::protocol::msg::kTaken)
      return frame;
  }
}

// A job's sides: the candidate and the reference of a compare.
const std::vector<std::string> kJobSides{"custom", "ref"};

int serve_one_job(int fd, const std::vector<std::string>& prewarm_paths,
                  const keval::protocol::SandboxPolicy& sandbox,
                  std::optional<int> open_ahead_device) {
  // This process decides the verdict and never runs user code: nothing of another process may
  // read or write it, and whatever the runners leave behind is reparented to it and ended.
  const boost::json::object layers = keval::worker::isolation::protect_trusted_process();
  // Its one stream needs one hardware work queue: its context costs half as much to make and
  // end (worker/engine/work_queues.hpp). Before any thread or CUDA call; its runners do not
  // inherit it.
  keval::worker::use_one_work_queue();
  // Frames from the host are summaries but for the job, which carries the whole request.
  keval::protocol::BlockingChannel channel(fd, "host", keval::protocol::kMaxJobFrameBytes);
  try {
    Runners runners(std::filesystem::read_symlink("/proc/self/exe"), sandbox);
    keval::protocol::Hello hello;
    hello.worker_version = keval::kVersion;
    hello.pid = ::getpid();
    hello.isolation = layers;
    if (!prewarm_paths.empty())
      runners.prestart(kJobSides, prewarm_paths, hello, channel.fd(), open_ahead_device);
    channel.send(keval::protocol::to_frame(hello));
#ifdef KEVAL_HAVE_CUDA
    runners.warm_device_before_job(channel.fd());
#endif

    const keval::worker::JobSpec job = keval::worker::parse_job(receive_job(channel));
    keval::worker::run_pipeline(channel, job, runners);
    return 0;
  } catch (const std::exception& e) {
    keval::worker::isolation::kill_descendants();
    spdlog::error("worker failed: {}", e.what());
    try {
      channel.send(keval::protocol::to_frame(keval::protocol::Fatal{e.what()}));
    } catch (...) {
      // The host is gone or the channel is broken; the exit code tells the rest.
    }
    return 1;
  }
}

} // namespace

int main(int argc, char** argv) {
  keval::init_logging("keval-worker", "warn");
  if (argc >= 3 && std::strcmp(argv[1], "--describe") == 0)
    return describe(argc, argv);
  if (argc == 2 && std::strcmp(argv[1], "--devices") == 0)
    return list_devices();
  if (argc == 2 && std::strcmp(argv[1], "--hold-driver") == 0)
    return hold_driver();
  // `--device-verifier ORDINAL`: a GPU's context for the jobs' trusted workers
  // (worker/verifier/device_verifier.hpp); the daemon's child, like the driver hold.
  if (argc == 3 && std::strcmp(argv[1], "--device-verifier") == 0) {
    const std::string ordinal = argv[2];
    if (ordinal.empty() || ordinal.size() > 6 ||
        ordinal.find_first_not_of("0123456789") != std::string::npos) {
      std::fprintf(stderr, "keval-worker: --device-verifier wants a CUDA ordinal, got '%s'\n",
                   argv[2]);
      return 2;
    }
    keval::worker::install_crash_report("keval device verifier");
    return keval::worker::verifier::run_device_verifier(std::stoi(ordinal));
  }
  // `--program-step POLICY -- ARGV...`: one command of a whole program, sandboxed in its
  // runner's place (worker/program/step_process.hpp).
  if (argc >= 2 && std::strcmp(argv[1], keval::worker::program::kStepOption) == 0)
    return keval::worker::program::exec_step(argc, argv);
  if (argc == 3 && std::strcmp(argv[1], "--sandbox-probe") == 0)
    return sandbox_probe(argv[2]);
  // `--conformance PLUGIN.so --cuda-arch N [--request FILE]`: keval conformance's checks of the
  // plugin's table.
  if ((argc == 5 || (argc == 7 && std::strcmp(argv[5], "--request") == 0)) &&
      std::strcmp(argv[1], "--conformance") == 0 && std::strcmp(argv[3], "--cuda-arch") == 0)
    return keval::worker::conformance::run_abi_checks(
        argv[2], argc == 7 ? std::optional<std::filesystem::path>(argv[6]) : std::nullopt,
        std::atoi(argv[4]));
  // `--runner --channel-fd FD [--sandbox POLICY] [--prewarm PLUGIN]...`: one side's user code,
  // for a trusted worker.
  const bool runner = argc >= 2 && std::strcmp(argv[1], "--runner") == 0;
  const int first = runner ? 2 : 1;
  const char* fd_option = runner ? "--channel-fd" : "--protocol-fd";
  if (argc >= first + 2 && (argc - first) % 2 == 0 && std::strcmp(argv[first], fd_option) == 0) {
    std::vector<std::string> prewarm_paths;
    keval::protocol::SandboxPolicy sandbox;
    std::optional<int> open_ahead_device;
    try {
      for (int i = first + 2; i + 1 < argc; i += 2) {
        if (std::strcmp(argv[i], "--prewarm") == 0) {
          prewarm_paths.emplace_back(argv[i + 1]);
        } else if (!runner && std::strcmp(argv[i], "--open-ahead-device") == 0) {
          const std::string ordinal = argv[i + 1];
          if (ordinal.empty() || ordinal.size() > 6 ||
              ordinal.find_first_not_of("0123456789") != std::string::npos)
            throw std::invalid_argument("--open-ahead-device wants a CUDA ordinal, got '" +
                                        ordinal + "'");
          open_ahead_device = std::stoi(ordinal);
        } else if (std::strcmp(argv[i], "--sandbox") == 0) {
          sandbox = keval::protocol::parse_sandbox_policy(std::string_view(argv[i + 1]));
        } else {
          std::fprintf(stderr, "keval-worker: unknown option '%s'\n", argv[i]);
          return 2;
        }
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "keval-worker: %s\n", e.what());
      return 2;
    }
    const int fd = std::stoi(argv[first + 1]);
    keval::worker::install_crash_report(runner ? "keval runner" : "keval trusted worker");
    if (runner)
      return keval::worker::run_runner(fd, prewarm_paths, sandbox);
    keval::worker::isolation::end_descendants_on_sigterm(); // before any thread starts
    return serve_one_job(fd, prewarm_paths, sandbox, open_ahead_device);
  }
  std::fprintf(
      stderr,
      "keval-worker %s: runs one keval job; started by keval, not by hand.\n"
      "usage: keval-worker --protocol-fd FD [--sandbox POLICY] [--prewarm PLUGIN.so]... "
      "[--open-ahead-device N] | "
      "--describe PLUGIN.so... | --devices | --hold-driver | --device-verifier N | "
      "--sandbox-probe POLICY | "
      "--conformance PLUGIN.so "
      "--cuda-arch N [--request FILE] | --runner --channel-fd FD [--sandbox POLICY] [--prewarm "
      "PLUGIN.so]...\n",
      keval::kVersion);
  return 2;
}
