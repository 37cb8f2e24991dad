// Python exceptions as SDK errors.
#pragma once

#include <pybind11/pybind11.h>

#include <keval/plugin.hpp>

namespace keval::python_runtime::detail {

// The SDK error for a Python exception (call with the GIL held). A driver's
// keval_runtime.errors.KernelError keeps its code, message and details (the user's traceback);
// any other exception escaping a driver is keval's own failure: KEVAL_ERROR_INTERNAL with the
// full traceback.
sdk::Error to_sdk_error(pybind11::error_already_set& error);

} // namespace keval::python_runtime::detail
