// Splitting a ComputeEval build_command so the harness is compiled once: which commands split,
// into what, why the others do not, and (where nvcc is installed) that the split build makes the
// program the single command makes.
#include "plan/build_command.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace keval::cuda_program {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

const std::vector<std::string> kFiles = {"include/k.h", "solution.cu", "test/a.cu", "test/b.cu"};

SplitBuild split_ok(std::string_view command, const std::vector<std::string>& files = kFiles) {
  auto result = split_build_command(command, files);
  if (const auto* reason = std::get_if<std::string>(&result)) {
    ADD_FAILURE() << command << ": refused: " << *reason;
    return {};
  }
  return std::get<SplitBuild>(std::move(result));
}

std::string refusal(std::string_view command, const std::vector<std::string>& files = kFiles) {
  auto result = split_build_command(command, files);
  if (const auto* reason = std::get_if<std::string>(&result))
    return *reason;
  return "(split)";
}

TEST(SplitBuildCommand, ComputeEvalsTypicalCommand) {
  const SplitBuild split = split_ok("nvcc -I include -o test.out solution.cu test/*.cu");
  EXPECT_EQ(split.compiler, "nvcc");
  EXPECT_THAT(split.options, ElementsAre("-I", "include"));
  EXPECT_EQ(split.output, "test.out");
  EXPECT_THAT(split.sources, ElementsAre("solution.cu", "test/a.cu", "test/b.cu"));
  EXPECT_THAT(split.link_inputs, IsEmpty());
}

TEST(SplitBuildCommand, OptionsKeepTheirArguments) {
  const SplitBuild split = split_ok(
      "/usr/local/cuda/bin/nvcc -arch sm_90 -I include -lcublas -Xcompiler -fopenmp -std=c++17 "
      "-O3 --output-file=bin/prog -gencode arch=compute_90,code=sm_90 -DN=4 -rdc=false "
      "-lineinfo -Xlinker -rpath solution.cu -ccbin g++ test/a.cu");
  EXPECT_EQ(split.compiler, "/usr/local/cuda/bin/nvcc");
  EXPECT_THAT(split.options,
              ElementsAre("-arch", "sm_90", "-I", "include", "-lcublas", "-Xcompiler", "-fopenmp",
                          "-std=c++17", "-O3", "-gencode", "arch=compute_90,code=sm_90", "-DN=4",
                          "-rdc=false", "-lineinfo", "-Xlinker", "-rpath", "-ccbin", "g++"));
  EXPECT_EQ(split.output, "bin/prog");
  EXPECT_THAT(split.sources, ElementsAre("solution.cu", "test/a.cu"));
}

TEST(SplitBuildCommand, OutputForms) {
  EXPECT_EQ(split_ok("nvcc -otest.out solution.cu").output, "test.out");
  EXPECT_EQ(split_ok("nvcc --output-file test.out solution.cu").output, "test.out");
  EXPECT_EQ(split_ok("nvcc --output-file=test.out solution.cu").output, "test.out");
  EXPECT_EQ(split_ok("nvcc solution.cu -o test.out").output, "test.out");
  // -odir and -objtemp are options of their own, not -o with a value.
  const SplitBuild split = split_ok("nvcc -odir obj -objtemp -o t solution.cu");
  EXPECT_THAT(split.options, ElementsAre("-odir", "obj", "-objtemp"));
  EXPECT_EQ(split.output, "t");
}

TEST(SplitBuildCommand, QuotesAndEscapes) {
  const SplitBuild split = split_ok(
      R"(nvcc '-DMSG="a b"' -DOTHER="x y" -I\ inc\ dir -o "my out" 'solution.cu' "test/*.cu")",
      {"solution.cu", "test/*.cu", "test/a.cu"});
  EXPECT_THAT(split.options, ElementsAre("-DMSG=\"a b\"", "-DOTHER=x y", "-I inc dir"));
  EXPECT_EQ(split.output, "my out");
  // A quoted glob is a name, not a glob.
  EXPECT_THAT(split.sources, ElementsAre("solution.cu", "test/*.cu"));
  // Quoted operators are characters; a backslash-newline joins lines.
  EXPECT_THAT(split_ok("nvcc \"-DA=1;2\" '-DB=a&&b' -o t \\\n solution.cu").options,
              ElementsAre("-DA=1;2", "-DB=a&&b"));
  EXPECT_THAT(split_ok(R"(nvcc "-DQ=\"\\\"" -o t solution.cu)").options, ElementsAre(R"(-DQ="\")"));
}

TEST(SplitBuildCommand, GlobsExpandSortedAsShDoes) {
  const std::vector<std::string> files = {"test/z.cu",       "test/B.cu",     "test/a.cu",
                                          "test/.hidden.cu", "test/sub/c.cu", "solution.cu",
                                          "test/a.cuh"};
  // Byte order, * does not cross / nor match a leading dot.
  EXPECT_THAT(split_ok("nvcc -o t solution.cu test/*.cu", files).sources,
              ElementsAre("solution.cu", "test/B.cu", "test/a.cu", "test/z.cu"));
  EXPECT_THAT(split_ok("nvcc -o t test/*/*.cu ./test/[az].cu test/?.cu", files).sources,
              ElementsAre("test/sub/c.cu", "./test/a.cu", "./test/z.cu", "test/B.cu", "test/a.cu",
                          "test/z.cu"));
  // A glob in an option's value that matches nothing is passed on as written, as sh does.
  EXPECT_THAT(
      split_ok("nvcc -gencode arch=compute_90,code=[sm_90] -o t solution.cu", files).options,
      ElementsAre("-gencode", "arch=compute_90,code=[sm_90]"));
}

TEST(SplitBuildCommand, LinkInputsGoToTheLink) {
  const SplitBuild split =
      split_ok("nvcc -o t solution.cu test/a.cu lib/libk.a pre.o /usr/lib/libx.so.1");
  EXPECT_THAT(split.sources, ElementsAre("solution.cu", "test/a.cu"));
  EXPECT_THAT(split.link_inputs, ElementsAre("lib/libk.a", "pre.o", "/usr/lib/libx.so.1"));
  EXPECT_THAT(link_argv(split, {"o/0.o", "o/1.o"}),
              ElementsAre("nvcc", "o/0.o", "o/1.o", "lib/libk.a", "pre.o", "/usr/lib/libx.so.1",
                          "-o", "t"));
}

TEST(SplitBuildCommand, CompileAndLinkArgv) {
  const SplitBuild split =
      split_ok("nvcc -arch=sm_80 -I include -lcublas -o test.out solution.cu test/*.cu");
  EXPECT_THAT(compile_argv(split, "test/a.cu", "/cache/a.o"),
              ElementsAre("nvcc", "-arch=sm_80", "-I", "include", "-lcublas", "-c", "test/a.cu",
                          "-o", "/cache/a.o"));
  EXPECT_THAT(link_argv(split, {"s.o", "a.o", "b.o"}),
              ElementsAre("nvcc", "-arch=sm_80", "-I", "include", "-lcublas", "s.o", "a.o", "b.o",
                          "-o", "test.out"));
}

TEST(SplitBuildCommand, RefusesShellBeyondOneSimpleCommand) {
  EXPECT_EQ(refusal("nvcc -o t solution.cu && ./t"), "uses shell operators (&&)");
  EXPECT_EQ(refusal("nvcc -o t solution.cu || true"), "uses shell operators (||)");
  EXPECT_EQ(refusal("nvcc -o t solution.cu; ls"), "uses shell operators (;)");
  EXPECT_EQ(refusal("nvcc -o t solution.cu &"), "uses shell operators (&)");
  EXPECT_EQ(refusal("nvcc -o t solution.cu | tee log"), "uses shell operators (|)");
  EXPECT_EQ(refusal("nvcc -o t solution.cu > log"), "uses shell operators (>)");
  EXPECT_EQ(refusal("nvcc -o t solution.cu 2>&1"), "uses shell operators (>)");
  EXPECT_EQ(refusal("nvcc -o t < solution.cu"), "uses shell operators (<)");
  EXPECT_EQ(refusal("(nvcc -o t solution.cu)"), "uses shell operators (()");
  EXPECT_EQ(refusal("nvcc -o t solution.cu\nls"), "uses shell operators (newline)");
  EXPECT_EQ(refusal("nvcc -o $OUT solution.cu"), "uses shell expansion ($)");
  EXPECT_EQ(refusal("nvcc -o \"$OUT\" solution.cu"), "uses shell expansion ($)");
  EXPECT_EQ(refusal("nvcc -o `echo t` solution.cu"), "uses shell expansion (`)");
  EXPECT_EQ(refusal("FOO=1 nvcc -o t solution.cu"), "sets the environment (FOO=1)");
  EXPECT_EQ(refusal("{ nvcc -o t solution.cu; }"), "uses braces ({)");
  EXPECT_EQ(refusal("nvcc -o t test/{a,b}.cu"), "uses braces ({)");
  EXPECT_EQ(refusal("nvcc -o t -I ~/include solution.cu"), "uses tilde expansion (~)");
  EXPECT_EQ(refusal("nvcc -o t solution.cu # all of it"), "has a shell comment (#)");
  EXPECT_EQ(refusal("nvcc -o 't solution.cu"), "has an unterminated quote (')");
  EXPECT_EQ(refusal("nvcc -o \"t solution.cu"), "has an unterminated quote (\")");
  EXPECT_EQ(refusal(""), "is empty");
  EXPECT_EQ(refusal("   "), "is empty");
  // Quoted, they are characters: "FOO=1" is the command's name, ~ and # are plain.
  EXPECT_EQ(refusal("'FOO=1' nvcc -o t solution.cu"), "compiler is FOO=1, not nvcc");
  EXPECT_THAT(split_ok("nvcc -o t '#x.cu' a~b.cu").sources, ElementsAre("#x.cu", "a~b.cu"));
}

TEST(SplitBuildCommand, RefusesOtherCompilers) {
  EXPECT_EQ(refusal("g++ -o t solution.cpp"), "compiler is g++, not nvcc");
  EXPECT_EQ(refusal("clang++ -x cuda -o t solution.cu"), "compiler is clang++, not nvcc");
  EXPECT_EQ(refusal("make"), "compiler is make, not nvcc");
  EXPECT_EQ(refusal("time nvcc -o t solution.cu"), "compiler is time, not nvcc");
  EXPECT_EQ(refusal("/opt/nvcc-wrapper -o t solution.cu"),
            "compiler is /opt/nvcc-wrapper, not nvcc");
}

TEST(SplitBuildCommand, RefusesOptionsThatChangeWhatTheCommandDoes) {
  const std::string tail = " -o t solution.cu";
  EXPECT_EQ(refusal("nvcc -c" + tail), "has -c (compiles only)");
  EXPECT_EQ(refusal("nvcc --compile" + tail), "has --compile (compiles only)");
  EXPECT_EQ(refusal("nvcc -E" + tail), "has -E (preprocesses only)");
  EXPECT_EQ(refusal("nvcc -M" + tail), "has -M (generates dependencies)");
  EXPECT_EQ(refusal("nvcc -MM" + tail), "has -MM (generates dependencies)");
  EXPECT_EQ(refusal("nvcc -MD" + tail), "has -MD (generates dependencies)");
  EXPECT_EQ(refusal("nvcc -MMD" + tail), "has -MMD (generates dependencies)");
  EXPECT_EQ(refusal("nvcc -run" + tail), "has -run (runs the program)");
  EXPECT_EQ(refusal("nvcc --run" + tail), "has --run (runs the program)");
  EXPECT_EQ(refusal("nvcc -lib" + tail), "has -lib (builds a library)");
  EXPECT_EQ(refusal("nvcc -shared" + tail), "has -shared (builds a shared library)");
  EXPECT_EQ(refusal("nvcc --shared" + tail), "has --shared (builds a shared library)");
  EXPECT_EQ(refusal("nvcc -rdc=true" + tail), "has -rdc=true (device linking)");
  EXPECT_EQ(refusal("nvcc -rdc true" + tail), "has -rdc true (device linking)");
  EXPECT_EQ(refusal("nvcc --relocatable-device-code=true" + tail),
            "has --relocatable-device-code=true (device linking)");
  EXPECT_EQ(refusal("nvcc -dc" + tail), "has -dc (device linking)");
  EXPECT_EQ(refusal("nvcc --device-c" + tail), "has --device-c (device linking)");
  EXPECT_EQ(refusal("nvcc -dlink" + tail), "has -dlink (device linking)");
  EXPECT_EQ(refusal("nvcc -dlto" + tail), "has -dlto (device link-time optimization)");
  EXPECT_EQ(refusal("nvcc -x cu" + tail), "has -x cu (forces the language of every input)");
  EXPECT_EQ(refusal("nvcc -xcu" + tail), "has -xcu (forces the language of every input)");
  EXPECT_EQ(refusal("nvcc -ptx" + tail), "has -ptx (stops before linking)");
  EXPECT_EQ(refusal("nvcc -optf opts.txt" + tail),
            "has -optf opts.txt (reads options from a file)");
  EXPECT_EQ(refusal("nvcc -dryrun" + tail), "has -dryrun (only prints the commands)");
}

TEST(SplitBuildCommand, RefusesWhatItCannotReadAsOneOutputAndSources) {
  EXPECT_EQ(refusal("nvcc solution.cu"), "has no -o");
  EXPECT_EQ(refusal("nvcc -o a -o b solution.cu"), "has more than one -o (a, b)");
  EXPECT_EQ(refusal("nvcc -o '' solution.cu"), "has an empty -o");
  EXPECT_EQ(refusal("nvcc -o t"), "has no source");
  EXPECT_EQ(refusal("nvcc -o t solution.cu -I"), "option -I has no argument");
  EXPECT_EQ(refusal("nvcc -o t solution.cu include/k.h"),
            "argument include/k.h is neither a source (.cu .cpp .cc .cxx .c .C) nor an object or "
            "library (.o .a .so)");
  EXPECT_EQ(refusal("nvcc -o t pre.o solution.cu"),
            "has the link input pre.o before the source solution.cu (splitting would change the "
            "link order)");
}

TEST(SplitBuildCommand, RefusesGlobsItCannotExpandAsSh) {
  EXPECT_EQ(refusal("nvcc -o t solution.cu src/*.cu"), "glob src/*.cu matches nothing");
  EXPECT_THAT(split_ok("nvcc -o t test/*").sources, ElementsAre("test/a.cu", "test/b.cu"));
  // test/* matches the folder test/sub too, as sh would, and a folder is not a source.
  EXPECT_EQ(refusal("nvcc -o t test/*", {"test/a.cu", "test/sub/b.cu"}),
            "argument test/sub is neither a source (.cu .cpp .cc .cxx .c .C) nor an object or "
            "library (.o .a .so)");
  EXPECT_EQ(refusal("nvcc -o t /src/*.cu"), "glob /src/*.cu reaches outside the workspace");
  EXPECT_EQ(refusal("nvcc -o t ../*.cu"), "glob ../*.cu reaches outside the workspace");
  EXPECT_EQ(refusal("nvcc -I inc* -o t solution.cu", {"inc1/k.h", "solution.cu"}),
            "glob inc* in an option matches inc1");
}

// --- The split build against the single command, with the real nvcc (host code only) ----------

std::string nvcc_path() {
  for (const char* candidate : {"/usr/local/cuda/bin/nvcc", "/usr/bin/nvcc"})
    if (access(candidate, X_OK) == 0)
      return candidate;
  return {};
}

// Runs argv in `dir`, stdout to `stdout_file` when not empty; the exit status.
int run_in(const std::filesystem::path& dir, const std::vector<std::string>& argv,
           const std::filesystem::path& stdout_file = {}) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (chdir(dir.c_str()) != 0)
      _exit(126);
    if (!stdout_file.empty() && !freopen(stdout_file.c_str(), "w", stdout))
      _exit(126);
    std::vector<char*> args;
    for (const std::string& arg : argv)
      args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(SplitBuildCommand, SplitBuildMakesTheSameProgramAsTheSingleCommand) {
  const std::string nvcc = nvcc_path();
  if (nvcc.empty())
    GTEST_SKIP() << "nvcc not found";
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("keval-split-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "inc");
  std::filesystem::create_directories(dir / "test");
  std::ofstream(dir / "inc/k.h") << "#pragma once\nint scale(int);\n#define BASE 40\n";
  std::ofstream(dir / "solution.cu") << "#include \"k.h\"\nint scale(int x) { return 2 * x; }\n";
  std::ofstream(dir / "test/main.cu")
      << "#include <cstdio>\n#include \"k.h\"\n"
         "int main() { std::printf(\"%d %d\\n\", scale(21), BASE + N); return 0; }\n";
  const std::string command = nvcc + " -I inc -DN=2 -o single.out solution.cu test/*.cu";

  auto result = split_build_command(command, {"inc/k.h", "solution.cu", "test/main.cu"});
  ASSERT_TRUE(std::holds_alternative<SplitBuild>(result)) << std::get<std::string>(result);
  SplitBuild split = std::get<SplitBuild>(result);
  ASSERT_THAT(split.sources, ElementsAre("solution.cu", "test/main.cu"));

  ASSERT_EQ(run_in(dir, {"/bin/sh", "-c", command}), 0);
  std::vector<std::string> objects;
  for (size_t i = 0; i < split.sources.size(); ++i) {
    objects.push_back("unit" + std::to_string(i) + ".o");
    ASSERT_EQ(run_in(dir, compile_argv(split, split.sources[i], objects.back())), 0);
  }
  split.output = "split.out";
  ASSERT_EQ(run_in(dir, link_argv(split, objects)), 0);

  ASSERT_EQ(run_in(dir, {(dir / "single.out").string()}, dir / "single.txt"), 0);
  ASSERT_EQ(run_in(dir, {(dir / "split.out").string()}, dir / "split.txt"), 0);
  EXPECT_EQ(read_file(dir / "single.txt"), "42 42\n");
  EXPECT_EQ(read_file(dir / "split.txt"), read_file(dir / "single.txt"));
  std::filesystem::remove_all(dir);
}

} // namespace
} // namespace keval::cuda_program
