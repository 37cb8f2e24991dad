// Jobs that do not hold the GPU (compiling, prewarming, building extensions) share the CPU with
// the one being timed, whose samples are round trips between the trusted worker and its runners:
// under a batch's compiles those round trips took up to five times as long (issue 17: a job's
// profiling 231 to 1164 ms for the same problem in one batch), and they hold the GPU meanwhile.
// So runners wait in the background: a runner starts at nice kBackgroundNice (its prewarm, an
// interpreter importing torch, too: at nice 0 a pool's refills slowed the timed job as much;
// every thread and child it starts inherits that), and the trusted worker brings all of them back
// to nice 0 once the job is granted its device, and sends them back after each time it brought
// them forward: while a prestarted runner opens its device in the machine's turn or warms the
// GPU up (both hold what the timed job may wait for). Queued jobs keep compiling, and pools
// refilling, beside the timed one at a tenth of its weight.
//
// Lowering a nice value needs CAP_SYS_NICE (the runners may be of other uids, too): a worker
// without it leaves its runners at nice 0, as before, and says why (background_unavailable).
// Both sides of a job are treated alike, and user code cannot change another process's priority
// (the seccomp layer), so the order is the host's alone.
#pragma once

#include <string>
#include <vector>

#include <sys/types.h>

namespace keval::worker::isolation {

inline constexpr int kBackgroundNice = 10;

// Empty when this process may send runners to the background and bring them back; else why not
// (no CAP_SYS_NICE, or KEVAL_BACKGROUND_RUNNERS=0). Read once.
const std::string& background_unavailable();

// The nice value a runner placed now waits at once its hello has come (RunnerClient):
// kBackgroundNice, or 0 where background_unavailable() says why not.
int background_nice_for_runners();

// Sets every thread of every process in the trees rooted at `roots` to nice `nice`. Empty when
// all were set; else which could not be and why (threads that ended meanwhile are no failure).
std::string set_tree_nice(const std::vector<pid_t>& roots, int nice);

} // namespace keval::worker::isolation
