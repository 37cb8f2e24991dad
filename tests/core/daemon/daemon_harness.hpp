// What the daemon tests share: a real `keval serve` process (its own state directory and
// socket, the fault plugin), an HTTP/1.1 client over its Unix socket (keep-alive, every
// operation bounded by a timeout), and bounded polling for conditions.
#pragma once

#include "support/test_env.hpp"

#include <chrono>
#include <csignal>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/beast/core/basic_stream.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace keval::test::daemon {

namespace fs = std::filesystem;
namespace http = boost::beast::http;
namespace json = boost::json;
using namespace std::chrono_literals;

// Polls `condition` until it holds or `limit` passes; true when it held. The pause between
// polls grows from 5 to 100 ms: a poll, not a guess at how long something takes.
template <class Condition>
bool eventually(Condition condition, std::chrono::milliseconds limit = 60s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (auto pause = 5ms;; pause = std::min<std::chrono::milliseconds>(pause * 2, 100ms)) {
    if (condition())
      return true;
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(pause);
  }
}

struct HttpResult {
  unsigned status = 0;
  http::response<http::string_body> message;
  const std::string& body() const { return message.body(); }
  std::string header(const std::string& name) const {
    auto it = message.find(name);
    return it == message.end() ? std::string() : std::string(it->value());
  }
  json::object json_body() const {
    auto value = json::parse(message.body());
    if (!value.is_object())
      throw std::runtime_error("response body is not a JSON object: " + message.body());
    return value.as_object();
  }
};

// One keep-alive connection to the daemon's Unix socket. Throws std::runtime_error when the
// daemon cannot be reached or does not answer within the timeout.
class HttpClient {
public:
  explicit HttpClient(const fs::path& socket, std::chrono::seconds timeout = 180s)
      : stream_(ioc_), timeout_(timeout) {
    boost::beast::error_code result;
    stream_.expires_after(timeout_);
    stream_.async_connect(boost::asio::local::stream_protocol::endpoint(socket.string()),
                          [&](boost::beast::error_code ec) { result = ec; });
    ioc_.run();
    if (result)
      throw std::runtime_error("connecting to " + socket.string() + ": " + result.message());
  }

  HttpResult request(http::verb verb, const std::string& target, const std::string& body = {},
                     const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    http::request<http::string_body> req{verb, target, 11};
    req.set(http::field::host, "localhost");
    for (const auto& [name, value] : headers)
      req.set(name, value);
    if (!body.empty()) {
      req.set(http::field::content_type, "application/json");
      req.body() = body;
    }
    req.prepare_payload();
    boost::beast::error_code write_error, read_error;
    stream_.expires_after(timeout_);
    http::async_write(stream_, req, [&](boost::beast::error_code ec, size_t) { write_error = ec; });
    ioc_.restart();
    ioc_.run();
    // A server that refuses a body early (413) may close before it has read all of it: its
    // answer is still there to read.
    HttpResult result;
    http::response_parser<http::string_body> parser;
    parser.body_limit(1ull << 30);
    stream_.expires_after(timeout_);
    http::async_read(stream_, buffer_, parser,
                     [&](boost::beast::error_code ec, size_t) { read_error = ec; });
    ioc_.restart();
    ioc_.run();
    if (read_error)
      throw std::runtime_error(std::string(http::to_string(verb)) + " " + target + ": " +
                               (write_error ? "write: " + write_error.message() + ", " : "") +
                               "read: " + read_error.message());
    result.message = parser.release();
    result.status = result.message.result_int();
    return result;
  }

  HttpResult get(const std::string& target) { return request(http::verb::get, target); }
  HttpResult post(const std::string& target, const json::object& body,
                  const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    return request(http::verb::post, target, json::serialize(body), headers);
  }

  // POSTs as curl does for bodies over 1 MiB: the headers with "Expect: 100-continue", then the
  // body only once the server has answered. Returns the interim status and the response.
  std::pair<unsigned, HttpResult> post_expecting_continue(const std::string& target,
                                                          const json::object& body) {
    http::request<http::string_body> req{http::verb::post, target, 11};
    req.set(http::field::host, "localhost");
    req.set(http::field::expect, "100-continue");
    req.body() = json::serialize(body);
    req.prepare_payload();
    http::request_serializer<http::string_body> serializer(req);
    run("write header", [&](auto done) { http::async_write_header(stream_, serializer, done); });
    http::response_parser<http::empty_body> interim;
    run("read interim", [&](auto done) { http::async_read(stream_, buffer_, interim, done); });
    run("write body", [&](auto done) { http::async_write(stream_, serializer, done); });
    http::response_parser<http::string_body> parser;
    run("read", [&](auto done) { http::async_read(stream_, buffer_, parser, done); });
    HttpResult result;
    result.message = parser.release();
    result.status = result.message.result_int();
    return {interim.get().result_int(), std::move(result)};
  }

private:
  // Runs one asynchronous operation to its end (or the timeout); throws on failure.
  template <class Start> void run(const char* what, Start start) {
    boost::beast::error_code result;
    stream_.expires_after(timeout_);
    start([&](boost::beast::error_code ec, size_t) { result = ec; });
    ioc_.restart();
    ioc_.run();
    if (result)
      throw std::runtime_error(std::string(what) + ": " + result.message());
  }

  boost::asio::io_context ioc_;
  boost::beast::basic_stream<boost::asio::local::stream_protocol> stream_;
  boost::beast::flat_buffer buffer_;
  std::chrono::seconds timeout_;
};

// A `keval serve` process with the fault plugin, its state in `state_dir`, its socket at
// `socket`, stdout and stderr in `log_path`. Killed (SIGKILL) by the destructor if still running.
class DaemonProcess {
public:
  DaemonProcess(fs::path state_dir, fs::path socket, std::vector<std::string> extra_args = {},
                std::vector<std::string> extra_env = {})
      : state_dir_(std::move(state_dir)), socket_(std::move(socket)),
        log_path_(state_dir_.parent_path() / (state_dir_.filename().string() + ".log")) {
    std::vector<std::string> args{keval_exe().string(), "serve",    "--state-dir",
                                  state_dir_.string(),  "--socket", socket_.string(),
                                  "--log-level",        "debug"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    std::vector<std::string> env{"KEVAL_PLUGIN_PATH=" + test_plugin_dir().string()};
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry(*e);
      const std::string name = entry.substr(0, entry.find('='));
      bool overridden = false;
      for (const auto& mine : env)
        overridden = overridden || mine.compare(0, name.size() + 1, name + "=") == 0;
      if (!overridden)
        env.push_back(entry);
    }
    std::vector<char*> argv, envp;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env)
      envp.push_back(e.data());
    envp.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                     0600);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    // Its own process group, so teardown reaches anything it left (its workers have their own
    // groups and die with it).
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attributes, 0);
    const int rc = ::posix_spawn(&pid_, argv[0], &actions, &attributes, argv.data(), envp.data());
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0)
      throw std::runtime_error("cannot start " + args[0]);
  }

  ~DaemonProcess() {
    if (pid_ <= 0)
      return;
    ::kill(-pid_, SIGKILL);
    if (!exit_status_)
      ::waitpid(pid_, nullptr, 0);
  }

  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  pid_t pid() const { return pid_; }
  const fs::path& socket() const { return socket_; }
  std::string log() const {
    std::ifstream in(log_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // The last `bytes` of the log: for failures after many jobs, where the whole log is long.
  std::string log_tail(size_t bytes = 16 * 1024) const {
    const std::string whole = log();
    return whole.size() <= bytes ? whole : "[...]" + whole.substr(whole.size() - bytes);
  }

  // True once /health answers; false when the daemon exited or did not answer in time.
  bool wait_ready(std::chrono::milliseconds limit = 120s) {
    return eventually(
               [&] {
                 if (exited())
                   return true;
                 try {
                   return HttpClient(socket_, 10s).get("/health").status == 200;
                 } catch (const std::exception&) {
                   return false;
                 }
               },
               limit) &&
           !exited();
  }

  // True when the process has ended (reaped).
  bool exited() {
    if (exit_status_)
      return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_)
      exit_status_ = status;
    return exit_status_.has_value();
  }

  // Waits for the exit; the wait status (for WIFEXITED & co.), or nullopt after `limit`.
  std::optional<int> wait_exit(std::chrono::milliseconds limit = 120s) {
    eventually([&] { return exited(); }, limit);
    return exit_status_;
  }

  void signal(int signal_number) { ::kill(pid_, signal_number); }

  // Kills the daemon as a crash would (no shutdown) and reaps it.
  void crash() {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    exit_status_ = status;
  }

private:
  fs::path state_dir_;
  fs::path socket_;
  fs::path log_path_;
  pid_t pid_ = -1;
  std::optional<int> exit_status_;
};

// A temporary directory with a daemon's usual places in it.
struct DaemonDirs {
  TempDir tmp;
  fs::path state() const { return tmp.path() / "state"; }
  fs::path socket() const { return tmp.path() / "keval.sock"; }
};

// Polls GET /jobs/{id} until the job has finished; its view.
inline json::object wait_finished(const fs::path& socket, const std::string& job_id,
                                  std::chrono::milliseconds limit = 120s) {
  json::object view;
  const bool finished = eventually(
      [&] {
        view = HttpClient(socket).get("/jobs/" + job_id).json_body();
        const auto& status = view.at("status").as_string();
        return status == "completed" || status == "failed";
      },
      limit);
  if (!finished)
    throw std::runtime_error("job " + job_id + " did not finish: " + json::serialize(view));
  return view;
}

// Polls GET /jobs/{id} until its status is `status`.
inline bool wait_status(const fs::path& socket, const std::string& job_id,
                        const std::string& status, std::chrono::milliseconds limit = 120s) {
  return eventually(
      [&] {
        const auto view = HttpClient(socket).get("/jobs/" + job_id).json_body();
        return view.at("status").as_string() == status;
      },
      limit);
}

inline json::object with_async(json::object request) {
  request["async"] = true;
  return request;
}

inline json::object hang(const char* fault = "hang_in_launch", double timeout_s = 600) {
  return fault_evaluate(json::object{{"fault", fault}}, timeout_s);
}

} // namespace keval::test::daemon
