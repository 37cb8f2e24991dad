#include "daemon/serve.hpp"

#include "common/log.hpp"
#include "common/version.hpp"
#include "daemon/api.hpp"
#include "daemon/detail/connection_slots.hpp"
#include "daemon/detail/http_session.hpp"
#include "daemon/detail/listener.hpp"
#include "daemon/detail/state_lock.hpp"
#include "daemon/detail/tcp_token.hpp"
#include "daemon/detail/unix_socket.hpp"
#include "daemon/device_discovery.hpp"
#include "daemon/device_pool.hpp"
#include "daemon/device_verifiers.hpp"
#include "daemon/driver_hold.hpp"
#include "daemon/job_manager.hpp"
#include "protocol/frame.hpp"
#include "registry/registry.hpp"
#include "supervisor/orphan_reaper.hpp"
#include "supervisor/warm_pool.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <optional>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/json/serialize.hpp>
#include <sys/resource.h>

namespace keval::daemon {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using local = asio::local::stream_protocol;

namespace {

size_t cpu_cores() {
  return std::max<size_t>(1, std::thread::hardware_concurrency());
}

// "127.0.0.1:8000", "localhost:8000", "[::1]:8000". Loopback only unless `allow_remote`: the API
// runs code it is sent, so exposing it must be a decision.
tcp::endpoint parse_listen(const std::string& text, bool allow_remote) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    throw ServeOptionError("--listen wants HOST:PORT, got '" + text + "'");
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (host == "localhost")
    host = "127.0.0.1";
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec)
    throw ServeOptionError("--listen: '" + host + "' is not an IP address");
  const std::string port_text = text.substr(colon + 1);
  if (port_text.find_first_not_of("0123456789") != std::string::npos || port_text.size() > 5 ||
      std::stoul(port_text) > 65535)
    throw ServeOptionError("--listen: '" + port_text + "' is not a port number");
  if (!address.is_loopback() && !allow_remote)
    throw ServeOptionError("--listen " + text +
                           " is not a loopback address: anyone who can reach it could run code "
                           "on this machine; add --allow-remote to mean it");
  return tcp::endpoint(address, static_cast<unsigned short>(std::stoul(port_text)));
}

// Descriptors the daemon needs besides its connections: the listeners, the state lock, logs and
// libraries, and per worker (running or prestarted) its channel, its pipes and its process fd.
constexpr size_t kBaseDescriptors = 256;
constexpr size_t kDescriptorsPerWorker = 16;
// Prestarted workers are kept for at most this many prewarm sets (supervisor/warm_pool).
constexpr size_t kWarmSets = 4;

// Raises the soft RLIMIT_NOFILE so that `needed` descriptors fit (never above the hard limit,
// never lowered); what it did, for the log. Throws ServeOptionError when the hard limit is lower.
std::string fit_descriptor_limit(size_t needed, size_t max_connections) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0)
    throw std::runtime_error(std::string("getrlimit(RLIMIT_NOFILE): ") + std::strerror(errno));
  const rlim_t wanted = static_cast<rlim_t>(needed);
  if (limit.rlim_max != RLIM_INFINITY && limit.rlim_max < wanted)
    throw ServeOptionError(
        "--max-connections " + std::to_string(max_connections) + " needs " +
        std::to_string(needed) + " open files, more than this process's hard limit of " +
        std::to_string(limit.rlim_max) +
        " (RLIMIT_NOFILE); lower --max-connections or raise the limit (ulimit -Hn, LimitNOFILE=)");
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur >= wanted)
    return "open-file limit " + std::to_string(limit.rlim_cur) + " fits " + std::to_string(needed);
  const rlim_t before = limit.rlim_cur;
  limit.rlim_cur = wanted;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0)
    throw std::runtime_error(std::string("setrlimit(RLIMIT_NOFILE): ") + std::strerror(errno));
  return "open-file limit raised from " + std::to_string(before) + " to " + std::to_string(needed) +
         " (hard limit " +
         (limit.rlim_max == RLIM_INFINITY ? std::string("unlimited")
                                          : std::to_string(limit.rlim_max)) +
         ")";
}

// Handlers that throw must not end the daemon: log and keep serving.
void run_event_loop(asio::io_context& ioc) {
  for (;;) {
    try {
      ioc.run();
      return;
    } catch (const std::exception& e) {
      spdlog::error("unexpected exception in the event loop: {}", e.what());
    }
  }
}

// The sandbox every job's runners get, probed once so the log says what this machine applies;
// with --sandbox strict a missing layer stops the daemon here rather than failing every job.
protocol::SandboxPolicy start_sandbox(const ServeOptions& options) {
  protocol::SandboxPolicy policy;
  try {
    policy = supervisor::prepare_host_sandbox(options.sandbox, options.state_dir);
  } catch (const supervisor::SandboxOptionError& e) {
    throw ServeOptionError(e.what());
  }
  const boost::json::object report = supervisor::probe_sandbox(options.worker_exe, policy);
  const std::string summary = supervisor::describe_sandbox(report);
  const auto* skipped = report.if_contains("skipped");
  const bool complete = !report.contains("error") && skipped != nullptr && skipped->is_object() &&
                        skipped->as_object().empty();
  if (policy.mode == protocol::SandboxMode::strict && !complete)
    throw std::runtime_error("--sandbox strict, and this machine cannot apply every layer: " +
                             summary);
  if (policy.mode == protocol::SandboxMode::off)
    spdlog::warn("sandbox {} (--sandbox off: for debugging only; every result says so)", summary);
  else if (complete)
    spdlog::info("sandbox {}", summary);
  else
    spdlog::warn("sandbox {}", summary);
  return policy;
}

} // namespace

int serve(const ServeOptions& options) {
  if (options.max_connections == 0)
    throw ServeOptionError("--max-connections must be at least 1");
  if (options.max_body_bytes > protocol::kMaxRequestInJobFrame)
    throw ServeOptionError("--max-body-bytes may be at most " +
                           std::to_string(protocol::kMaxRequestInJobFrame) +
                           " (a request travels to its worker in one frame)");
  // Peers that vanish mid-response must cost a write error, not the process (workers restore the
  // default disposition before exec).
  std::signal(SIGPIPE, SIG_IGN);
  const std::optional<tcp::endpoint> tcp_endpoint =
      options.listen.empty() ? std::nullopt
                             : std::optional(parse_listen(options.listen, options.allow_remote));
  std::optional<gid_t> group;
  if (!options.socket_group.empty()) {
    try {
      group = detail::group_id(options.socket_group);
    } catch (const std::exception& e) {
      throw ServeOptionError(std::string("--socket-group: ") + e.what());
    }
  }
  const detail::StateLock state_lock(options.state_dir);
  // A worker's leftovers (setsid, double forks) come to us rather than to init once it dies, and
  // die with the next job that ends (supervisor/orphan_reaper.hpp).
  supervisor::become_child_subreaper();

  const auto registry = registry::Registry::discover(options.plugin_dirs, options.worker_exe);
  for (const auto& plugin : registry.plugins())
    if (!plugin.usable())
      spdlog::warn("plugin {} not loaded: {}", plugin.path.string(), plugin.error);
  DeviceDiscovery discovery = discover_devices(options.worker_exe);
  for (const auto& gpu : discovery.gpus)
    spdlog::info("GPU {}: {} ({}, sm_{}, {} MiB)", gpu.index, gpu.name, gpu.gpu_type, gpu.arch,
                 gpu.memory_bytes >> 20);
  if (discovery.gpus.empty())
    spdlog::warn("no GPU: {}; CPU-mode kernel types only", discovery.reason);
  // Outlives everything that reports it (the Api); ended as serve returns.
  const DriverHold driver = discovery.gpus.empty() ? DriverHold::none("no GPU")
                            : options.hold_driver  ? DriverHold(options.worker_exe)
                                                   : DriverHold::none("--no-driver-hold");
  if (const boost::json::object status = driver.status(); status.at("held").as_bool())
    spdlog::info("the CUDA driver is held initialised: {}", boost::json::serialize(status));
  else if (!discovery.gpus.empty())
    spdlog::warn("the CUDA driver is not held ({}): a worker's cuInit redoes the machine's "
                 "initialisation whenever no other process holds it",
                 boost::json::serialize(status.at("reason")));

  // After the driver hold, whose cuInit they then find done.
  std::vector<int> ordinals;
  for (const auto& gpu : discovery.gpus)
    ordinals.push_back(gpu.index);
  const std::unique_ptr<DeviceVerifiers> verifiers =
      !options.device_verifier ? DeviceVerifiers::none("not asked for (--device-verifier)")
      : ordinals.empty()       ? DeviceVerifiers::none("no GPU")
                               : std::make_unique<DeviceVerifiers>(options.worker_exe, ordinals);

  // Two event loops. Jobs run on one thread: Boost.Process forks with notify_fork on the workers'
  // io_context, which must not race with other threads using that context. HTTP runs on a pool.
  // Declaration order is destruction order reversed: the session tracker outlives both loops,
  // the HTTP loop outlives the job loop (jobs hold replies for HTTP sessions).
  // Sessions hold their connection's place: the slots outlive the HTTP loop too.
  const size_t refusing_places =
      detail::ConnectionSlots::refusing_places_for(options.max_connections);
  detail::ConnectionSlots connection_slots(options.max_connections, refusing_places);
  detail::SessionTracker sessions;
  asio::io_context http_ioc;
  asio::io_context jobs_ioc(1);
  DevicePool devices(jobs_ioc.get_executor(), discovery.gpus, options.jobs_per_gpu);
  JobManagerConfig job_config;
  job_config.worker_exe = options.worker_exe;
  job_config.sandbox = start_sandbox(options);
  job_config.state_dir = options.state_dir;
  job_config.max_queued = options.max_queued;
  job_config.max_running = options.max_workers != 0
                               ? options.max_workers
                               : std::max<size_t>(2, cpu_cores() + discovery.gpus.size());
  job_config.job_ttl = options.job_ttl;
  job_config.state_max_bytes = options.state_max_bytes;
  job_config.warm_workers = options.warm_workers;
  job_config.verifiers = verifiers.get();
  job_config.warm_workers_max = options.warm_workers_max.value_or(
      supervisor::WarmPool::default_max_size(options.warm_workers, cpu_cores()));
  job_config.warm_workers_total = options.warm_workers_total.value_or(
      supervisor::WarmPool::default_max_total(job_config.warm_workers_max));
  const auto& plugins = registry.plugins();
  if (std::none_of(plugins.begin(), plugins.end(),
                   [](const auto& plugin) { return plugin.usable() && plugin.prewarm; }))
    job_config.warm_workers = 0; // nothing to prewarm: a fresh worker starts as fast
  const std::string descriptors = fit_descriptor_limit(
      options.max_connections + refusing_places + kBaseDescriptors +
          kDescriptorsPerWorker *
              (job_config.max_running +
               kWarmSets * std::max(job_config.warm_workers, job_config.warm_workers_max)),
      options.max_connections);
  std::string token;
  std::filesystem::path token_file = options.token_file;
  if (tcp_endpoint) {
    if (token_file.empty())
      token_file = options.state_dir / "keys" / "tcp.token";
    token_file = std::filesystem::absolute(token_file);
    token = detail::load_or_create_token(token_file);
  }
  JobManager jobs(jobs_ioc.get_executor(), registry, devices, job_config);
  jobs.recover();

  ApiConfig api_config;
  api_config.limits.max_request_bytes = options.max_body_bytes;
  api_config.max_body_bytes = options.max_body_bytes;
  api_config.connection_stats = [&connection_slots] { return connection_slots.stats(); };
  api_config.driver_status = [&driver] { return driver.status(); };
  api_config.verifier_status = [&verifiers] { return verifiers->status(); };
  Api api(jobs, registry, devices, std::move(discovery), api_config);
  const detail::HttpSettings http{options.max_body_bytes, options.http_timeout};

  std::vector<std::shared_ptr<detail::Listener>> listeners;
  local::acceptor unix_acceptor(asio::make_strand(http_ioc));
  const detail::SocketFile socket_file =
      detail::bind_unix_socket(unix_acceptor, options.socket_path, group);
  // The Unix socket: its mode and the peer's ancestry guard it (peer_check.hpp).
  listeners.push_back(detail::start_listener<local>(http_ioc, std::move(unix_acceptor), api,
                                                    sessions, http, connection_slots,
                                                    detail::RequestRules{}));
  std::string where = "unix:" + options.socket_path.string();
  if (tcp_endpoint) {
    tcp::acceptor tcp_acceptor(asio::make_strand(http_ioc));
    detail::open_acceptor(tcp_acceptor, tcp_endpoint->protocol());
    tcp_acceptor.set_option(asio::socket_base::reuse_address(true));
    tcp_acceptor.bind(*tcp_endpoint);
    tcp_acceptor.listen();
    const auto bound = tcp_acceptor.local_endpoint();
    where += " and tcp:" + bound.address().to_string() + ":" + std::to_string(bound.port());
    detail::RequestRules tcp_rules;
    tcp_rules.bearer_token = token;
    tcp_rules.json_bodies_only = true;
    listeners.push_back(detail::start_listener<tcp>(http_ioc, std::move(tcp_acceptor), api,
                                                    sessions, http, connection_slots,
                                                    std::move(tcp_rules)));
    spdlog::info("TCP clients must send 'Authorization: Bearer <token>' with the token in {}",
                 token_file.string());
  }
  spdlog::info("connections: at most {} at once, then 503; {}", options.max_connections,
               descriptors);
  spdlog::info("keval {} serving on {} (plugins: {}; workers: {}; state: {})", kVersion, where,
               registry.kernel_types().size(), job_config.max_running, options.state_dir.string());

  // First signal: stop accepting, let running jobs finish (within the grace period), answer
  // their clients, close the connections, stop. Second signal: cancel the running jobs now.
  asio::signal_set signals(http_ioc, SIGINT, SIGTERM);
  asio::steady_timer close_deadline(http_ioc);
  auto stop_loops = [&] {
    http_ioc.stop();
    jobs_ioc.stop();
  };
  int signals_seen = 0;
  std::function<void(boost::system::error_code, int)> on_signal = [&](boost::system::error_code ec,
                                                                      int signal_number) {
    if (ec)
      return;
    if (++signals_seen == 1) {
      spdlog::info("{}: no new connections; running jobs have {} s to finish",
                   ::strsignal(signal_number), options.shutdown_grace.count() / 1000.0);
      for (auto& listener : listeners)
        listener->stop();
      detail::remove_socket_file(socket_file);
      jobs.shutdown(options.shutdown_grace, [&] {
        asio::post(http_ioc, [&] {
          // Every job has answered its waiting client; give the writes their timeout.
          close_deadline.expires_after(options.http_timeout);
          close_deadline.async_wait([&](boost::system::error_code wait_ec) {
            if (!wait_ec)
              stop_loops();
          });
          sessions.stop_all(stop_loops);
        });
      });
    } else {
      spdlog::warn("{} again: cancelling the running jobs", ::strsignal(signal_number));
      jobs.cancel_running();
    }
    signals.async_wait(on_signal);
  };
  signals.async_wait(on_signal);

  // The job loop waits for work even when no job runs; it stops with the HTTP loop.
  auto jobs_work = asio::make_work_guard(jobs_ioc);
  std::thread jobs_thread([&jobs_ioc] { run_event_loop(jobs_ioc); });
  const size_t http_threads =
      options.threads != 0 ? options.threads : std::max<size_t>(2, cpu_cores());
  std::vector<std::thread> threads;
  for (size_t i = 1; i < http_threads; ++i)
    threads.emplace_back([&http_ioc] { run_event_loop(http_ioc); });
  run_event_loop(http_ioc);
  for (auto& thread : threads)
    thread.join();
  jobs_thread.join();
  sessions.abandon();
  supervisor::reap_orphans();
  spdlog::info("keval daemon stopped");
  return 0;
}

} // namespace keval::daemon
