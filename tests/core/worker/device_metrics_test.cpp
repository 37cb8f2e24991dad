// The trusted side of device metrics (worker/metrics/device_metrics.hpp): which counters a
// request needs, the report made of them (sections, units, roofline), theoretical occupancy, and
// the checks on what a runner sends back. Values are an H100's (counters read on one).
#include "request/parse.hpp"
#include "worker/engine/device_counters.hpp"
#include "worker/metrics/device_metrics.hpp"

#include <algorithm>
#include <limits>

#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

namespace keval::worker {
namespace {

namespace json = boost::json;

const SmLimits kH100{132, 64, 32, 65536, 233472, 1024};

LaunchShape launch(int64_t block, int64_t registers, int64_t shared = 0, int64_t grid = 1024) {
  LaunchShape l;
  l.block[0] = block;
  l.grid[0] = grid;
  l.registers_per_thread = registers;
  l.static_shared_bytes = shared;
  l.shared_carveout_bytes = shared > 0 ? 233472 : 8192;
  return l;
}

TEST(TheoreticalOccupancy, FullWhenNothingLimitsIt) {
  const auto o = metrics::theoretical_occupancy(launch(256, 16), kH100);
  ASSERT_TRUE(o);
  EXPECT_DOUBLE_EQ(o->theoretical_percent, 100.0);
  EXPECT_EQ(o->blocks_per_sm, 8);
  EXPECT_EQ(o->limiters, std::vector<std::string>{"warps"});
}

TEST(TheoreticalOccupancy, RegistersLimitAHeavyKernel) {
  // 64 registers a thread: 2048 a warp, 8 warps per sub-partition, 32 per SM: one 1024-thread
  // block.
  const auto o = metrics::theoretical_occupancy(launch(1024, 64), kH100);
  ASSERT_TRUE(o);
  EXPECT_EQ(o->block_limits.at("registers"), 1);
  EXPECT_EQ(o->blocks_per_sm, 1);
  EXPECT_DOUBLE_EQ(o->theoretical_percent, 50.0);
  EXPECT_EQ(o->limiters, std::vector<std::string>{"registers"});
}

TEST(TheoreticalOccupancy, SharedMemoryLimitsAndTheDriversReserveCounts) {
  // 48 KiB + 1 KiB reserve a block: 4 blocks in 228 KiB.
  const auto o = metrics::theoretical_occupancy(launch(128, 32, 48 * 1024), kH100);
  ASSERT_TRUE(o);
  EXPECT_EQ(o->block_limits.at("shared_memory"), 4);
  EXPECT_EQ(o->limiters, std::vector<std::string>{"shared_memory"});
  EXPECT_DOUBLE_EQ(o->theoretical_percent, 100.0 * 16 / 64);
  EXPECT_DOUBLE_EQ(o->waves, 1024.0 / (4 * 132));
}

TEST(TheoreticalOccupancy, AnEmptyBlockHasNone) {
  EXPECT_FALSE(metrics::theoretical_occupancy(launch(0, 16), kH100));
}

request::DeviceMetricsRequest all_sections() {
  request::DeviceMetricsRequest r;
  r.sections.assign(std::begin(request::kDeviceMetricSections),
                    std::end(request::kDeviceMetricSections));
  return r;
}

// Counters as an H100 read them for a vector add of 32 M floats and a register-tiled FMA loop.
DeviceCounters h100_counters() {
  DeviceCounters c;
  c.chip = "GH100";
  c.passes = 16;
  c.limits = kH100;
  c.metrics = metrics::metrics_for(all_sections());
  const std::map<std::string, std::pair<double, double>> measured = {
      {"gpu__time_duration.sum", {150080, 630528}},
      {"dram__throughput.avg.pct_of_peak_sustained_elapsed", {81.79, 0.026}},
      {"sm__throughput.avg.pct_of_peak_sustained_elapsed", {18.07, 94.69}},
      {"dram__bytes_read.sum", {2.6847e8, 5376}},
      {"dram__bytes_write.sum", {1.24e8, 0}},
      {"sm__cycles_elapsed.avg.per_second", {1.9776e9, 1.9776e9}},
      {"dram__bytes.sum.peak_sustained", {1280, 1280}},
      {"dram__cycles_elapsed.avg.per_second", {2.6188e9, 2.6188e9}},
      {"sm__sass_thread_inst_executed_op_fadd_pred_on.sum", {3.35544e7, 7.56941e6}},
      {"sm__sass_thread_inst_executed_op_ffma_pred_on.sum", {0, 1.77167e10}},
      {"sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained", {16896, 16896}},
      {"sm__sass_thread_inst_executed_op_dfma_pred_on.sum.peak_sustained", {8448, 8448}},
      {"sm__sass_thread_inst_executed_op_hfma_pred_on.sum.peak_sustained", {16896, 16896}},
  };
  for (int k = 0; k < 2; ++k) {
    CountedKernel kernel;
    kernel.name = k == 0 ? "vadd" : "fma_loop";
    kernel.launch = k == 0 ? launch(256, 16, 0, 131072) : launch(1024, 22, 0, 528);
    for (const auto& m : c.metrics) {
      auto it = measured.find(m);
      kernel.values.push_back(it == measured.end()
                                  ? (m.find("pred_on.sum") != std::string::npos
                                         ? 0.0
                                         : std::numeric_limits<double>::quiet_NaN())
                                  : (k == 0 ? it->second.first : it->second.second));
    }
    c.kernels.push_back(std::move(kernel));
  }
  return c;
}

TEST(DeviceMetricsReport, VectorAddIsMemoryBoundAndAnFmaLoopComputeBound) {
  const json::object report = metrics::build_report(all_sections(), h100_counters(), "j_custom");
  ASSERT_TRUE(report.at("available").as_bool());
  EXPECT_EQ(report.at("nvtx_range").as_string(), "j_custom");
  EXPECT_NE(std::string(report.at("durations_and_dram_bytes").as_string()).find("range profiler"),
            std::string::npos)
      << "counters without an unreplayed run say whose numbers they are";
  const auto& kernels = report.at("kernels").as_array();
  ASSERT_EQ(kernels.size(), 2u);
  const auto& vadd = kernels[0].as_object();
  const auto& fma = kernels[1].as_object();
  EXPECT_EQ(vadd.at("roofline").at("bound").as_string(), "memory") << json::serialize(vadd);
  EXPECT_EQ(fma.at("roofline").at("bound").as_string(), "compute") << json::serialize(fma);
  EXPECT_EQ(fma.at("roofline").at("precision").as_string(), "fp32");
  // 1280 bytes a DRAM cycle at 2.6188 GHz: the H100's 3.35 TB/s.
  EXPECT_NEAR(vadd.at("roofline").at("peak_bandwidth").at("value").to_number<double>(), 3352, 1);
  EXPECT_EQ(vadd.at("speed_of_light").at("duration").at("unit").as_string(), "us");
  EXPECT_NEAR(vadd.at("speed_of_light").at("duration").at("value").to_number<double>(), 150.08,
              1e-9);
  EXPECT_EQ(vadd.at("memory").at("dram_bytes_read").at("unit").as_string(), "bytes");
  EXPECT_DOUBLE_EQ(vadd.at("occupancy").at("theoretical_occupancy").at("value").to_number<double>(),
                   100.0);
  EXPECT_NEAR(report.at("total_duration").at("value").to_number<double>(), 150.08 + 630.528, 1e-6);
  // Metrics the counters did not hold are absent, not zero.
  EXPECT_FALSE(vadd.at("memory").as_object().contains("l2_hit_rate"));
}

TEST(DeviceMetricsReport, OnlyTheSectionsAskedForAndTheRawMetricsListed) {
  request::DeviceMetricsRequest r;
  r.sections = {"memory"};
  r.metrics = {"sm__warps_active.avg.per_cycle_active"};
  const auto wanted = metrics::metrics_for(r);
  EXPECT_NE(std::find(wanted.begin(), wanted.end(), "dram__bytes_read.sum"), wanted.end());
  EXPECT_NE(std::find(wanted.begin(), wanted.end(), "sm__warps_active.avg.per_cycle_active"),
            wanted.end());
  EXPECT_EQ(std::find(wanted.begin(), wanted.end(), "sm__inst_executed.sum"), wanted.end())
      << "detailed was not asked for";
  DeviceCounters c;
  c.chip = "GH100";
  c.metrics = {"dram__bytes_read.sum", "sm__warps_active.avg.per_cycle_active"};
  c.kernels.push_back({"k", std::nullopt, {1024.0, 40.0}});
  const json::object report = metrics::build_report(r, c, "");
  const auto& kernel = report.at("kernels").at(0).as_object();
  EXPECT_TRUE(kernel.contains("memory"));
  EXPECT_FALSE(kernel.contains("occupancy"));
  EXPECT_DOUBLE_EQ(kernel.at("metrics").at("sm__warps_active.avg.per_cycle_active").as_double(),
                   40.0);
  EXPECT_FALSE(kernel.at("roofline").at("available").as_bool()) << "its counters were not read";
}

// A kernel measured in a run of its own (CountedKernel::unreplayed): its duration and DRAM bytes
// are that run's, and the DRAM bandwidth and throughput follow from them, in place of the range
// profiler's values; the other counters stay the profiler's.
TEST(DeviceMetricsReport, AnUnreplayedRunGivesTheDurationTheBytesAndWhatFollows) {
  DeviceCounters c = h100_counters();
  c.traffic = "unreplayed";
  c.kernels[0].unreplayed = UnreplayedRun{100000, 2.0e8, 1.0e8}; // 100 us, 300 MB
  const json::object report = metrics::build_report(all_sections(), c, "");
  const auto& vadd = report.at("kernels").at(0).as_object();
  const auto value = [&](const char* section, const char* key) {
    return vadd.at(section).at(key).at("value").to_number<double>();
  };
  EXPECT_NEAR(value("speed_of_light", "duration"), 100.0, 1e-9);
  EXPECT_DOUBLE_EQ(value("memory", "dram_bytes_read"), 2.0e8);
  EXPECT_DOUBLE_EQ(value("memory", "dram_bytes_written"), 1.0e8);
  EXPECT_NEAR(value("memory", "dram_bandwidth"), 3000, 1e-6); // GB/s
  EXPECT_NEAR(value("speed_of_light", "dram_throughput"), 100 * 3.0e12 / (1280 * 2.6188e9), 1e-9);
  EXPECT_NEAR(value("speed_of_light", "sm_throughput"), 18.07, 1e-9) << "the profiler's";
  // The FMA loop has no run of its own: the range profiler's duration.
  EXPECT_NEAR(report.at("kernels")
                  .at(1)
                  .at("speed_of_light")
                  .at("duration")
                  .at("value")
                  .to_number<double>(),
              630.528, 1e-9);

  const DeviceCounters back = device_counters_from_json(to_json(c));
  ASSERT_TRUE(back.kernels[0].unreplayed.has_value());
  EXPECT_DOUBLE_EQ(back.kernels[0].unreplayed->dram_read_bytes, 2.0e8);
  EXPECT_FALSE(back.kernels[1].unreplayed.has_value());
  json::object bad = to_json(c);
  bad["kernels"].as_array()[0].as_object()["unreplayed"].as_object()["duration_ns"] = -1;
  EXPECT_THROW(device_counters_from_json(bad), std::invalid_argument);
  EXPECT_NE(std::string(report.at("durations_and_dram_bytes").as_string())
                .find("durations are gpu__time_duration"),
            std::string::npos)
      << json::serialize(report.at("durations_and_dram_bytes"));

  // Where gpu__time_duration could not be read, the durations are the trace's and the report
  // says why.
  c.trace_durations = "the launch ran more than 2 kernels";
  const json::object traced = metrics::build_report(all_sections(), c, "");
  const std::string source(traced.at("durations_and_dram_bytes").as_string());
  EXPECT_NE(source.find("durations are the trace's intervals"), std::string::npos) << source;
  EXPECT_NE(source.find("the launch ran more than 2 kernels"), std::string::npos) << source;
  EXPECT_EQ(device_counters_from_json(to_json(c)).trace_durations, c.trace_durations);
}

TEST(DeviceCountersWire, RoundTripsAndRejectsWhatARunnerShouldNotSend) {
  DeviceCounters c = h100_counters();
  c.traffic = "unreplayed";
  const DeviceCounters back = device_counters_from_json(to_json(c));
  EXPECT_EQ(back.traffic, "unreplayed");
  ASSERT_EQ(back.kernels.size(), 2u);
  EXPECT_EQ(back.metrics, c.metrics);
  EXPECT_EQ(back.kernels[1].launch->block[0], 1024);
  EXPECT_EQ(back.limits->registers, 65536);

  json::object bad = to_json(c);
  bad["kernels"].as_array()[0].as_object()["values"].as_array().pop_back();
  EXPECT_THROW(device_counters_from_json(bad), std::invalid_argument) << "one value per metric";
  bad = to_json(c);
  bad["kernels"].as_array()[0].as_object()["values"].as_array()[0] = "fast";
  EXPECT_THROW(device_counters_from_json(bad), std::invalid_argument);
  bad = to_json(c);
  json::array many;
  for (size_t i = 0; i <= kMaxCountedKernels; ++i)
    many.push_back(bad["kernels"].as_array()[0]);
  bad["kernels"] = std::move(many);
  EXPECT_THROW(device_counters_from_json(bad), std::invalid_argument);
  bad = to_json(c);
  bad["kernels"].as_array()[0].as_object()["name"] = "evil\x1b[2Jname";
  EXPECT_EQ(device_counters_from_json(bad).kernels[0].name, "evil?[2Jname");
}

request::EvalRequest parse(const std::string& text) {
  return request::parse_request_text(text, request::EvalRequest::Mode::compare);
}

const char* kCompare = R"({"ref_kernel": {"source_code": "x", "kernel_type": "torch"%s},
  "custom_kernel": {"source_code": "y", "kernel_type": "torch"%s}%s})";

std::string compare_with(const std::string& ref, const std::string& custom,
                         const std::string& top) {
  char buffer[1024];
  std::snprintf(buffer, sizeof buffer, kCompare, ref.c_str(), custom.c_str(), top.c_str());
  return buffer;
}

TEST(DeviceMetricsRequest, TrueFalseAndListsPerRequestAndPerSide) {
  auto r = parse(compare_with("", "", ""));
  EXPECT_FALSE(r.device_metrics_for(r.kernel));
  r = parse(compare_with("", "", R"(, "device_metrics": true)"));
  ASSERT_TRUE(r.device_metrics_for(r.kernel));
  EXPECT_EQ(r.device_metrics_for(r.kernel)->sections.size(), 5u);
  EXPECT_TRUE(r.device_metrics_for(*r.ref));
  r = parse(compare_with(R"(, "device_metrics": ["occupancy", "lts__t_bytes.sum"])",
                         R"(, "device_metrics": false)", R"(, "device_metrics": true)"));
  EXPECT_FALSE(r.device_metrics_for(r.kernel)) << "the side's false wins";
  ASSERT_TRUE(r.device_metrics_for(*r.ref));
  EXPECT_EQ(r.device_metrics_for(*r.ref)->sections, std::vector<std::string>{"occupancy"});
  EXPECT_EQ(r.device_metrics_for(*r.ref)->metrics, std::vector<std::string>{"lts__t_bytes.sum"});
}

TEST(DeviceMetricsRequest, ABadEntryIsRejectedWithItsPath) {
  const auto path_of = [](const std::string& text) {
    try {
      parse(text);
    } catch (const request::RequestError& e) {
      return e.path();
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(path_of(compare_with("", "", R"(, "device_metrics": ["memory", "speed"])")),
            "device_metrics[1]");
  EXPECT_EQ(path_of(compare_with("", R"(, "device_metrics": "yes")", "")),
            "custom_kernel.device_metrics");
  EXPECT_EQ(path_of(compare_with("", "", R"(, "device_metrics": [])")), "device_metrics");
  for (const char* bad : {"dram__bytes..sum", "__x", "dram__", "Dram__bytes", "a__b;rm", "a__b."})
    EXPECT_EQ(
        path_of(compare_with("", "", std::string(R"(, "device_metrics": [")") + bad + R"("])")),
        "device_metrics[0]")
        << bad;
}

} // namespace
} // namespace keval::worker
