#include "support/daemon_harness.hpp"

#include <strings.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/beast/core/basic_stream.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <fcntl.h>
#include <spawn.h>

extern char** environ;

namespace keval::test::daemon {

namespace http = boost::beast::http;

// ---- HttpResult -------------------------------------------------------------------------------

std::string HttpResult::header(const std::string& name) const {
  for (const auto& [key, value] : headers)
    if (::strcasecmp(key.c_str(), name.c_str()) == 0)
      return value;
  return {};
}

json::object HttpResult::json_body() const {
  auto value = json::parse(text);
  if (!value.is_object())
    throw std::runtime_error("response body is not a JSON object: " + text);
  return value.as_object();
}

// ---- HttpClient -------------------------------------------------------------------------------

namespace {

HttpResult result_of(http::response<http::string_body> message) {
  HttpResult result;
  result.status = message.result_int();
  for (const auto& field : message)
    result.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  result.text = std::move(message.body());
  return result;
}

} // namespace

struct HttpClient::Connection {
  explicit Connection(std::chrono::seconds timeout) : stream(ioc), timeout(timeout) {}

  // Runs one asynchronous operation to its end (or the timeout); its error.
  template <class Start> boost::beast::error_code run(Start start) {
    boost::beast::error_code result;
    stream.expires_after(timeout);
    start([&](boost::beast::error_code ec, size_t = 0) { result = ec; });
    ioc.restart();
    ioc.run();
    return result;
  }
  // As run(), throwing on failure.
  template <class Start> void run_or_throw(const char* what, Start start) {
    if (const auto ec = run(start))
      throw std::runtime_error(std::string(what) + ": " + ec.message());
  }

  boost::asio::io_context ioc;
  boost::beast::basic_stream<boost::asio::local::stream_protocol> stream;
  boost::beast::flat_buffer buffer;
  std::chrono::seconds timeout;
};

HttpClient::HttpClient(const fs::path& socket, std::chrono::seconds timeout)
    : connection_(std::make_unique<Connection>(timeout)) {
  const auto ec = connection_->run([&](auto done) {
    connection_->stream.async_connect(
        boost::asio::local::stream_protocol::endpoint(socket.string()),
        [done](boost::beast::error_code ec) mutable { done(ec); });
  });
  if (ec)
    throw std::runtime_error("connecting to " + socket.string() + ": " + ec.message());
}

HttpClient::~HttpClient() = default;

HttpResult HttpClient::request(const std::string& method, const std::string& target,
                               const std::string& body,
                               const std::vector<std::pair<std::string, std::string>>& headers) {
  const http::verb verb = http::string_to_verb(method);
  if (verb == http::verb::unknown)
    throw std::invalid_argument("unknown HTTP method " + method);
  http::request<http::string_body> req{verb, target, 11};
  req.set(http::field::host, "localhost");
  for (const auto& [name, value] : headers)
    req.set(name, value);
  if (!body.empty()) {
    req.set(http::field::content_type, "application/json");
    req.body() = body;
  }
  req.prepare_payload();
  Connection& c = *connection_;
  const auto write_error =
      c.run([&](auto done) { http::async_write(c.stream, req, std::move(done)); });
  // A server that refuses a body early (413) may close before it has read all of it: its
  // answer is still there to read.
  http::response_parser<http::string_body> parser;
  parser.body_limit(1ull << 30);
  const auto read_error =
      c.run([&](auto done) { http::async_read(c.stream, c.buffer, parser, std::move(done)); });
  if (read_error)
    throw std::runtime_error(method + " " + target + ": " +
                             (write_error ? "write: " + write_error.message() + ", " : "") +
                             "read: " + read_error.message());
  return result_of(parser.release());
}

std::pair<unsigned, HttpResult> HttpClient::post_expecting_continue(const std::string& target,
                                                                    const json::object& body) {
  http::request<http::string_body> req{http::verb::post, target, 11};
  req.set(http::field::host, "localhost");
  req.set(http::field::expect, "100-continue");
  req.body() = json::serialize(body);
  req.prepare_payload();
  http::request_serializer<http::string_body> serializer(req);
  Connection& c = *connection_;
  c.run_or_throw("write header", [&](auto done) {
    http::async_write_header(c.stream, serializer, std::move(done));
  });
  http::response_parser<http::empty_body> interim;
  c.run_or_throw("read interim", [&](auto done) {
    http::async_read(c.stream, c.buffer, interim, std::move(done));
  });
  c.run_or_throw("write body",
                 [&](auto done) { http::async_write(c.stream, serializer, std::move(done)); });
  http::response_parser<http::string_body> parser;
  c.run_or_throw("read",
                 [&](auto done) { http::async_read(c.stream, c.buffer, parser, std::move(done)); });
  return {interim.get().result_int(), result_of(parser.release())};
}

// ---- DaemonProcess ----------------------------------------------------------------------------

DaemonProcess::DaemonProcess(fs::path state_dir, fs::path socket,
                             std::vector<std::string> extra_args,
                             std::vector<std::string> extra_env)
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

DaemonProcess::~DaemonProcess() {
  if (pid_ <= 0)
    return;
  ::kill(-pid_, SIGKILL);
  if (!exit_status_)
    ::waitpid(pid_, nullptr, 0);
}

std::string DaemonProcess::log() const {
  return read_file(log_path_);
}

std::string DaemonProcess::log_tail(size_t bytes) const {
  const std::string whole = log();
  return whole.size() <= bytes ? whole : "[...]" + whole.substr(whole.size() - bytes);
}

bool DaemonProcess::wait_ready(std::chrono::milliseconds limit) {
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

bool DaemonProcess::exited() {
  if (exit_status_)
    return true;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_)
    exit_status_ = status;
  return exit_status_.has_value();
}

std::optional<int> DaemonProcess::wait_exit(std::chrono::milliseconds limit) {
  eventually([&] { return exited(); }, limit);
  return exit_status_;
}

void DaemonProcess::signal(int signal_number) {
  ::kill(pid_, signal_number);
}

void DaemonProcess::crash() {
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  exit_status_ = status;
}

} // namespace keval::test::daemon
