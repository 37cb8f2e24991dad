#include "protocol/blocking_channel.hpp"

#include <cerrno>
#include <cstring>
#include <system_error>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace keval::protocol {

namespace {

// Descriptors queued but not yet claimed: a peer that sends without announcing could otherwise
// make us hold any number of them.
constexpr size_t kMaxQueuedFds = 4 * kMaxFdsPerFrame;

} // namespace

BlockingChannel::BlockingChannel(int fd, std::string peer, size_t max_frame_bytes)
    : fd_(fd), peer_(std::move(peer)), max_frame_bytes_(max_frame_bytes),
      decoder_(max_frame_bytes) {}

BlockingChannel::~BlockingChannel() {
  if (fd_ >= 0)
    ::close(fd_);
}

void BlockingChannel::send(boost::json::object message, const std::vector<int>& fds) {
  if (fds.size() > kMaxFdsPerFrame)
    throw std::invalid_argument("too many descriptors for one frame");
  const std::string frame = encode_frame(std::move(message), max_frame_bytes_);
  size_t written = 0;
  bool fds_sent = fds.empty();
  while (written < frame.size()) {
    iovec iov{const_cast<char*>(frame.data() + written), frame.size() - written};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    std::vector<char> control;
    if (!fds_sent) { // the descriptors ride with the frame's first bytes
      control.resize(CMSG_SPACE(sizeof(int) * fds.size()));
      msg.msg_control = control.data();
      msg.msg_controllen = control.size();
      cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
      cmsg->cmsg_level = SOL_SOCKET;
      cmsg->cmsg_type = SCM_RIGHTS;
      cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
    }
    // MSG_NOSIGNAL: a vanished peer must surface as an error here, not kill us with SIGPIPE.
    const ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      throw std::system_error(errno, std::generic_category(), "sending to " + peer_);
    }
    fds_sent = true;
    written += static_cast<size_t>(n);
  }
}

boost::json::object BlockingChannel::receive() {
  if (ready_) {
    boost::json::object message = std::move(*ready_);
    ready_.reset();
    return message;
  }
  for (;;) {
    if (auto message = decoder_.next())
      return std::move(*message);
    read_some();
  }
}

bool BlockingChannel::wait_unless(int other) {
  for (;;) {
    if (!ready_)
      ready_ = decoder_.next();
    if (ready_)
      return true;
    pollfd watched[2] = {{fd_, POLLIN, 0}, {other, POLLIN, 0}};
    if (::poll(watched, 2, -1) < 0) {
      if (errno == EINTR)
        continue;
      throw std::system_error(errno, std::generic_category(), "waiting for " + peer_);
    }
    if (watched[0].revents != 0)
      read_some(); // what the peer sent before it went comes first
    else if (watched[1].revents != 0)
      return false;
  }
}

void BlockingChannel::read_some() {
  for (;;) {
    char buffer[64 * 1024];
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerFrame)];
    iovec iov{buffer, sizeof buffer};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      throw std::system_error(errno, std::generic_category(), "reading from " + peer_);
    }
    for (cmsghdr* cmsg = CMSG_FIRSTHDR(&msg); cmsg != nullptr; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
      if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS)
        continue;
      const size_t count = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int received = -1;
        std::memcpy(&received, CMSG_DATA(cmsg) + i * sizeof(int), sizeof(int));
        fds_.emplace_back(received);
      }
    }
    if (fds_.size() > kMaxQueuedFds)
      throw ProtocolError(peer_ + " sent more descriptors than it announced");
    if ((msg.msg_flags & MSG_CTRUNC) != 0)
      throw ProtocolError(peer_ + " sent more descriptors than one frame may carry");
    if (n == 0)
      throw ProtocolError(peer_ + " closed the channel");
    decoder_.feed(std::string_view(buffer, static_cast<size_t>(n)));
    return;
  }
}

std::vector<UniqueFd> BlockingChannel::take_fds(size_t count) {
  if (count > fds_.size())
    throw ProtocolError(peer_ + " announced " + std::to_string(count) + " descriptors but sent " +
                        std::to_string(fds_.size()));
  std::vector<UniqueFd> out;
  for (size_t i = 0; i < count; ++i) {
    out.push_back(std::move(fds_.front()));
    fds_.pop_front();
  }
  return out;
}

} // namespace keval::protocol
