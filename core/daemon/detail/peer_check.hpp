// Connections from jobs. User code runs in processes under a keval-worker, and must not talk to
// the daemon: it could cancel other jobs, read their results or submit work. Its processes
// share our uid, so the socket's permissions do not stop them; their ancestry does: a process
// descends from one of the daemon's workers, or (once its worker died) was adopted by the daemon,
// which is a child subreaper. Either way the daemon is among its ancestors, and no legitimate
// client ever is: clients start the daemon or run beside it, never under it.
#pragma once

#include <optional>
#include <string>

#include <sys/types.h>

namespace keval::daemon::detail {

// Why a connection from process `peer` is refused, or nullopt to serve it: refused when `peer`
// is a registered worker (supervisor::OwnedChildren) or descends from one, descends from `self`
// (adopted leftovers of jobs included), or is gone before it could be checked. A peer of pid 0
// (another pid namespace that cannot hold our descendants) and `self` itself are served.
std::optional<std::string> job_process_refusal(pid_t peer, pid_t self);

// The same for the peer of a connected Unix socket (SO_PEERCRED: the process that connected).
std::optional<std::string> unix_peer_refusal(int socket_fd);

} // namespace keval::daemon::detail
