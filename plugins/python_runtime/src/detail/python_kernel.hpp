// A kernel compiled by a Python driver: the SDK's Kernel over the driver's kernel object.
#pragma once

#include <pybind11/pybind11.h>

#include <keval/plugin.hpp>

#include <string>

namespace keval::python_runtime::detail {

class PythonKernel final : public sdk::Kernel {
public:
  // `kernel` is the driver's kernel object (see keval_runtime/__init__.py); GIL held.
  explicit PythonKernel(pybind11::object kernel);
  ~PythonKernel() override;
  PythonKernel(const PythonKernel&) = delete;
  PythonKernel& operator=(const PythonKernel&) = delete;

  // kernel.bind(device_type, device_id, stream): the model is built on the device, the core's
  // stream wrapped for torch.
  void bind_device(const keval_device_args& device) override;
  // kernel.default_inputs(seed) -> tensors handed to the core.
  void default_inputs(sdk::InputsContext& ctx) override;
  // kernel.launch(args) -> produced tensors (none for kernels that write output arguments).
  void launch(sdk::LaunchContext& ctx) override;
  std::string info_json() const override { return info_; }

private:
  pybind11::object kernel_;
  std::string info_;
};

} // namespace keval::python_runtime::detail
