// What keeps a job's user code apart from everything that decides its verdict, and what makes sure
// nothing of a job outlives it: the restrictions a runner puts on itself before any user code
// loads, how the trusted worker starts runners (only their own channel inherited), and how it
// ends every process the job started, setsid and double forks included.
#pragma once

#include <filesystem>
#include <string>
#include <sys/types.h>
#include <vector>

#include <boost/json/object.hpp>

namespace keval::worker::isolation {

// Applied by a runner to itself before it loads user code, each where the kernel allows it:
// no new privileges (PR_SET_NO_NEW_PRIVS), every capability dropped (bounding set, effective,
// permitted, inheritable, ambient; a uid-0 process then cannot regain them by exec), and not
// dumpable (no other process of our uid may ptrace it or open its /proc/<pid>/mem, so the
// candidate cannot reach into the reference's runner or the trusted worker). Returns which layers
// hold, {"no_new_privs": true, "capabilities_dropped": true, "not_dumpable": true, ...}, and
// "errors" for any that could not be applied: reported, never silently skipped.
boost::json::object restrict_user_code_process();

// For the trusted worker itself: not dumpable, the reaper of every orphan its runners leave
// (PR_SET_CHILD_SUBREAPER, so a setsid or double-forked descendant stays its descendant), and
// SIGTERM as its parent-death signal (so a host that dies still gets the job's processes ended).
// Call after end_descendants_on_sigterm. Returns what holds, like restrict_user_code_process.
boost::json::object protect_trusted_process();

// Kills every descendant of this process (SIGKILL) and reaps it, round after round until none is
// left: a killed process's own children are reparented to us (we are their subreaper) and met in
// the next round. Returns how many processes it ended.
size_t kill_descendants();

// SIGTERM (the host's timeout or cancel, or the host's death through PDEATHSIG) ends this process
// only after kill_descendants() and the removal of every directory registered below, from a
// thread of its own. Call before any other thread starts: SIGTERM is blocked in every thread but
// that one.
void end_descendants_on_sigterm();

// Directories (a runner's own, with what its user code built there) that a SIGTERM must not
// leave behind: no destructor runs on that path. Thread-safe.
void remove_on_termination(const std::filesystem::path& dir);
void forget_on_termination(const std::filesystem::path& dir);

// Starts `exe args...` with `channel_fd` as its descriptor 3 and stdin/stdout/stderr as ours, no
// other descriptor, killed when this process dies, no core dumps, in our process group, with
// `environment` ("NAME=value" entries) as its whole environment, at nice `nice` from its first
// instruction (cpu_priority.hpp). Returns its pid; throws std::system_error.
pid_t spawn_with_channel(const std::filesystem::path& exe, const std::vector<std::string>& args,
                         int channel_fd, const std::vector<std::string>& environment, int nice);

// How a process we waited for ended: "exited with code 0", "was killed by SIGSEGV (...)".
std::string describe_wait_status(int status);

} // namespace keval::worker::isolation
