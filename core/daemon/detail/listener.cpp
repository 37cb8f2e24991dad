#include "daemon/detail/listener.hpp"

#include "common/log.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

namespace keval::daemon::detail {

namespace asio = boost::asio;

namespace {

// After a failed accept (out of descriptors, most likely) wait a little rather than spin.
constexpr auto kAcceptRetryDelay = std::chrono::milliseconds(100);

template <class Protocol>
class AcceptLoop final : public Listener,
                         public std::enable_shared_from_this<AcceptLoop<Protocol>> {
public:
  AcceptLoop(asio::io_context& ioc, typename Protocol::acceptor acceptor, Api& api,
             SessionTracker& tracker, const HttpSettings& settings)
      : ioc_(ioc), acceptor_(std::move(acceptor)), retry_timer_(acceptor_.get_executor()),
        api_(api), tracker_(tracker), settings_(settings) {}

  void start() {
    asio::post(acceptor_.get_executor(), [self = this->shared_from_this()] { self->accept(); });
  }

  void accept() {
    acceptor_.async_accept(asio::make_strand(ioc_), [self = this->shared_from_this()](
                                                        boost::system::error_code ec,
                                                        typename Protocol::socket socket) {
      if (!self->acceptor_.is_open())
        return; // stopped
      if (ec) {
        spdlog::warn("accepting a connection failed: {}", ec.message());
        self->retry_timer_.expires_after(kAcceptRetryDelay);
        self->retry_timer_.async_wait([self](boost::system::error_code wait_ec) {
          if (!wait_ec && self->acceptor_.is_open())
            self->accept();
        });
        return;
      }
      start_http_session<Protocol>(std::move(socket), self->api_, self->tracker_, self->settings_);
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
  asio::io_context& ioc_;
  typename Protocol::acceptor acceptor_;
  asio::steady_timer retry_timer_;
  Api& api_;
  SessionTracker& tracker_;
  const HttpSettings& settings_;
};

} // namespace

template <class Protocol>
std::shared_ptr<Listener> start_listener(asio::io_context& ioc,
                                         typename Protocol::acceptor acceptor, Api& api,
                                         SessionTracker& tracker, const HttpSettings& settings) {
  auto loop =
      std::make_shared<AcceptLoop<Protocol>>(ioc, std::move(acceptor), api, tracker, settings);
  loop->start();
  return loop;
}

template std::shared_ptr<Listener>
start_listener<asio::local::stream_protocol>(asio::io_context&,
                                             asio::local::stream_protocol::acceptor, Api&,
                                             SessionTracker&, const HttpSettings&);
template std::shared_ptr<Listener> start_listener<asio::ip::tcp>(asio::io_context&,
                                                                 asio::ip::tcp::acceptor, Api&,
                                                                 SessionTracker&,
                                                                 const HttpSettings&);

} // namespace keval::daemon::detail
