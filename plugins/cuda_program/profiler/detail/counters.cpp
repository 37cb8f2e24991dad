#include "detail/counters.hpp"

#include "detail/json_writer.hpp"
#include "detail/kernel_names.hpp"
#include "detail/report.hpp"
#include "detail/state.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <cupti_profiler_host.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>
#include <dlfcn.h>
#include <fnmatch.h>
#include <unistd.h>

namespace keval::profiler {

namespace {

struct Launch {
  int64_t grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  int64_t registers = 0, static_shared = 0, dynamic_shared = 0, carveout = 0;
};

struct CountedLaunch {
  std::string name;             // as ComputeEval names kernels (kernel_display_name)
  std::vector<uint32_t> calls;  // correlation ids of the launching runtime/driver calls
  std::vector<double> values;   // one per Counters::metrics
  std::optional<Launch> launch; // from the kernel's activity record
};

struct SmLimits {
  int64_t sm_count = 0, max_warps = 0, max_blocks = 0, registers = 0, shared = 0, reserved = 0;
};

struct Counters {
  // --- configuration (set once by start_counters) ---
  std::string output;
  std::vector<std::string> wanted; // as requested
  std::size_t max_kernels = 32, per_kernel = 2;
  std::vector<std::string> kernel_include, kernel_exclude, range_include, range_exclude;

  // --- counting (mu; a counted launch holds it from its API_ENTER to its API_EXIT) ---
  std::mutex mu;
  std::atomic<bool> stopped{false}; // nothing more will be counted
  std::string stop_reason;          // why counting stopped early
  bool set_up = false;
  CUcontext context = nullptr;
  std::string chip;
  std::optional<SmLimits> limits;
  CUpti_RangeProfiler_Object* profiler = nullptr;
  CUpti_Profiler_Host_Object* host = nullptr;
  std::vector<std::string> metrics; // what the configuration holds, in values' order
  std::vector<const char*> names;   // metrics' c_str()s
  std::vector<std::pair<std::string, std::string>> unsupported;
  std::vector<uint8_t> config, data;
  uint64_t passes = 0;
  std::vector<CountedLaunch> counted;
  std::map<std::string, std::size_t> per_name;
  std::set<std::string> left_out; // selected kernels none of whose launches could be counted
  uint64_t launches_seen = 0;     // selected launches, counted or not

  // --- launch shapes (shapes_mu: CUPTI's buffer thread must never wait on a launch) ---
  std::mutex shapes_mu;
  std::map<uint32_t, Launch> shapes; // by launching call, for counted launches only
  std::set<uint32_t> wanted_calls;
};

Counters& counters() {
  static Counters* c = new Counters; // never destroyed: callbacks may run during exit
  return *c;
}

// Launch calls entered and not left on this thread: a runtime launch and the driver launch it
// makes are one launch, handled at the outermost.
thread_local int t_depth = 0;
// What this thread's outermost launch holds: Counters::mu while any launch is issued (so that no
// other thread's kernel lands in a counted launch's range), and whether it is being counted.
enum class Hold { none, issuing, counting };
thread_local Hold t_hold = Hold::none;

std::string text_of(CUptiResult r) {
  const char* text = nullptr;
  if (cuptiGetResultString(r, &text) != CUPTI_SUCCESS || text == nullptr)
    return "CUptiResult " + std::to_string(static_cast<int>(r));
  return text;
}

// Why counters cannot be read, in words a user can act on (the runners' wording).
std::string why_not(const char* step, CUptiResult r) {
  const std::string what = std::string(step) + ": " + text_of(r);
  switch (r) {
  case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
    return "the GPU driver lets only administrators read performance counters "
           "(NVreg_RestrictProfilingToAdminUsers=1) and the benchmark runs without CAP_SYS_ADMIN "
           "(" +
           what + "); docs/device_metrics.md says how to allow it";
  case CUPTI_ERROR_HARDWARE_BUSY:
    return "another process is reading the GPU's counters (" + what + ")";
  case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
    return "another profiler holds the GPU's counters or CUPTI's callbacks (" + what + ")";
  case CUPTI_ERROR_NOT_SUPPORTED:
  case CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED:
  case CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED:
  case CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED:
    return "this GPU or its mode does not support counter collection (" + what + ")";
  default:
    return what + " failed";
  }
}

// A CUPTI step that failed: counting stops for good (mu held).
void stop_locked(Counters& c, const std::string& why) {
  if (c.stopped.exchange(true))
    return;
  c.stop_reason = why;
  report_error("device metrics: " + why);
}

std::vector<std::string> split(const char* text, char separator) {
  std::vector<std::string> parts;
  if (text == nullptr)
    return parts;
  std::string part;
  for (const char* p = text;; ++p) {
    if (*p == separator || *p == '\0') {
      if (!part.empty())
        parts.push_back(part);
      part.clear();
      if (*p == '\0')
        break;
    } else {
      part += *p;
    }
  }
  return parts;
}

std::size_t size_from_env(const char* name, std::size_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0')
    return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value == 0)
    return fallback;
  return static_cast<std::size_t>(std::min<unsigned long long>(value, 256));
}

// The timing mode's selection, as keval applies it to the profile (worker/program/timing.cpp).
bool selects(const std::vector<std::string>& include, const std::vector<std::string>& exclude,
             const std::string& name) {
  if (!include.empty() && std::none_of(include.begin(), include.end(), [&](const std::string& p) {
        return ::fnmatch(p.c_str(), name.c_str(), 0) == 0;
      }))
    return false;
  return std::none_of(exclude.begin(), exclude.end(), [&](const std::string& p) {
    return ::fnmatch(p.c_str(), name.c_str(), 0) == 0;
  });
}

// Whether the calling thread is inside an open NVTX range the region selects: its own push/pop
// ranges, or any start/end range (process-wide).
bool in_selected_range(const Counters& c) {
  State& s = state();
  const uint32_t thread = current_thread_id();
  std::lock_guard<std::mutex> lock(s.nvtx_mu);
  for (const RangeRecord& r : s.ranges)
    if (r.end == 0 && (r.thread_id == kProcessWide || r.thread_id == thread) &&
        r.name_id < s.names.size() && selects(c.range_include, c.range_exclude, s.names[r.name_id]))
      return true;
  return false;
}

// The SM's limits for the occupancy calculator, from the driver the program already loaded.
std::optional<SmLimits> sm_limits(uint32_t device_index) {
  void* driver = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (driver == nullptr)
    return std::nullopt;
  using GetDevice = CUresult (*)(CUdevice*, int);
  using GetAttribute = CUresult (*)(int*, CUdevice_attribute, CUdevice);
  const auto get_device = reinterpret_cast<GetDevice>(::dlsym(driver, "cuDeviceGet"));
  const auto get_attribute =
      reinterpret_cast<GetAttribute>(::dlsym(driver, "cuDeviceGetAttribute"));
  std::optional<SmLimits> limits;
  CUdevice device = 0;
  if (get_device != nullptr && get_attribute != nullptr &&
      get_device(&device, static_cast<int>(device_index)) == CUDA_SUCCESS) {
    bool ok = true;
    const auto attribute = [&](CUdevice_attribute which) {
      int value = 0;
      ok = ok && get_attribute(&value, which, device) == CUDA_SUCCESS;
      return static_cast<int64_t>(value);
    };
    SmLimits l;
    l.sm_count = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    l.max_warps = attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR) / 32;
    l.max_blocks = attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
    l.registers = attribute(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
    l.shared = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
    l.reserved = attribute(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK);
    if (ok)
      limits = l;
  }
  ::dlclose(driver);
  return limits;
}

CUptiResult add_metrics(CUpti_Profiler_Host_Object* host, const std::vector<const char*>& names) {
  CUpti_Profiler_Host_ConfigAddMetrics_Params p{
      CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE};
  p.pHostObject = host;
  p.ppMetricNames = const_cast<const char**>(names.data());
  p.numMetrics = names.size();
  return cuptiProfilerHostConfigAddMetrics(&p);
}

CUptiResult new_host(const std::string& chip, const std::vector<uint8_t>& availability,
                     CUpti_Profiler_Host_Object** host) {
  CUpti_Profiler_Host_Initialize_Params p{CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE};
  p.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
  p.pChipName = chip.c_str();
  p.pCounterAvailabilityImage = availability.data();
  const CUptiResult r = cuptiProfilerHostInitialize(&p);
  *host = p.pHostObject;
  return r;
}

void free_host(CUpti_Profiler_Host_Object* host) {
  CUpti_Profiler_Host_Deinitialize_Params p{CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE};
  p.pHostObject = host;
  cuptiProfilerHostDeinitialize(&p);
}

#define KEVAL_COUNTERS_STEP(step, call)                                                            \
  do {                                                                                             \
    if (const CUptiResult r_ = (call); r_ != CUPTI_SUCCESS) {                                      \
      stop_locked(c, why_not(step, r_));                                                           \
      return false;                                                                                \
    }                                                                                              \
  } while (0)

// The range profiler on `context` and the configuration of the requested metrics: those the chip
// lacks are left out with the reason (a configuration refusing one refuses every later one, so
// they are probed one by one, each on a fresh host object, only when the whole set is refused).
bool set_up_locked(Counters& c, CUcontext context) {
  c.set_up = true;
  c.context = context;
  CUpti_Profiler_Initialize_Params init{CUpti_Profiler_Initialize_Params_STRUCT_SIZE};
  KEVAL_COUNTERS_STEP("initialising CUPTI's profiler", cuptiProfilerInitialize(&init));
  uint32_t device = 0;
  KEVAL_COUNTERS_STEP("finding the context's device", cuptiGetDeviceId(context, &device));
  CUpti_Device_GetChipName_Params chip{CUpti_Device_GetChipName_Params_STRUCT_SIZE};
  chip.deviceIndex = device;
  KEVAL_COUNTERS_STEP("naming the GPU's chip", cuptiDeviceGetChipName(&chip));
  c.chip = chip.pChipName != nullptr ? chip.pChipName : "";
  c.limits = sm_limits(device);

  CUpti_RangeProfiler_Enable_Params enable{CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE};
  enable.ctx = context;
  KEVAL_COUNTERS_STEP("enabling the range profiler", cuptiRangeProfilerEnable(&enable));
  c.profiler = enable.pRangeProfilerObject;

  CUpti_Profiler_GetCounterAvailability_Params avail{
      CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE};
  avail.ctx = context;
  KEVAL_COUNTERS_STEP("reading which counters the GPU offers",
                      cuptiProfilerGetCounterAvailability(&avail));
  std::vector<uint8_t> availability(avail.counterAvailabilityImageSize);
  avail.pCounterAvailabilityImage = availability.data();
  KEVAL_COUNTERS_STEP("reading which counters the GPU offers",
                      cuptiProfilerGetCounterAvailability(&avail));

  std::vector<const char*> all;
  for (const std::string& m : c.wanted)
    all.push_back(m.c_str());
  KEVAL_COUNTERS_STEP("initialising the profiler's host side",
                      new_host(c.chip, availability, &c.host));
  if (add_metrics(c.host, all) == CUPTI_SUCCESS) {
    c.metrics = c.wanted;
  } else {
    for (const std::string& m : c.wanted) {
      CUpti_Profiler_Host_Object* probe = nullptr;
      KEVAL_COUNTERS_STEP("initialising the profiler's host side",
                          new_host(c.chip, availability, &probe));
      if (const CUptiResult r = add_metrics(probe, {m.c_str()}); r == CUPTI_SUCCESS)
        c.metrics.push_back(m);
      else
        c.unsupported.emplace_back(m, "not a metric of " + c.chip + " (" + text_of(r) + ")");
      free_host(probe);
    }
    free_host(c.host);
    c.host = nullptr;
    if (c.metrics.empty()) {
      stop_locked(c, "none of the requested metrics exists on " + c.chip);
      return false;
    }
    std::vector<const char*> kept;
    for (const std::string& m : c.metrics)
      kept.push_back(m.c_str());
    KEVAL_COUNTERS_STEP("initialising the profiler's host side",
                        new_host(c.chip, availability, &c.host));
    KEVAL_COUNTERS_STEP("configuring the metrics", add_metrics(c.host, kept));
  }
  for (const std::string& m : c.metrics)
    c.names.push_back(m.c_str());

  CUpti_Profiler_Host_GetConfigImageSize_Params size{
      CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE};
  size.pHostObject = c.host;
  KEVAL_COUNTERS_STEP("sizing the counter configuration",
                      cuptiProfilerHostGetConfigImageSize(&size));
  c.config.resize(size.configImageSize);
  CUpti_Profiler_Host_GetConfigImage_Params image{
      CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE};
  image.pHostObject = c.host;
  image.configImageSize = c.config.size();
  image.pConfigImage = c.config.data();
  KEVAL_COUNTERS_STEP("building the counter configuration",
                      cuptiProfilerHostGetConfigImage(&image));
  CUpti_Profiler_Host_GetNumOfPasses_Params passes{
      CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE};
  passes.configImageSize = c.config.size();
  passes.pConfigImage = c.config.data();
  KEVAL_COUNTERS_STEP("counting the passes", cuptiProfilerHostGetNumOfPasses(&passes));
  c.passes = passes.numOfPasses;

  CUpti_RangeProfiler_GetCounterDataSize_Params data{
      CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE};
  data.pRangeProfilerObject = c.profiler;
  data.pMetricNames = c.names.data();
  data.numMetrics = c.names.size();
  data.maxNumOfRanges = 1;
  data.maxNumRangeTreeNodes = 1;
  KEVAL_COUNTERS_STEP("sizing the counter data", cuptiRangeProfilerGetCounterDataSize(&data));
  c.data.resize(data.counterDataSize);
  return true;
}

// One session per counted launch: a fresh counter data image of one range, the configuration,
// Start before the launch and (end_locked) Stop after it. Kernel replay runs the kernel once per
// pass with its memory restored in between, so the program's results are what they would be.
bool begin_locked(Counters& c) {
  CUpti_RangeProfiler_CounterDataImage_Initialize_Params init{
      CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE};
  init.pRangeProfilerObject = c.profiler;
  init.counterDataSize = c.data.size();
  init.pCounterData = c.data.data();
  KEVAL_COUNTERS_STEP("preparing the counter data",
                      cuptiRangeProfilerCounterDataImageInitialize(&init));
  CUpti_RangeProfiler_SetConfig_Params config{CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE};
  config.pRangeProfilerObject = c.profiler;
  config.configSize = c.config.size();
  config.pConfig = c.config.data();
  config.counterDataImageSize = c.data.size();
  config.pCounterDataImage = c.data.data();
  config.range = CUPTI_AutoRange;
  config.replayMode = CUPTI_KernelReplay;
  config.maxRangesPerPass = 1;
  config.numNestingLevels = 1;
  config.minNestingLevel = 1;
  config.passIndex = 0;
  config.targetNestingLevel = 1;
  KEVAL_COUNTERS_STEP("configuring the range profiler", cuptiRangeProfilerSetConfig(&config));
  CUpti_RangeProfiler_Start_Params start{CUpti_RangeProfiler_Start_Params_STRUCT_SIZE};
  start.pRangeProfilerObject = c.profiler;
  KEVAL_COUNTERS_STEP("starting the range profiler", cuptiRangeProfilerStart(&start));
  return true;
}

bool end_locked(Counters& c, CountedLaunch& launch) {
  CUpti_RangeProfiler_Stop_Params stop{CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE};
  stop.pRangeProfilerObject = c.profiler;
  KEVAL_COUNTERS_STEP("stopping the range profiler", cuptiRangeProfilerStop(&stop));
  CUpti_RangeProfiler_DecodeData_Params decode{CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE};
  decode.pRangeProfilerObject = c.profiler;
  KEVAL_COUNTERS_STEP("decoding the counters", cuptiRangeProfilerDecodeData(&decode));
  CUpti_RangeProfiler_GetCounterDataInfo_Params info{
      CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE};
  info.pCounterDataImage = c.data.data();
  info.counterDataImageSize = c.data.size();
  KEVAL_COUNTERS_STEP("reading the counter data", cuptiRangeProfilerGetCounterDataInfo(&info));
  if (info.numTotalRanges < 1)
    return false; // the launch ran no kernel (it failed): nothing to report for it
  launch.values.assign(c.names.size(), std::numeric_limits<double>::quiet_NaN());
  CUpti_Profiler_Host_EvaluateToGpuValues_Params p{
      CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE};
  p.pHostObject = c.host;
  p.pCounterDataImage = c.data.data();
  p.counterDataImageSize = c.data.size();
  p.rangeIndex = 0;
  p.ppMetricNames = c.names.data();
  p.numMetrics = c.names.size();
  p.pMetricValues = launch.values.data();
  KEVAL_COUNTERS_STEP("evaluating the counters", cuptiProfilerHostEvaluateToGpuValues(&p));
  return true;
}

#undef KEVAL_COUNTERS_STEP

bool is_launch(CUpti_CallbackDomain domain, CUpti_CallbackId id) {
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API)
    return id == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000 ||
           id == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000 ||
           id == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060 ||
           id == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060 ||
           id == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000 ||
           id == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000;
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API)
    return id == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel ||
           id == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz ||
           id == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx ||
           id == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz ||
           id == CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel ||
           id == CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz;
  return false;
}

// The outermost launch call on this thread, with Counters::mu held: counted when the timing mode
// selects it and the limits allow.
bool count_locked(Counters& c, const CUpti_CallbackData& call) {
  const std::string name =
      kernel_display_name(call.symbolName != nullptr ? call.symbolName : "<unnamed>");
  if (!selects(c.kernel_include, c.kernel_exclude, name))
    return false;
  if ((!c.range_include.empty() || !c.range_exclude.empty()) && !in_selected_range(c))
    return false;
  ++c.launches_seen;
  std::size_t& of_name = c.per_name[name];
  if (of_name >= c.per_kernel)
    return false;
  if (c.counted.size() >= c.max_kernels || (c.set_up && call.context != c.context)) {
    if (of_name == 0)
      c.left_out.insert(name);
    return false;
  }
  if (!c.set_up && !set_up_locked(c, call.context))
    return false;
  if (!begin_locked(c))
    return false;
  ++of_name;
  c.left_out.erase(name);
  CountedLaunch launch;
  launch.name = name;
  launch.calls.push_back(call.correlationId);
  c.counted.push_back(std::move(launch));
  std::lock_guard<std::mutex> shapes(c.shapes_mu);
  c.wanted_calls.insert(call.correlationId);
  return true;
}

void on_launch_enter(Counters& c, const CUpti_CallbackData& call) {
  if (c.stopped.load(std::memory_order_relaxed))
    return;
  std::unique_lock<std::mutex> lock(c.mu);
  if (c.stopped.load())
    return;
  t_hold = count_locked(c, call) ? Hold::counting : Hold::issuing;
  lock.release(); // held until this thread's launch call returns (on_launch_exit)
}

void on_launch_exit(Counters& c) {
  std::unique_lock<std::mutex> lock(c.mu, std::adopt_lock);
  const Hold hold = std::exchange(t_hold, Hold::none);
  if (hold != Hold::counting)
    return;
  CountedLaunch& launch = c.counted.back();
  if (!end_locked(c, launch)) {
    --c.per_name[launch.name];
    c.counted.pop_back();
  }
}

void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId id,
                          const void* data) {
  if (!is_launch(domain, id) || data == nullptr)
    return;
  const auto& call = *static_cast<const CUpti_CallbackData*>(data);
  Counters& c = counters();
  try {
    if (call.callbackSite == CUPTI_API_ENTER) {
      if (t_depth++ == 0) {
        on_launch_enter(c, call);
      } else if (t_hold == Hold::counting) { // the driver call of a runtime launch: its id too
        std::lock_guard<std::mutex> shapes(c.shapes_mu);
        c.wanted_calls.insert(call.correlationId);
        c.counted.back().calls.push_back(call.correlationId); // mu is held by this thread
      }
    } else if (t_depth > 0 && --t_depth == 0 && t_hold != Hold::none) {
      on_launch_exit(c);
    }
  } catch (...) {
    std::fprintf(stderr, "keval-profiler: device metrics: out of memory\n");
  }
}

} // namespace

bool counters_requested() {
  static const bool requested = [] {
    const char* output = std::getenv("KEVAL_COUNTERS_OUTPUT");
    return output != nullptr && *output != '\0';
  }();
  return requested;
}

void start_counters() {
  Counters& c = counters();
  std::lock_guard<std::mutex> lock(c.mu);
  c.output = std::getenv("KEVAL_COUNTERS_OUTPUT");
  if (c.output.front() != '/') { // against where the process starts, as KEVAL_PROFILE_OUTPUT
    char cwd[PATH_MAX];
    if (::getcwd(cwd, sizeof cwd) != nullptr)
      c.output = std::string(cwd) + "/" + c.output;
  }
  c.wanted = split(std::getenv("KEVAL_COUNTERS_METRICS"), ',');
  c.max_kernels = size_from_env("KEVAL_COUNTERS_MAX_KERNELS", c.max_kernels);
  c.per_kernel = size_from_env("KEVAL_COUNTERS_PER_KERNEL", c.per_kernel);
  c.kernel_include = split(std::getenv("KEVAL_COUNTERS_KERNEL_INCLUDE"), '\n');
  c.kernel_exclude = split(std::getenv("KEVAL_COUNTERS_KERNEL_EXCLUDE"), '\n');
  c.range_include = split(std::getenv("KEVAL_COUNTERS_RANGE_INCLUDE"), '\n');
  c.range_exclude = split(std::getenv("KEVAL_COUNTERS_RANGE_EXCLUDE"), '\n');
  if (c.wanted.empty()) {
    stop_locked(c, "KEVAL_COUNTERS_METRICS names no metric");
    return;
  }
  CUpti_SubscriberHandle subscriber = nullptr;
  if (const CUptiResult r = cuptiSubscribe(&subscriber, on_callback, nullptr); r != CUPTI_SUCCESS) {
    stop_locked(c, why_not("subscribing to CUPTI's launch callbacks", r));
    return;
  }
  for (CUpti_CallbackDomain domain : {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_CB_DOMAIN_DRIVER_API})
    if (const CUptiResult r = cuptiEnableDomain(1, subscriber, domain); r != CUPTI_SUCCESS) {
      stop_locked(c, why_not("enabling CUPTI's launch callbacks", r));
      return;
    }
}

void note_kernel_record(const CUpti_ActivityKernel10& k) {
  Counters& c = counters();
  std::lock_guard<std::mutex> lock(c.shapes_mu);
  if (!c.wanted_calls.count(k.correlationId) || c.shapes.count(k.correlationId))
    return;
  Launch l;
  l.grid[0] = k.gridX, l.grid[1] = k.gridY, l.grid[2] = k.gridZ;
  l.block[0] = k.blockX, l.block[1] = k.blockY, l.block[2] = k.blockZ;
  l.registers = k.registersPerThread;
  l.static_shared = k.staticSharedMemory;
  l.dynamic_shared = k.dynamicSharedMemory;
  l.carveout = k.sharedMemoryExecuted;
  c.shapes.emplace(k.correlationId, l);
}

void write_counters() {
  Counters& c = counters();
  std::unique_lock<std::mutex> lock(c.mu, std::try_to_lock);
  JsonWriter w;
  w.begin_object();
  if (!lock.owns_lock()) { // a thread is inside a counted launch while the process exits
    w.key("unavailable");
    w.string("the benchmark exited while one of its launches was being counted");
    w.end_object();
  } else if (c.counted.empty()) {
    w.key("unavailable");
    if (!c.stop_reason.empty())
      w.string(c.stop_reason);
    else if (c.launches_seen == 0)
      w.string("the benchmark launched no kernel its timing mode selects (or none through the "
               "runtime or driver launch calls: graphs and device-side launches are not counted)");
    else
      w.string("no launch of the benchmark could be counted");
    w.end_object();
  } else {
    {
      std::lock_guard<std::mutex> shapes(c.shapes_mu);
      for (CountedLaunch& launch : c.counted)
        for (uint32_t call : launch.calls)
          if (auto it = c.shapes.find(call); it != c.shapes.end() && !launch.launch)
            launch.launch = it->second;
    }
    w.key("chip");
    w.string(c.chip);
    w.key("metrics");
    w.begin_array();
    for (const std::string& m : c.metrics)
      w.string(m);
    w.end_array();
    w.key("unsupported");
    w.begin_array();
    for (const auto& [metric, why] : c.unsupported) {
      w.begin_object();
      w.key("metric");
      w.string(metric);
      w.key("reason");
      w.string(why);
      w.end_object();
    }
    w.end_array();
    w.key("kernels");
    w.begin_array();
    for (const CountedLaunch& launch : c.counted) {
      w.begin_object();
      w.key("name");
      w.string(launch.name);
      w.key("values");
      w.begin_array();
      for (double v : launch.values)
        w.real(v);
      w.end_array();
      if (launch.launch) {
        const Launch& l = *launch.launch;
        w.key("launch");
        w.begin_object();
        for (const auto& [key, dims] : {std::pair<const char*, const int64_t*>{"grid", l.grid},
                                        std::pair<const char*, const int64_t*>{"block", l.block}}) {
          w.key(key);
          w.begin_array();
          for (int i = 0; i < 3; ++i)
            w.uint(static_cast<uint64_t>(dims[i]));
          w.end_array();
        }
        w.field("registers_per_thread", static_cast<uint64_t>(l.registers));
        w.field("static_shared_bytes", static_cast<uint64_t>(l.static_shared));
        w.field("dynamic_shared_bytes", static_cast<uint64_t>(l.dynamic_shared));
        w.field("shared_carveout_bytes", static_cast<uint64_t>(l.carveout));
        w.end_object();
      }
      w.end_object();
    }
    w.end_array();
    w.field("passes", c.passes);
    w.field("not_counted", static_cast<uint64_t>(c.left_out.size()));
    w.key("traffic");
    w.string("the range profiler's: kernel replay inside the benchmark's process, which leaves "
             "the L2 warm between passes (working sets the L2 holds read less from DRAM than in an "
             "unprofiled run); the benchmark's own kernel times are in "
             "metadata.program.benchmark");
    if (c.limits) {
      const SmLimits& l = *c.limits;
      w.key("sm_limits");
      w.begin_object();
      w.field("sm_count", static_cast<uint64_t>(l.sm_count));
      w.field("max_warps", static_cast<uint64_t>(l.max_warps));
      w.field("max_blocks", static_cast<uint64_t>(l.max_blocks));
      w.field("registers", static_cast<uint64_t>(l.registers));
      w.field("shared_bytes", static_cast<uint64_t>(l.shared));
      w.field("reserved_shared_per_block", static_cast<uint64_t>(l.reserved));
      w.end_object();
    }
    if (!c.stop_reason.empty()) {
      w.key("stopped");
      w.string(c.stop_reason);
    }
    w.end_object();
  }
  std::string why;
  if (!write_atomically(c.output, w.take(), &why))
    std::fprintf(stderr, "keval-profiler: device metrics not written: %s\n", why.c_str());
}

} // namespace keval::profiler
