// Accepts connections on a bound, listening acceptor and starts an HTTP session for each, on a
// strand of its own.
#pragma once

#include "daemon/detail/http_session.hpp"

#include <memory>

#include <boost/asio/io_context.hpp>

namespace keval::daemon::detail {

class Listener {
public:
  virtual ~Listener() = default;
  // Stops accepting; connections already accepted go on.
  virtual void stop() = 0;
};

// `acceptor` must be open and listening, and use a strand of `ioc`: stop() closes it from another
// thread. Accepting begins at once.
template <class Protocol>
std::shared_ptr<Listener> start_listener(boost::asio::io_context& ioc,
                                         typename Protocol::acceptor acceptor, Api& api,
                                         SessionTracker& tracker, const HttpSettings& settings);

} // namespace keval::daemon::detail
