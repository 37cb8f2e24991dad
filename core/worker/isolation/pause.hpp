// While one side of a job is timed, the other side's processes stand still. The GPU time-slices
// between processes' contexts and the CPU's cores are shared, so a process of the candidate's
// (its runner's own threads, a helper it started, an orphan it left) that keeps either busy while
// the reference is timed makes the reference slower, and the candidate gains the difference; a
// reference's idle thread pool spinning beside the candidate's sample costs the candidate the
// same way. SIGSTOP cannot be caught, blocked or ignored, and a stopped process can neither run
// nor start anything, so the timed side has the machine to itself apart from device work the
// other side queued before it stopped (which a stopped process cannot renew).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace keval::worker::isolation {

class PausedProcesses {
public:
  PausedProcesses() = default;
  PausedProcesses(PausedProcesses&& other) noexcept;
  PausedProcesses& operator=(PausedProcesses&& other) noexcept;
  PausedProcesses(const PausedProcesses&) = delete;
  PausedProcesses& operator=(const PausedProcesses&) = delete;
  // Lets every stopped process go on (SIGCONT).
  ~PausedProcesses();

  // Stops every process of the trees rooted at `roots` (their descendants by /proc's children
  // files) and every child of this process that `pause_orphan` accepts (an orphan adopted by this
  // subreaper), round after round until a round finds none new, then waits until each of their
  // threads has stopped, for at most `wait_ms`. A process that forks meanwhile is met in the next
  // round; one that cannot be signalled or does not stop in time is named in failure().
  static PausedProcesses pause(const std::vector<pid_t>& roots,
                               const std::function<bool(pid_t)>& pause_orphan, double wait_ms);

  // Ends every stopped process (SIGKILL, which a stopped process takes too) instead of letting
  // it go on: none of them runs another instruction. Nothing is left to resume.
  void kill();

  size_t size() const { return stopped_.size(); }
  // Empty when every process found was stopped; else what could not be, and why.
  const std::string& failure() const { return failure_; }

private:
  void resume();

  std::vector<pid_t> stopped_;
  std::string failure_;
};

} // namespace keval::worker::isolation
