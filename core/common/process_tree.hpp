// What keval reads of the process tree in /proc: a process's parent and start time, and this
// process's own children. The host uses it to find adopted orphans and job processes; the trusted
// worker to end every descendant of a job.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include <sys/types.h>

namespace keval {

struct ProcStat {
  char state = '?'; // R, S, D, T (stopped), t, Z, X, ...
  pid_t parent = 0;
  uint64_t start_time = 0; // clock ticks after boot: with the pid, names one process for good
};

// From /proc/<pid>/stat; nullopt when the process does not exist (a zombie still does).
std::optional<ProcStat> read_proc_stat(pid_t pid);

// The children of this process, from /proc/self/task/*/children (every thread's: an adopted
// process may be given to any of them); where the kernel lacks those files, from the parent
// field of every /proc/<pid>/stat. A snapshot: children come and go meanwhile.
std::vector<pid_t> children_of_self();

// The same for any process `pid` (its /proc/<pid>/task/*/children, else every process's parent
// field); empty once it has ended.
std::vector<pid_t> children_of(pid_t pid);

// Adds every process of the tree rooted at `root` (by /proc's children files), root included,
// that still exists, to `out`. A process already in `out` is not walked again.
void add_process_tree(pid_t root, std::set<pid_t>& out);

// The threads of `pid` (/proc/<pid>/task); empty once it has ended.
std::vector<pid_t> threads_of(pid_t pid);

// The state of thread `tid` of process `pid` (/proc/<pid>/task/<tid>/stat), nullopt once gone.
std::optional<char> thread_state(pid_t pid, pid_t tid);

// The real uid of `pid` (/proc/<pid>/status), nullopt once it has ended.
std::optional<uid_t> uid_of(pid_t pid);

} // namespace keval
