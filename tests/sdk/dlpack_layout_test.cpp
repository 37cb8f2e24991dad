// plugin.h re-declares DLPack's DLTensor and DLManagedTensor (so plugins need no DLPack header),
// and promises that a plugin may reinterpret keval's tensors as DLPack's. Checked here against
// the real <dlpack/dlpack.h> (Debian's libdlpack-dev, which scripts/setup installs): every field
// at the same offset with the same size, the same enum values.
#include <keval/plugin.h>

#include <cstddef>

#include <gtest/gtest.h>

#if __has_include(<dlpack/dlpack.h>)
#include <dlpack/dlpack.h>
#define KEVAL_HAVE_DLPACK_HEADER 1

#define KEVAL_SAME_FIELD(ours, theirs, our_field, their_field)                                     \
  static_assert(offsetof(ours, our_field) == offsetof(theirs, their_field),                        \
                #ours "." #our_field " is not where " #theirs "." #their_field " is");             \
  static_assert(sizeof(ours::our_field) == sizeof(theirs::their_field),                            \
                #ours "." #our_field " has another size than " #theirs "." #their_field)

static_assert(sizeof(keval_dl_device) == sizeof(DLDevice));
KEVAL_SAME_FIELD(keval_dl_device, DLDevice, device_type, device_type);
KEVAL_SAME_FIELD(keval_dl_device, DLDevice, device_id, device_id);

static_assert(sizeof(keval_dl_dtype) == sizeof(DLDataType));
KEVAL_SAME_FIELD(keval_dl_dtype, DLDataType, code, code);
KEVAL_SAME_FIELD(keval_dl_dtype, DLDataType, bits, bits);
KEVAL_SAME_FIELD(keval_dl_dtype, DLDataType, lanes, lanes);

static_assert(sizeof(keval_dl_tensor) == sizeof(DLTensor));
KEVAL_SAME_FIELD(keval_dl_tensor, DLTensor, data, data);
KEVAL_SAME_FIELD(keval_dl_tensor, DLTensor, device, device);
KEVAL_SAME_FIELD(keval_dl_tensor, DLTensor, ndim, ndim);
KEVAL_SAME_FIELD(keval_dl_tensor, DLTensor, dtype, dtype);
KEVAL_SAME_FIELD(keval_dl_tensor, DLTensor, shape, shape);
KEVAL_SAME_FIELD(keval_dl_tensor, DLTensor, strides, strides);
KEVAL_SAME_FIELD(keval_dl_tensor, DLTensor, byte_offset, byte_offset);

static_assert(sizeof(keval_dl_managed_tensor) == sizeof(DLManagedTensor));
KEVAL_SAME_FIELD(keval_dl_managed_tensor, DLManagedTensor, dl_tensor, dl_tensor);
KEVAL_SAME_FIELD(keval_dl_managed_tensor, DLManagedTensor, manager_ctx, manager_ctx);
KEVAL_SAME_FIELD(keval_dl_managed_tensor, DLManagedTensor, deleter, deleter);

// Enumerators of two enums, compared as the integers that cross the boundary.
constexpr int value(int enumerator) {
  return enumerator;
}
static_assert(value(KEVAL_DEVICE_CPU) == value(kDLCPU) &&
              value(KEVAL_DEVICE_CUDA) == value(kDLCUDA));
static_assert(value(KEVAL_DTYPE_INT) == value(kDLInt) &&
              value(KEVAL_DTYPE_UINT) == value(kDLUInt) &&
              value(KEVAL_DTYPE_FLOAT) == value(kDLFloat) &&
              value(KEVAL_DTYPE_BFLOAT) == value(kDLBfloat));
#if DLPACK_VERSION >= 80 // kDLBool arrived in DLPack 0.8; Debian 12 ships 0.6
static_assert(value(KEVAL_DTYPE_BOOL) == value(kDLBool));
#endif
#endif

namespace {

// The checks above are compile-time; this says which header they were made against, and fails
// where there was none to check against (rather than passing with nothing checked).
TEST(DLPackLayout, PluginTensorsAreDLPacksFieldForField) {
#ifdef KEVAL_HAVE_DLPACK_HEADER
  RecordProperty("dlpack_version", DLPACK_VERSION);
  SUCCEED() << "checked against DLPack " << DLPACK_VERSION;
#else
  FAIL() << "<dlpack/dlpack.h> was not found, so plugin.h's tensor layout was not checked "
            "(scripts/setup installs libdlpack-dev)";
#endif
}

} // namespace
