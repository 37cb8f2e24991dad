#include "detail/python_error.hpp"

#include <string>

namespace keval::python_runtime::detail {

namespace py = pybind11;

namespace {

std::string full_traceback(py::error_already_set& error) {
  py::object format = py::module_::import("traceback").attr("format_exception");
  std::string text;
  for (const py::handle line : format(error.type(), error.value(), error.trace()))
    text += py::str(line).cast<std::string>();
  while (!text.empty() && text.back() == '\n')
    text.pop_back();
  return text;
}

bool is_code(long code) {
  return code >= KEVAL_ERROR_COMPILE && code <= KEVAL_ERROR_INTERNAL;
}

} // namespace

sdk::Error to_sdk_error(py::error_already_set& error) {
  try {
    py::module_ errors = py::module_::import("keval_runtime.errors");
    if (error.matches(errors.attr("KernelError"))) {
      py::object value = error.value();
      const long code = value.attr("code").cast<long>();
      const std::string message = py::str(value.attr("message")).cast<std::string>();
      py::object details = value.attr("details");
      return sdk::Error(is_code(code) ? static_cast<keval_error_code>(code) : KEVAL_ERROR_INTERNAL,
                        message,
                        details.is_none() ? std::string() : py::str(details).cast<std::string>());
    }
    // error.what() may carry pybind11's own rendering of the traceback: one line instead.
    const std::string summary = py::str(errors.attr("describe")(error.value())).cast<std::string>();
    return sdk::Error(KEVAL_ERROR_INTERNAL, "keval's Python runtime failed: " + summary,
                      full_traceback(error));
  } catch (py::error_already_set& nested) {
    return sdk::Error(KEVAL_ERROR_INTERNAL,
                      std::string("keval's Python runtime failed: ") + error.what() +
                          " (and reporting it failed: " + nested.what() + ")");
  }
}

} // namespace keval::python_runtime::detail
