#include "detail/dlpack_bridge.hpp"

#include <keval/plugin.hpp>

#include <memory>
#include <string>
#include <vector>

namespace keval::python_runtime::detail {

namespace py = pybind11;
using sdk::Error;

namespace {

constexpr const char* kCapsuleName = "dltensor";
constexpr const char* kVersionedCapsuleName = "dltensor_versioned";

// ---- core -> Python ---------------------------------------------------------------------------

struct Borrowed {
  keval_dl_managed_tensor managed{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
};

// DLPack: the consumer (torch) calls this when its tensor dies; the data is not ours to free.
void delete_borrowed(keval_dl_managed_tensor* self) {
  delete static_cast<Borrowed*>(self->manager_ctx);
}

// A capsule still named "dltensor" was never consumed: its tensor is released here.
void destroy_unconsumed_capsule(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kCapsuleName))
    return;
  auto* managed =
      static_cast<keval_dl_managed_tensor*>(PyCapsule_GetPointer(capsule, kCapsuleName));
  if (managed != nullptr && managed->deleter != nullptr)
    managed->deleter(managed);
}

// ---- Python -> core ---------------------------------------------------------------------------

// DLPack 1.x's DLManagedTensorVersioned, field for field (dlpack.h).
struct DLPackVersion {
  uint32_t major;
  uint32_t minor;
};
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  uint64_t flags;
  keval_dl_tensor dl_tensor;
};

struct Returned {
  keval_dl_managed_tensor managed{};
  PyObject* capsule = nullptr; // strong reference
};

void delete_returned(keval_dl_managed_tensor* self) {
  auto* returned = static_cast<Returned*>(self->manager_ctx);
  {
    // The core releases tensors without the GIL, from any thread.
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_XDECREF(returned->capsule); // torch's capsule destructor releases its tensor
    PyGILState_Release(gil);
  }
  delete returned;
}

const keval_dl_tensor& described_tensor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, kCapsuleName)) {
    auto* managed =
        static_cast<keval_dl_managed_tensor*>(PyCapsule_GetPointer(capsule, kCapsuleName));
    return managed->dl_tensor; // DLManagedTensor has keval_dl_managed_tensor's layout
  }
  if (PyCapsule_IsValid(capsule, kVersionedCapsuleName)) {
    auto* managed = static_cast<DLManagedTensorVersioned*>(
        PyCapsule_GetPointer(capsule, kVersionedCapsuleName));
    if (managed->version.major != 1)
      throw Error(KEVAL_ERROR_INTERNAL, "unsupported DLPack version " +
                                            std::to_string(managed->version.major) + "." +
                                            std::to_string(managed->version.minor));
    return managed->dl_tensor;
  }
  const char* name = PyCapsule_GetName(capsule);
  PyErr_Clear();
  throw Error(KEVAL_ERROR_INTERNAL, std::string("expected an unconsumed DLPack capsule, got '") +
                                        (name ? name : "(unnamed)") + "'");
}

} // namespace

py::object borrow_as_capsule(const keval_dl_tensor& tensor, bool* is_bool) {
  auto borrowed = std::make_unique<Borrowed>();
  keval_dl_tensor& view = borrowed->managed.dl_tensor;
  view = tensor;
  if (tensor.ndim > 0) {
    borrowed->shape.assign(tensor.shape, tensor.shape + tensor.ndim);
    view.shape = borrowed->shape.data();
    if (tensor.strides != nullptr) {
      borrowed->strides.assign(tensor.strides, tensor.strides + tensor.ndim);
      view.strides = borrowed->strides.data();
    }
  } else {
    view.shape = nullptr;
    view.strides = nullptr;
  }
  *is_bool = tensor.dtype.code == KEVAL_DTYPE_BOOL;
  if (*is_bool)
    view.dtype = keval_dl_dtype{KEVAL_DTYPE_UINT, 8, 1};
  borrowed->managed.manager_ctx = borrowed.get();
  borrowed->managed.deleter = &delete_borrowed;
  PyObject* capsule = PyCapsule_New(&borrowed->managed, kCapsuleName, &destroy_unconsumed_capsule);
  if (capsule == nullptr)
    throw py::error_already_set();
  borrowed.release(); // owned by the capsule, then by its consumer
  return py::reinterpret_steal<py::object>(capsule);
}

keval_dl_managed_tensor* adopt_returned(py::handle pair) {
  if (!py::isinstance<py::tuple>(pair) || py::len(pair) != 2)
    throw Error(KEVAL_ERROR_INTERNAL, "a driver returned a tensor that is not (capsule, is_bool)");
  const auto items = py::reinterpret_borrow<py::tuple>(pair);
  py::object capsule = items[0];
  const bool is_bool = items[1].cast<bool>();
  if (!PyCapsule_CheckExact(capsule.ptr()))
    throw Error(KEVAL_ERROR_INTERNAL, "a driver returned a tensor that is not a DLPack capsule");
  const keval_dl_tensor& tensor = described_tensor(capsule.ptr());
  if (tensor.dtype.lanes != 1)
    throw Error(KEVAL_ERROR_RUNTIME, "a returned tensor has vector lanes (" +
                                         std::to_string(tensor.dtype.lanes) +
                                         "); keval compares scalar elements only");
  auto returned = std::make_unique<Returned>();
  returned->managed.dl_tensor = tensor; // shape and strides stay owned by the capsule's tensor
  if (is_bool)
    returned->managed.dl_tensor.dtype = keval_dl_dtype{KEVAL_DTYPE_BOOL, 8, 1};
  returned->managed.manager_ctx = returned.get();
  returned->managed.deleter = &delete_returned;
  returned->capsule = capsule.release().ptr();
  return &returned.release()->managed;
}

} // namespace keval::python_runtime::detail
