// Tensors between the core and Python, through DLPack capsules, without copies.
#pragma once

#include <pybind11/pybind11.h>

#include <keval/plugin.h>

namespace keval::python_runtime::detail {

// A "dltensor" capsule viewing `tensor` (the core's memory), for torch.utils.dlpack.from_dlpack.
// The capsule owns a copy of the descriptor (shape and strides included), never the data, which
// stays valid only for the call it was passed in. Bool tensors are described as uint8 (torch
// before 2.0 has no DLPack bool): `is_bool` tells Python to view them as torch.bool again.
// Call with the GIL held.
pybind11::object borrow_as_capsule(const keval_dl_tensor& tensor, bool* is_bool);

// Takes a tensor Python hands back as (capsule, is_bool), the capsule from
// torch.utils.dlpack.to_dlpack ("dltensor" or "dltensor_versioned"). The result shares the
// tensor's memory and keeps the capsule (so the torch tensor) alive until the core calls its
// deleter, which takes the GIL. Throws keval::sdk::Error on anything that is not such a pair.
// Call with the GIL held.
keval_dl_managed_tensor* adopt_returned(pybind11::handle pair);

} // namespace keval::python_runtime::detail
