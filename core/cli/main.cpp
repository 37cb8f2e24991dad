// keval — the command-line host.
//
//   keval evaluate REQUEST.json|-    evaluate one kernel (the V2 contract's POST /evaluate body)
//   keval compare REQUEST.json|-     reference vs custom (the V2 contract's POST /compare body)
//   keval plugins [--json]           list kernel-type plugins and why any could not load
//   keval conformance PLUGIN.so      check a plugin against the SDK (cli/conformance.hpp)
//   keval serve [options]            the daemon: the V2 contract's HTTP API on a Unix socket
//   keval version
//
//   keval check evaluate|compare REQUEST   parse and check a request, run nothing
//   keval compute-eval|kernelbench|report|mcp ...   the Python tools (python/keval)
//
// The result JSON goes to stdout (a short summary instead when stdout is a terminal, unless
// --json); logs and progress go to stderr.
// Exit codes: 0 evaluated and correct, 1 the kernel failed (compile, correctness, crash),
// 2 bad request or usage, 3 infrastructure failure (timeout, worker failure, no device).
#include "cli/conformance.hpp"
#include "common/log.hpp"
#include "common/plugin_abi.hpp"
#include "common/version.hpp"
#include "daemon/serve.hpp"
#include "job/job_runner.hpp"
#include "registry/registry.hpp"
#include "request/parse.hpp"
#include "result/response.hpp"
#include "result/summary.hpp"
#include "supervisor/orphan_reaper.hpp"

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <boost/json/serialize.hpp>
#include <boost/json/value_to.hpp>
#include <unistd.h>

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

constexpr int kExitUsage = 2;
constexpr int kExitInfrastructure = 3;

const char* kUsage = R"(usage: keval <command> [options]

commands:
  evaluate REQUEST.json|-   evaluate one kernel (body of the V2 contract's POST /evaluate)
  compare REQUEST.json|-    compare a custom kernel with a reference (POST /compare)
  plugins [--json]          list kernel-type plugins, their capabilities and load errors
  check evaluate|compare REQUEST.json|-
                            parse and check a request as the daemon would, running nothing:
                            prints {"valid": true, ...} (exit 0) or the 400 body (exit 2)
  conformance PLUGIN.so [--request REQUEST.json] [--json]
                            check a plugin against the SDK: its table and manifest, versioning,
                            compile errors reported as such, structs of a newer host, and the
                            sample request compiled, launched and correct (sdk/README.md)
  compute-eval evaluate|pack-problems|pack-solutions ...
                            ComputeEval datapacks through the daemon: pass@k, graded solutions
                            in ComputeEval's format (docs/cuda_program.md; keval compute-eval -h)
  kernelbench run --kernelbench PATH --level N [--problems 1-100] (--generations DIR|--baseline)
                            a KernelBench level through the daemon: eval results in KernelBench's
                            shape plus keval's fields, resumable (keval kernelbench run -h)
  report RESULTS.json... [-o report.html]
                            one self-contained HTML page: fast_p, speedups, failures, per problem
  mcp [--transport stdio|streamable-http]
                            an MCP server for agents, against a daemon (keval mcp -h)
  serve                     run the daemon: the V2 contract's HTTP/JSON API (POST /evaluate, /compare,
                            GET /jobs/ID, /health, /stats, /metrics, ...) on a Unix socket
  version                   print the version

options (evaluate, compare):
  --json                    print the response JSON even on a terminal (it is printed whenever
                            stdout is not one; on a terminal a summary is printed and the whole
                            response kept in DIR/results/<job_id>.json)
  --state-dir DIR           where job records and work directories live
                            (default: $KEVAL_STATE_DIR, else $TMPDIR/keval-<uid>)
  --keep-record             keep the job record (DIR/jobs/<id>.json) after printing the result
  --log-level LEVEL         trace|debug|info|warn|error (default info; or $KEVAL_LOG_LEVEL)

sandbox of the user code (evaluate, compare, serve; see README "Sandbox"):
  --sandbox MODE            standard: every layer this machine allows, the rest reported as
                            skipped in metadata.sandbox (default); strict: refuse to run jobs
                            when a layer is missing; off: debugging only, said in every result
  --job-user USER           when keval runs as root, user code runs as USER (NAME, UID or
                            UID:GID; default nobody)
  --runner-uids BASE|shared each process that runs user code runs as a uid of its own,
                            BASE + its pid, with USER's group, so that --job-pids counts one
                            job's processes alone and jobs cannot signal each other (default
                            1879048192); shared: all as USER
  --job-memory SIZE         memory per process that runs user code, e.g. 4G (default: half the
                            machine's memory, at most 16G): cgroup v2 memory.max where keval
                            has a delegated cgroup, else RLIMIT_DATA
  --job-pids N              processes and threads per process that runs user code (default 1024)

options (serve):
  --state-dir DIR           job records, work directories and the lock of this daemon
                            (default: the directory above + /daemon)
  --socket PATH             Unix socket to serve (default: $KEVAL_SOCKET, else DIR/keval.sock);
                            mode 0600; a dead daemon's socket is replaced, a live one is not
  --socket-group GROUP      make the socket 0660 and owned by GROUP
  --listen HOST:PORT        also serve TCP (loopback addresses only, unless --allow-remote);
                            every TCP request needs 'Authorization: Bearer <token>' (else 401)
                            and a body sent as 'Content-Type: application/json' (else 403)
  --allow-remote            let --listen bind a non-loopback address
  --token-file PATH         the TCP bearer token; made on first start (32 random bytes as 64
                            hex digits, mode 0600) when missing (default: DIR/keys/tcp.token)
  --max-connections N       connections open at once, Unix and TCP together; past it, 503 and
                            close (default 1024); the open-file limit is raised to fit it
  --max-queued N            jobs waiting for a worker before new ones get 503 (default 256)
  --max-workers N           workers running at once (default: CPU cores + GPUs)
  --jobs-per-gpu N          jobs validating/profiling on one GPU at once (default 1: exclusive)
  --threads N               HTTP event-loop threads (default: CPU cores, at least 2); jobs
                            are supervised on one more
  --warm-workers N          workers kept started ahead of jobs per set of prewarming plugins
                            seen in jobs (Python types: interpreter up, torch imported); each
                            still serves one job (default 2; 0: every job starts its own)
  --warm-workers-max N      let a set's pool grow past --warm-workers with its demand (the
                            set's jobs of the last 10 s; its busiest 10 s are kept for 10 min,
                            for the next burst; its first job counts as N, the start of a
                            burst) up to N, while a quarter of the machine's memory is free
                            and, where idle workers open the GPU ahead, half of its memory at
                            the workers' latest reading (default: half the CPU cores, at most
                            8; 0: no growth)
  --warm-workers-total N    the sets in use (a job in the last 10 min) share N prestarted
                            workers past their --warm-workers: each grows to at most N / sets
                            in use, and to --warm-workers-max (default: 18, at least
                            --warm-workers-max)
  --no-driver-hold          do not keep the CUDA driver initialised while serving (by default,
                            on a machine with GPUs, one process does: cuInit, no context, no
                            device memory; without it, a fresh worker's cuInit redoes the
                            machine's initialisation whenever no other process holds it,
                            about 0.1 s; /health "driver" says which)
  --device-verifier         one long-lived process per GPU holds its CUDA context for the jobs'
                            trusted workers, so a job makes and releases one context (its
                            runner's) instead of two or three: cuda jobs about twice the rate
                            (README, "The device verifier"; /health "device_verifiers";
                            KEVAL_DEVICE_VERIFIER=1 sets it)
  --max-body-bytes N        request body limit; larger bodies get 413 (default 67108864)
  --http-timeout SECONDS    limit on every read of a request (an idle kept-alive connection
                            included: it is closed after this) and write of a response (default 30)
  --job-ttl SECONDS         finished jobs are kept, and served by GET /jobs/ID, this long
                            (default 3600)
  --state-max-bytes SIZE    job records and their blobs in DIR at most (e.g. 512M, 2G; default
                            2G); past it, finished jobs are forgotten oldest-first before their
                            TTL (queued and running jobs never are); reported in /stats "state"
  --shutdown-grace SECONDS  on SIGTERM/SIGINT, running jobs get this long before they are
                            cancelled; a second signal cancels them at once (default 60)

exit codes: 0 correct, 1 kernel failed, 2 bad request or usage, 3 infrastructure failure
environment: KEVAL_PLUGIN_PATH (extra plugin directories, first wins), KEVAL_WORKER
)";

fs::path self_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::current_path() : exe.parent_path();
}

fs::path worker_exe() {
  if (const char* env = std::getenv("KEVAL_WORKER"))
    return env;
  return self_dir() / "keval-worker";
}

fs::path default_state_dir() {
  if (const char* env = std::getenv("KEVAL_STATE_DIR"))
    return env;
  const char* tmp = std::getenv("TMPDIR");
  return fs::path(tmp ? tmp : "/tmp") / ("keval-" + std::to_string(::getuid()));
}

keval::registry::Registry discover_plugins() {
  return keval::registry::Registry::discover(keval::registry::default_search_path(self_dir()),
                                             worker_exe());
}

std::string read_input(const std::string& source) {
  std::stringstream ss;
  if (source == "-") {
    ss << std::cin.rdbuf();
  } else {
    std::ifstream in(source, std::ios::binary);
    if (!in)
      throw keval::request::RequestError("", "cannot read request file '" + source + "'");
    ss << in.rdbuf();
  }
  return ss.str();
}

void print(const json::object& body) {
  std::cout << json::serialize(body) << std::endl;
}

// What `keval evaluate|compare` prints: the response JSON for scripts (stdout not a terminal, or
// --json), a short summary for a person on a terminal, with the whole response kept in
// STATE/results/<job_id>.json so nothing of it is lost.
void print_result(const json::object& body, bool as_json, const fs::path& state_dir) {
  if (as_json || ::isatty(STDOUT_FILENO) == 0) {
    print(body);
    return;
  }
  keval::result::SummaryOptions options;
  const char* no_color = std::getenv("NO_COLOR");
  const char* term = std::getenv("TERM");
  options.color = (no_color == nullptr || *no_color == '\0') &&
                  (term == nullptr || std::strcmp(term, "dumb") != 0);
  if (const json::value* id = body.if_contains("job_id"); id != nullptr && id->is_string()) {
    const fs::path dir = state_dir / "results";
    std::error_code ec;
    fs::create_directories(dir, ec);
    fs::permissions(dir, fs::perms::owner_all, ec);
    const fs::path path = dir / (std::string(id->get_string()) + ".json");
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file << json::serialize(body) << "\n";
    if (file.flush())
      options.full_result_path = path.string();
    else
      spdlog::warn("could not write the full result to {}: it follows as JSON", path.string());
    if (options.full_result_path.empty())
      print(body);
  }
  std::cout << keval::result::summarize(body, options) << std::flush;
}

int cmd_plugins(bool as_json) {
  const auto registry = discover_plugins();
  if (as_json) {
    json::object out;
    json::array path;
    for (const auto& dir : registry.search_path())
      path.emplace_back(dir.string());
    out["search_path"] = std::move(path);
    out["plugins"] = registry.to_json();
    print(out);
    return 0;
  }
  std::cout << "search path:\n";
  for (const auto& dir : registry.search_path())
    std::cout << "  " << dir.string() << "\n";
  std::cout << "plugins:\n";
  if (registry.plugins().empty())
    std::cout << "  (none found)\n";
  for (const auto& p : registry.plugins()) {
    if (p.usable()) {
      std::string caps;
      for (const auto& c : keval::capability_names(p.capabilities))
        caps += (caps.empty() ? "" : ",") + c;
      std::cout << "  " << p.kernel_type << "  v" << p.plugin_version << "  api " << p.api_major
                << "." << p.api_minor << "  [" << caps << "]\n"
                << "      " << p.path.string() << "\n";
      if (!p.description.empty())
        std::cout << "      " << p.description << "\n";
    } else {
      std::cout << "  (not loaded)  " << p.path.string() << "\n      error: " << p.error << "\n";
    }
  }
  return 0;
}

int cmd_run(keval::request::EvalRequest::Mode mode, const std::string& source,
            const fs::path& state_dir, bool keep_record, bool as_json,
            const keval::supervisor::SandboxOptions& sandbox) {
  using keval::result::Verdict;
  keval::request::EvalRequest request;
  const auto registry = discover_plugins();
  try {
    request = keval::request::parse_request_text(read_input(source), mode);
    keval::job::check_against_registry(request, registry);
  } catch (const keval::request::RequestError& e) {
    spdlog::error("bad request: {}", e.what());
    print_result(keval::result::bad_request_body(e.path(), e.message()), as_json, state_dir);
    return keval::result::exit_code(Verdict::bad_request);
  }
  for (const auto& warning : request.warnings)
    spdlog::warn("{}", warning);

  const keval::store::JobStore store(state_dir / "jobs");
  // What a worker leaves behind when it dies (setsid, double forks) comes to us rather than to
  // init, and is killed once the job has ended, however it ends.
  keval::supervisor::become_child_subreaper();
  struct ReapAtEnd {
    ~ReapAtEnd() {
      try {
        keval::supervisor::reap_orphans();
      } catch (const std::exception& e) {
        spdlog::error("killing what the job left behind: {}", e.what());
      }
    }
  } reap_at_end;
  keval::job::RunOptions options;
  options.worker_exe = worker_exe();
  options.work_root = state_dir / "work";
  options.sandbox = keval::supervisor::prepare_host_sandbox(sandbox, state_dir);
  options.grant_device = [](const json::array& types, auto grant) {
    // One job, no contention: the first device type the worker can use, device 0.
    json::object device;
    device["type"] = types.front();
    device["index"] = 0;
    grant(json::object{{"device", device}});
  };
  options.on_progress = [](const json::object& p) {
    spdlog::debug("{} {}/{}", json::value_to<std::string>(p.at("phase")),
                  p.at("done").to_number<int64_t>(), p.at("total").to_number<int64_t>());
  };
  const auto response = keval::job::run_job(request, registry, store, options);
  const std::string job_id = json::value_to<std::string>(response.body.at("job_id"));
  if (keep_record)
    spdlog::info("job record: {}", store.record_path(job_id).string());
  else
    store.remove(job_id);
  spdlog::info("job {}: {}", job_id, keval::result::verdict_name(response.verdict));
  print_result(response.body, as_json, state_dir);
  return keval::result::exit_code(response.verdict);
}

// `keval check evaluate|compare REQUEST`: the daemon's own parsing and registry checks, nothing
// run. A request builder (python/keval/iocontract) or a client can see whether keval accepts a
// request, and why not, without a daemon or a device.
int cmd_check(const std::string& mode_name, const std::string& source) {
  const auto mode = mode_name == "compare" ? keval::request::EvalRequest::Mode::compare
                                           : keval::request::EvalRequest::Mode::evaluate;
  keval::request::EvalRequest request;
  try {
    request = keval::request::parse_request_text(read_input(source), mode);
    keval::job::check_against_registry(request, discover_plugins());
  } catch (const keval::request::RequestError& e) {
    print(keval::result::bad_request_body(e.path(), e.message()));
    return kExitUsage;
  }
  json::object out;
  out["valid"] = true;
  out["mode"] = mode_name;
  json::object kernel_types;
  kernel_types[mode == keval::request::EvalRequest::Mode::compare ? "custom_kernel" : "kernel"] =
      request.kernel.kernel_type;
  if (request.ref)
    kernel_types["ref_kernel"] = request.ref->kernel_type;
  out["kernel_types"] = std::move(kernel_types);
  json::array warnings;
  for (const auto& warning : request.warnings)
    warnings.emplace_back(warning);
  out["warnings"] = std::move(warnings);
  print(out);
  return 0;
}

int cmd_serve(keval::daemon::ServeOptions options) {
  options.worker_exe = worker_exe();
  options.plugin_dirs = keval::registry::default_search_path(self_dir());
  if (options.socket_path.empty()) {
    const char* env = std::getenv("KEVAL_SOCKET");
    options.socket_path = env != nullptr ? fs::path(env) : options.state_dir / "keval.sock";
  }
  try {
    return keval::daemon::serve(options);
  } catch (const keval::daemon::ServeOptionError& e) {
    std::cerr << "keval serve: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    spdlog::critical("keval serve: {}", e.what());
    return kExitInfrastructure;
  }
}

} // namespace

// The commands written in Python (python/keval, installed beside the plugins): each is a client
// of the daemon, run as `python3 -m keval.<module>` with this keval as KEVAL_BIN, so that it can
// start a daemon of its own when it is given none. The interpreter is KEVAL_CLIENT_PYTHON, else
// python3 (the client needs only the standard library; `mcp` and `report` need their extras).
struct PythonCommand {
  const char* name;   // keval <name> ...
  const char* module; // python3 -m <module>
};
constexpr PythonCommand kPythonCommands[] = {
    {"compute-eval", "keval.compute_eval"},
    {"kernelbench", "keval.kernelbench"},
    {"report", "keval.report"},
    {"mcp", "keval.mcp"},
};

int cmd_python(const PythonCommand& command, int argc, char** argv) {
  const fs::path package_root = self_dir() / ".." / "lib" / "keval" / "python";
  if (!fs::exists(package_root / "keval" / "__init__.py")) {
    std::cerr << "keval " << command.name << ": the Python package is not installed at "
              << package_root << " (build keval with its python/ folder)\n";
    return kExitInfrastructure;
  }
  std::string pythonpath = package_root.lexically_normal().string();
  if (const char* old = std::getenv("PYTHONPATH"); old != nullptr && *old != '\0')
    pythonpath += ":" + std::string(old);
  ::setenv("PYTHONPATH", pythonpath.c_str(), 1);
  ::setenv("KEVAL_BIN", (self_dir() / "keval").c_str(), 1);
  const char* python = std::getenv("KEVAL_CLIENT_PYTHON");
  const std::string interpreter = python != nullptr && *python != '\0' ? python : "python3";
  std::vector<std::string> words{interpreter, "-m", command.module};
  for (int i = 2; i < argc; ++i)
    words.emplace_back(argv[i]);
  std::vector<char*> exec_argv;
  for (auto& w : words)
    exec_argv.push_back(w.data());
  exec_argv.push_back(nullptr);
  ::execvp(exec_argv[0], exec_argv.data());
  std::cerr << "keval " << command.name << ": cannot run " << interpreter << ": "
            << std::strerror(errno) << " (set KEVAL_CLIENT_PYTHON to a Python 3.9+ interpreter)\n";
  return kExitInfrastructure;
}

int main(int argc, char** argv) {
  for (const auto& command : kPythonCommands)
    if (argc >= 2 && std::strcmp(argv[1], command.name) == 0)
      return cmd_python(command, argc, argv);
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string level = "info";
  std::optional<fs::path> state_dir;
  keval::daemon::ServeOptions serve_options;
  // KEVAL_DEVICE_VERIFIER=1: --device-verifier by default (how the whole GPU suite is run with
  // it; an operator's way to turn it on for every daemon of a machine).
  if (const char* verifier = std::getenv("KEVAL_DEVICE_VERIFIER"))
    serve_options.device_verifier = std::string_view(verifier) == "1";
  bool keep_record = false, as_json = false;
  std::optional<fs::path> conformance_request;
  std::vector<std::string> positional;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= args.size()) {
        std::cerr << "keval: " << flag << " needs a value\n" << kUsage;
        std::exit(kExitUsage);
      }
      return args[++i];
    };
    auto number = [&](const char* flag) -> uint64_t {
      const std::string text = value(flag);
      if (text.empty() || text.size() > 18 ||
          text.find_first_not_of("0123456789") != std::string::npos) {
        std::cerr << "keval: " << flag << " wants a non-negative whole number, got '" << text
                  << "'\n";
        std::exit(kExitUsage);
      }
      return std::stoull(text);
    };
    auto seconds = [&](const char* flag) { return std::chrono::milliseconds(number(flag) * 1000); };
    if (a == "--log-level")
      level = value("--log-level");
    else if (a == "--state-dir")
      state_dir = value("--state-dir");
    else if (a == "--socket")
      serve_options.socket_path = value("--socket");
    else if (a == "--socket-group")
      serve_options.socket_group = value("--socket-group");
    else if (a == "--listen")
      serve_options.listen = value("--listen");
    else if (a == "--allow-remote")
      serve_options.allow_remote = true;
    else if (a == "--token-file")
      serve_options.token_file = value("--token-file");
    else if (a == "--max-connections")
      serve_options.max_connections = number("--max-connections");
    else if (a == "--max-queued")
      serve_options.max_queued = number("--max-queued");
    else if (a == "--max-workers")
      serve_options.max_workers = number("--max-workers");
    else if (a == "--jobs-per-gpu")
      serve_options.jobs_per_gpu = number("--jobs-per-gpu");
    else if (a == "--threads")
      serve_options.threads = number("--threads");
    else if (a == "--warm-workers")
      serve_options.warm_workers = number("--warm-workers");
    else if (a == "--warm-workers-max")
      serve_options.warm_workers_max = number("--warm-workers-max");
    else if (a == "--warm-workers-total")
      serve_options.warm_workers_total = number("--warm-workers-total");
    else if (a == "--no-driver-hold")
      serve_options.hold_driver = false;
    else if (a == "--device-verifier")
      serve_options.device_verifier = true;
    else if (a == "--max-body-bytes")
      serve_options.max_body_bytes = number("--max-body-bytes");
    else if (a == "--http-timeout")
      serve_options.http_timeout = seconds("--http-timeout");
    else if (a == "--job-ttl")
      serve_options.job_ttl = seconds("--job-ttl");
    else if (a == "--state-max-bytes") {
      const std::string text = value("--state-max-bytes");
      const auto bytes = keval::protocol::parse_byte_size(text);
      if (!bytes || *bytes == 0) {
        std::cerr << "keval: --state-max-bytes wants a size above 0 (e.g. 512M, 2G), got '" << text
                  << "'\n";
        return kExitUsage;
      }
      serve_options.state_max_bytes = *bytes;
    } else if (a == "--shutdown-grace")
      serve_options.shutdown_grace = seconds("--shutdown-grace");
    else if (a == "--sandbox") {
      const std::string mode = value("--sandbox");
      const auto parsed = keval::protocol::parse_sandbox_mode(mode);
      if (!parsed) {
        std::cerr << "keval: --sandbox wants standard, strict or off, got '" << mode << "'\n";
        return kExitUsage;
      }
      serve_options.sandbox.mode = *parsed;
    } else if (a == "--job-user")
      serve_options.sandbox.job_user = value("--job-user");
    else if (a == "--runner-uids") {
      const std::string text = value("--runner-uids");
      constexpr uint32_t kLargest = keval::protocol::SandboxPolicy::kLargestRunnerUidBase;
      if (text == "shared") {
        serve_options.sandbox.runner_uid_base = 0;
      } else {
        const bool digits = !text.empty() && text.size() <= 10 &&
                            text.find_first_not_of("0123456789") == std::string::npos;
        const uint64_t base = digits ? std::stoull(text) : 0;
        if (base == 0 || base > kLargest) {
          std::cerr << "keval: --runner-uids wants 'shared' or a uid from 1 to " << kLargest
                    << " (it and the next 4194304 uids are used), got '" << text << "'\n";
          return kExitUsage;
        }
        serve_options.sandbox.runner_uid_base = static_cast<uint32_t>(base);
      }
    } else if (a == "--job-memory") {
      const std::string text = value("--job-memory");
      const auto bytes = keval::protocol::parse_byte_size(text);
      if (!bytes || *bytes < (16u << 20)) {
        std::cerr << "keval: --job-memory wants a size of at least 16M (e.g. 512M, 4G), got '"
                  << text << "'\n";
        return kExitUsage;
      }
      serve_options.sandbox.memory_bytes = *bytes;
    } else if (a == "--job-pids") {
      serve_options.sandbox.max_processes = number("--job-pids");
      if (serve_options.sandbox.max_processes < 16) {
        std::cerr << "keval: --job-pids must be at least 16\n";
        return kExitUsage;
      }
    } else if (a == "--keep-record")
      keep_record = true;
    else if (a == "--request")
      conformance_request = value("--request");
    else if (a == "--json")
      as_json = true;
    else if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return 0;
    } else if (a.size() > 1 && a[0] == '-' && a != "-") {
      std::cerr << "keval: unknown option '" << a << "'\n" << kUsage;
      return kExitUsage;
    } else
      positional.push_back(a);
  }
  keval::init_logging("keval", level.c_str());
  if (positional.empty()) {
    std::cerr << kUsage;
    return kExitUsage;
  }
  const std::string& command = positional[0];
  try {
    if (command == "version" && positional.size() == 1) {
      std::cout << "keval " << keval::kVersion << " (plugin API " << KEVAL_PLUGIN_API_MAJOR << "."
                << KEVAL_PLUGIN_API_MINOR << ")\n";
      return 0;
    }
    if (command == "plugins" && positional.size() == 1)
      return cmd_plugins(as_json);
    if (command == "conformance" && positional.size() == 2)
      return keval::cli::run_conformance(
          {positional[1], conformance_request, as_json, self_dir() / "keval", worker_exe()});
    if ((command == "evaluate" || command == "compare") && positional.size() == 2)
      return cmd_run(command == "compare" ? keval::request::EvalRequest::Mode::compare
                                          : keval::request::EvalRequest::Mode::evaluate,
                     positional[1], state_dir.value_or(default_state_dir()), keep_record, as_json,
                     serve_options.sandbox);
    if (command == "check" && positional.size() == 3 &&
        (positional[1] == "evaluate" || positional[1] == "compare"))
      return cmd_check(positional[1], positional[2]);
    if (command == "serve" && positional.size() == 1) {
      // Its own directory by default: the daemon expires records and clears work directories,
      // which must not touch what a concurrent `keval evaluate` keeps there.
      serve_options.state_dir = state_dir.value_or(default_state_dir() / "daemon");
      return cmd_serve(std::move(serve_options));
    }
  } catch (const keval::supervisor::SandboxOptionError& e) {
    std::cerr << "keval: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    spdlog::critical("infrastructure failure: {}", e.what());
    json::object body;
    body["status"] = "failed";
    body["error"] = json::object{{"class", "infrastructure"}, {"message", e.what()}};
    print(body);
    return kExitInfrastructure;
  }
  std::cerr << "keval: bad command line\n" << kUsage;
  return kExitUsage;
}
