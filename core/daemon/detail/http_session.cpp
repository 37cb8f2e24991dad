#include "daemon/detail/http_session.hpp"

#include <array>
#include <optional>
#include <utility>
#include <vector>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/basic_stream.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

namespace keval::daemon::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

void SessionTracker::add(const std::shared_ptr<HttpSessionBase>& session) {
  std::lock_guard lock(mutex_);
  sessions_.emplace(session.get(), session);
}

void SessionTracker::remove(HttpSessionBase* session) {
  std::function<void()> on_empty;
  {
    std::lock_guard lock(mutex_);
    sessions_.erase(session);
    if (stopping_ && sessions_.empty())
      on_empty = std::exchange(on_empty_, nullptr);
  }
  if (on_empty)
    on_empty();
}

void SessionTracker::stop_all(std::function<void()> on_empty) {
  std::vector<std::shared_ptr<HttpSessionBase>> live;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    for (auto& [raw, weak] : sessions_)
      if (auto session = weak.lock())
        live.push_back(std::move(session));
    if (!sessions_.empty())
      on_empty_ = std::exchange(on_empty, nullptr);
  }
  if (on_empty) // there was none
    on_empty();
  for (auto& session : live)
    session->stop();
}

bool SessionTracker::stopping() const {
  std::lock_guard lock(mutex_);
  return stopping_;
}

void SessionTracker::abandon() {
  std::lock_guard lock(mutex_);
  on_empty_ = nullptr;
}

namespace {

// What a refused connection's client may still send, discarded, before it is closed anyway.
constexpr size_t kLingerBytes = 1 << 20;

template <class Protocol>
class HttpSession final : public HttpSessionBase,
                          public std::enable_shared_from_this<HttpSession<Protocol>> {
public:
  HttpSession(typename Protocol::socket socket, Api& api, SessionTracker& tracker,
              const HttpSettings& settings, SessionOptions options)
      : stream_(std::move(socket)), api_(api), tracker_(tracker), settings_(settings),
        options_(std::move(options)) {}

  ~HttpSession() override { tracker_.remove(this); }

  void run() {
    tracker_.add(this->shared_from_this());
    if (tracker_.stopping()) // accepted just as the daemon began to stop
      stopping_ = true;
    asio::dispatch(stream_.get_executor(), [self = this->shared_from_this()] { self->read(); });
  }

  void stop() override {
    asio::post(stream_.get_executor(), [self = this->shared_from_this()] {
      self->stopping_ = true;
      if (self->reading_ || self->discarding_)
        self->close();
    });
  }

private:
  void read() {
    if (stopping_)
      return close();
    parser_.emplace();
    parser_->body_limit(settings_.max_body_bytes);
    stream_.expires_after(settings_.io_timeout); // the whole request, however it arrives
    reading_ = true;
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    if (ec)
      return on_read(ec);
    const bool has_body = parser_->chunked() || parser_->content_length().value_or(0) > 0;
    std::optional<Refusal> refusal = options_.refusal;
    if (!refusal)
      refusal = check_request_header(parser_->get(), has_body, options_.rules);
    if (refusal) {
      reading_ = false;
      lingering_ = true;
      return write(api_.refused(refusal->status, refusal->error_class, refusal->message));
    }
    // curl asks before sending a body over 1 MiB, and waits a second for an answer otherwise.
    if (beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
      interim_.emplace(http::status::continue_, parser_->get().version());
      http::async_write(stream_, *interim_,
                        [self = this->shared_from_this()](beast::error_code write_ec, size_t) {
                          self->interim_.reset();
                          if (write_ec)
                            return self->close();
                          self->read_body();
                        });
      return;
    }
    read_body();
  }

  void read_body() {
    http::async_read(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    reading_ = false;
    if (ec == http::error::body_limit)
      return write(api_.payload_too_large());
    // A parse error (not end of stream, a timeout, or a broken connection) is the client's.
    if (ec && ec.category() == http::make_error_code(http::error::bad_target).category() &&
        ec != http::error::end_of_stream && ec != http::error::partial_message)
      return write(api_.malformed_http(ec.message()));
    if (ec)
      return close();
    stream_.expires_never(); // a synchronous job takes its own time; it has its own timeout
    api_.handle(parser_->release(), [self = this->shared_from_this()](HttpResponse response) {
      asio::post(self->stream_.get_executor(), [self, response = std::move(response)]() mutable {
        self->write(std::move(response));
      });
    });
  }

  void write(HttpResponse response) {
    response_.emplace(std::move(response));
    if (stopping_)
      response_->keep_alive(false);
    stream_.expires_after(settings_.io_timeout);
    http::async_write(stream_, *response_,
                      [self = this->shared_from_this()](beast::error_code ec, size_t) {
                        const bool again = !ec && self->response_->keep_alive();
                        self->response_.reset();
                        if (again)
                          self->read();
                        else if (!ec && self->lingering_)
                          self->linger();
                        else
                          self->close();
                      });
  }

  // After a refusal: no more writes, and what the client still sends (the body of the refused
  // request) is read and dropped until it closes, kLingerBytes or the timeout.
  void linger() {
    beast::error_code ignored;
    stream_.socket().shutdown(Protocol::socket::shutdown_send, ignored);
    stream_.expires_after(settings_.io_timeout);
    discarding_ = true;
    discard();
  }

  void discard() {
    stream_.async_read_some(asio::buffer(scratch_),
                            [self = this->shared_from_this()](beast::error_code ec, size_t n) {
                              self->discarded_ += n;
                              if (ec || self->discarded_ >= kLingerBytes)
                                return self->close();
                              self->discard();
                            });
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(Protocol::socket::shutdown_send, ignored);
    stream_.close();
  }

  beast::basic_stream<Protocol> stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<HttpResponse> response_;
  std::optional<http::response<http::empty_body>> interim_; // 100 Continue
  Api& api_;
  SessionTracker& tracker_;
  const HttpSettings& settings_;
  SessionOptions options_;
  std::array<char, 16 * 1024> scratch_{}; // what linger() discards passes through here
  size_t discarded_ = 0;
  bool lingering_ = false;  // a refusal is being written: linger, then close
  bool discarding_ = false; // lingering
  bool reading_ = false;
  bool stopping_ = false;
};

} // namespace

template <class Protocol>
void start_http_session(typename Protocol::socket socket, Api& api, SessionTracker& tracker,
                        const HttpSettings& settings, SessionOptions options) {
  std::make_shared<HttpSession<Protocol>>(std::move(socket), api, tracker, settings,
                                          std::move(options))
      ->run();
}

template void start_http_session<asio::local::stream_protocol>(asio::local::stream_protocol::socket,
                                                               Api&, SessionTracker&,
                                                               const HttpSettings&, SessionOptions);
template void start_http_session<asio::ip::tcp>(asio::ip::tcp::socket, Api&, SessionTracker&,
                                                const HttpSettings&, SessionOptions);

} // namespace keval::daemon::detail
