#include "protocol/blocking_channel.hpp"

#include <cerrno>
#include <system_error>

#include <sys/socket.h>
#include <unistd.h>

namespace keval::protocol {

BlockingChannel::BlockingChannel(int fd) : fd_(fd) {}

BlockingChannel::~BlockingChannel() {
  if (fd_ >= 0)
    ::close(fd_);
}

void BlockingChannel::send(boost::json::object message) {
  const std::string frame = encode_frame(std::move(message));
  size_t written = 0;
  while (written < frame.size()) {
    // MSG_NOSIGNAL: a vanished host must surface as an error here, not kill us with SIGPIPE.
    const ssize_t n = ::send(fd_, frame.data() + written, frame.size() - written, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      throw std::system_error(errno, std::generic_category(), "sending to host");
    }
    written += static_cast<size_t>(n);
  }
}

boost::json::object BlockingChannel::receive() {
  for (;;) {
    if (auto message = decoder_.next())
      return std::move(*message);
    char buffer[64 * 1024];
    const ssize_t n = ::read(fd_, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      throw std::system_error(errno, std::generic_category(), "reading from host");
    }
    if (n == 0)
      throw ProtocolError("host closed the channel");
    decoder_.feed(std::string_view(buffer, static_cast<size_t>(n)));
  }
}

} // namespace keval::protocol
