// Nothing of a job outlives it. A worker kills its own descendants when its job ends (its process
// group, and what it adopted); this is the fallback for when the worker itself died or was killed
// first: a `setsid` or double-forked process its user code left behind is then reparented, and
// because the host is a child subreaper (not init) it is reparented to the host, where
// reap_orphans finds it.
//
// Every child of the host that the host did not spawn itself (see owned_children.hpp) is such a
// leftover: the host starts no other processes. reap_orphans kills (SIGKILL) and reaps those,
// each by its own pid: never waitpid(-1), which would steal the exit status of a worker that
// Boost.Process is waiting for.
#pragma once

#include <cstddef>

namespace keval::supervisor {

// Makes this process a child subreaper (PR_SET_CHILD_SUBREAPER): orphaned descendants are
// reparented to it rather than to init. False (with a warning logged) when the kernel refuses.
bool become_child_subreaper();

struct ReapResult {
  size_t killed = 0; // adopted processes killed and reaped
  size_t left = 0;   // still there after the last round (a fork storm; the next call goes on)
};

// Kills and reaps every child of this process that is not an OwnedChildren entry, round after
// round (killing one hands its own children to us) until none is left or the rounds run out.
// Blocks until each killed process is reaped. Thread-safe; one call at a time.
ReapResult reap_orphans();

} // namespace keval::supervisor
