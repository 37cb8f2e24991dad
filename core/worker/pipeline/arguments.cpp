#include "worker/pipeline/arguments.hpp"

#include "tensor/generate.hpp"
#include "worker/runner/detail/wire.hpp"

#include <functional>

#include <boost/json/value_to.hpp>

namespace keval::worker {

namespace {

std::unique_ptr<Tensor> materialise(Engine& engine, const request::ArgSpec& arg, uint64_t trial,
                                    uint64_t job_seed) {
  const auto& spec = *arg.tensor_spec;
  auto tensor = engine.allocate(spec.dtype, spec.shape);
  if (spec.data) {
    engine.upload(*tensor, spec.data->bytes);
    return tensor;
  }
  // The V2 contract generates unspecified inputs with randn.
  const request::TensorInit init = spec.init.value_or(request::TensorInit{});
  const std::string stream = init.seed ? "seed:" + std::to_string(*init.seed) : "arg:" + arg.name;
  engine.fill(*tensor, init, tensor::input_seed(job_seed, stream, trial));
  return tensor;
}

} // namespace

InputSet InputSet::from_contracts(Engine& engine,
                                  const std::vector<const request::IOContract*>& contracts,
                                  uint64_t trial, uint64_t job_seed) {
  InputSet set;
  for (const auto* contract : contracts) {
    if (contract == nullptr)
      continue;
    ContractInputs inputs;
    inputs.contract = contract;
    for (const auto& arg : contract->args) {
      const bool is_input =
          arg.type == request::ArgType::tensor && arg.role != request::Role::output;
      inputs.tensors.push_back(is_input ? materialise(engine, arg, trial, job_seed) : nullptr);
    }
    set.contracts_.push_back(std::move(inputs));
  }
  return set;
}

InputSet InputSet::from_tensors(std::vector<std::unique_ptr<Tensor>> tensors) {
  InputSet set;
  set.defaults_ = std::move(tensors);
  return set;
}

const Tensor* InputSet::contract_input(const request::IOContract* contract, size_t index) const {
  for (const auto& c : contracts_)
    if (c.contract == contract)
      return index < c.tensors.size() ? c.tensors[index].get() : nullptr;
  return nullptr;
}

ArgumentBinder::ArgumentBinder(Engine& engine, const request::IOContract* contract,
                               bool own_contract, const InputSet& inputs, Sharing sharing)
    : contract_(contract) {
  if (contract == nullptr) {
    for (size_t i = 0; i < inputs.defaults().size(); ++i) {
      Bound b;
      b.name = "input" + std::to_string(i);
      b.pristine = inputs.defaults()[i].get();
      b.source = i;
      b.tensor = engine.clone(b.pristine->dl(), sharing);
      bound_.push_back(std::move(b));
    }
  } else {
    for (size_t i = 0; i < contract->args.size(); ++i) {
      const auto& arg = contract->args[i];
      const bool is_tensor = arg.type == request::ArgType::tensor;
      if (!own_contract && (arg.is_meta || (is_tensor && arg.role == request::Role::output)))
        continue;
      Bound b;
      b.name = arg.name;
      b.role = own_contract ? arg.role : request::Role::input;
      if (is_tensor) {
        if (arg.role == request::Role::output) {
          b.tensor = engine.allocate(arg.tensor_spec->dtype, arg.tensor_spec->shape, sharing);
        } else {
          b.pristine = inputs.contract_input(contract, i);
          b.source = i;
          if (b.pristine == nullptr)
            throw std::logic_error("no materialised input for argument '" + arg.name + "'");
          b.tensor = engine.clone(b.pristine->dl(), sharing);
        }
      } else if (arg.type == request::ArgType::str) {
        b.str_value = boost::json::value_to<std::string>(arg.value);
      }
      bound_.push_back(std::move(b));
    }
  }

  // Build the C view once; the Bound entries own everything it points to.
  size_t contract_index = 0;
  for (auto& b : bound_) {
    keval_arg a{};
    a.struct_size = sizeof a;
    a.name = b.name.c_str();
    a.role = static_cast<int32_t>(b.role == request::Role::input    ? KEVAL_ROLE_INPUT
                                  : b.role == request::Role::output ? KEVAL_ROLE_OUTPUT
                                                                    : KEVAL_ROLE_INOUT);
    if (b.tensor) {
      a.kind = KEVAL_ARG_TENSOR;
      a.tensor = &b.tensor->dl();
    }
    if (contract != nullptr) {
      // Find this binding's ArgSpec (bindings keep contract order, skipping filtered args).
      while (contract->args[contract_index].name != b.name)
        ++contract_index;
      const auto& spec = contract->args[contract_index++];
      a.is_meta = spec.is_meta ? 1 : 0;
      switch (spec.type) {
      case request::ArgType::tensor:
        break;
      case request::ArgType::int_:
        a.kind = KEVAL_ARG_INT;
        a.int_value = spec.value.to_number<int64_t>();
        break;
      case request::ArgType::float_:
        a.kind = KEVAL_ARG_FLOAT;
        a.float_value = spec.value.to_number<double>();
        break;
      case request::ArgType::bool_:
        a.kind = KEVAL_ARG_BOOL;
        a.int_value = spec.value.as_bool() ? 1 : 0;
        break;
      case request::ArgType::str:
        a.kind = KEVAL_ARG_STR;
        a.str_value = b.str_value.c_str();
        break;
      }
    }
    args_.push_back(a);
  }
}

boost::json::array ArgumentBinder::describe(std::vector<int>& fds) const {
  boost::json::array out;
  for (size_t i = 0; i < args_.size(); ++i) {
    const keval_arg& a = args_[i];
    boost::json::object d;
    d["name"] = a.name;
    d["kind"] = a.kind;
    d["role"] = a.role;
    d["is_meta"] = a.is_meta != 0;
    switch (a.kind) {
    case KEVAL_ARG_TENSOR:
      d["tensor"] = detail::describe_shared(*bound_[i].tensor, fds);
      break;
    case KEVAL_ARG_INT:
    case KEVAL_ARG_BOOL:
      d["int_value"] = a.int_value;
      break;
    case KEVAL_ARG_FLOAT:
      d["float_value"] = a.float_value;
      break;
    case KEVAL_ARG_STR:
      d["str_value"] = a.str_value;
      break;
    }
    out.push_back(std::move(d));
  }
  return out;
}

void ArgumentBinder::poison_outputs(Engine& engine) {
  for (auto& b : bound_)
    if (b.tensor && b.role == request::Role::output)
      engine.poison(*b.tensor);
}

void ArgumentBinder::refresh(Engine& engine, const InputSet& inputs) {
  for (auto& b : bound_) {
    if (b.pristine == nullptr)
      continue;
    const Tensor* fresh = nullptr;
    if (contract_ == nullptr)
      fresh = b.source < inputs.defaults().size() ? inputs.defaults()[b.source].get() : nullptr;
    else
      fresh = inputs.contract_input(contract_, b.source);
    if (fresh == nullptr)
      throw std::invalid_argument("the new inputs have no argument '" + b.name + "'");
    if (fresh->dtype() != b.tensor->dtype() || fresh->shape() != b.tensor->shape())
      throw std::invalid_argument("input '" + b.name +
                                  "' changed its dtype or shape between "
                                  "trials");
    engine.copy_into(*b.tensor, *fresh);
    b.pristine = fresh;
  }
}

std::vector<const keval_dl_tensor*> ArgumentBinder::output_views() {
  std::vector<const keval_dl_tensor*> views;
  for (auto& b : bound_)
    if (b.tensor && b.role != request::Role::input)
      views.push_back(&b.tensor->dl());
  return views;
}

std::optional<std::string> ArgumentBinder::first_modified_input(Engine& engine) const {
  for (const auto& b : bound_)
    if (b.tensor && b.role == request::Role::input && b.pristine != nullptr &&
        !engine.same_bytes(b.pristine->dl(), b.tensor->dl()))
      return b.name;
  return std::nullopt;
}

} // namespace keval::worker
