// How much of each GPU its workers last found free (protocol::DeviceMemoryReading), for the pools
// of prestarted workers (warm_pool.hpp). An idle worker that opened its GPU ahead holds its
// contexts' memory there, and whatever its plugins' warm-up allocated; a pool readied for a burst
// holds that six times over per set, on a GPU whose next job may need all of it. On the H200 the
// mixed batch's three sets of ready workers and its jobs left 0.71 of the GPU free (0.62 with
// eight per set): on an 80 GB H100 that is past half. So a pool grows past its size only while the
// GPUs its workers open on have half their memory free, by the latest reading: a prestarted
// worker's once it has opened its device, and each job's as it ends (its processes stopped, not yet
// gone: a job's own memory counts as used, so the pools stay small while jobs are large).
//
// Only GPUs that prestarted workers open on count: each opens the one the pool named at its start
// (warm_pool.hpp, Sizing::gpus), and jobs' readings of any other decide nothing. Until a GPU has
// been read there is nothing to go by, and pools grow by the machine's memory alone: the first
// reading comes with the first job of a prestarted worker to end.
#pragma once

#include "protocol/job_contract.hpp"

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <boost/json/array.hpp>

namespace keval::supervisor {

class GpuMemoryReadings {
public:
  using Clock = std::chrono::steady_clock;
  // The share of a GPU that must be free for its pools to grow past their size: the same half a
  // job's handover leaves the next job (worker/pipeline: hand_over_device).
  static constexpr double kSpareFraction = 0.5;

  // A prestarted worker's reading (its hello, heard when its job ends): its GPU is one that idle
  // workers hold memory on. Its numbers count only for a GPU not read before (the worker may
  // have read them minutes ago).
  void record_prestarted(const protocol::DeviceMemoryReading& reading, Clock::time_point now);
  // A job's reading (its done), heard `now`.
  void record_job(const protocol::DeviceMemoryReading& reading, Clock::time_point now);

  // Whether every GPU that prestarted workers open on had at least kSpareFraction free at its
  // latest reading; true where none has been read.
  bool to_spare() const;

  // Each GPU read: {gpu, free_bytes, total_bytes, free_fraction, age_s, prestarted_workers_open}
  // by GPU, for /stats.
  boost::json::array report(Clock::time_point now) const;

private:
  struct Latest {
    protocol::DeviceMemoryReading reading;
    Clock::time_point at;
    bool prestarted_open = false; // a prestarted worker reported it
  };
  mutable std::mutex mutex_;
  std::map<std::string, Latest> by_gpu_;
};

} // namespace keval::supervisor
