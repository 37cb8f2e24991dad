// The Python pass of the static scan: torch, torch_cuda, triton and multi_kernel sources.
#pragma once

#include "checks/detail/findings.hpp"

#include <string>
#include <string_view>

namespace keval::checks::detail {

// Scans `source` as Python: imports and the names they bind (aliases are followed, so
// `import torch.cuda as c; c.synchronize = f` is seen as what it is), then every statement on
// code only; comments and string contents are not code. Strings go to scan_literal, and the
// strings that look like C++ (load_inline sources) are copied into `cxx_text` (left empty when
// there are none) at their own offsets, with byte 0x01 where each string starts and ends and
// 0x02 for an escaped newline, for scan_cxx.
void scan_python(std::string_view source, Findings& out, std::string& cxx_text);

// Whether a source of unknown kernel type reads as Python (its first telling line is an import, a
// def, a class, a decorator or a docstring) rather than C++.
bool looks_like_python(std::string_view source);

} // namespace keval::checks::detail
