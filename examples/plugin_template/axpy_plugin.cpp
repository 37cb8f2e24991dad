// A complete keval plugin in one file: kernel type "axpy", out = alpha * x + y on the CPU.
//
// The source code a user submits selects the element operation ("axpy" or "axmy" for
// alpha * x - y); anything else is a compile error, which shows how plugins report them.
// The IOContract supplies x and y (float32 inputs), out (float32 output) and alpha (float).
// keval's core generates the inputs, poisons the output, compares against a reference and
// times the launches: the plugin only compiles and runs.
#include <keval/plugin.hpp>

#include <string>

namespace {

using keval::sdk::Error;

float* floats(const keval_arg& arg) {
  const keval_dl_tensor* t = arg.tensor;
  if (t->dtype.code != KEVAL_DTYPE_FLOAT || t->dtype.bits != 32)
    throw Error(KEVAL_ERROR_INVALID_REQUEST,
                std::string("argument '") + arg.name + "' must be float32");
  return reinterpret_cast<float*>(static_cast<char*>(t->data) + t->byte_offset);
}

int64_t numel(const keval_dl_tensor* t) {
  int64_t n = 1;
  for (int32_t i = 0; i < t->ndim; ++i)
    n *= t->shape[i];
  return n;
}

class AxpyKernel final : public keval::sdk::Kernel {
public:
  explicit AxpyKernel(float y_sign) : y_sign_(y_sign) {}

  void launch(keval::sdk::LaunchContext& ctx) override {
    const keval_arg *x = nullptr, *y = nullptr, *out = nullptr;
    double alpha = 1.0;
    for (size_t i = 0; i < ctx.num_args(); ++i) {
      const keval_arg& a = ctx.arg(i);
      if (a.kind == KEVAL_ARG_FLOAT)
        alpha = a.float_value;
      else if (a.kind == KEVAL_ARG_TENSOR && a.role == KEVAL_ROLE_OUTPUT)
        out = &a;
      else if (a.kind == KEVAL_ARG_TENSOR)
        (x == nullptr ? x : y) = &a;
    }
    if (x == nullptr || y == nullptr || out == nullptr)
      throw Error(KEVAL_ERROR_INVALID_REQUEST, "axpy needs tensors x, y (inputs) and out");
    const int64_t n = numel(out->tensor);
    if (numel(x->tensor) != n || numel(y->tensor) != n)
      throw Error(KEVAL_ERROR_RUNTIME, "x, y and out must have the same number of elements");
    const float* xs = floats(*x);
    const float* ys = floats(*y);
    float* os = floats(*out);
    for (int64_t i = 0; i < n; ++i)
      os[i] = static_cast<float>(alpha) * xs[i] + y_sign_ * ys[i];
  }

  std::string info_json() const override {
    return y_sign_ > 0 ? R"({"operation": "axpy"})" : R"({"operation": "axmy"})";
  }

private:
  float y_sign_;
};

struct AxpyPlugin {
  static keval_manifest manifest() {
    return keval::sdk::make_manifest("axpy", "1.0.0", "example plugin: out = alpha * x + y (CPU)",
                                     KEVAL_CAP_DEVICE_CPU | KEVAL_CAP_REQUIRES_IO_CONTRACT);
  }

  static std::unique_ptr<keval::sdk::Kernel> compile(const keval::sdk::CompileInput& in) {
    std::string op(in.source_code);
    op.erase(0, op.find_first_not_of(" \t\r\n"));
    op.erase(op.find_last_not_of(" \t\r\n") + 1);
    if (op == "axpy")
      return std::make_unique<AxpyKernel>(1.0f);
    if (op == "axmy")
      return std::make_unique<AxpyKernel>(-1.0f);
    throw Error(KEVAL_ERROR_COMPILE, "unknown operation '" + op + "'",
                "source line 1: expected 'axpy' or 'axmy'");
  }
};

} // namespace

KEVAL_PLUGIN(AxpyPlugin)
