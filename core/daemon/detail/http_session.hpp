// One HTTP/1.1 connection (Unix or TCP): keep-alive, one request at a time, a timeout on every
// read and write, a body limit; everything on the connection's strand. Sessions register with a
// SessionTracker so shutdown can close the idle ones and wait for the busy ones.
#pragma once

#include "daemon/api.hpp"
#include "daemon/detail/connection_slots.hpp"
#include "daemon/detail/request_gate.hpp"

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace keval::daemon::detail {

struct HttpSettings {
  uint64_t max_body_bytes = 64ull << 20;
  // Each read (a whole request, including the wait for it on a kept-alive connection) and each
  // write must finish within this.
  std::chrono::milliseconds io_timeout{30000};
};

class HttpSessionBase {
public:
  virtual ~HttpSessionBase() = default;
  // Closes the connection now if it is waiting for a request, else after the response.
  virtual void stop() = 0;
};

class SessionTracker {
public:
  void add(const std::shared_ptr<HttpSessionBase>& session);
  void remove(HttpSessionBase* session); // from the session's destructor
  // Stops every session; `on_empty` runs once none is left (at once when there are none).
  void stop_all(std::function<void()> on_empty);
  bool stopping() const;
  // Drops the stop_all callback: the event loop has stopped, and sessions it still holds are
  // destroyed with it, not served.
  void abandon();

private:
  mutable std::mutex mutex_;
  std::unordered_map<HttpSessionBase*, std::weak_ptr<HttpSessionBase>> sessions_;
  bool stopping_ = false;
  std::function<void()> on_empty_;
};

// What one connection is served under.
struct SessionOptions {
  RequestRules rules; // its transport's (request_gate.hpp)
  // Set: every request on the connection is answered with this (a job's process, the connection
  // limit), and the connection closed.
  std::optional<Refusal> refusal;
  ConnectionSlots::Ticket ticket; // its place under the connection limit, held while it lives
};

// Starts serving `socket` (whose executor should be a strand). `api`, `tracker` and `settings`
// must outlive the session. A refused request (options.refusal, or the rules) is answered once
// its header has arrived, without reading its body into memory; the connection then closes,
// after discarding what the client still sends (a bounded amount, within the timeout) so that
// closing does not reset the connection before the client has read the answer.
template <class Protocol>
void start_http_session(typename Protocol::socket socket, Api& api, SessionTracker& tracker,
                        const HttpSettings& settings, SessionOptions options = {});

} // namespace keval::daemon::detail
