#include "worker/metrics/device_metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>

#include <boost/json/array.hpp>

namespace keval::worker::metrics {

namespace json = boost::json;

namespace {

// One reported value: which section, under which key, from which Perfworks metric, in which
// unit (value = metric * scale). The names are ncu's, so `ncu --metrics` reads the same counters.
struct Entry {
  std::string_view section, key, metric, unit;
  double scale = 1;
};

constexpr Entry kCatalogue[] = {
    {"speed_of_light", "duration", "gpu__time_duration.sum", "us", 1e-3},
    {"speed_of_light", "sm_throughput", "sm__throughput.avg.pct_of_peak_sustained_elapsed", "%"},
    {"speed_of_light", "memory_throughput",
     "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "%"},
    {"speed_of_light", "dram_throughput", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
     "%"},
    {"speed_of_light", "l1_throughput", "l1tex__throughput.avg.pct_of_peak_sustained_active", "%"},
    {"speed_of_light", "l2_throughput", "lts__throughput.avg.pct_of_peak_sustained_elapsed", "%"},
    {"speed_of_light", "elapsed_cycles", "gpc__cycles_elapsed.max", "cycles"},
    {"speed_of_light", "sm_frequency", "gpc__cycles_elapsed.avg.per_second", "GHz", 1e-9},
    {"speed_of_light", "dram_frequency", "dram__cycles_elapsed.avg.per_second", "GHz", 1e-9},
    {"occupancy", "achieved_occupancy", "sm__warps_active.avg.pct_of_peak_sustained_active", "%"},
    {"occupancy", "achieved_active_warps_per_sm", "sm__warps_active.avg.per_cycle_active", "warps"},
    {"memory", "dram_bytes_read", "dram__bytes_read.sum", "bytes"},
    {"memory", "dram_bytes_written", "dram__bytes_write.sum", "bytes"},
    {"memory", "dram_bandwidth", "dram__bytes.sum.per_second", "GB/s", 1e-9},
    {"memory", "l1_hit_rate", "l1tex__t_sector_hit_rate.pct", "%"},
    {"memory", "l2_hit_rate", "lts__t_sector_hit_rate.pct", "%"},
    {"memory", "l1_bytes", "l1tex__t_bytes.sum", "bytes"},
    {"memory", "l2_bytes", "lts__t_bytes.sum", "bytes"},
    {"compute", "sm_busy", "sm__instruction_throughput.avg.pct_of_peak_sustained_active", "%"},
    {"compute", "issue_slots_busy", "sm__inst_issued.avg.pct_of_peak_sustained_active", "%"},
    {"compute", "fma_pipe_utilization",
     "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active", "%"},
    {"compute", "alu_pipe_utilization",
     "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active", "%"},
    {"compute", "fp64_pipe_utilization",
     "sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_active", "%"},
    {"compute", "tensor_pipe_utilization",
     "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active", "%"},
    {"compute", "tensor_ops_fp16", "sm__ops_path_tensor_src_fp16.sum", "ops"},
    {"compute", "tensor_ops_bf16", "sm__ops_path_tensor_src_bf16_dst_fp32.sum", "ops"},
    {"compute", "tensor_ops_tf32", "sm__ops_path_tensor_src_tf32_dst_fp32.sum", "ops"},
    {"compute", "tensor_ops_fp64", "sm__ops_path_tensor_src_fp64.sum", "ops"},
    {"compute", "tensor_ops_fp8", "sm__ops_path_tensor_src_fp8.sum", "ops"},
    {"compute", "tensor_ops_int8", "sm__ops_path_tensor_src_int8.sum", "ops"},
    {"detailed", "ipc", "sm__inst_executed.avg.per_cycle_active", "inst/cycle"},
    {"detailed", "instructions", "sm__inst_executed.sum", "inst"},
    {"detailed", "active_cycles", "sm__cycles_active.avg", "cycles"},
    {"detailed", "threads_per_instruction", "smsp__thread_inst_executed_per_inst_executed.ratio",
     "threads"},
};

// Floating-point work by precision: FLOPs = add + mul + 2 * fma, thread instructions (ncu's
// roofline counts them the same way), and the FMA peak per cycle for that precision's roof.
struct Precision {
  std::string_view name, add, mul, fma, fma_peak;
};
constexpr Precision kPrecisions[] = {
    {"fp32", "sm__sass_thread_inst_executed_op_fadd_pred_on.sum",
     "sm__sass_thread_inst_executed_op_fmul_pred_on.sum",
     "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
     "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained"},
    {"fp64", "sm__sass_thread_inst_executed_op_dadd_pred_on.sum",
     "sm__sass_thread_inst_executed_op_dmul_pred_on.sum",
     "sm__sass_thread_inst_executed_op_dfma_pred_on.sum",
     "sm__sass_thread_inst_executed_op_dfma_pred_on.sum.peak_sustained"},
    {"fp16", "sm__sass_thread_inst_executed_op_hadd_pred_on.sum",
     "sm__sass_thread_inst_executed_op_hmul_pred_on.sum",
     "sm__sass_thread_inst_executed_op_hfma_pred_on.sum",
     "sm__sass_thread_inst_executed_op_hfma_pred_on.sum.peak_sustained"},
};
constexpr std::string_view kSmClock = "sm__cycles_elapsed.avg.per_second";
constexpr std::string_view kDramPeakPerCycle = "dram__bytes.sum.peak_sustained";
constexpr std::string_view kDramClock = "dram__cycles_elapsed.avg.per_second";
constexpr std::string_view kDuration = "gpu__time_duration.sum";
constexpr std::string_view kDramRead = "dram__bytes_read.sum";
constexpr std::string_view kDramWrite = "dram__bytes_write.sum";
constexpr std::string_view kDramBandwidth = "dram__bytes.sum.per_second";
constexpr std::string_view kDramThroughput = "dram__throughput.avg.pct_of_peak_sustained_elapsed";

bool wants(const request::DeviceMetricsRequest& r, std::string_view section) {
  return std::find(r.sections.begin(), r.sections.end(), section) != r.sections.end();
}

void add_unique(std::vector<std::string>& into, std::string_view metric) {
  if (std::find(into.begin(), into.end(), metric) == into.end())
    into.emplace_back(metric);
}

// The roofline needs the duration, the FLOPs of each precision, DRAM traffic and the peaks: part
// of any request that names a section.
std::vector<std::string_view> roofline_metrics() {
  std::vector<std::string_view> m{kDuration, kDramRead,         kDramWrite,
                                  kSmClock,  kDramPeakPerCycle, kDramClock};
  for (const auto& p : kPrecisions)
    m.insert(m.end(), {p.add, p.mul, p.fma, p.fma_peak});
  return m;
}

json::object with_unit(double value, std::string_view unit) {
  return json::object{{"value", value}, {"unit", unit}};
}

class Values;
std::optional<double> dram_peak(const Values& v);

// One kernel's values by metric name; NaN (not evaluated) and unsupported metrics are absent.
// Where the kernel was measured in a run of its own (CountedKernel::unreplayed), its duration
// and DRAM bytes are that run's, and so are the DRAM bandwidth and throughput that follow from
// them, for each of those metrics that was collected.
class Values {
public:
  Values(const DeviceCounters& c, const CountedKernel& k) {
    for (size_t i = 0; i < c.metrics.size() && i < k.values.size(); ++i)
      if (std::isfinite(k.values[i]))
        by_name_.emplace(c.metrics[i], k.values[i]);
    if (k.unreplayed)
      take_unreplayed(c, *k.unreplayed);
  }
  std::optional<double> get(std::string_view metric) const {
    auto it = by_name_.find(std::string(metric));
    if (it == by_name_.end())
      return std::nullopt;
    return it->second;
  }

private:
  void take_unreplayed(const DeviceCounters& c, const UnreplayedRun& run) {
    const auto collected = [&c](std::string_view metric) {
      return std::find(c.metrics.begin(), c.metrics.end(), metric) != c.metrics.end();
    };
    const auto set = [&](std::string_view metric, double value) {
      if (collected(metric))
        by_name_[std::string(metric)] = value;
    };
    set(kDramRead, run.dram_read_bytes);
    set(kDramWrite, run.dram_write_bytes);
    if (run.duration_ns <= 0)
      return;
    set(kDuration, run.duration_ns);
    if (!collected(kDramRead) || !collected(kDramWrite))
      return;
    const double per_second =
        (run.dram_read_bytes + run.dram_write_bytes) / (run.duration_ns * 1e-9);
    set(kDramBandwidth, per_second);
    if (const auto peak = dram_peak(*this); peak && *peak > 0)
      set(kDramThroughput, 100 * per_second / *peak);
  }

  std::map<std::string, double> by_name_;
};

// The DRAM's peak bandwidth in bytes per second: peak bytes per DRAM cycle times its clock.
std::optional<double> dram_peak(const Values& v) {
  const auto per_cycle = v.get(kDramPeakPerCycle), clock = v.get(kDramClock);
  if (!per_cycle || !clock)
    return std::nullopt;
  return *per_cycle * *clock;
}

json::object roofline(const Values& v) {
  json::object out;
  const auto duration_ns = v.get(kDuration);
  const auto read = v.get(kDramRead), written = v.get(kDramWrite);
  const auto sm_clock = v.get(kSmClock), dram_bandwidth = dram_peak(v);
  if (!duration_ns || *duration_ns <= 0 || !read || !written || !sm_clock || !dram_bandwidth) {
    out["available"] = false;
    out["reason"] = "the counters it needs (duration, DRAM bytes, clocks, peaks) were not all "
                    "collected on this GPU";
    return out;
  }
  // The precision that did the most floating-point work places the kernel.
  const Precision* chosen = nullptr;
  double flops = 0, fma_peak = 0;
  json::object by_precision;
  for (const auto& p : kPrecisions) {
    const auto add = v.get(p.add), mul = v.get(p.mul), fma = v.get(p.fma), peak = v.get(p.fma_peak);
    if (!add || !mul || !fma)
      continue;
    const double f = *add + *mul + 2 * *fma;
    by_precision[p.name] = with_unit(f, "FLOP");
    if (peak && (chosen == nullptr || f > flops)) {
      chosen = &p;
      flops = f;
      fma_peak = *peak;
    }
  }
  if (chosen == nullptr) {
    out["available"] = false;
    out["reason"] = "no floating-point instruction counters on this GPU";
    return out;
  }
  const double bytes = *read + *written;
  const double seconds = *duration_ns * 1e-9;
  const double peak_flops = 2 * fma_peak * *sm_clock;
  const double peak_bandwidth = *dram_bandwidth;
  const double ridge = peak_bandwidth > 0 ? peak_flops / peak_bandwidth : 0;
  out["available"] = true;
  out["precision"] = chosen->name;
  out["flops"] = std::move(by_precision);
  out["achieved"] = with_unit(flops / seconds * 1e-9, "GFLOP/s");
  out["peak_compute"] = with_unit(peak_flops * 1e-9, "GFLOP/s");
  out["peak_bandwidth"] = with_unit(peak_bandwidth * 1e-9, "GB/s");
  out["ridge_point"] = with_unit(ridge, "FLOP/byte");
  if (bytes > 0) {
    const double intensity = flops / bytes;
    const double roof = std::min(peak_flops, intensity * peak_bandwidth);
    out["arithmetic_intensity"] = with_unit(intensity, "FLOP/byte");
    out["bound"] = intensity < ridge ? "memory" : "compute";
    out["fraction_of_roof"] = roof > 0 ? flops / seconds / roof : 0.0;
  } else {
    // Nothing reached DRAM: no memory roof to be under.
    out["arithmetic_intensity"] = nullptr;
    out["bound"] = "compute";
    out["fraction_of_roof"] = peak_flops > 0 ? flops / seconds / peak_flops : 0.0;
  }
  return out;
}

json::object occupancy_json(const LaunchShape& launch, const std::optional<SmLimits>& limits) {
  json::object o;
  const int64_t threads = launch.block[0] * launch.block[1] * launch.block[2];
  o["block_size"] = with_unit(static_cast<double>(threads), "threads");
  o["grid_size"] =
      with_unit(static_cast<double>(launch.grid[0] * launch.grid[1] * launch.grid[2]), "blocks");
  o["registers_per_thread"] =
      with_unit(static_cast<double>(launch.registers_per_thread), "registers");
  o["shared_memory_per_block"] = with_unit(
      static_cast<double>(launch.static_shared_bytes + launch.dynamic_shared_bytes), "bytes");
  if (!limits)
    return o;
  const auto occupancy = theoretical_occupancy(launch, *limits);
  if (!occupancy)
    return o;
  o["theoretical_occupancy"] = with_unit(occupancy->theoretical_percent, "%");
  o["theoretical_active_warps_per_sm"] =
      with_unit(static_cast<double>(occupancy->warps_per_sm), "warps");
  json::object block_limits;
  for (const auto& [name, blocks] : occupancy->block_limits)
    block_limits[name] = blocks;
  o["block_limits"] = std::move(block_limits);
  json::array limiters;
  for (const auto& l : occupancy->limiters)
    limiters.emplace_back(l);
  o["limiters"] = std::move(limiters);
  o["waves_per_sm"] = with_unit(occupancy->waves, "waves");
  return o;
}

int64_t round_up(int64_t value, int64_t unit) {
  return (value + unit - 1) / unit * unit;
}

} // namespace

std::optional<Occupancy> theoretical_occupancy(const LaunchShape& launch, const SmLimits& limits) {
  constexpr int64_t kWarpSize = 32, kRegisterUnit = 256, kSubPartitions = 4, kSharedUnit = 128;
  const int64_t threads = launch.block[0] * launch.block[1] * launch.block[2];
  if (threads <= 0 || limits.max_warps <= 0 || limits.max_blocks <= 0)
    return std::nullopt;
  const int64_t warps_per_block = (threads + kWarpSize - 1) / kWarpSize;
  Occupancy o;
  o.block_limits["warps"] = limits.max_warps / warps_per_block;
  o.block_limits["blocks"] = limits.max_blocks;
  int64_t by_registers = limits.max_blocks;
  if (launch.registers_per_thread > 0 && limits.registers > 0) {
    const int64_t per_warp = round_up(launch.registers_per_thread * kWarpSize, kRegisterUnit);
    const int64_t warps = (limits.registers / kSubPartitions / per_warp) * kSubPartitions;
    by_registers = warps / warps_per_block;
  }
  o.block_limits["registers"] = by_registers;
  // A kernel with no shared memory of its own is not held back by the driver's reserve: the
  // driver picks the carveout for what the kernel asks.
  int64_t by_shared = limits.max_blocks;
  const int64_t own_shared = launch.static_shared_bytes + launch.dynamic_shared_bytes;
  if (own_shared > 0) {
    const int64_t per_block = round_up(own_shared + limits.reserved_shared_per_block, kSharedUnit);
    const int64_t carveout =
        launch.shared_carveout_bytes > 0 ? launch.shared_carveout_bytes : limits.shared_bytes;
    by_shared = per_block > 0 ? carveout / per_block : limits.max_blocks;
  }
  o.block_limits["shared_memory"] = by_shared;
  o.blocks_per_sm = limits.max_blocks;
  for (const auto& [name, blocks] : o.block_limits)
    o.blocks_per_sm = std::min(o.blocks_per_sm, blocks);
  for (const auto& [name, blocks] : o.block_limits)
    if (blocks == o.blocks_per_sm && name != "blocks")
      o.limiters.push_back(name);
  if (o.limiters.empty())
    o.limiters.emplace_back("blocks");
  o.warps_per_sm = o.blocks_per_sm * warps_per_block;
  o.theoretical_percent =
      100.0 * static_cast<double>(o.warps_per_sm) / static_cast<double>(limits.max_warps);
  const int64_t grid = launch.grid[0] * launch.grid[1] * launch.grid[2];
  if (o.blocks_per_sm > 0 && limits.sm_count > 0)
    o.waves = static_cast<double>(grid) / static_cast<double>(o.blocks_per_sm * limits.sm_count);
  return o;
}

std::vector<std::string> metrics_for(const request::DeviceMetricsRequest& request) {
  std::vector<std::string> out;
  for (const Entry& e : kCatalogue)
    if (wants(request, e.section))
      add_unique(out, e.metric);
  if (wants(request, "compute"))
    for (const auto& p : kPrecisions)
      for (auto m : {p.add, p.mul, p.fma})
        add_unique(out, m);
  if (!request.sections.empty())
    for (auto m : roofline_metrics())
      add_unique(out, m);
  for (const auto& m : request.metrics)
    add_unique(out, m);
  return out;
}

json::object unavailable_report(const std::string& reason) {
  return json::object{{"available", false}, {"reason", reason}};
}

json::object build_report(const request::DeviceMetricsRequest& request,
                          const DeviceCounters& counters, const std::string& nvtx_range) {
  json::object report;
  report["available"] = true;
  report["source"] = "CUPTI range profiler in the process that ran the kernel, after its timing: "
                     "one run of the launch (L2 flushed first), each kernel replayed per pass";
  report["chip"] = counters.chip;
  report["passes"] = counters.passes;
  report["durations_and_dram_bytes"] =
      counters.traffic == "unreplayed"
          ? (counters.trace_durations.empty()
                 ? std::string("from runs of their own, neither replayed nor restored: durations "
                               "are gpu__time_duration as ncu reads it (the median of 5 runs), "
                               "DRAM bytes from PM sampling of the device over the kernel's "
                               "trace interval")
                 : "from a run of their own, neither replayed nor restored: durations are the "
                   "trace's intervals (first block to last; gpu__time_duration could not be "
                   "read: " +
                       counters.trace_durations +
                       "), DRAM bytes from PM sampling of the device over them")
      : counters.traffic.empty() ? std::string("the range profiler's (kernel replay)")
                                 : counters.traffic;
  if (!nvtx_range.empty())
    report["nvtx_range"] = nvtx_range;
  json::array sections;
  for (const auto& s : request.sections)
    sections.emplace_back(s);
  report["sections"] = std::move(sections);
  json::array kernels;
  double total_us = 0;
  for (const CountedKernel& k : counters.kernels) {
    const Values values(counters, k);
    json::object kernel;
    kernel["name"] = k.name;
    for (const auto& section : request.sections)
      kernel[section] = json::object();
    for (const Entry& e : kCatalogue) {
      if (!wants(request, e.section))
        continue;
      if (const auto v = values.get(e.metric))
        kernel[e.section].as_object()[e.key] = with_unit(*v * e.scale, e.unit);
    }
    if (wants(request, "memory")) {
      if (const auto peak = dram_peak(values))
        kernel["memory"].as_object()["dram_peak_bandwidth"] = with_unit(*peak * 1e-9, "GB/s");
    }
    if (wants(request, "occupancy") && k.launch)
      for (auto& [key, value] : occupancy_json(*k.launch, counters.limits))
        kernel["occupancy"].as_object()[key] = value;
    if (!request.sections.empty())
      kernel["roofline"] = roofline(values);
    if (!request.metrics.empty()) {
      json::object raw;
      for (const auto& m : request.metrics)
        if (const auto v = values.get(m))
          raw[m] = *v;
      kernel["metrics"] = std::move(raw);
    }
    if (const auto d = values.get(kDuration))
      total_us += *d * 1e-3;
    kernels.push_back(std::move(kernel));
  }
  report["kernel_count"] = static_cast<int64_t>(counters.kernels.size());
  report["total_duration"] = with_unit(total_us, "us");
  report["kernels"] = std::move(kernels);
  if (counters.not_counted > 0)
    report["kernels_not_counted"] = counters.not_counted;
  if (!counters.unsupported.empty()) {
    json::array unsupported;
    for (const auto& [metric, why] : counters.unsupported)
      unsupported.push_back(json::object{{"metric", metric}, {"reason", why}});
    report["unsupported"] = std::move(unsupported);
  }
  return report;
}

} // namespace keval::worker::metrics
