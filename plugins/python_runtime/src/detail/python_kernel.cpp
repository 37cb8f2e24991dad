#include "detail/python_kernel.hpp"

#include "detail/dlpack_bridge.hpp"
#include "detail/interpreter.hpp"
#include "detail/python_error.hpp"

#include <cstdint>

namespace keval::python_runtime::detail {

namespace py = pybind11;

namespace {

// One launch argument for the driver: (name, kind, role, is_meta, value, is_bool).
py::tuple argument_tuple(const keval_arg& arg) {
  py::object value = py::none();
  bool is_bool = false;
  switch (arg.kind) {
  case KEVAL_ARG_TENSOR:
    if (arg.tensor == nullptr)
      throw sdk::Error(KEVAL_ERROR_INTERNAL, std::string("tensor argument '") +
                                                 (arg.name ? arg.name : "?") + "' has no tensor");
    value = borrow_as_capsule(*arg.tensor, &is_bool);
    break;
  case KEVAL_ARG_INT:
    value = py::int_(arg.int_value);
    break;
  case KEVAL_ARG_FLOAT:
    value = py::float_(arg.float_value);
    break;
  case KEVAL_ARG_BOOL:
    value = py::bool_(arg.int_value != 0);
    break;
  case KEVAL_ARG_STR:
    value = py::str(arg.str_value != nullptr ? arg.str_value : "");
    break;
  default:
    throw sdk::Error(KEVAL_ERROR_INTERNAL, "unknown argument kind " + std::to_string(arg.kind));
  }
  return py::make_tuple(py::str(arg.name != nullptr ? arg.name : ""), arg.kind, arg.role,
                        py::bool_(arg.is_meta != 0), std::move(value), py::bool_(is_bool));
}

} // namespace

PythonKernel::PythonKernel(py::object kernel) : kernel_(std::move(kernel)) {
  info_ = kernel_.attr("info_json")().cast<std::string>();
}

PythonKernel::~PythonKernel() {
  Gil gil;
  kernel_ = py::object();
}

void PythonKernel::bind_device(const keval_device_args& device) {
  Gil gil;
  try {
    kernel_.attr("bind")(device.device.device_type, device.device.device_id,
                         reinterpret_cast<uintptr_t>(device.stream));
  } catch (py::error_already_set& e) {
    throw to_sdk_error(e);
  }
}

void PythonKernel::default_inputs(sdk::InputsContext& ctx) {
  Gil gil;
  try {
    py::object produced = kernel_.attr("default_inputs")(ctx.seed());
    for (const py::handle tensor : produced)
      ctx.add_input(adopt_returned(tensor));
  } catch (py::error_already_set& e) {
    throw to_sdk_error(e);
  }
}

void PythonKernel::launch(sdk::LaunchContext& ctx) {
  Gil gil;
  try {
    py::list args;
    for (size_t i = 0; i < ctx.num_args(); ++i)
      args.append(argument_tuple(ctx.arg(i)));
    py::object produced = kernel_.attr("launch")(args);
    for (const py::handle tensor : produced)
      ctx.return_output(adopt_returned(tensor));
  } catch (py::error_already_set& e) {
    throw to_sdk_error(e);
  }
}

} // namespace keval::python_runtime::detail
