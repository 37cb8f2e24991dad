#include "daemon/detail/listener.hpp"

#include "common/log.hpp"
#include "daemon/detail/peer_check.hpp"

#include <cerrno>
#include <type_traits>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <sys/socket.h>
#include <unistd.h>

namespace keval::daemon::detail {

namespace asio = boost::asio;

namespace {

// After a failed accept (out of descriptors, most likely) wait a little rather than spin.
constexpr auto kAcceptRetryDelay = std::chrono::milliseconds(100);

// accept(2) outcomes that concern only the connection that was being accepted.
bool connection_error(int error) {
  return error == EAGAIN || error == EWOULDBLOCK || error == EINTR || error == ECONNABORTED ||
         error == EPROTO;
}

template <class Protocol>
class AcceptLoop final : public Listener,
                         public std::enable_shared_from_this<AcceptLoop<Protocol>> {
public:
  AcceptLoop(asio::io_context& ioc, typename Protocol::acceptor acceptor, Api& api,
             SessionTracker& tracker, const HttpSettings& settings, ConnectionSlots& slots,
             RequestRules rules)
      : ioc_(ioc), acceptor_(std::move(acceptor)), protocol_(acceptor_.local_endpoint().protocol()),
        retry_timer_(acceptor_.get_executor()), api_(api), tracker_(tracker), settings_(settings),
        slots_(slots), rules_(std::move(rules)) {
    acceptor_.native_non_blocking(true); // accept4 below must not block
  }

  void start() {
    asio::post(acceptor_.get_executor(), [self = this->shared_from_this()] { self->accept(); });
  }

  // Asio's accept leaves the connection inheritable by a worker forked meanwhile (on the jobs
  // thread); accept4 makes it close-on-exec from the first instant.
  void accept() {
    acceptor_.async_wait(Protocol::acceptor::wait_read,
                         [self = this->shared_from_this()](boost::system::error_code ec) {
                           if (!self->acceptor_.is_open())
                             return; // stopped
                           if (ec)
                             return self->retry_later(ec);
                           const int fd = ::accept4(self->acceptor_.native_handle(), nullptr,
                                                    nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
                           if (fd < 0) {
                             const int error = errno;
                             if (connection_error(error))
                               return self->accept();
                             return self->retry_later({error, boost::system::system_category()});
                           }
                           typename Protocol::socket socket(asio::make_strand(self->ioc_));
                           boost::system::error_code assign_ec;
                           socket.assign(self->protocol_, fd, assign_ec);
                           if (assign_ec) {
                             ::close(fd);
                             return self->retry_later(assign_ec);
                           }
                           self->serve(std::move(socket));
                           self->accept();
                         });
  }

  void stop() override {
    asio::post(acceptor_.get_executor(), [self = this->shared_from_this()] {
      boost::system::error_code ignored;
      self->acceptor_.close(ignored);
      self->retry_timer_.cancel();
    });
  }

private:
  void serve(typename Protocol::socket socket) {
    SessionOptions options;
    options.rules = rules_;
    options.ticket = slots_.admit();
    if (options.ticket.kind() == ConnectionSlots::Kind::none) {
      spdlog::debug("closing a connection unanswered: every connection place is taken");
      return; // the socket closes here
    }
    if (options.ticket.kind() == ConnectionSlots::Kind::refuse) {
      const ConnectionStats stats = slots_.stats();
      if (stats.refused_total % 1000 == 1)
        spdlog::warn("{} connections open, the limit (--max-connections): new ones are answered "
                     "503 ({} so far)",
                     stats.open, stats.refused_total);
      options.refusal = Refusal{boost::beast::http::status::service_unavailable, "unavailable",
                                "the daemon serves at most " + std::to_string(stats.max) +
                                    " connections at once (--max-connections) and all are open; "
                                    "retry later"};
    }
    if constexpr (std::is_same_v<Protocol, asio::local::stream_protocol>) {
      // Checked now, while the process that connected is most likely still there.
      if (auto why = unix_peer_refusal(socket.native_handle())) {
        spdlog::warn("refusing a connection on the Unix socket: {}", *why);
        options.refusal = Refusal{boost::beast::http::status::forbidden, "forbidden",
                                  "this connection is refused: " + *why};
      }
    }
    start_http_session<Protocol>(std::move(socket), api_, tracker_, settings_, std::move(options));
  }

  void retry_later(boost::system::error_code ec) {
    spdlog::warn("accepting a connection failed: {}", ec.message());
    retry_timer_.expires_after(kAcceptRetryDelay);
    retry_timer_.async_wait([self = this->shared_from_this()](boost::system::error_code wait_ec) {
      if (!wait_ec && self->acceptor_.is_open())
        self->accept();
    });
  }

  asio::io_context& ioc_;
  typename Protocol::acceptor acceptor_;
  Protocol protocol_;
  asio::steady_timer retry_timer_;
  Api& api_;
  SessionTracker& tracker_;
  const HttpSettings& settings_;
  ConnectionSlots& slots_;
  const RequestRules rules_;
};

} // namespace

template <class Protocol>
void open_acceptor(typename Protocol::acceptor& acceptor, const Protocol& protocol) {
  const int fd = ::socket(protocol.family(), protocol.type() | SOCK_CLOEXEC, protocol.protocol());
  if (fd < 0)
    throw boost::system::system_error(errno, boost::system::system_category(), "socket");
  boost::system::error_code ec;
  acceptor.assign(protocol, fd, ec);
  if (ec) {
    ::close(fd);
    throw boost::system::system_error(ec, "socket");
  }
}

template <class Protocol>
std::shared_ptr<Listener> start_listener(asio::io_context& ioc,
                                         typename Protocol::acceptor acceptor, Api& api,
                                         SessionTracker& tracker, const HttpSettings& settings,
                                         ConnectionSlots& slots, RequestRules rules) {
  auto loop = std::make_shared<AcceptLoop<Protocol>>(ioc, std::move(acceptor), api, tracker,
                                                     settings, slots, std::move(rules));
  loop->start();
  return loop;
}

template void open_acceptor<asio::local::stream_protocol>(asio::local::stream_protocol::acceptor&,
                                                          const asio::local::stream_protocol&);
template void open_acceptor<asio::ip::tcp>(asio::ip::tcp::acceptor&, const asio::ip::tcp&);
template std::shared_ptr<Listener> start_listener<asio::local::stream_protocol>(
    asio::io_context&, asio::local::stream_protocol::acceptor, Api&, SessionTracker&,
    const HttpSettings&, ConnectionSlots&, RequestRules);
template std::shared_ptr<Listener>
start_listener<asio::ip::tcp>(asio::io_context&, asio::ip::tcp::acceptor, Api&, SessionTracker&,
                              const HttpSettings&, ConnectionSlots&, RequestRules);

} // namespace keval::daemon::detail
