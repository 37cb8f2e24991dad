// ComputeEval's `source_references` check: the names a problem requires a solution to use (all of
// `all`, and one of `any` when it is not empty), looked for in the solution's code by a
// tokenizer, so that a name in a comment, a string or an #include path does not count.
//
// Which files are scanned: ComputeEval picks the language of each file; here it is the extension.
// C, C++ and CUDA files (.cu .cuh .c .cc .cpp .cxx .c++ .C .h .hh .hpp .hxx .inl .ipp .tpp) are
// read by a C++ tokenizer, Python files (.py) by a Python one, and any other file is not scanned
// (a name used only in a .txt or a CMakeLists.txt is missing).
//
// What counts as a use: the reference's tokens, in order, among the file's tokens, where comments
// and whitespace separate tokens and are otherwise ignored. So "cudaMalloc" is an identifier
// token (not "myCudaMalloc", not "cudaMallocAsync"); "thrust::sort" is `thrust` `::` `sort`
// (also in `::thrust::sort` or `thrust :: /*x*/ sort`, not in `thrust::sort_by_key`); in Python,
// "cp.cuda.runtime.malloc" is the dotted name. A reference that is not a name ("<<<",
// "__global__ void") is the same: its own tokens, as the file's tokenizer reads them. A string,
// character or header-name literal is one opaque token whose contents never match (f-strings
// included); a reference with no tokens at all (empty, or only a comment) is never found.
//
// What it does not do: expand macros, evaluate #if (code under #if 0 counts), or follow
// `using namespace` (a solution that calls `sort` after `using namespace thrust;` does not use
// "thrust::sort"). C++ lines are spliced at backslash-newline before tokenizing, as compilers do.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace keval::checks {

struct SourceFile {
  std::string path; // relative, '/'-separated; its extension picks the tokenizer
  std::string content;
};

struct SourceReferences {
  std::vector<std::string> all; // every one must be used
  std::vector<std::string> any; // at least one must be used, when not empty
};

struct ReferenceCheck {
  bool passed = true;
  // Every `all` name not found, then, when no `any` name was found, all the `any` names.
  std::vector<std::string> missing;
  // "missing required names: cublasSgemm; none of: thrust::sort, cub::DeviceRadixSort::SortKeys",
  // either part alone, or "" when passed.
  std::string message;
};

// Bytes of each file scanned at most (requests allow no larger file).
inline constexpr size_t kMaxReferenceScanBytes = 4u << 20;

// Linear in the size of the files and the references; never throws on any content (binary, NUL,
// unterminated comments and strings), only std::bad_alloc.
ReferenceCheck check_source_references(const std::vector<SourceFile>& files,
                                       const SourceReferences& refs);

} // namespace keval::checks
