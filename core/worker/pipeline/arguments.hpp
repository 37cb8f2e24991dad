// Turning an IOContract (or a kernel's default inputs) into launch arguments on the engine's
// device: pristine trial inputs, per-launch clones, poisoned outputs, and the check that a
// kernel left its read-only inputs alone.
#pragma once

#include "request/model.hpp"
#include "worker/engine/engine.hpp"

#include <keval/plugin.h>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/json/array.hpp>

namespace keval::worker {

// Owns a tensor a plugin handed over; releases it through its deleter.
struct ManagedTensorDeleter {
  void operator()(keval_dl_managed_tensor* t) const {
    if (t != nullptr && t->deleter != nullptr)
      t->deleter(t);
  }
};
using ManagedTensor = std::unique_ptr<keval_dl_managed_tensor, ManagedTensorDeleter>;

// One trial's pristine inputs. Never handed to a kernel directly: kernels get clones.
class InputSet {
public:
  InputSet() = default;
  // Materialises every contract's input and inout tensors. Values depend only on the argument's
  // spec, its seed (or, without one, its name), the job seed and the trial (tensor::input_seed),
  // so two contracts that describe the same argument get bit-identical tensors.
  static InputSet from_contracts(Engine& engine,
                                 const std::vector<const request::IOContract*>& contracts,
                                 uint64_t trial, uint64_t job_seed);
  // A kernel's own default inputs (KernelBench's get_inputs), already private copies.
  static InputSet from_tensors(std::vector<std::unique_ptr<Tensor>> tensors);

  // The pristine tensor for argument `index` of `contract`, or nullptr (not an input tensor).
  const Tensor* contract_input(const request::IOContract* contract, size_t index) const;
  const std::vector<std::unique_ptr<Tensor>>& defaults() const { return defaults_; }

private:
  struct ContractInputs {
    const request::IOContract* contract = nullptr;
    std::vector<std::unique_ptr<Tensor>> tensors; // aligned with contract->args
  };
  std::vector<ContractInputs> contracts_;
  std::vector<std::unique_ptr<Tensor>> defaults_;
};

// The keval_arg array for one side: clones of the inputs, fresh output tensors, scalars.
class ArgumentBinder {
public:
  // `contract` may be nullptr (default-input mode). When `own_contract` is false the side
  // borrows another side's contract and receives only its inputs (no outputs, no meta args).
  // The side's tensors are allocated with `sharing`: Sharing::shared when a runner process is
  // handed them.
  ArgumentBinder(Engine& engine, const request::IOContract* contract, bool own_contract,
                 const InputSet& inputs, Sharing sharing = Sharing::private_memory);

  const std::vector<keval_arg>& args() const { return args_; }
  // The arguments as the runner channel describes them; the shared tensors' descriptors are
  // appended to `fds` in argument order.
  boost::json::array describe(std::vector<int>& fds) const;
  void poison_outputs(Engine& engine);
  // Writes another trial's inputs (same contracts, or default inputs of the same shapes) into the
  // bound tensors, in place, and checks against those from then on: a timed sample's fresh
  // inputs, in buffers the runner (and a graph it captured) already holds. `inputs` must outlive
  // the next first_modified_input. Throws std::invalid_argument when a shape or dtype differs.
  void refresh(Engine& engine, const InputSet& inputs);
  // Output and inout tensors, in contract order.
  std::vector<const keval_dl_tensor*> output_views();
  // Name of the first read-only input whose bytes changed, if any.
  std::optional<std::string> first_modified_input(Engine& engine) const;

private:
  struct Bound {
    std::string name;
    request::Role role = request::Role::input;
    std::unique_ptr<Tensor> tensor;   // tensor arguments
    const Tensor* pristine = nullptr; // inputs: what the clone must still equal
    size_t source = 0;                // the pristine's index: contract argument or default input
    std::string str_value;            // keeps str scalars alive
  };
  const request::IOContract* contract_ = nullptr;
  std::vector<Bound> bound_;
  std::vector<keval_arg> args_;
};

// The outputs of one launch: private copies, out of the reach of the process that made them.
struct Launched {
  std::vector<std::unique_ptr<Tensor>> copies;
  std::vector<const keval_dl_tensor*> outputs; // views of `copies`
};

} // namespace keval::worker
