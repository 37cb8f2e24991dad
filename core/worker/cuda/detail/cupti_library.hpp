// Where the process's CUPTI comes from: loaded at run time like the driver (nothing links it), the
// copy a library in the process already loaded (torch's own) first, then the loader's path, then
// the toolkit's keval was built with. One CUPTI per process, shared by the activity trace and the
// counter profiler.
#pragma once

#include <string>

namespace keval::worker::detail {

// "libcupti.so.<major>" for the CUDA major version keval was built against.
std::string cupti_soname();

// A dlopen handle on CUPTI, or null with `why` set (which names every path tried).
void* open_cupti_library(std::string& why);

} // namespace keval::worker::detail
