#include "worker/cuda/detail/counter_profiler.hpp"

#include "worker/cuda/detail/cupti_library.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>

#if KEVAL_HAVE_CUPTI
#include <cupti.h>
#include <cupti_pmsampling.h>
#include <cupti_profiler_host.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>
#include <dlfcn.h>
#endif

namespace keval::worker::detail {

#if KEVAL_HAVE_CUPTI
namespace {

// Every CUPTI entry point the profiler uses, with the types CUPTI's headers declare.
#define KEVAL_PROFILER_FUNCTIONS(X)                                                                \
  X(cuptiGetResultString)                                                                          \
  X(cuptiProfilerInitialize)                                                                       \
  X(cuptiDeviceGetChipName)                                                                        \
  X(cuptiProfilerGetCounterAvailability)                                                           \
  X(cuptiRangeProfilerEnable)                                                                      \
  X(cuptiRangeProfilerDisable)                                                                     \
  X(cuptiRangeProfilerSetConfig)                                                                   \
  X(cuptiRangeProfilerStart)                                                                       \
  X(cuptiRangeProfilerStop)                                                                        \
  X(cuptiRangeProfilerDecodeData)                                                                  \
  X(cuptiRangeProfilerGetCounterDataSize)                                                          \
  X(cuptiRangeProfilerCounterDataImageInitialize)                                                  \
  X(cuptiRangeProfilerGetCounterDataInfo)                                                          \
  X(cuptiProfilerHostInitialize)                                                                   \
  X(cuptiProfilerHostDeinitialize)                                                                 \
  X(cuptiProfilerHostConfigAddMetrics)                                                             \
  X(cuptiProfilerHostGetConfigImageSize)                                                           \
  X(cuptiProfilerHostGetConfigImage)                                                               \
  X(cuptiProfilerHostGetNumOfPasses)                                                               \
  X(cuptiProfilerHostEvaluateToGpuValues)                                                          \
  X(cuptiPmSamplingGetCounterAvailability)                                                         \
  X(cuptiPmSamplingEnable)                                                                         \
  X(cuptiPmSamplingDisable)                                                                        \
  X(cuptiPmSamplingSetConfig)                                                                      \
  X(cuptiPmSamplingGetCounterDataSize)                                                             \
  X(cuptiPmSamplingCounterDataImageInitialize)                                                     \
  X(cuptiPmSamplingStart)                                                                          \
  X(cuptiPmSamplingStop)                                                                           \
  X(cuptiPmSamplingDecodeData)                                                                     \
  X(cuptiPmSamplingGetCounterDataInfo)                                                             \
  X(cuptiPmSamplingCounterDataGetSampleInfo)

struct ProfilerApi {
#define KEVAL_PROFILER_DECLARE(name) decltype(&::name) name = nullptr;
  KEVAL_PROFILER_FUNCTIONS(KEVAL_PROFILER_DECLARE)
#undef KEVAL_PROFILER_DECLARE
};

// Loads CUPTI's profiler once per process; the reason when it cannot (empty when it could).
std::string load(ProfilerApi& api) {
  std::string why;
  void* handle = open_cupti_library(why);
  if (handle == nullptr)
    return why;
#define KEVAL_PROFILER_RESOLVE(name)                                                               \
  api.name = reinterpret_cast<decltype(api.name)>(::dlsym(handle, #name));                         \
  if (api.name == nullptr)                                                                         \
    return "CUPTI (" + cupti_soname() + ") lacks " #name " (the range profiler needs CUDA 12.6+)";
  KEVAL_PROFILER_FUNCTIONS(KEVAL_PROFILER_RESOLVE)
#undef KEVAL_PROFILER_RESOLVE
  CUpti_Profiler_Initialize_Params init{CUpti_Profiler_Initialize_Params_STRUCT_SIZE};
  if (const CUptiResult r = api.cuptiProfilerInitialize(&init); r != CUPTI_SUCCESS) {
    const char* text = nullptr;
    api.cuptiGetResultString(r, &text);
    return std::string("CUPTI's profiler did not initialise: ") + (text ? text : "?");
  }
  return {};
}

const ProfilerApi& api() {
  static ProfilerApi loaded;
  static const std::string why = load(loaded);
  if (!why.empty())
    throw CountersUnavailable(why);
  return loaded;
}

std::string text_of(CUptiResult result) {
  const char* text = nullptr;
  if (api().cuptiGetResultString(result, &text) == CUPTI_SUCCESS && text != nullptr)
    return text;
  return "CUPTI error " + std::to_string(static_cast<int>(result));
}

// What a failed call means for the user; the driver's restriction is the common one.
[[noreturn]] void unavailable(const char* step, CUptiResult result) {
  if (result == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)
    throw CountersUnavailable(
        std::string("the GPU driver lets only administrators read performance counters "
                    "(NVreg_RestrictProfilingToAdminUsers=1) and the kernel's process runs "
                    "without CAP_SYS_ADMIN (") +
        step + ": " + text_of(result) + "); docs/device_metrics.md says how to allow it");
  if (result == CUPTI_ERROR_HARDWARE_BUSY)
    throw CountersBusy(std::string("another process is reading the GPU's counters (") + step +
                       ": " + text_of(result) + ")");
  if (result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
    throw CountersUnavailable(std::string("another profiler holds the GPU's counters (") + step +
                              ": " + text_of(result) + ")");
  if (result == CUPTI_ERROR_NOT_SUPPORTED ||
      result == CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED ||
      result == CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED ||
      result == CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED)
    throw CountersUnavailable(std::string("this GPU or its mode does not support counter "
                                          "collection (") +
                              step + ": " + text_of(result) + ")");
  throw CountersUnavailable(std::string(step) + " failed: " + text_of(result));
}

void check(const char* step, CUptiResult result) {
  if (result != CUPTI_SUCCESS)
    unavailable(step, result);
}

// The host side of the profiler for one chip: metric names to a configuration, counter data to
// values. Deinitialised when it goes.
class HostObject {
public:
  HostObject(const std::string& chip, const std::vector<uint8_t>& availability,
             CUpti_ProfilerType type = CUPTI_PROFILER_TYPE_RANGE_PROFILER) {
    CUpti_Profiler_Host_Initialize_Params p{CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE};
    p.profilerType = type;
    p.pChipName = chip.c_str();
    p.pCounterAvailabilityImage = availability.data();
    check("initialising the profiler's host side", api().cuptiProfilerHostInitialize(&p));
    object_ = p.pHostObject;
  }
  ~HostObject() {
    CUpti_Profiler_Host_Deinitialize_Params p{CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE};
    p.pHostObject = object_;
    api().cuptiProfilerHostDeinitialize(&p);
  }
  HostObject(const HostObject&) = delete;
  HostObject& operator=(const HostObject&) = delete;

  CUptiResult add(const std::vector<const char*>& names) {
    CUpti_Profiler_Host_ConfigAddMetrics_Params p{
        CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE};
    p.pHostObject = object_;
    p.ppMetricNames = const_cast<const char**>(names.data());
    p.numMetrics = names.size();
    return api().cuptiProfilerHostConfigAddMetrics(&p);
  }

  std::vector<uint8_t> config_image() {
    CUpti_Profiler_Host_GetConfigImageSize_Params size{
        CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE};
    size.pHostObject = object_;
    check("sizing the counter configuration", api().cuptiProfilerHostGetConfigImageSize(&size));
    std::vector<uint8_t> image(size.configImageSize);
    CUpti_Profiler_Host_GetConfigImage_Params p{
        CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE};
    p.pHostObject = object_;
    p.configImageSize = image.size();
    p.pConfigImage = image.data();
    check("building the counter configuration", api().cuptiProfilerHostGetConfigImage(&p));
    return image;
  }

  void evaluate(const std::vector<uint8_t>& data, size_t range,
                const std::vector<const char*>& names, std::vector<double>& values) {
    values.assign(names.size(), std::numeric_limits<double>::quiet_NaN());
    CUpti_Profiler_Host_EvaluateToGpuValues_Params p{
        CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE};
    p.pHostObject = object_;
    p.pCounterDataImage = data.data();
    p.counterDataImageSize = data.size();
    p.rangeIndex = range;
    p.ppMetricNames = const_cast<const char**>(names.data());
    p.numMetrics = names.size();
    p.pMetricValues = values.data();
    check("evaluating the counters", api().cuptiProfilerHostEvaluateToGpuValues(&p));
  }

private:
  CUpti_Profiler_Host_Object* object_ = nullptr;
};

// The range profiler on one context, disabled when it goes (also when `run` threw).
class RangeProfiler {
public:
  explicit RangeProfiler(CUcontext context) {
    CUpti_RangeProfiler_Enable_Params p{CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE};
    p.ctx = context;
    check("enabling the range profiler", api().cuptiRangeProfilerEnable(&p));
    object_ = p.pRangeProfilerObject;
  }
  ~RangeProfiler() {
    CUpti_RangeProfiler_Disable_Params p{CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE};
    p.pRangeProfilerObject = object_;
    api().cuptiRangeProfilerDisable(&p);
  }
  RangeProfiler(const RangeProfiler&) = delete;
  RangeProfiler& operator=(const RangeProfiler&) = delete;
  CUpti_RangeProfiler_Object* get() const { return object_; }

private:
  CUpti_RangeProfiler_Object* object_ = nullptr;
};

std::vector<uint8_t> counter_availability(CUcontext context) {
  CUpti_Profiler_GetCounterAvailability_Params p{
      CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE};
  p.ctx = context;
  check("reading which counters the GPU offers", api().cuptiProfilerGetCounterAvailability(&p));
  std::vector<uint8_t> image(p.counterAvailabilityImageSize);
  p.pCounterAvailabilityImage = image.data();
  check("reading which counters the GPU offers", api().cuptiProfilerGetCounterAvailability(&p));
  return image;
}

// One process profiles one run at a time (CUPTI's profiler is per process).
std::mutex g_profiling;

std::string chip_name(int device_ordinal) {
  CUpti_Device_GetChipName_Params chip{CUpti_Device_GetChipName_Params_STRUCT_SIZE};
  chip.deviceIndex = static_cast<size_t>(device_ordinal);
  check("naming the GPU's chip", api().cuptiDeviceGetChipName(&chip));
  return chip.pChipName != nullptr ? chip.pChipName : "";
}

// PM sampling on one device, disabled when it goes.
class PmSampler {
public:
  explicit PmSampler(int device_ordinal) {
    CUpti_PmSampling_Enable_Params p{CUpti_PmSampling_Enable_Params_STRUCT_SIZE};
    p.deviceIndex = static_cast<size_t>(device_ordinal);
    check("enabling PM sampling", api().cuptiPmSamplingEnable(&p));
    object_ = p.pPmSamplingObject;
  }
  ~PmSampler() {
    CUpti_PmSampling_Disable_Params p{CUpti_PmSampling_Disable_Params_STRUCT_SIZE};
    p.pPmSamplingObject = object_;
    api().cuptiPmSamplingDisable(&p);
  }
  PmSampler(const PmSampler&) = delete;
  PmSampler& operator=(const PmSampler&) = delete;
  CUpti_PmSampling_Object* get() const { return object_; }

private:
  CUpti_PmSampling_Object* object_ = nullptr;
};

} // namespace

DeviceCounters collect_counters(CUcontext context, int device_ordinal,
                                const CounterRequest& request,
                                const std::function<void()>& before_pass,
                                const std::function<void()>& run) {
  std::lock_guard lock(g_profiling);
  api();
  DeviceCounters result;
  result.chip = chip_name(device_ordinal);

  RangeProfiler profiler(context);
  const std::vector<uint8_t> availability = counter_availability(context);

  // A metric this chip does not have is left out with the reason, not the whole request. The
  // usual request is accepted whole; only one that is refused is tried metric by metric, each on
  // a scratch configuration made again after every refusal (a configuration that refused one
  // metric refuses every later one too, CUPTI_ERROR_UNKNOWN).
  std::vector<const char*> names;
  for (const std::string& metric : request.metrics)
    names.push_back(metric.c_str());
  auto host = std::make_unique<HostObject>(result.chip, availability);
  if (host->add(names) == CUPTI_SUCCESS) {
    result.metrics = request.metrics;
  } else {
    for (const std::string& metric : request.metrics) {
      auto probe = std::make_unique<HostObject>(result.chip, availability);
      if (const CUptiResult r = probe->add({metric.c_str()}); r == CUPTI_SUCCESS)
        result.metrics.push_back(metric);
      else
        result.unsupported.emplace_back(metric,
                                        "not a metric of " + result.chip + " (" + text_of(r) + ")");
    }
    if (result.metrics.empty())
      throw CountersUnavailable("none of the requested metrics exists on " + result.chip);
    names.clear();
    for (const std::string& metric : result.metrics)
      names.push_back(metric.c_str());
    host = std::make_unique<HostObject>(result.chip, availability);
    check("configuring the metrics", host->add(names));
  }
  std::vector<uint8_t> config = host->config_image();
  CUpti_Profiler_Host_GetNumOfPasses_Params passes{
      CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE};
  passes.configImageSize = config.size();
  passes.pConfigImage = config.data();
  check("counting the passes", api().cuptiProfilerHostGetNumOfPasses(&passes));
  result.passes = static_cast<int64_t>(passes.numOfPasses);

  const size_t ranges = std::max<size_t>(1, request.max_kernels);
  CUpti_RangeProfiler_GetCounterDataSize_Params size{
      CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE};
  size.pRangeProfilerObject = profiler.get();
  size.pMetricNames = names.data();
  size.numMetrics = names.size();
  size.maxNumOfRanges = ranges;
  size.maxNumRangeTreeNodes = static_cast<uint32_t>(ranges);
  check("sizing the counter data", api().cuptiRangeProfilerGetCounterDataSize(&size));
  std::vector<uint8_t> data(size.counterDataSize);
  CUpti_RangeProfiler_CounterDataImage_Initialize_Params init{
      CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE};
  init.pRangeProfilerObject = profiler.get();
  init.counterDataSize = data.size();
  init.pCounterData = data.data();
  check("preparing the counter data", api().cuptiRangeProfilerCounterDataImageInitialize(&init));

  CUpti_RangeProfiler_SetConfig_Params config_params{
      CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE};
  config_params.pRangeProfilerObject = profiler.get();
  config_params.configSize = config.size();
  config_params.pConfig = config.data();
  config_params.counterDataImageSize = data.size();
  config_params.pCounterDataImage = data.data();
  config_params.range = CUPTI_AutoRange;
  config_params.replayMode = CUPTI_KernelReplay;
  config_params.maxRangesPerPass = ranges;
  config_params.numNestingLevels = 1;
  config_params.minNestingLevel = 1;
  config_params.passIndex = 0;
  config_params.targetNestingLevel = 1;
  check("configuring the range profiler", api().cuptiRangeProfilerSetConfig(&config_params));

  // Kernel replay: CUPTI runs each kernel once per pass, saving the memory it may touch before
  // the first and restoring it before the others, so the launch runs once and its results are
  // what they would have been. (User replay, a run of the whole launch per pass, was tried: on an
  // H100 the SASS instruction counters behind the FLOP counts read zero for modules loaded before
  // the profiler, and the DRAM bytes came out no closer to ncu's.)
  before_pass();
  CUpti_RangeProfiler_Start_Params start{CUpti_RangeProfiler_Start_Params_STRUCT_SIZE};
  start.pRangeProfilerObject = profiler.get();
  check("starting the range profiler", api().cuptiRangeProfilerStart(&start));
  CUpti_RangeProfiler_Stop_Params stop{CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE};
  stop.pRangeProfilerObject = profiler.get();
  try {
    run();
  } catch (...) {
    api().cuptiRangeProfilerStop(&stop);
    throw;
  }
  check("stopping the range profiler", api().cuptiRangeProfilerStop(&stop));
  CUpti_RangeProfiler_DecodeData_Params decode{CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE};
  decode.pRangeProfilerObject = profiler.get();
  check("decoding the counters", api().cuptiRangeProfilerDecodeData(&decode));
  result.not_counted = static_cast<int64_t>(decode.numOfRangeDropped);

  CUpti_RangeProfiler_GetCounterDataInfo_Params info{
      CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE};
  info.pCounterDataImage = data.data();
  info.counterDataImageSize = data.size();
  check("reading the counter data", api().cuptiRangeProfilerGetCounterDataInfo(&info));
  for (size_t range = 0; range < info.numTotalRanges; ++range) {
    CountedKernel kernel;
    host->evaluate(data, range, names, kernel.values);
    result.kernels.push_back(std::move(kernel));
  }
  return result;
}

std::vector<std::vector<double>> time_kernels(CUcontext context, int device_ordinal, size_t runs,
                                              size_t max_kernels,
                                              const std::function<void()>& before,
                                              const std::function<void()>& run) {
  std::lock_guard lock(g_profiling);
  api();
  const std::string chip = chip_name(device_ordinal);
  RangeProfiler profiler(context);
  const std::vector<uint8_t> availability = counter_availability(context);
  HostObject host(chip, availability);
  const std::vector<const char*> names{"gpu__time_duration.sum"};
  check("configuring gpu__time_duration", host.add(names));
  std::vector<uint8_t> config = host.config_image();
  CUpti_Profiler_Host_GetNumOfPasses_Params passes{
      CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE};
  passes.configImageSize = config.size();
  passes.pConfigImage = config.data();
  check("counting the passes", api().cuptiProfilerHostGetNumOfPasses(&passes));
  // One pass is what lets every run go unreplayed; a chip that needed more would have its
  // kernels replayed over memory restored (and an L2 left warm by the restore).
  if (passes.numOfPasses != 1)
    throw CountersUnavailable("gpu__time_duration needs " + std::to_string(passes.numOfPasses) +
                              " passes on " + chip + "; keval counts it only in one");

  const size_t ranges = std::max<size_t>(1, max_kernels);
  CUpti_RangeProfiler_GetCounterDataSize_Params size{
      CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE};
  size.pRangeProfilerObject = profiler.get();
  size.pMetricNames = const_cast<const char**>(names.data());
  size.numMetrics = names.size();
  size.maxNumOfRanges = ranges;
  size.maxNumRangeTreeNodes = static_cast<uint32_t>(ranges);
  check("sizing the counter data", api().cuptiRangeProfilerGetCounterDataSize(&size));

  std::vector<std::vector<double>> durations;
  std::vector<uint8_t> data(size.counterDataSize);
  std::vector<double> values;
  for (size_t r = 0; r < runs; ++r) {
    // Each run is a session of its own (a fresh image, the configuration set again), so its
    // ranges are only its kernels.
    CUpti_RangeProfiler_CounterDataImage_Initialize_Params init{
        CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE};
    init.pRangeProfilerObject = profiler.get();
    init.counterDataSize = data.size();
    init.pCounterData = data.data();
    check("preparing the counter data", api().cuptiRangeProfilerCounterDataImageInitialize(&init));
    CUpti_RangeProfiler_SetConfig_Params config_params{
        CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE};
    config_params.pRangeProfilerObject = profiler.get();
    config_params.configSize = config.size();
    config_params.pConfig = config.data();
    config_params.counterDataImageSize = data.size();
    config_params.pCounterDataImage = data.data();
    config_params.range = CUPTI_AutoRange;
    config_params.replayMode = CUPTI_UserReplay;
    config_params.maxRangesPerPass = ranges;
    config_params.numNestingLevels = 1;
    config_params.minNestingLevel = 1;
    config_params.passIndex = 0;
    config_params.targetNestingLevel = 1;
    check("configuring the range profiler", api().cuptiRangeProfilerSetConfig(&config_params));

    before();
    CUpti_RangeProfiler_Start_Params start{CUpti_RangeProfiler_Start_Params_STRUCT_SIZE};
    start.pRangeProfilerObject = profiler.get();
    check("starting the range profiler", api().cuptiRangeProfilerStart(&start));
    CUpti_RangeProfiler_Stop_Params stop{CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE};
    stop.pRangeProfilerObject = profiler.get();
    try {
      run();
    } catch (...) {
      api().cuptiRangeProfilerStop(&stop);
      throw;
    }
    check("stopping the range profiler", api().cuptiRangeProfilerStop(&stop));
    if (stop.isAllPassSubmitted == 0)
      throw CountersUnavailable("the range profiler asked for another pass of a one-pass metric");
    CUpti_RangeProfiler_DecodeData_Params decode{CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE};
    decode.pRangeProfilerObject = profiler.get();
    check("decoding the counters", api().cuptiRangeProfilerDecodeData(&decode));
    if (decode.numOfRangeDropped > 0)
      throw CountersUnavailable("the launch ran more than " + std::to_string(ranges) +
                                " kernels; their times were not all counted");
    CUpti_RangeProfiler_GetCounterDataInfo_Params info{
        CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE};
    info.pCounterDataImage = data.data();
    info.counterDataImageSize = data.size();
    check("reading the counter data", api().cuptiRangeProfilerGetCounterDataInfo(&info));
    std::vector<double> kernels;
    for (size_t range = 0; range < info.numTotalRanges; ++range) {
      host.evaluate(data, range, names, values);
      kernels.push_back(values[0]);
    }
    durations.push_back(std::move(kernels));
  }
  return durations;
}

std::vector<TrafficSample> sample_dram_traffic(int device_ordinal, double expected_ms,
                                               const std::function<void()>& before,
                                               const std::function<void()>& run) {
  std::lock_guard lock(g_profiling);
  api();
  const std::string chip = chip_name(device_ordinal);
  CUpti_PmSampling_GetCounterAvailability_Params avail{
      CUpti_PmSampling_GetCounterAvailability_Params_STRUCT_SIZE};
  avail.deviceIndex = static_cast<size_t>(device_ordinal);
  check("reading which counters PM sampling offers",
        api().cuptiPmSamplingGetCounterAvailability(&avail));
  std::vector<uint8_t> availability(avail.counterAvailabilityImageSize);
  avail.pCounterAvailabilityImage = availability.data();
  check("reading which counters PM sampling offers",
        api().cuptiPmSamplingGetCounterAvailability(&avail));
  HostObject host(chip, availability, CUPTI_PROFILER_TYPE_PM_SAMPLING);
  const std::vector<const char*> names{"dram__bytes_read.sum", "dram__bytes_write.sum"};
  check("configuring PM sampling's metrics", host.add(names));
  std::vector<uint8_t> config = host.config_image();

  PmSampler sampler(device_ordinal);
  // A sample every microsecond resolves kernels of a few microseconds; longer launches get a
  // longer interval, so that about kMaxSamples cover twice the expected run.
  constexpr uint32_t kMaxSamples = 50000;
  const double run_ns = std::max(expected_ms, 0.0) * 1e6;
  const auto interval_ns = static_cast<uint64_t>(std::clamp(2 * run_ns / kMaxSamples, 1000.0, 1e7));
  CUpti_PmSampling_SetConfig_Params config_params{CUpti_PmSampling_SetConfig_Params_STRUCT_SIZE};
  config_params.pPmSamplingObject = sampler.get();
  config_params.configSize = config.size();
  config_params.pConfig = config.data();
  config_params.hardwareBufferSize = size_t{256} << 20;
  config_params.samplingInterval = interval_ns;
  config_params.triggerMode = CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL;
  config_params.hwBufferAppendMode = CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_OLDEST;
  check("configuring PM sampling", api().cuptiPmSamplingSetConfig(&config_params));
  CUpti_PmSampling_GetCounterDataSize_Params size{
      CUpti_PmSampling_GetCounterDataSize_Params_STRUCT_SIZE};
  size.pPmSamplingObject = sampler.get();
  size.pMetricNames = const_cast<const char**>(names.data());
  size.numMetrics = names.size();
  size.maxSamples = kMaxSamples;
  check("sizing PM sampling's counter data", api().cuptiPmSamplingGetCounterDataSize(&size));
  std::vector<uint8_t> data(size.counterDataSize);
  CUpti_PmSampling_CounterDataImage_Initialize_Params init{
      CUpti_PmSampling_CounterDataImage_Initialize_Params_STRUCT_SIZE};
  init.pPmSamplingObject = sampler.get();
  init.counterDataSize = data.size();
  init.pCounterData = data.data();
  check("preparing PM sampling's counter data",
        api().cuptiPmSamplingCounterDataImageInitialize(&init));

  before();
  CUpti_PmSampling_Start_Params start{CUpti_PmSampling_Start_Params_STRUCT_SIZE};
  start.pPmSamplingObject = sampler.get();
  check("starting PM sampling", api().cuptiPmSamplingStart(&start));
  CUpti_PmSampling_Stop_Params stop{CUpti_PmSampling_Stop_Params_STRUCT_SIZE};
  stop.pPmSamplingObject = sampler.get();
  try {
    run();
  } catch (...) {
    api().cuptiPmSamplingStop(&stop);
    throw;
  }
  check("stopping PM sampling", api().cuptiPmSamplingStop(&stop));
  CUpti_PmSampling_DecodeData_Params decode{CUpti_PmSampling_DecodeData_Params_STRUCT_SIZE};
  decode.pPmSamplingObject = sampler.get();
  decode.pCounterDataImage = data.data();
  decode.counterDataImageSize = data.size();
  check("decoding PM samples", api().cuptiPmSamplingDecodeData(&decode));
  if (decode.overflow != 0 ||
      decode.decodeStopReason != CUPTI_PM_SAMPLING_DECODE_STOP_REASON_END_OF_RECORDS)
    throw CountersUnavailable("PM sampling lost samples (the launch ran longer than " +
                              std::to_string(kMaxSamples) + " samples of " +
                              std::to_string(interval_ns) + " ns)");
  CUpti_PmSampling_GetCounterDataInfo_Params info{
      CUpti_PmSampling_GetCounterDataInfo_Params_STRUCT_SIZE};
  info.pCounterDataImage = data.data();
  info.counterDataImageSize = data.size();
  check("reading PM samples", api().cuptiPmSamplingGetCounterDataInfo(&info));
  std::vector<TrafficSample> samples;
  std::vector<double> values;
  for (size_t i = 0; i < info.numCompletedSamples; ++i) {
    CUpti_PmSampling_CounterData_GetSampleInfo_Params when{
        CUpti_PmSampling_CounterData_GetSampleInfo_Params_STRUCT_SIZE};
    when.pPmSamplingObject = sampler.get();
    when.pCounterDataImage = data.data();
    when.counterDataImageSize = data.size();
    when.sampleIndex = i;
    check("reading a PM sample's time", api().cuptiPmSamplingCounterDataGetSampleInfo(&when));
    host.evaluate(data, i, names, values);
    samples.push_back({when.startTimestamp, when.endTimestamp, values[0], values[1]});
  }
  return samples;
}

#else

std::vector<TrafficSample> sample_dram_traffic(int, double, const std::function<void()>&,
                                               const std::function<void()>&) {
  throw CountersUnavailable("keval was built without CUPTI's headers (cupti.h)");
}

std::vector<std::vector<double>> time_kernels(CUcontext, int, size_t, size_t,
                                              const std::function<void()>&,
                                              const std::function<void()>&) {
  throw CountersUnavailable("keval was built without CUPTI's headers (cupti.h): kernels cannot "
                            "be timed by the hardware's counters");
}

DeviceCounters collect_counters(CUcontext, int, const CounterRequest&, const std::function<void()>&,
                                const std::function<void()>&) {
  throw CountersUnavailable("keval was built without CUPTI's headers (cupti.h): device metrics "
                            "cannot be collected");
}

#endif

} // namespace keval::worker::detail
