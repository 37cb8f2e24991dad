// Whether a ComputeEval `build_command` can be split, so that the held-out harness's translation
// units are compiled once and linked with each solution's: the command must be one nvcc that
// compiles and links its sources into one executable, `nvcc [options] -o OUT SOURCES...`, where
// compiling each source with `-c` and linking the objects with the same options does what the
// single command does. Anything else is refused with the reason, and the job runs the command as
// it is.
//
// The command is read as POSIX sh reads one simple command (quotes, backslashes), and globs are
// expanded as sh would against the workspace's files, in the C locale's (byte) order. What sh
// could do beyond that (operators, expansions, redirections, comments, assignments) is refused,
// not emulated.
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace keval::cuda_program {

struct SplitBuild {
  std::string compiler;             // argv[0] as written ("nvcc" or a path ending in /nvcc)
  std::vector<std::string> options; // every other argument but sources, link inputs, `-o OUT`
  std::string output;               // the -o argument
  std::vector<std::string> sources; // .cu .cpp .cc .cxx .c .C, globs expanded, in command order
  // .o .a .so (.so.N) arguments, in command order; all of them come after the last source, so
  // that appending them to the objects keeps the command's link order.
  std::vector<std::string> link_inputs;
};

// `command`: the build_command; `files`: every path of the workspace (context, test and solution
// files; relative, '/'-separated), what a glob can match. Returns the split, or why the command
// cannot be split: "uses shell operators (&&)", "compiler is g++, not nvcc", "has -rdc=true
// (device linking)", "glob test/*.cu matches nothing", ...
std::variant<SplitBuild, std::string> split_build_command(std::string_view command,
                                                          const std::vector<std::string>& files);

// argv to compile one source to an object: compiler options... -c source -o object.
std::vector<std::string> compile_argv(const SplitBuild& build, const std::string& source,
                                      const std::string& object);

// argv for the final link, `objects` standing for the sources in order: compiler options...
// objects... link_inputs... -o output.
std::vector<std::string> link_argv(const SplitBuild& build,
                                   const std::vector<std::string>& objects);

} // namespace keval::cuda_program
