// The daemon's Unix socket: never world-accessible, never stolen from a live daemon, and not
// blocked by the socket file a dead one left behind.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <boost/asio/local/stream_protocol.hpp>
#include <sys/types.h>

namespace keval::daemon::detail {

// The file's identity once bound, so shutdown removes it only while it is still ours.
struct SocketFile {
  std::filesystem::path path;
  dev_t device = 0;
  ino_t inode = 0;
};

// Binds `acceptor` to `path` and listens. The socket is mode 0600, or 0660 owned by `group` when
// given. An existing socket that nobody accepts on (a dead daemon's) is replaced; one that
// answers, or a file that is not a socket, is left alone and reported (std::runtime_error).
SocketFile bind_unix_socket(boost::asio::local::stream_protocol::acceptor& acceptor,
                            const std::filesystem::path& path, std::optional<gid_t> group);

// Removes the socket file if it is still the one bind_unix_socket created.
void remove_socket_file(const SocketFile& file);

// The group id of `name` (a group name or a number). Throws std::runtime_error when unknown.
gid_t group_id(const std::string& name);

} // namespace keval::daemon::detail
