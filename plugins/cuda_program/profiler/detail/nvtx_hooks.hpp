// NVTX injection: this library implements the NVTX range calls itself (push/pop, start/end,
// domains, registered strings) rather than forwarding them to CUPTI, so ranges are stamped
// synchronously on the calling thread with the CUPTI clock and the thread id CUPTI's API records
// carry, whatever NVTX flavour (C, nvtx3 C++, null or named domain) the program uses.
#pragma once

#include <cstdint>

namespace keval::profiler {

// NVTX's export-table getter (NvtxGetExportTableFunc_t).
using NvtxGetExportTable = const void* (*)(uint32_t export_table_id);

// Fills the function tables of one NVTX instance (each shared object that includes the
// header-only NVTX 3 has its own, and calls the injection once). Returns false, with the reason,
// when the tables are not there; NVTX then keeps its no-ops.
bool install_nvtx_hooks(NvtxGetExportTable get_export_table, const char** why);

// Asks for RUNTIME/DRIVER API records (program_profiler.cpp); called before the first range opens.
void request_api_tracing();

} // namespace keval::profiler
