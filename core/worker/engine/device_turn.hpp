// Turns that keval's workers on a machine take on a device, each a flock on a file of this
// user's, released when the holder gives it up or dies. Only keval's trusted processes take
// them, never one that runs user code, which could keep one. A turn that does not come within
// its patience is gone without: the order is worth less than what waits for it.
//
// The open turn: one device opening at a time. Making a CUDA context (and cuInit before it) takes
// the driver's device-wide lock for milliseconds at a time, and every other process's driver calls
// that need it wait: memory allocation, module loading, mapping shared memory, tearing a context
// down. When a warm pool refills, a dozen prestarted processes open the device at once; on the
// H200 a process allocating 8 MiB then waited 3.7 ms at the median (0.1 ms alone) and 52 ms at
// the 99th percentile, and the job holding the GPU saw validations and teardowns of several
// seconds. Taking turns leaves it one opener to wait behind.
//
// The timing turn, one per GPU: held (shared) by the jobs timed on it, each from its first timed
// sample to its handover, and (exclusively) by a prestarted worker's runner while it warms the GPU
// up (SDK 1.4 warm_device: the kernels a framework loads at its first launches, launched once). So
// no warm-up runs on a GPU while a job is timed there; with the timing wish below, warm-ups start
// only while no job holds the GPU.
#pragma once

#include "common/unique_fd.hpp"
#include "worker/engine/engine.hpp"

#include <chrono>
#include <filesystem>
#include <string>

namespace keval::worker {

class DeviceTurn {
public:
  // Exclusive: one holder at a time (an open, a warm-up). Shared: the jobs timed on a GPU, which
  // the daemon lets share it only where an operator asked (jobs_per_gpu): they keep warm-ups out,
  // not each other.
  enum class Hold { exclusive, shared };
  // Waits for the turn on `lock_file` (created, owner-only, when missing) for at most `patience`.
  DeviceTurn(const std::filesystem::path& lock_file, std::chrono::milliseconds patience,
             Hold hold = Hold::exclusive);
  // Waits for the turn for as long as `fd` has nothing to read (a prestarted worker's channel
  // from the host: its job has come) and its writer is there; interrupted() once it has. Tries
  // every `interval`: a dozen idle workers wait so while a job is timed, each waking up no more
  // often than that.
  struct UntilReadable {
    explicit UntilReadable(int fd,
                           std::chrono::milliseconds interval = std::chrono::milliseconds(10))
        : fd(fd), interval(interval) {}
    int fd;
    std::chrono::milliseconds interval;
  };
  DeviceTurn(const std::filesystem::path& lock_file, UntilReadable until);
  ~DeviceTurn() = default; // closing the file gives the turn up
  DeviceTurn(const DeviceTurn&) = delete;
  DeviceTurn& operator=(const DeviceTurn&) = delete;

  bool held() const { return held_; }
  // Why the turn is not held ("" when it is): the file could not be used, or the patience ran out.
  const std::string& why_not() const { return why_not_; }
  // How long the constructor waited.
  double waited_ms() const { return waited_ms_; }
  // Whether an UntilReadable wait ended because its descriptor had something to read.
  bool interrupted() const { return interrupted_; }

  // The machine's open turn for this user: `keval-device-open-<euid>.lock` in the temporary
  // directory.
  static std::filesystem::path open_lock_file();
  // The timing turn of the GPU `gpu` (its PCI bus id, the same in every process whatever its
  // CUDA_VISIBLE_DEVICES) for this user: `keval-device-timing-<euid>-<gpu>.lock` there, with
  // every character of `gpu` but letters and digits as '_'.
  static std::filesystem::path timing_lock_file(const std::string& gpu);
  // Beside it, the GPU's timing wish (TimingWish): `keval-device-timing-wish-<euid>-<gpu>.lock`.
  static std::filesystem::path timing_wish_file(const std::string& gpu);
  // The name of `engine`'s GPU for those files: its PCI bus id (its ordinal where the driver
  // does not say); empty for an engine that is not a CUDA device's.
  static std::string gpu_of(const Engine& engine);
  // How long a prestarted worker waits for its turn: past a few dozen openers in line (each
  // opens three contexts, 0.1 to 0.3 s apiece), it opens anyway.
  static constexpr std::chrono::milliseconds kOpenPatience{15000};
  // How long a job waits for its GPU's timing turn before it times without it: a warm-up takes a
  // few hundred milliseconds; a holder past this is stuck, and the job's time is worth more.
  static constexpr std::chrono::milliseconds kTimingPatience{3000};

private:
  // Takes the turn, trying every `interval` until `deadline`, or until `interrupt_fd` (-1: none)
  // is readable (looked at before each try: a job already there goes first).
  void wait(const std::filesystem::path& lock_file, std::chrono::steady_clock::time_point deadline,
            int interrupt_fd, std::chrono::milliseconds interval, Hold hold);

  UniqueFd file_;
  bool held_ = false;
  bool interrupted_ = false;
  std::string why_not_;
  double waited_ms_ = 0;
};

// The machine's open turn as a prestarted worker waits for it, where a worker that a job has
// already taken goes before the pool's spares. flock has no queue: whoever tries first when the
// turn comes free takes it. When a pool refilled beside a batch, a job's worker waited behind a
// dozen spares opening for jobs not yet come (up to the turn's 15 s patience on an H100, its job
// waiting all along). A taken worker holds the precedence file (precedence_file) shared while it
// waits; a spare tries the turn only while it can take that file exclusively for a moment, so
// none waits there. Neither kind waits longer than its patience.
class OpenTurn {
public:
  // Waits for `turn_file` for at most `patience`: as a spare while `taken_fd` (a prestarted
  // worker's channel from the host, which sends `taken` once a job has the worker) has nothing
  // to read, as a taken worker from then on. The turn is given up with this object. An empty
  // `precedence_file`: no precedence, every waiter tries the turn as it comes.
  OpenTurn(const std::filesystem::path& turn_file, const std::filesystem::path& precedence_file,
           int taken_fd, std::chrono::milliseconds patience);
  bool held() const { return held_; }
  const std::string& why_not() const { return why_not_; }
  double waited_ms() const { return waited_ms_; }
  // Of waited_ms, how long the worker had been taken (0: its job came after the turn).
  double waited_taken_ms() const { return waited_taken_ms_; }
  // Beside open_lock_file: `keval-device-open-precedence-<euid>.lock`.
  static std::filesystem::path precedence_file();

private:
  UniqueFd turn_;
  bool held_ = false;
  std::string why_not_;
  double waited_ms_ = 0, waited_taken_ms_ = 0;
};

// A job's wish to time on a GPU: a shared flock on the GPU's wish file (timing_wish_file), held
// from its grant of the GPU until it gives the timing turn up, and the file's modification time
// set as it lets go. A warm-up starts a runner only on a GPU that no job has held for a while
// (idle_for): a runner warming up when a job is granted the GPU then ends while that job binds
// and validates, most likely before it needs the turn, and none starts between the jobs of a
// busy GPU: a runner's warm-up takes 0.3 to 0.6 s beside other work, and warm-ups that started
// whenever no job was timed made the next job wait for them (quiet_wait 159 ms a job on an H100).
// Several jobs may wish at once (a GPU shared by jobs_per_gpu): the wish is a shared DeviceTurn.
class TimingWish {
public:
  // Holds the wish, trying for `patience` (a warm-up's look takes the file exclusively for a
  // moment); without it the job still times, and a warm-up may start beside its wait.
  TimingWish(const std::filesystem::path& wish_file, std::chrono::milliseconds patience);
  ~TimingWish(); // marks the file's modification time, then lets go
  TimingWish(const TimingWish&) = delete;
  TimingWish& operator=(const TimingWish&) = delete;
  bool held() const { return turn_.held(); }
  // True when no process holds a wish on `wish_file` now and none let one go within `idle` (or
  // the file cannot be used: then no job can hold one either).
  static bool idle_for(const std::filesystem::path& wish_file, std::chrono::milliseconds idle);
  // How long a GPU is left idle before a warm-up starts on it: longer than the gap between one
  // job's end and the next one's grant on a busy GPU (a handover: milliseconds; a client's next
  // request: tens of them).
  static constexpr std::chrono::milliseconds kIdleBeforeWarmUp{250};

private:
  std::filesystem::path file_;
  DeviceTurn turn_; // shared; let go after the destructor has marked the time
};

} // namespace keval::worker
