// ComputeEval's source_references check: names in code count, names in comments, strings and
// #include paths do not; qualified and dotted names are token sequences; all/any semantics.
#include "checks/source_references.hpp"

#include <chrono>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace keval::checks {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

SourceReferences all_of(std::vector<std::string> names) {
  return {std::move(names), {}};
}

// The missing names when `refs` are looked for in one file.
std::vector<std::string> missing_in(const std::string& path, const std::string& content,
                                    const SourceReferences& refs) {
  return check_source_references({{path, content}}, refs).missing;
}

// Whether `name` is used in `content`, read as a .cu file.
bool uses(const std::string& content, const std::string& name) {
  return missing_in("solution.cu", content, all_of({name})).empty();
}

bool python_uses(const std::string& content, const std::string& name) {
  return missing_in("solution.py", content, all_of({name})).empty();
}

TEST(SourceReferences, NameUsedInCodeIsFound) {
  const ReferenceCheck check = check_source_references(
      {{"solution.cu", "void f(float* d, const float* h, size_t n) {\n"
                       "  cudaMemcpy(d, h, n, cudaMemcpyHostToDevice);\n}\n"}},
      all_of({"cudaMemcpy", "cudaMemcpyHostToDevice"}));
  EXPECT_TRUE(check.passed);
  EXPECT_THAT(check.missing, IsEmpty());
  EXPECT_EQ(check.message, "");
}

TEST(SourceReferences, NameInACommentIsNotUsed) {
  EXPECT_FALSE(uses("// cublasSgemm(handle, ...)\nint x;\n", "cublasSgemm"));
  EXPECT_FALSE(uses("/* we could call\n cublasSgemm here */ int x;", "cublasSgemm"));
  EXPECT_FALSE(uses("#define N 4 // cublasSgemm\n", "cublasSgemm"));
  EXPECT_FALSE(uses("#if 1 /* cublasSgemm */\n#endif\n", "cublasSgemm"));
  EXPECT_FALSE(uses("/* unterminated cublasSgemm", "cublasSgemm"));
}

TEST(SourceReferences, NameInALiteralIsNotUsed) {
  EXPECT_FALSE(uses(R"(puts("cublasSgemm");)", "cublasSgemm"));
  EXPECT_FALSE(uses(R"(puts("escaped \" cublasSgemm");)", "cublasSgemm"));
  EXPECT_FALSE(uses(R"(auto s = L"cublasSgemm"; auto t = u8"cublasSgemm";)", "cublasSgemm"));
  EXPECT_FALSE(uses("auto s = R\"x(\n cublasSgemm )\" still inside\n)x\";", "cublasSgemm"));
  EXPECT_FALSE(uses("auto s = uR\"(cublasSgemm)\";", "cublasSgemm"));
  EXPECT_FALSE(uses("char c = 'cublasSgemm';", "cublasSgemm"));
  EXPECT_FALSE(uses("puts(\"unterminated cublasSgemm", "cublasSgemm"));
  // A literal is one token: f("x") does not read as f().
  EXPECT_FALSE(uses(R"(f("x");)", "f()"));
  // After a literal, code again.
  EXPECT_TRUE(uses(R"(puts("a\\"); cublasSgemm(h);)", "cublasSgemm"));
  EXPECT_TRUE(uses("auto s = R\"(a)\"; cublasSgemm(h);", "cublasSgemm"));
  EXPECT_TRUE(uses("int n = 1'000'000; cublasSgemm(h);", "cublasSgemm"));
}

TEST(SourceReferences, IncludePathIsNotUsedButDirectivesAreCode) {
  EXPECT_FALSE(uses("#include <cublas_v2.h>\n", "cublas_v2"));
  EXPECT_FALSE(uses("  #  include \"cublas_v2.h\"\n", "cublas_v2"));
  EXPECT_FALSE(uses("#include_next <cublas_v2.h>\n", "cublas_v2"));
  EXPECT_TRUE(uses("#define GEMM cublasSgemm\n", "cublasSgemm"));
  EXPECT_TRUE(uses("#include <vector>\n#define SORT(x) thrust::sort(x)\n", "thrust::sort"));
  // `<` opens a header name only right after #include; elsewhere it is an operator.
  EXPECT_TRUE(uses("#if A < B\nint cublasSgemm;\n#endif\n", "cublasSgemm"));
  EXPECT_TRUE(uses("int a = b <cublasSgemm> c;", "cublasSgemm"));
}

TEST(SourceReferences, QualifiedNamesAreTokenSequences) {
  EXPECT_TRUE(uses("thrust::sort(v.begin(), v.end());", "thrust::sort"));
  EXPECT_TRUE(uses("::thrust::sort(v.begin(), v.end());", "thrust::sort"));
  EXPECT_TRUE(uses("thrust :: sort(v.begin(), v.end());", "thrust::sort"));
  EXPECT_TRUE(uses("thrust::/* the sort */sort(v.begin(), v.end());", "thrust::sort"));
  EXPECT_TRUE(uses("thrust::\n  sort(v.begin(), v.end());", "thrust::sort"));
  EXPECT_TRUE(
      uses("cub::DeviceRadixSort::SortKeys(t, b, in, out, n);", "cub::DeviceRadixSort::SortKeys"));
  EXPECT_TRUE(uses("std::transform(a, b, c, f);", "std::transform"));
  // A part of a qualified name is a name too.
  EXPECT_TRUE(uses("cub::DeviceRadixSort::SortKeys(t, b, in, out, n);", "SortKeys"));
  // A reference written with spaces means the same tokens.
  EXPECT_TRUE(uses("thrust::sort(v.begin(), v.end());", "thrust :: sort"));
}

TEST(SourceReferences, NamesMatchWholeTokensOnly) {
  EXPECT_FALSE(uses("thrust::sort_by_key(k.begin(), k.end(), v.begin());", "thrust::sort"));
  EXPECT_FALSE(uses("mythrust::sort(v);", "thrust::sort"));
  EXPECT_FALSE(uses("thrust::stable_sort(v);", "thrust::sort"));
  EXPECT_FALSE(uses("cudaMallocAsync(&p, n, s);", "cudaMalloc"));
  EXPECT_FALSE(uses("myCudaMalloc(&p, n);", "cudaMalloc"));
  EXPECT_FALSE(uses("thrust::detail::sort(v);", "thrust::sort"));
  EXPECT_FALSE(uses("float x = 1e10;", "e10"));
}

TEST(SourceReferences, NameSplitByALineContinuationIsJoined) {
  EXPECT_TRUE(uses("cublas\\\nSgemm(h);", "cublasSgemm"));
  EXPECT_TRUE(uses("cublas\\\r\nSgemm(h);", "cublasSgemm"));
  EXPECT_TRUE(uses("#define GEMM(h) \\\n  cublasSgemm(h)\n", "cublasSgemm"));
  // A // comment continued onto the next line is still a comment there.
  EXPECT_FALSE(uses("// note \\\ncublasSgemm(h);\n", "cublasSgemm"));
}

TEST(SourceReferences, ReferenceThatIsNotANameIsATokenSequence) {
  EXPECT_TRUE(uses("add<<<blocks, 256>>>(x, y, n);", "<<<"));
  EXPECT_TRUE(uses("add <<< blocks, 256 >>> (x, y, n);", "<<<"));
  EXPECT_FALSE(uses("int y = x << 2;", "<<<"));
  EXPECT_FALSE(uses("// add<<<blocks, 256>>>(x, y, n);\n", "<<<"));
  EXPECT_TRUE(uses("__global__   void add(float* x) {}", "__global__ void"));
  EXPECT_TRUE(uses("__global__ /* kernel */ void add(float* x) {}", "__global__ void"));
  EXPECT_FALSE(uses("__global__ static void add(float* x) {}", "__global__ void"));
  EXPECT_TRUE(uses("__shared__ float tile[32][33];", "__shared__ float"));
}

TEST(SourceReferences, ReferenceWithNoTokensIsNeverFound) {
  EXPECT_FALSE(uses("int x;", ""));
  EXPECT_FALSE(uses("int x;", "// x"));
}

TEST(SourceReferences, AllAndAny) {
  const std::string source = "cublasSgemm(h); thrust::sort(v.begin(), v.end());";
  // `any` satisfied by one of its names.
  EXPECT_THAT(missing_in("s.cu", source, {{}, {"cub::DeviceRadixSort::SortKeys", "thrust::sort"}}),
              IsEmpty());
  // `all` partially missing: only the missing ones, in order.
  EXPECT_THAT(missing_in("s.cu", source, all_of({"cublasCreate", "cublasSgemm", "cublasDestroy"})),
              ElementsAre("cublasCreate", "cublasDestroy"));
  // Both satisfied.
  EXPECT_THAT(missing_in("s.cu", source, {{"cublasSgemm"}, {"thrust::sort", "std::sort"}}),
              IsEmpty());
  // `all` satisfied, no `any` name: every `any` name is missing.
  EXPECT_THAT(missing_in("s.cu", source, {{"cublasSgemm"}, {"std::sort", "cub::DeviceScan"}}),
              ElementsAre("std::sort", "cub::DeviceScan"));
  // Both failing: the `all` names first.
  EXPECT_THAT(missing_in("s.cu", source, {{"cublasCreate"}, {"std::sort"}}),
              ElementsAre("cublasCreate", "std::sort"));
  // `any` satisfied but `all` not.
  EXPECT_THAT(missing_in("s.cu", source, {{"cublasCreate"}, {"std::sort", "thrust::sort"}}),
              ElementsAre("cublasCreate"));
}

TEST(SourceReferences, EmptyReferencesPass) {
  const ReferenceCheck check = check_source_references({{"solution.cu", "int main() {}"}}, {});
  EXPECT_TRUE(check.passed);
  EXPECT_THAT(check.missing, IsEmpty());
  EXPECT_EQ(check.message, "");
  EXPECT_TRUE(check_source_references({}, {}).passed);
}

TEST(SourceReferences, MessageNamesWhatIsMissing) {
  const std::vector<SourceFile> files = {{"solution.cu", "int main() { return 0; }"}};
  ReferenceCheck check = check_source_references(
      files, {{"cublasSgemm"}, {"thrust::sort", "cub::DeviceRadixSort::SortKeys"}});
  EXPECT_FALSE(check.passed);
  EXPECT_EQ(check.message, "missing required names: cublasSgemm; none of: thrust::sort, "
                           "cub::DeviceRadixSort::SortKeys");
  check = check_source_references(files, all_of({"cublasCreate", "cublasSgemm"}));
  EXPECT_EQ(check.message, "missing required names: cublasCreate, cublasSgemm");
  check = check_source_references(files, {{"main"}, {"thrust::sort", "std::sort"}});
  EXPECT_EQ(check.message, "none of: thrust::sort, std::sort");
}

TEST(SourceReferences, EveryCodeFileCountsButNoMatchSpansTwo) {
  const std::vector<SourceFile> files = {
      {"include/helpers.cuh", "inline void h() { cublasSgemm(); }"},
      {"solution.cu", "thrust::sort(v);"},
      {"a.cu", "int x = thrust::"},
      {"b.cu", "sort;"}};
  EXPECT_TRUE(check_source_references(files, all_of({"cublasSgemm", "thrust::sort"})).passed);
  EXPECT_FALSE(check_source_references({files[2], files[3]}, all_of({"thrust::sort"})).passed);
}

TEST(SourceReferences, FilesAreChosenByExtension) {
  const std::string code = "cublasSgemm(h);";
  for (const char* path : {"a.cu", "a.cuh", "a.c", "a.cc", "a.cpp", "a.cxx", "a.c++", "a.C", "a.h",
                           "a.hh", "a.hpp", "a.hxx", "a.inl", "a.ipp", "a.tpp", "dir/k.CU"})
    EXPECT_THAT(missing_in(path, code, all_of({"cublasSgemm"})), IsEmpty()) << path;
  for (const char* path : {"notes.txt", "CMakeLists.txt", "Makefile", "cu", "a.cu.orig", ".cu"})
    EXPECT_THAT(missing_in(path, code, all_of({"cublasSgemm"})), ElementsAre("cublasSgemm"))
        << path;
}

TEST(SourceReferences, PythonFilesUsePythonTokens) {
  EXPECT_TRUE(
      python_uses("import cupy as cp\nx = cp.cuda.runtime.malloc(16)\n", "cp.cuda.runtime.malloc"));
  EXPECT_TRUE(python_uses("x = cp . cuda.runtime.\\\n    malloc(16)\n", "cp.cuda.runtime.malloc"));
  EXPECT_FALSE(python_uses("x = cp.cuda.runtime.malloc_async(16)\n", "cp.cuda.runtime.malloc"));
  EXPECT_FALSE(python_uses("# cp.cuda.runtime.malloc(16)\n", "cp.cuda.runtime.malloc"));
  EXPECT_FALSE(python_uses("x = 'cupy.matmul'\n", "matmul"));
  EXPECT_FALSE(python_uses("x = \"matmul\"\n", "matmul"));
  EXPECT_FALSE(python_uses("'''\nmatmul\n'''\n", "matmul"));
  EXPECT_FALSE(python_uses("\"\"\"docstring \"\" matmul\"\"\"\n", "matmul"));
  EXPECT_FALSE(python_uses("x = rb'\\' matmul'\n", "matmul"));
  EXPECT_FALSE(python_uses("x = BR\"matmul\"\n", "matmul"));
  EXPECT_FALSE(python_uses("x = u'matmul'\n", "matmul"));
  // f-string contents do not count, replacement fields included (with nested quotes, 3.12).
  EXPECT_FALSE(python_uses("x = f'{matmul(a)}'\n", "matmul"));
  EXPECT_FALSE(python_uses("x = Rf\"{d[\"k\"]} {matmul(a)!r:>{w}}\"\n", "matmul"));
  EXPECT_FALSE(python_uses("x = f\"{a:'>10} matmul\"\n", "matmul"));
  EXPECT_TRUE(python_uses("x = f'{a:{w}}' + matmul(a)\n", "matmul"));
  EXPECT_TRUE(python_uses("x = f'{{' + str(a) + '}}'\ny = matmul(a)\n", "matmul"));
  EXPECT_TRUE(python_uses("x = f'{a}'; y = matmul(a)\n", "matmul"));
  // `rf` is a name when no quote follows.
  EXPECT_TRUE(python_uses("rf = 1\n", "rf"));
  // C++'s comment syntax is not Python's: `//` is floor division.
  EXPECT_TRUE(python_uses("x = a // matmul(b)\n", "matmul"));
}

TEST(SourceReferences, SurvivesHostileInput) {
  constexpr char kBinary[] = "\0\xff\"\x01R\"(((\\\n'\x80/*";
  const std::string binary(kBinary, sizeof kBinary - 1);
  EXPECT_FALSE(uses(binary, "cublasSgemm"));
  EXPECT_FALSE(python_uses(binary + "f'{{{{{{{{" + std::string(1000, '{') + "'''", "x"));
  std::string nested;
  for (int i = 0; i < 5000; ++i)
    nested += "f'{";
  EXPECT_FALSE(python_uses(nested, "x"));
}

TEST(SourceReferences, OverlappingReferencesStayLinear) {
  // 4 MiB of `a` against references that almost match everywhere: a naive scan would compare
  // every reference at every token, 200 references of up to 200 tokens each. Measured against the
  // same scan for one short reference in the same process, not against a wall-clock bound: the
  // sanitized, unoptimised build that CI also runs is many times slower than a release build.
  std::string source;
  for (size_t i = 0; source.size() < kMaxReferenceScanBytes; ++i)
    source += "a ";
  std::vector<std::string> refs;
  std::string prefix;
  for (int i = 0; i < 200; ++i) {
    prefix += "a ";
    refs.push_back(prefix + "b");
  }
  refs.emplace_back("a a");
  const auto scan = [&](const std::vector<std::string>& references) {
    const auto start = std::chrono::steady_clock::now();
    const ReferenceCheck check = check_source_references({{"big.cu", source}}, {{}, references});
    EXPECT_TRUE(check.passed) << check.message;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const double one = scan({"a a"});
  const double all = scan(refs);
  RecordProperty("one_reference_s", std::to_string(one));
  RecordProperty("overlapping_references_s", std::to_string(all));
  EXPECT_LT(all, 10 * one) << "one reference " << one << " s, 201 overlapping " << all << " s";
}

} // namespace
} // namespace keval::checks
