#include "daemon/detail/unix_socket.hpp"

#include "daemon/detail/listener.hpp"

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

namespace keval::daemon::detail {

namespace fs = std::filesystem;
using local = boost::asio::local::stream_protocol;

namespace {

// True when a process accepts connections on the socket at `path`.
bool someone_listens(const fs::path& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    throw std::system_error(errno, std::generic_category(), "socket");
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
  const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address);
  const int error = errno;
  ::close(fd);
  if (rc == 0)
    return true;
  if (error == ECONNREFUSED)
    return false;
  throw std::system_error(error, std::generic_category(), "probing " + path.string());
}

// Restores the process's umask when the bind is done, however it ends.
class ScopedUmask {
public:
  explicit ScopedUmask(mode_t mask) : previous_(::umask(mask)) {}
  ~ScopedUmask() { ::umask(previous_); }
  ScopedUmask(const ScopedUmask&) = delete;
  ScopedUmask& operator=(const ScopedUmask&) = delete;

private:
  mode_t previous_;
};

} // namespace

SocketFile bind_unix_socket(local::acceptor& acceptor, const fs::path& path,
                            std::optional<gid_t> group) {
  if (path.native().size() >= sizeof(sockaddr_un{}.sun_path))
    throw std::runtime_error("socket path '" + path.string() + "' is too long for a Unix socket (" +
                             std::to_string(sizeof(sockaddr_un{}.sun_path) - 1) +
                             " bytes at most)");
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      throw std::runtime_error("'" + path.string() +
                               "' exists and is not a socket; not touching it");
    if (someone_listens(path))
      throw std::runtime_error("another process (a running keval daemon?) is listening on '" +
                               path.string() + "'");
    fs::remove(path); // a dead daemon's socket
  }
  if (path.has_parent_path())
    fs::create_directories(path.parent_path());

  const mode_t mode = group ? 0660 : 0600;
  open_acceptor(acceptor, local());
  {
    // The file is created by bind with the umask's mode: make it private from the first instant
    // rather than chmod-ing a socket that others could already have connected to.
    ScopedUmask private_mask(0777 & ~mode);
    acceptor.bind(local::endpoint(path.string()));
  }
  if (group && ::chown(path.c_str(), static_cast<uid_t>(-1), *group) != 0)
    throw std::system_error(errno, std::generic_category(),
                            "giving " + path.string() + " to group " + std::to_string(*group));
  if (::chmod(path.c_str(), mode) != 0)
    throw std::system_error(errno, std::generic_category(), "chmod " + path.string());
  acceptor.listen();

  SocketFile file{path};
  if (::lstat(path.c_str(), &st) == 0) {
    file.device = st.st_dev;
    file.inode = st.st_ino;
  }
  return file;
}

void remove_socket_file(const SocketFile& file) {
  struct stat st {};
  if (::lstat(file.path.c_str(), &st) == 0 && st.st_dev == file.device && st.st_ino == file.inode)
    ::unlink(file.path.c_str());
}

gid_t group_id(const std::string& name) {
  if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos)
    return static_cast<gid_t>(std::stoul(name));
  if (const group* g = ::getgrnam(name.c_str()))
    return g->gr_gid;
  throw std::runtime_error("unknown group '" + name + "'");
}

} // namespace keval::daemon::detail
