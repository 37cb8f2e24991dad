// Fuzz target: the daemon's HTTP request path without a listener. The input is what a client
// writes on a connection to the Unix socket; it goes through a socketpair into a real HTTP
// session (detail/http_session: Beast's parser, body limit, 100-continue, keep-alive) and the
// real Api (routing, request parsing and validation, the job manager). The job manager's queue
// holds nothing (max_queued 0), so a valid submission is answered 503 without starting a
// worker; with KEVAL_FUZZ_WORKER and KEVAL_FUZZ_PLUGIN_DIR set (scripts/fuzz sets them to the
// build's keval-worker and fault plugin) the registry knows kernel type "fault", so requests get
// past the registry check to the queue. Checked:
// - the session ends (answers, then closes when the client has closed) without a timeout;
// - what it wrote back is a sequence of complete HTTP responses, JSON ones valid JSON;
// - no 5xx other than 503 (a 500 is an exception nobody expected).
#include "daemon/api.hpp"
#include "daemon/detail/http_session.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/json/parse.hpp>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
namespace fs = std::filesystem;
using namespace keval::daemon;
using local = asio::local::stream_protocol;

[[noreturn]] void fail(const char* what, const std::string& detail = {}) {
  std::fprintf(stderr, "http_fuzzer: %s %s\n", what, detail.c_str());
  std::abort();
}

// One daemon's worth of objects, built once for the whole run.
struct Daemon {
  fs::path state_dir;
  asio::io_context ioc;
  keval::registry::Registry registry;
  DevicePool devices{ioc.get_executor(), {}};
  std::unique_ptr<JobManager> jobs;
  std::unique_ptr<Api> api;
  detail::SessionTracker tracker;
  detail::HttpSettings settings;

  Daemon() {
    std::string dir = (fs::temp_directory_path() / "keval-http-fuzzer-XXXXXX").string();
    if (::mkdtemp(dir.data()) == nullptr)
      fail("mkdtemp failed");
    state_dir = dir;
    const char* worker = std::getenv("KEVAL_FUZZ_WORKER");
    const char* plugins = std::getenv("KEVAL_FUZZ_PLUGIN_DIR");
    if (worker != nullptr && plugins != nullptr) {
      registry = keval::registry::Registry::discover({plugins}, worker);
      std::fprintf(stderr, "http_fuzzer: kernel types from %s:", plugins);
      for (const auto& type : registry.kernel_types())
        std::fprintf(stderr, " %s", type.c_str());
      std::fprintf(stderr, "\n");
    } else {
      std::fprintf(stderr, "http_fuzzer: KEVAL_FUZZ_WORKER / KEVAL_FUZZ_PLUGIN_DIR not set: no "
                           "kernel type is known, every submission stops at the registry check\n");
    }
    JobManagerConfig config;
    config.worker_exe = worker != nullptr ? worker : "/nonexistent/keval-worker";
    config.state_dir = state_dir;
    config.max_queued = 0; // never a worker: valid submissions are refused (503)
    config.max_running = 1;
    jobs = std::make_unique<JobManager>(ioc.get_executor(), registry, devices, config);
    api = std::make_unique<Api>(*jobs, registry, devices, DeviceDiscovery{{}, "fuzzing"},
                                ApiConfig{});
  }
  ~Daemon() {
    api.reset();
    jobs.reset();
    std::error_code ec;
    fs::remove_all(state_dir, ec);
  }
};

Daemon* daemon_state = nullptr;

// Runs the session on `input` and returns everything it wrote back.
std::string converse(std::string_view input) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    fail("socketpair failed");
  const int client = fds[1];
  ::fcntl(client, F_SETFL, ::fcntl(client, F_GETFL) | O_NONBLOCK);
  Daemon& d = *daemon_state;
  detail::start_http_session<local>(local::socket(d.ioc, local(), fds[0]), *d.api, d.tracker,
                                    d.settings);

  std::string received;
  size_t written = 0;
  bool write_closed = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    bool progress = false;
    if (!write_closed) {
      if (written < input.size()) {
        const ssize_t n =
            ::send(client, input.data() + written, input.size() - written, MSG_NOSIGNAL);
        if (n > 0) {
          written += static_cast<size_t>(n);
          progress = true;
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
          write_closed = true; // the session closed early (an error answer): fine
        }
      }
      if (written == input.size() && !write_closed) {
        ::shutdown(client, SHUT_WR);
        write_closed = true;
        progress = true;
      }
    }
    char buffer[16384];
    const ssize_t n = ::recv(client, buffer, sizeof buffer, 0);
    if (n > 0) {
      received.append(buffer, static_cast<size_t>(n));
      progress = true;
    } else if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      break; // the session closed the connection
    }
    d.ioc.restart();
    if (d.ioc.poll() > 0)
      progress = true;
    if (!progress) {
      if (std::chrono::steady_clock::now() > deadline)
        fail("the session neither answered nor closed within 10 s");
      d.ioc.restart();
      d.ioc.run_one_for(std::chrono::milliseconds(5));
    }
  }
  ::close(client);
  d.ioc.restart();
  d.ioc.poll(); // the session's last handlers: it is destroyed here
  return received;
}

// KEVAL_FUZZ_SHOW=1 prints each response's status line and body (writing seeds).
const bool show_responses = std::getenv("KEVAL_FUZZ_SHOW") != nullptr;

void check_responses(std::string_view bytes) {
  while (!bytes.empty()) {
    http::response_parser<http::string_body> parser;
    parser.eager(true);
    parser.body_limit(64ull << 20);
    boost::beast::error_code ec;
    const size_t used = parser.put(asio::buffer(bytes.data(), bytes.size()), ec);
    if (!ec && !parser.is_done())
      parser.put_eof(ec);
    if (ec || !parser.is_done())
      fail("the session wrote something that is not a complete HTTP response:",
           ec.message() + ": " + std::string(bytes.substr(0, 200)));
    const auto& response = parser.get();
    const unsigned status = response.result_int();
    if (show_responses)
      std::fprintf(stderr, "  %u %s\n", status, response.body().substr(0, 160).c_str());
    if (status >= 500 && status != 503)
      fail("a 5xx other than 503:", response.body().substr(0, 400));
    if (boost::beast::iequals(response[http::field::content_type], "application/json")) {
      boost::json::error_code json_ec;
      (void)boost::json::parse(response.body(), json_ec);
      if (json_ec)
        fail("a JSON response whose body is not JSON:", response.body().substr(0, 400));
    }
    bytes.remove_prefix(used);
  }
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off); // the Api logs every 500; the checks report those
  static Daemon daemon;
  daemon_state = &daemon;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string reply = converse(std::string_view(reinterpret_cast<const char*>(data), size));
  check_responses(reply);
  return 0;
}
