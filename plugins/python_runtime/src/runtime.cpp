// The C entry points behind every Python kernel-type plugin (keval/python_runtime/plugin.hpp).
#include "detail/interpreter.hpp"
#include "detail/python_error.hpp"
#include "detail/python_kernel.hpp"

#include <keval/python_runtime/plugin.hpp>

#include <memory>
#include <string>

namespace py = pybind11;
using keval::sdk::Error;
namespace sdk_detail = keval::sdk::detail;
namespace runtime = keval::python_runtime::detail;

extern "C" {

namespace {

// The driver's package, imported with its directory on sys.path (after keval's own modules, so
// that no driver can stand in for keval_runtime). GIL held.
py::object import_driver(const keval_python_driver* driver) {
  if (driver == nullptr || driver->struct_size < sizeof(keval_python_driver) ||
      driver->module == nullptr || driver->module[0] == '\0')
    throw Error(KEVAL_ERROR_INTERNAL, "the plugin names no Python driver");
  if (driver->directory != nullptr)
    runtime::add_driver_directory(driver->directory);
  return py::module_::import(driver->module);
}

} // namespace

keval_error* keval_python_compile(const keval_python_driver* driver_location,
                                  const keval_compile_args* args, keval_compile_result* result) {
  return sdk_detail::guarded(KEVAL_ERROR_INTERNAL, [&] {
    if (args == nullptr || result == nullptr || args->source_code == nullptr)
      throw Error(KEVAL_ERROR_INTERNAL, "compile called with null arguments");
    runtime::ensure_interpreter();
    runtime::Gil gil;
    auto box = std::make_unique<sdk_detail::KernelBox>();
    try {
      py::object driver = import_driver(driver_location);
      py::object io = args->io_contract_json != nullptr
                          ? py::object(py::str(args->io_contract_json))
                          : py::object(py::none());
      py::object kernel = driver.attr("compile")(
          py::str(args->source_code), py::str(args->metadata_json ? args->metadata_json : "{}"), io,
          py::str(args->work_dir ? args->work_dir : ""),
          py::str(args->side ? args->side : "custom"), args->cuda_arch);
      box->kernel = std::make_unique<runtime::PythonKernel>(std::move(kernel));
    } catch (py::error_already_set& e) {
      throw runtime::to_sdk_error(e);
    }
    box->info = box->kernel->info_json();
    result->kernel = reinterpret_cast<keval_kernel*>(box.get());
    result->info_json = box->info.c_str();
    box.release();
  });
}

keval_error* keval_python_prewarm(const keval_python_driver* driver_location) {
  return sdk_detail::guarded(KEVAL_ERROR_INTERNAL, [&] {
    runtime::ensure_interpreter();
    runtime::Gil gil;
    try {
      py::object driver = import_driver(driver_location);
      if (py::hasattr(driver, "prewarm"))
        driver.attr("prewarm")();
    } catch (py::error_already_set& e) {
      throw runtime::to_sdk_error(e);
    }
  });
}

keval_error* keval_python_warm_device(const keval_python_driver* driver_location,
                                      const keval_device_args* args) {
  return sdk_detail::guarded(KEVAL_ERROR_INTERNAL, [&] {
    if (args == nullptr)
      throw Error(KEVAL_ERROR_INTERNAL, "warm_device called with null arguments");
    runtime::ensure_interpreter();
    runtime::Gil gil;
    try {
      py::object driver = import_driver(driver_location);
      if (py::hasattr(driver, "warm_device"))
        driver.attr("warm_device")(static_cast<int>(args->device.device_type),
                                   static_cast<int>(args->device.device_id),
                                   reinterpret_cast<uintptr_t>(args->stream));
    } catch (py::error_already_set& e) {
      throw runtime::to_sdk_error(e);
    }
  });
}

keval_error* keval_python_bind_device(keval_kernel* kernel, const keval_device_args* args) {
  return sdk_detail::bind_thunk(kernel, args);
}

keval_error* keval_python_default_inputs(keval_kernel* kernel,
                                         const keval_default_inputs_args* args) {
  return sdk_detail::inputs_thunk(kernel, args);
}

keval_error* keval_python_launch(keval_kernel* kernel, const keval_launch_args* args) {
  return sdk_detail::launch_thunk(kernel, args);
}

void keval_python_kernel_destroy(keval_kernel* kernel) {
  sdk_detail::kernel_destroy_thunk(kernel);
}

void keval_python_error_destroy(keval_error* error) {
  sdk_detail::destroy_error(error);
}

} // extern "C"
