// Accepts connections on a bound, listening acceptor and starts an HTTP session for each, on a
// strand of its own; refuses those that come from jobs.
#pragma once

#include "daemon/detail/connection_slots.hpp"
#include "daemon/detail/http_session.hpp"
#include "daemon/detail/request_gate.hpp"

#include <memory>

#include <boost/asio/io_context.hpp>

namespace keval::daemon::detail {

class Listener {
public:
  virtual ~Listener() = default;
  // Stops accepting; connections already accepted go on.
  virtual void stop() = 0;
};

// Opens `acceptor` on a close-on-exec socket (Asio's open leaves it inheritable: every worker
// would hold the daemon's listening socket). Throws boost::system::system_error.
template <class Protocol>
void open_acceptor(typename Protocol::acceptor& acceptor, const Protocol& protocol);

// `acceptor` must be open and listening, and use a strand of `ioc`: stop() closes it from another
// thread. Accepting begins at once; connections are close-on-exec, and served under `rules`.
// One on a Unix socket from a job's process (peer_check.hpp) is answered 403 whatever it asks;
// one past the limit of `slots` is answered 503, or closed at once when too many are.
template <class Protocol>
std::shared_ptr<Listener> start_listener(boost::asio::io_context& ioc,
                                         typename Protocol::acceptor acceptor, Api& api,
                                         SessionTracker& tracker, const HttpSettings& settings,
                                         ConnectionSlots& slots, RequestRules rules);

} // namespace keval::daemon::detail
