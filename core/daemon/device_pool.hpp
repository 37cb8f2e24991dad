// The daemon's devices: every visible GPU, leased to one job at a time by default (validation
// and profiling must not share a GPU, or timings lie), and the CPU device, which CPU-mode kernel
// types share without a lease. Jobs that find every fitting GPU busy wait in FIFO order.
//
// On a host with several GPUs, a job whose worker opened its contexts ahead on one of them
// (DeviceWish::opened_cuda) is granted that one when it is free, and a GPU that comes free goes
// first to the earliest waiter that opened it: another GPU would cost the job its contexts opened
// again with the GPU held (657 ms a job on two H200s). A waiter passed over so, by later waiters
// granted GPUs it could have had, as many times as there are other GPUs (about the hold of one
// job on its own GPU), takes the next GPU that fits it.
//
// A job whose processes are stopped for good hands its GPU over (hand_over) before they have
// died: the driver takes a couple of hundred milliseconds to tear down a job's contexts, and the
// next job validates meanwhile. That job's grant says the GPU is not quiet yet, and it times
// nothing on it until the one handing over is gone (release): then on_quiet runs.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

namespace keval::daemon {

// A visible CUDA device, as `keval-worker --devices` reports it.
struct GpuDevice {
  int index = 0;        // CUDA ordinal as the worker sees it (after CUDA_VISIBLE_DEVICES)
  std::string name;     // "NVIDIA H100 80GB HBM3"
  std::string gpu_type; // "A100", "H100", "H200" or "other"
  int arch = 0;         // compute capability, 90 for sm_90
  uint64_t memory_bytes = 0;
};

// What a job's worker asks for and what the client allowed.
struct DeviceWish {
  boost::json::array device_types;     // the worker's preference order: "cuda", "cpu"
  std::optional<std::string> gpu_type; // the request's X-GPU-Type, when given
  int arch = 0;                        // the architecture the job compiled for; 0: any
  // The GPU (its index) whose contexts the job's worker opened ahead: granted when it is free.
  std::optional<int> opened_cuda{};
};

// A decision: a device, or why there is none (type is then empty).
struct DeviceGrant {
  std::string type; // "cuda" or "cpu"
  int index = 0;
  std::string gpu_type; // the GPU's type, "cpu" for the CPU device
  std::string error;
  // False: a job that handed this GPU over is still ending; the acquirer's on_quiet follows.
  bool quiet = true;

  // The worker protocol's grant: {"device": {"type", "index"}, "quiet"?} or {"error": "..."}.
  boost::json::object to_protocol() const;
  boost::json::object to_json() const; // {"type", "index", "gpu_type"}
};

// One GPU as /health and /stats show it.
struct GpuState {
  GpuDevice device;
  size_t holders = 0;   // jobs holding it now (those handing it over included)
  size_t departing = 0; // of them, jobs that handed it over and are ending
  uint64_t grants = 0;
  double busy_ms = 0; // time with at least one holder, including the current lease
};

class DevicePool {
public:
  using Ticket = uint64_t;

  // `jobs_per_gpu` jobs may hold one GPU at once (1: exclusive). Grants are delivered on
  // `executor`.
  DevicePool(boost::asio::any_io_executor executor, std::vector<GpuDevice> gpus,
             size_t jobs_per_gpu = 1);

  // Grants a device now or once a fitting GPU is free. `on_grant` runs on the executor, never
  // inside this call, exactly once unless the ticket is released first. When nothing on this
  // host can ever fit, the grant carries the error at once. A grant that is not quiet is
  // followed by `on_quiet`, on the executor, once no job handing the GPU over is left (unless the
  // ticket is released or handed over first).
  Ticket acquire(DeviceWish wish, std::function<void(DeviceGrant)> on_grant,
                 std::function<void()> on_quiet = {});
  // The ticket's job will use its GPU no more and every process of its user code is stopped:
  // the GPU may go to the next job while this one ends. The ticket still holds it until
  // release. No effect on a ticket that holds no GPU or handed it over already.
  void hand_over(Ticket ticket);
  // Gives the ticket's device back, or withdraws the ticket from the queue. Idempotent.
  void release(Ticket ticket);

  // The architecture to compile a job for, before it asks for a device: among the GPUs of
  // `gpu_type` (any when absent), the architecture whose GPUs are least loaded, counting the jobs
  // that hold or wait for them and those still compiling for them. 0 without GPUs.
  int compile_arch(const std::optional<std::string>& gpu_type) const;
  // compile_arch, and the job counted as compiling for that architecture until
  // end_compile_reservation: jobs that arrive together spread over a mixed host's architectures
  // instead of all compiling for the idlest one and then queueing for its GPUs.
  int reserve_compile_arch(const std::optional<std::string>& gpu_type);
  // The job asked for a device (acquire counts it from then on) or ended. 0: nothing reserved.
  void end_compile_reservation(int arch);
  bool has_gpu_type(std::string_view gpu_type) const;
  // The GPUs' common type when they all share one ("H100"), else empty.
  std::string uniform_gpu_type() const;

  std::vector<GpuState> snapshot() const;
  size_t waiting() const;

private:
  using Clock = std::chrono::steady_clock;
  struct Slot {
    GpuDevice device;
    size_t holders = 0;
    size_t departing = 0; // holders that handed it over
    uint64_t grants = 0;
    Clock::time_point busy_since;
    double busy_ms = 0;
    // Holders granted it while it was not quiet, waiting to hear it is.
    std::vector<std::pair<Ticket, std::function<void()>>> awaiting_quiet;
  };
  struct Waiter {
    Ticket ticket; // tickets grow: a later waiter has a larger one
    DeviceWish wish;
    std::function<void(DeviceGrant)> on_grant;
    std::function<void()> on_quiet;
    size_t passed_over = 0; // later waiters granted a GPU that fit this one
  };
  struct Held {
    std::optional<size_t> slot; // nullopt: the CPU device
    bool departing = false;
  };

  bool fits(const Slot& slot, const DeviceWish& wish) const;
  int least_loaded_arch(const std::optional<std::string>& gpu_type) const; // with mutex_ held
  std::optional<size_t> free_slot(const DeviceWish& wish) const;
  bool is_free(const Slot& slot) const;
  // The GPU its worker opened ahead, when it fits the wish and is free.
  std::optional<size_t> opened_slot(const DeviceWish& wish) const;
  DeviceGrant take(size_t slot, Ticket ticket, std::function<void()> on_quiet);
  void deliver(std::function<void(DeviceGrant)> on_grant, DeviceGrant grant);
  void grant_waiters();                              // with mutex_ held
  void forget_quiet_wish(Slot& slot, Ticket ticket); // with mutex_ held

  boost::asio::any_io_executor executor_;
  const size_t jobs_per_gpu_;
  mutable std::mutex mutex_;
  std::vector<Slot> slots_;
  std::deque<Waiter> waiting_;
  std::unordered_map<Ticket, Held> held_;
  std::map<int, size_t> compiling_; // architecture -> jobs reserved to compile for it
  Ticket next_ticket_ = 1;
};

} // namespace keval::daemon
