// Blocking frame I/O on one socket: the worker's side of the host protocol, and both sides of the
// channel between the trusted worker and the processes that run user code. A job runs
// sequentially, so no event loop is needed; the host side is asynchronous (Asio).
//
// Descriptors can travel with a frame (SCM_RIGHTS): tensor buffers cross between processes as
// memfds or CUDA shareable handles, never as bytes in a frame. Received descriptors are
// close-on-exec and queued in arrival order; the frame that announces them takes them with
// take_fds().
#pragma once

#include "common/unique_fd.hpp"
#include "protocol/frame.hpp"

#include <deque>
#include <optional>
#include <string>
#include <vector>

namespace keval::protocol {

// At most this many descriptors travel with one frame (the kernel's SCM_MAX_FD is 253).
inline constexpr size_t kMaxFdsPerFrame = 200;

class BlockingChannel {
public:
  // Takes ownership of `fd` (closed on destruction). `peer` names the other end in errors
  // ("host", "custom runner").
  explicit BlockingChannel(int fd, std::string peer = "host",
                           size_t max_frame_bytes = kDefaultMaxFrameBytes);
  ~BlockingChannel();
  BlockingChannel(const BlockingChannel&) = delete;
  BlockingChannel& operator=(const BlockingChannel&) = delete;

  // Sends one message, with `fds` attached (at most kMaxFdsPerFrame; they stay open here). A
  // message over the channel's frame cap throws ProtocolError.
  // Throws std::system_error when the peer is gone.
  void send(boost::json::object message, const std::vector<int>& fds = {});
  // Blocks for the next message; throws ProtocolError on garbage or end of stream.
  boost::json::object receive();
  // Blocks until receive() would not (a message waits, or what it would throw) and returns true,
  // or returns false once `other` is readable while nothing waits on the channel: a runner's
  // pidfd, so that its death is seen while a process it left behind still holds the channel.
  // Throws as receive() does.
  bool wait_unless(int other);
  // Takes the `count` oldest received descriptors. Throws ProtocolError when fewer arrived.
  std::vector<UniqueFd> take_fds(size_t count);
  // Closes descriptors that arrived but that no frame claimed (a peer sending more than it says).
  void drop_unclaimed_fds() { fds_.clear(); }
  int fd() const { return fd_; }

private:
  // One read from the socket into the decoder, descriptors queued. Throws on end of stream.
  void read_some();

  int fd_;
  std::string peer_;
  size_t max_frame_bytes_; // both ways
  FrameDecoder decoder_;
  std::optional<boost::json::object> ready_; // decoded by wait_unless, not yet received
  std::deque<UniqueFd> fds_;
};

} // namespace keval::protocol
