// A side's `device_metrics` from the counters its runner read (worker/engine/device_counters.hpp):
// which Perfworks metrics a request's sections need, and the report grouped as seed 000's
// categories (speed of light, occupancy, memory, compute, detailed), every value with its unit,
// plus what is derived from them: theoretical occupancy and its limiters, FLOP counts by
// precision, and the kernel's place on the roofline. Trusted-side code: the counters are data
// from the process that ran the kernel and never touch the verdict.
#pragma once

#include "request/model.hpp"
#include "worker/engine/device_counters.hpp"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

namespace keval::worker::metrics {

// The Perfworks metrics to collect for `request`: its sections' own, the peaks the roofline
// needs, and the raw names it lists. Never empty for an enabled request.
std::vector<std::string> metrics_for(const request::DeviceMetricsRequest& request);

// The side's device_metrics. `nvtx_range`: the NVTX range the side's launches ran in.
boost::json::object build_report(const request::DeviceMetricsRequest& request,
                                 const DeviceCounters& counters, const std::string& nvtx_range);

// device_metrics where none could be collected: {"available": false, "reason"}.
boost::json::object unavailable_report(const std::string& reason);

// A launch's theoretical occupancy by the CUDA occupancy calculator's rules: resident blocks per
// SM as limited by warps, blocks, registers (allocated per warp in units of 256, per SM
// sub-partition) and shared memory (the kernel's own plus the driver's reserve, in units of 128
// bytes, against the carveout the driver configured). nullopt for an empty block.
struct Occupancy {
  double theoretical_percent = 0;
  int64_t warps_per_sm = 0;
  int64_t blocks_per_sm = 0;
  std::map<std::string, int64_t> block_limits; // "warps", "blocks", "registers", "shared_memory"
  std::vector<std::string> limiters;           // the limits that set blocks_per_sm
  double waves = 0;                            // blocks of the grid per blocks_per_sm on all SMs
};
std::optional<Occupancy> theoretical_occupancy(const LaunchShape& launch, const SmLimits& limits);

} // namespace keval::worker::metrics
