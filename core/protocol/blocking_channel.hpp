// The worker's side of the protocol: blocking frame I/O on one file descriptor. The worker runs
// one job sequentially, so it needs no event loop; the host side is asynchronous (Asio).
#pragma once

#include "protocol/frame.hpp"

namespace keval::protocol {

class BlockingChannel {
public:
  // Takes ownership of `fd` (closed on destruction).
  explicit BlockingChannel(int fd);
  ~BlockingChannel();
  BlockingChannel(const BlockingChannel&) = delete;
  BlockingChannel& operator=(const BlockingChannel&) = delete;

  // Sends one message; throws std::system_error when the host is gone.
  void send(boost::json::object message);
  // Blocks for the next message; throws ProtocolError on garbage or end of stream.
  boost::json::object receive();

private:
  int fd_;
  FrameDecoder decoder_;
};

} // namespace keval::protocol
