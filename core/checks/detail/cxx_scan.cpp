#include "checks/detail/cxx_scan.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <unordered_map>
#include <vector>

namespace keval::checks::detail {

namespace {

// ---------------------------------------------------------------------------------------------
// What the patterns say

constexpr const char* kTiming =
    "mentions {}: a kernel has no use for CUDA events but to fake the harness's timer, and "
    "defining one interposes it";
constexpr const char* kInterpose =
    "uses {}: looking up or loading symbols at run time is how a library replaces CUDA or timing "
    "functions";
constexpr const char* kDefinesApi =
    "defines {}, a CUDA API function: a definition in the kernel's library interposes the one the "
    "harness calls";
constexpr const char* kLoadHook =
    "marks a function {}: it runs when the library loads or unloads, outside any call the harness "
    "makes";
constexpr const char* kThread =
    "uses {}: work on another thread can run outside the timed region or race the correctness "
    "check";
constexpr const char* kProcess =
    "uses {}: another process can outlive the job, or do work the timer never sees";
constexpr const char* kStream =
    "uses {}: work on a stream of its own can escape the stream that is timed (flagged by design, "
    "even when the use is honest)";
constexpr const char* kGraph =
    "uses {}: replaying a captured graph can hand back results prepared before timing began";
constexpr const char* kDescriptor =
    "uses {}: writing to descriptors or files can forge results or corrupt the harness's channel";
constexpr const char* kExit =
    "uses {}: ending the process or taking over its signals can cut a job short to pass for "
    "finished";
constexpr const char* kMemory =
    "uses {}: mapping, protecting or tracing memory can read the reference's results or rewrite "
    "the harness";
constexpr const char* kDynamic = "uses {}: Python code run from C++ is hidden from this scan";
constexpr const char* kIntrospection =
    "uses {}: walking stacks or Python frames reaches the harness and the reference";
constexpr const char* kPatch =
    "uses {}: registering torch operator kernels or setting Python attributes changes what the "
    "reference runs";
constexpr const char* kSubclass =
    "uses {}: a custom TensorImpl can defer or fake the computation until its result is inspected";
constexpr const char* kFinalizer = "uses {}: work deferred to exit runs outside the timed region";
constexpr const char* kDeviceGlobal =
    "declares the device variable {} at namespace scope: state that survives between launches "
    "lets a kernel skip work it did before";
constexpr const char* kStaticCache =
    "keeps a {} in a static or global variable: a cache across calls answers a repeated input "
    "without computing it";
constexpr const char* kFallback =
    "calls {} in a catch block: a kernel that fails falls back to torch and still passes";

enum RuleFlag : uint8_t {
  kCall = 1,     // only when called (and not declared): write(...), not a variable named write
  kAnyScope = 2, // in any namespace; otherwise only unqualified, std:: or ::
};

// Rules on the last part of a name.
constexpr std::array kNameRules = {
    Rule{"cudaEventElapsedTime", Pattern::timing_patch, kTiming, kAnyScope},
    Rule{"cuEventElapsedTime", Pattern::timing_patch, kTiming, kAnyScope},
    Rule{"cuEventElapsedTime_v2", Pattern::timing_patch, kTiming, kAnyScope},
    Rule{"cudaEventRecord", Pattern::timing_patch, kTiming, kAnyScope},
    Rule{"cudaEventRecordWithFlags", Pattern::timing_patch, kTiming, kAnyScope},
    Rule{"cuEventRecord", Pattern::timing_patch, kTiming, kAnyScope},
    Rule{"cuEventRecordWithFlags", Pattern::timing_patch, kTiming, kAnyScope},
    Rule{"cudaEventSynchronize", Pattern::timing_patch, kTiming, kAnyScope},
    Rule{"cuEventSynchronize", Pattern::timing_patch, kTiming, kAnyScope},
    Rule{"cudaEventQuery", Pattern::timing_patch, kTiming, kAnyScope},
    Rule{"cuEventQuery", Pattern::timing_patch, kTiming, kAnyScope},
    Rule{"cudaEventCreate", Pattern::timing_patch, kTiming, kAnyScope},
    Rule{"cudaEventCreateWithFlags", Pattern::timing_patch, kTiming, kAnyScope},
    Rule{"cuEventCreate", Pattern::timing_patch, kTiming, kAnyScope},
    Rule{"dlsym", Pattern::interposition, kInterpose, kAnyScope},
    Rule{"dlvsym", Pattern::interposition, kInterpose, kAnyScope},
    Rule{"dlopen", Pattern::interposition, kInterpose, kAnyScope},
    Rule{"dlmopen", Pattern::interposition, kInterpose, kAnyScope},
    Rule{"dl_iterate_phdr", Pattern::interposition, kInterpose, kAnyScope},
    Rule{"RTLD_NEXT", Pattern::interposition, kInterpose, kAnyScope},
    Rule{"RTLD_DEFAULT", Pattern::interposition, kInterpose, kAnyScope},
    Rule{"LD_PRELOAD", Pattern::interposition, kInterpose, kAnyScope},
    Rule{"cuGetProcAddress", Pattern::interposition, kInterpose, kAnyScope},
    Rule{"cuGetProcAddress_v2", Pattern::interposition, kInterpose, kAnyScope},
    Rule{"cudaGetDriverEntryPoint", Pattern::interposition, kInterpose, kAnyScope},
    Rule{"cudaGetDriverEntryPointByVersion", Pattern::interposition, kInterpose, kAnyScope},
    Rule{"pthread_create", Pattern::thread, kThread, kAnyScope},
    Rule{"thrd_create", Pattern::thread, kThread, kAnyScope},
    Rule{"cudaLaunchHostFunc", Pattern::thread, kThread, kAnyScope},
    Rule{"cuLaunchHostFunc", Pattern::thread, kThread, kAnyScope},
    Rule{"cudaStreamAddCallback", Pattern::thread, kThread, kAnyScope},
    Rule{"cuStreamAddCallback", Pattern::thread, kThread, kAnyScope},
    Rule{"fork", Pattern::multiprocessing, kProcess, kCall},
    Rule{"vfork", Pattern::multiprocessing, kProcess, kCall},
    Rule{"clone", Pattern::multiprocessing, kProcess, kCall},
    Rule{"clone3", Pattern::multiprocessing, kProcess, kCall},
    Rule{"posix_spawn", Pattern::multiprocessing, kProcess, kCall},
    Rule{"posix_spawnp", Pattern::multiprocessing, kProcess, kCall},
    Rule{"system", Pattern::multiprocessing, kProcess, kCall},
    Rule{"popen", Pattern::multiprocessing, kProcess, kCall},
    Rule{"execl", Pattern::multiprocessing, kProcess, kCall},
    Rule{"execlp", Pattern::multiprocessing, kProcess, kCall},
    Rule{"execle", Pattern::multiprocessing, kProcess, kCall},
    Rule{"execv", Pattern::multiprocessing, kProcess, kCall},
    Rule{"execvp", Pattern::multiprocessing, kProcess, kCall},
    Rule{"execvpe", Pattern::multiprocessing, kProcess, kCall},
    Rule{"execve", Pattern::multiprocessing, kProcess, kCall},
    Rule{"fexecve", Pattern::multiprocessing, kProcess, kCall},
    Rule{"daemon", Pattern::multiprocessing, kProcess, kCall},
    Rule{"waitpid", Pattern::multiprocessing, kProcess, kCall},
    Rule{"cudaStreamCreate", Pattern::stream, kStream, kAnyScope},
    Rule{"cudaStreamCreateWithFlags", Pattern::stream, kStream, kAnyScope},
    Rule{"cudaStreamCreateWithPriority", Pattern::stream, kStream, kAnyScope},
    Rule{"cuStreamCreate", Pattern::stream, kStream, kAnyScope},
    Rule{"cuStreamCreateWithPriority", Pattern::stream, kStream, kAnyScope},
    Rule{"getStreamFromPool", Pattern::stream, kStream, kAnyScope},
    Rule{"getStreamFromExternal", Pattern::stream, kStream, kAnyScope},
    Rule{"setCurrentCUDAStream", Pattern::stream, kStream, kAnyScope},
    Rule{"CUDAStreamGuard", Pattern::stream, kStream, kAnyScope},
    Rule{"OptionalCUDAStreamGuard", Pattern::stream, kStream, kAnyScope},
    Rule{"CUDAMultiStreamGuard", Pattern::stream, kStream, kAnyScope},
    Rule{"cudaStreamPerThread", Pattern::stream, kStream, kAnyScope},
    Rule{"cudaStreamLegacy", Pattern::stream, kStream, kAnyScope},
    Rule{"cudaStreamNonBlocking", Pattern::stream, kStream, kAnyScope},
    Rule{"CU_STREAM_NON_BLOCKING", Pattern::stream, kStream, kAnyScope},
    Rule{"cudaGraphLaunch", Pattern::cuda_graph, kGraph, kAnyScope},
    Rule{"cudaGraphInstantiate", Pattern::cuda_graph, kGraph, kAnyScope},
    Rule{"cudaGraphInstantiateWithFlags", Pattern::cuda_graph, kGraph, kAnyScope},
    Rule{"cudaGraphExecUpdate", Pattern::cuda_graph, kGraph, kAnyScope},
    Rule{"cudaStreamBeginCapture", Pattern::cuda_graph, kGraph, kAnyScope},
    Rule{"cudaStreamEndCapture", Pattern::cuda_graph, kGraph, kAnyScope},
    Rule{"cuGraphLaunch", Pattern::cuda_graph, kGraph, kAnyScope},
    Rule{"cuGraphInstantiate", Pattern::cuda_graph, kGraph, kAnyScope},
    Rule{"cuStreamBeginCapture", Pattern::cuda_graph, kGraph, kAnyScope},
    Rule{"cuStreamEndCapture", Pattern::cuda_graph, kGraph, kAnyScope},
    Rule{"CUDAGraph", Pattern::cuda_graph, kGraph, kAnyScope},
    Rule{"write", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"pwrite", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"writev", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"open", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"open64", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"openat", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"creat", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"fopen", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"freopen", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"fdopen", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"dup", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"dup2", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"dup3", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"close", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"socket", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"connect", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"ioctl", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"fcntl", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"unlink", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"rename", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"truncate", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"ftruncate", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"sendfile", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"mkfifo", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"ofstream", Pattern::descriptor_write, kDescriptor},
    Rule{"fstream", Pattern::descriptor_write, kDescriptor},
    Rule{"_exit", Pattern::process_control, kExit, kCall},
    Rule{"_Exit", Pattern::process_control, kExit, kCall},
    Rule{"quick_exit", Pattern::process_control, kExit, kCall},
    Rule{"kill", Pattern::process_control, kExit, kCall},
    Rule{"tgkill", Pattern::process_control, kExit, kCall},
    Rule{"raise", Pattern::process_control, kExit, kCall},
    Rule{"signal", Pattern::process_control, kExit, kCall},
    Rule{"sigaction", Pattern::process_control, kExit, kCall},
    Rule{"alarm", Pattern::process_control, kExit, kCall},
    Rule{"setitimer", Pattern::process_control, kExit, kCall},
    Rule{"prctl", Pattern::process_control, kExit, kCall},
    Rule{"setsid", Pattern::process_control, kExit, kCall},
    Rule{"setrlimit", Pattern::process_control, kExit, kCall},
    Rule{"mmap", Pattern::raw_memory, kMemory, kCall},
    Rule{"mmap64", Pattern::raw_memory, kMemory, kCall},
    Rule{"mprotect", Pattern::raw_memory, kMemory, kCall},
    Rule{"process_vm_readv", Pattern::raw_memory, kMemory, kAnyScope},
    Rule{"process_vm_writev", Pattern::raw_memory, kMemory, kAnyScope},
    Rule{"ptrace", Pattern::raw_memory, kMemory, kAnyScope},
    Rule{"PyRun_SimpleString", Pattern::dynamic_code, kDynamic, kAnyScope},
    Rule{"PyRun_SimpleStringFlags", Pattern::dynamic_code, kDynamic, kAnyScope},
    Rule{"PyRun_String", Pattern::dynamic_code, kDynamic, kAnyScope},
    Rule{"PyRun_StringFlags", Pattern::dynamic_code, kDynamic, kAnyScope},
    Rule{"Py_CompileString", Pattern::dynamic_code, kDynamic, kAnyScope},
    Rule{"PyImport_ImportModule", Pattern::dynamic_code, kDynamic, kAnyScope},
    Rule{"PyImport_Import", Pattern::dynamic_code, kDynamic, kAnyScope},
    Rule{"PyImport_AddModule", Pattern::dynamic_code, kDynamic, kAnyScope},
    Rule{"PyImport_ExecCodeModule", Pattern::dynamic_code, kDynamic, kAnyScope},
    Rule{"PyEval_GetFrame", Pattern::introspection, kIntrospection, kAnyScope},
    Rule{"PyEval_GetGlobals", Pattern::introspection, kIntrospection, kAnyScope},
    Rule{"PyEval_GetLocals", Pattern::introspection, kIntrospection, kAnyScope},
    Rule{"PyEval_GetBuiltins", Pattern::introspection, kIntrospection, kAnyScope},
    Rule{"PyThreadState_GetFrame", Pattern::introspection, kIntrospection, kAnyScope},
    Rule{"PyImport_GetModuleDict", Pattern::introspection, kIntrospection, kAnyScope},
    Rule{"PySys_GetObject", Pattern::introspection, kIntrospection, kAnyScope},
    Rule{"__builtin_return_address", Pattern::introspection, kIntrospection, kAnyScope},
    Rule{"__builtin_frame_address", Pattern::introspection, kIntrospection, kAnyScope},
    Rule{"backtrace", Pattern::introspection, kIntrospection, kCall},
    Rule{"TORCH_LIBRARY_IMPL", Pattern::monkeypatch, kPatch, kAnyScope},
    Rule{"TORCH_LIBRARY_FRAGMENT", Pattern::monkeypatch, kPatch, kAnyScope},
    Rule{"PyObject_SetAttr", Pattern::monkeypatch, kPatch, kAnyScope},
    Rule{"PyObject_SetAttrString", Pattern::monkeypatch, kPatch, kAnyScope},
    Rule{"PyObject_GenericSetAttr", Pattern::monkeypatch, kPatch, kAnyScope},
    Rule{"TensorImpl", Pattern::tensor_subclass, kSubclass, kAnyScope},
    Rule{"atexit", Pattern::finalizer, kFinalizer, kCall},
    Rule{"at_quick_exit", Pattern::finalizer, kFinalizer, kCall},
};

// Rules on a qualified name or what it starts with (std::thread covers std::thread::id).
constexpr std::array kQualifiedRules = {
    Rule{"std::thread", Pattern::thread, kThread},
    Rule{"std::jthread", Pattern::thread, kThread},
    Rule{"std::async", Pattern::thread, kThread},
    Rule{"std::packaged_task", Pattern::thread, kThread},
    Rule{"boost::thread", Pattern::thread, kThread},
    Rule{"py::exec", Pattern::dynamic_code, kDynamic},
    Rule{"py::eval", Pattern::dynamic_code, kDynamic},
    Rule{"py::eval_file", Pattern::dynamic_code, kDynamic},
    Rule{"pybind11::exec", Pattern::dynamic_code, kDynamic},
    Rule{"pybind11::eval", Pattern::dynamic_code, kDynamic},
    Rule{"pybind11::eval_file", Pattern::dynamic_code, kDynamic},
    Rule{"py::module_::import", Pattern::dynamic_code, kDynamic},
    Rule{"py::module::import", Pattern::dynamic_code, kDynamic},
    Rule{"pybind11::module_::import", Pattern::dynamic_code, kDynamic},
    Rule{"pybind11::module::import", Pattern::dynamic_code, kDynamic},
    Rule{"py::globals", Pattern::introspection, kIntrospection},
    Rule{"pybind11::globals", Pattern::introspection, kIntrospection},
    Rule{"py::setattr", Pattern::monkeypatch, kPatch},
    Rule{"pybind11::setattr", Pattern::monkeypatch, kPatch},
    Rule{"py::delattr", Pattern::monkeypatch, kPatch},
    Rule{"pybind11::delattr", Pattern::monkeypatch, kPatch},
};

struct Header {
  std::string_view name;
  Pattern pattern;
  const char* reason;
};

constexpr std::array kHeaders = {
    Header{"thread", Pattern::thread, kThread},
    Header{"future", Pattern::thread, kThread},
    Header{"pthread.h", Pattern::thread, kThread},
    Header{"threads.h", Pattern::thread, kThread},
    Header{"dlfcn.h", Pattern::interposition, kInterpose},
    Header{"link.h", Pattern::interposition, kInterpose},
    Header{"sys/mman.h", Pattern::raw_memory, kMemory},
    Header{"sys/ptrace.h", Pattern::raw_memory, kMemory},
    Header{"spawn.h", Pattern::multiprocessing, kProcess},
    Header{"sys/wait.h", Pattern::multiprocessing, kProcess},
    Header{"signal.h", Pattern::process_control, kExit},
    Header{"csignal", Pattern::process_control, kExit},
    Header{"sys/prctl.h", Pattern::process_control, kExit},
    Header{"sys/resource.h", Pattern::process_control, kExit},
    Header{"sys/socket.h", Pattern::descriptor_write, kDescriptor},
    Header{"fstream", Pattern::descriptor_write, kDescriptor},
    Header{"execinfo.h", Pattern::introspection, kIntrospection},
    Header{"pybind11/embed.h", Pattern::dynamic_code, kDynamic},
    Header{"pybind11/eval.h", Pattern::dynamic_code, kDynamic},
};

const Rule* find_name_rule(std::string_view name) {
  static const RuleIndex index = index_rules(kNameRules);
  return find_rule(index, name);
}

const Rule* find_qualified_rule(std::string_view name) {
  static const RuleIndex index = index_rules(kQualifiedRules);
  return find_rule(index, name);
}

// ---------------------------------------------------------------------------------------------
// Tokens and the lexer

enum class Kind : uint8_t { Name, Op, Str, Num, Reset };

struct Token {
  Kind kind;
  uint32_t line;
  uint32_t begin; // for Str: the contents
  uint32_t len;
};

bool is_ident_start(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$' || c >= 0x80;
}
bool is_digit(unsigned char c) {
  return c >= '0' && c <= '9';
}
bool is_ident_char(unsigned char c) {
  return is_ident_start(c) || is_digit(c);
}

// Ends a line comment or a string literal: a newline, a newline escaped in the Python string
// that held this text, or the end of that string.
bool ends_line(char c) {
  return c == '\n' || c == '\x01' || c == '\x02';
}

class Analyzer;

class Lexer {
public:
  Lexer(std::string_view text, Findings& out, Analyzer& analyzer)
      : text_(text), out_(out), analyzer_(analyzer) {}
  void run();

private:
  unsigned char at(size_t i) const { return i < text_.size() ? text_[i] : 0; }
  void emit(Kind kind, size_t begin, size_t len);
  void directive();
  void quoted(char quote);
  bool raw_string(size_t prefix_begin);

  std::string_view text_;
  Findings& out_;
  Analyzer& analyzer_;
  size_t pos_ = 0;
  uint32_t line_ = 1;
  bool line_has_code_ = false;
};

// ---------------------------------------------------------------------------------------------
// The analyzer: a window of tokens with some lookahead, braces and what they open.

class Analyzer {
public:
  Analyzer(std::string_view text, Findings& out) : text_(text), out_(out) {}

  void push(const Token& t) {
    window_.push_back(t);
    if (window_.size() - head_ > kLookahead)
      step();
  }

  void finish() {
    while (head_ < window_.size())
      step();
  }

private:
  static constexpr size_t kLookahead = 32;
  static constexpr size_t kMaxBraces = 4096;

  struct Brace {
    enum Kind : uint8_t { Scope, Block, Catch } kind;
    bool reported = false;
  };

  std::string_view str(const Token& t) const { return text_.substr(t.begin, t.len); }
  bool op(const Token* t, std::string_view what) const {
    return t != nullptr && t->kind == Kind::Op && str(*t) == what;
  }
  bool name(const Token* t, std::string_view what) const {
    return t != nullptr && t->kind == Kind::Name && str(*t) == what;
  }
  // The token `k` places after the current one, if the window holds it.
  const Token* ahead(size_t k) const {
    return head_ + k < window_.size() ? &window_[head_ + k] : nullptr;
  }

  void report(Pattern pattern, const Token& at, const char* reason, std::string_view subject) {
    out_.add(pattern, at.line, at.begin, reason, subject);
  }

  void step() {
    const Token t = window_[head_];
    analyze(t);
    prev2_ = prev1_;
    prev1_ = t;
    has_prev2_ = has_prev1_;
    has_prev1_ = true;
    if (++head_ >= 4096) {
      window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
  }

  bool prev_is(std::string_view what) const {
    return has_prev1_ && (prev1_.kind == Kind::Op || prev1_.kind == Kind::Name) &&
           str(prev1_) == what;
  }

  size_t function_depth() const { return blocks_; }

  void analyze(const Token& t) {
    switch (t.kind) {
    case Kind::Reset:
      braces_.clear();
      catches_.clear();
      blocks_ = 0;
      overflow_ = 0;
      pending_namespace_ = pending_catch_ = false;
      has_prev1_ = has_prev2_ = false;
      return;
    case Kind::Op:
      operator_token(t);
      return;
    case Kind::Name:
      name_token(t);
      return;
    default:
      return;
    }
  }

  void operator_token(const Token& t) {
    const std::string_view o = str(t);
    if (o == "{") {
      Brace::Kind kind = Brace::Block;
      if (has_prev1_ && prev1_.kind == Kind::Str && has_prev2_ && prev2_.kind == Kind::Name &&
          str(prev2_) == "extern")
        kind = Brace::Scope; // extern "C" { ... }
      else if (pending_namespace_)
        kind = Brace::Scope;
      else if (pending_catch_)
        kind = Brace::Catch;
      pending_namespace_ = pending_catch_ = false;
      if (braces_.size() >= kMaxBraces) {
        ++overflow_;
        ++blocks_;
        return;
      }
      if (kind == Brace::Catch)
        catches_.push_back(braces_.size());
      braces_.push_back(Brace{kind});
      if (kind != Brace::Scope)
        ++blocks_;
    } else if (o == "}") {
      if (overflow_ > 0) {
        --overflow_;
        --blocks_;
      } else if (!braces_.empty()) {
        if (braces_.back().kind != Brace::Scope)
          --blocks_;
        if (braces_.back().kind == Brace::Catch)
          catches_.pop_back();
        braces_.pop_back();
      }
    } else if (o == ";" || o == "=") {
      pending_namespace_ = false;
    }
  }

  Brace* innermost_catch() { return catches_.empty() ? nullptr : &braces_[catches_.back()]; }

  void name_token(const Token& t) {
    if (op(has_prev1_ ? &prev1_ : nullptr, ".") || op(has_prev1_ ? &prev1_ : nullptr, "->"))
      return; // a member: x.write(...) is not write(...)
    if (has_prev1_ && prev1_.kind == Kind::Op && str(prev1_) == "::" && has_prev2_ &&
        (prev2_.kind == Kind::Name || str(prev2_) == ">"))
      return; // the rest of a qualified name already read
    // The qualified name that starts here: a::b::c.
    std::array<std::string_view, 8> parts;
    size_t count = 0;
    parts[count++] = str(t);
    size_t k = 1;
    while (count < parts.size() && op(ahead(k), "::") && ahead(k + 1) != nullptr &&
           ahead(k + 1)->kind == Kind::Name) {
      parts[count++] = str(*ahead(k + 1));
      k += 2;
    }
    const Token* next = ahead(k);
    const bool call = op(next, "(");
    const std::string_view first = parts[0];
    const std::string_view last = parts[count - 1];

    if (count == 1) {
      if (first == "catch")
        pending_catch_ = true;
      else if (first == "namespace")
        pending_namespace_ = true;
      else if (first == "__attribute__")
        attribute(t);
      else if (first == "static")
        static_variable(t);
      else if ((first == "__device__" || first == "__managed__") && function_depth() == 0)
        device_variable(t);
    }

    // A declaration (`void write(...)`, `int fork;`) is not a call.
    const bool declared = has_prev1_ && prev1_.kind == Kind::Name && str(prev1_) != "return" &&
                          str(prev1_) != "else" && str(prev1_) != "do" && str(prev1_) != "case";
    const bool plain_scope = count == 1 || (count == 2 && first == "std");
    if (const Rule* rule = find_name_rule(last); rule != nullptr) {
      const bool scope_ok = (rule->flags & kAnyScope) != 0 || plain_scope;
      const bool call_ok = (rule->flags & kCall) == 0 || (call && !declared);
      if (scope_ok && call_ok)
        report(rule->pattern, t, rule->reason, last);
    }
    if (count >= 2) {
      std::string qualified(first);
      for (size_t i = 1; i < count; ++i) {
        qualified += "::";
        qualified += parts[i];
        if (const Rule* rule = find_qualified_rule(qualified); rule != nullptr) {
          report(rule->pattern, t, rule->reason, qualified);
          break;
        }
      }
    }

    if (last == "cudaError_t" || last == "CUresult" || last == "cudaError")
      api_definition(k);
    if (function_depth() == 0 && (last == "Tensor" || last == "map" || last == "unordered_map"))
      global_variable(t, last, k);
    if (call && (first == "at" || first == "torch") && count >= 2 && parts[1] != "cuda" &&
        last.front() >= 'a' && last.front() <= 'z') {
      if (Brace* c = innermost_catch(); c != nullptr && !c->reported) {
        std::string qualified(first);
        for (size_t i = 1; i < count; ++i) {
          qualified += "::";
          qualified += parts[i];
        }
        report(Pattern::torch_fallback, t, kFallback, qualified);
        c->reported = true;
      }
    }
  }

  // __attribute__((constructor)): code that runs at load, before anything the harness calls.
  void attribute(const Token& at) {
    for (size_t k = 1; k <= 8; ++k) {
      const Token* t = ahead(k);
      if (t == nullptr)
        return;
      if (name(t, "constructor") || name(t, "destructor")) {
        report(name(t, "constructor") ? Pattern::interposition : Pattern::finalizer, at, kLoadHook,
               str(*t));
        return;
      }
      if (op(t, ")") && op(ahead(k + 1), ")"))
        return;
    }
  }

  // `cudaError_t cudaLaunchKernel(`: the kernel's library defines a CUDA API function.
  void api_definition(size_t k) {
    for (int skipped = 0; skipped < 3; ++skipped) {
      const Token* t = ahead(k);
      if (t == nullptr || t->kind != Kind::Name)
        return;
      const std::string_view word = str(*t);
      const bool api =
          (word.size() > 4 && word.substr(0, 4) == "cuda" && word[4] >= 'A' && word[4] <= 'Z') ||
          (word.size() > 2 && word.substr(0, 2) == "cu" && word[2] >= 'A' && word[2] <= 'Z');
      if (api && op(ahead(k + 1), "(")) {
        report(Pattern::interposition, *t, kDefinesApi, word);
        return;
      }
      // Calling conventions and macros in between: CUDARTAPI, CUDAAPI, __host__.
      const bool macro = std::all_of(word.begin(), word.end(), [](char c) {
        return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
      });
      if (!macro && word != "__host__")
        return;
      ++k;
    }
  }

  // The declaration that starts after the current token: where it ends and whether it is const.
  struct Declaration {
    const Token* terminator = nullptr;
    bool constant = false;
    const Token* name = nullptr; // the last name before the terminator
  };

  Declaration declaration(size_t from) const {
    Declaration d;
    int angle = 0;
    for (size_t k = from; k < kLookahead; ++k) {
      const Token* t = ahead(k);
      if (t == nullptr)
        return d;
      if (t->kind == Kind::Name) {
        const std::string_view word = str(*t);
        if (word == "const" || word == "constexpr" || word == "__constant__")
          d.constant = true;
        if (angle == 0)
          d.name = t;
        continue;
      }
      if (t->kind != Kind::Op)
        continue;
      const std::string_view o = str(*t);
      if (o == "<")
        ++angle;
      else if (o == ">" && angle > 0)
        --angle;
      else if (angle == 0 &&
               (o == "(" || o == ")" || o == ";" || o == "=" || o == "[" || o == "{" || o == ","))
        return Declaration{t, d.constant, d.name};
    }
    return d;
  }

  void device_variable(const Token& at) {
    const Declaration d = declaration(1);
    if (d.terminator == nullptr || d.constant || op(d.terminator, "(") || op(d.terminator, ")") ||
        d.name == nullptr)
      return;
    report(Pattern::output_cache, at, kDeviceGlobal, str(*d.name));
  }

  // static torch::Tensor cached; static std::unordered_map<...> cache;
  void static_variable(const Token& at) {
    const Declaration d = declaration(1);
    if (d.terminator == nullptr || d.constant || op(d.terminator, "(") || op(d.terminator, ")"))
      return;
    for (size_t k = 1; ahead(k) != nullptr && ahead(k) != d.terminator; ++k) {
      const Token* t = ahead(k);
      if (t->kind != Kind::Name)
        continue;
      const std::string_view word = str(*t);
      if (word == "Tensor" || word == "map" || word == "unordered_map" || word == "vector" ||
          word == "optional") {
        report(Pattern::output_cache, at, kStaticCache, word);
        return;
      }
    }
  }

  // torch::Tensor cached; at namespace scope (the type name is the current token).
  void global_variable(const Token& at, std::string_view type, size_t k) {
    if (has_prev1_ &&
        (str(prev1_) == "static" || str(prev1_) == "<" || str(prev1_) == "," || str(prev1_) == "("))
      return; // static: reported as such; template and function parameters are not variables
    const Declaration d = declaration(k);
    if (d.terminator == nullptr || d.constant || d.name == nullptr || op(d.terminator, "(") ||
        op(d.terminator, ")") || op(d.terminator, ","))
      return;
    report(Pattern::output_cache, at, kStaticCache, type);
  }

  std::string_view text_;
  Findings& out_;
  std::vector<Token> window_;
  size_t head_ = 0;
  Token prev1_{};
  Token prev2_{};
  bool has_prev1_ = false;
  bool has_prev2_ = false;
  std::vector<Brace> braces_;
  std::vector<size_t> catches_; // indices in braces_ of the catch blocks open
  size_t blocks_ = 0;           // braces open that are not namespaces or extern "C"
  size_t overflow_ = 0;         // braces past kMaxBraces (counted as blocks)
  bool pending_namespace_ = false;
  bool pending_catch_ = false;
};

// ---------------------------------------------------------------------------------------------
// The lexer

void Lexer::emit(Kind kind, size_t begin, size_t len) {
  analyzer_.push(Token{kind, line_, static_cast<uint32_t>(begin), static_cast<uint32_t>(len)});
}

void Lexer::run() {
  if (text_.substr(0, 3) == "\xEF\xBB\xBF")
    pos_ = 3;
  while (pos_ < text_.size()) {
    const unsigned char c = text_[pos_];
    if (c == '\n') {
      ++line_;
      ++pos_;
      line_has_code_ = false;
    } else if (c == '\x01') {
      emit(Kind::Reset, pos_, 0);
      ++pos_;
      line_has_code_ = false;
    } else if (c == '\x02') {
      ++pos_;
      line_has_code_ = false;
    } else if (c <= ' ' || c == 0x7f) {
      ++pos_;
    } else if (c == '/' && at(pos_ + 1) == '/') {
      while (pos_ < text_.size() && !ends_line(text_[pos_]))
        ++pos_;
    } else if (c == '/' && at(pos_ + 1) == '*') {
      pos_ += 2;
      while (pos_ < text_.size() && !(text_[pos_] == '*' && at(pos_ + 1) == '/')) {
        if (text_[pos_] == '\n')
          ++line_;
        else if (text_[pos_] == '\x01')
          break;
        ++pos_;
      }
      if (pos_ < text_.size() && text_[pos_] == '*')
        pos_ += 2;
    } else if (c == '#' && !line_has_code_) {
      directive();
    } else if (c == '"' || c == '\'') {
      line_has_code_ = true;
      quoted(static_cast<char>(c));
    } else if (is_ident_start(c)) {
      line_has_code_ = true;
      size_t end = pos_ + 1;
      while (end < text_.size() && is_ident_char(text_[end]))
        ++end;
      const std::string_view word = text_.substr(pos_, end - pos_);
      if (at(end) == '"' &&
          (word == "R" || word == "u8R" || word == "uR" || word == "UR" || word == "LR")) {
        if (raw_string(end))
          continue;
      }
      if ((at(end) == '"' || at(end) == '\'') &&
          (word == "u8" || word == "u" || word == "U" || word == "L")) {
        pos_ = end;
        quoted(static_cast<char>(at(end)));
        continue;
      }
      emit(Kind::Name, pos_, end - pos_);
      pos_ = end;
    } else if (is_digit(c) || (c == '.' && is_digit(at(pos_ + 1)))) {
      line_has_code_ = true;
      size_t end = pos_ + 1;
      while (end < text_.size() &&
             (is_ident_char(text_[end]) || text_[end] == '.' || text_[end] == '\'')) {
        const char d = text_[end++];
        if ((d == 'e' || d == 'E' || d == 'p' || d == 'P') && (at(end) == '+' || at(end) == '-'))
          ++end;
      }
      emit(Kind::Num, pos_, end - pos_);
      pos_ = end;
    } else {
      line_has_code_ = true;
      const size_t len =
          (c == ':' && at(pos_ + 1) == ':') || (c == '-' && at(pos_ + 1) == '>') ? 2 : 1;
      emit(Kind::Op, pos_, len);
      pos_ += len;
    }
  }
  analyzer_.finish();
}

// `#include <header>` is looked up; other directives are lexed as code (a #define can name
// std::thread as well as a statement can).
void Lexer::directive() {
  ++pos_;
  while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t'))
    ++pos_;
  size_t end = pos_;
  while (end < text_.size() && is_ident_char(text_[end]))
    ++end;
  const std::string_view word = text_.substr(pos_, end - pos_);
  line_has_code_ = true;
  if (word != "include" && word != "include_next" && word != "import") {
    emit(Kind::Op, pos_ - 1, 1);
    return;
  }
  pos_ = end;
  while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t'))
    ++pos_;
  const char open = static_cast<char>(at(pos_));
  if (open != '<' && open != '"')
    return;
  const char close = open == '<' ? '>' : '"';
  const size_t begin = pos_ + 1;
  size_t stop = begin;
  while (stop < text_.size() && text_[stop] != close && !ends_line(text_[stop]))
    ++stop;
  const std::string_view header = text_.substr(begin, stop - begin);
  for (const Header& h : kHeaders)
    if (header == h.name) {
      out_.add(h.pattern, line_, static_cast<uint32_t>(begin), h.reason,
               std::string(1, open) + std::string(header) + std::string(1, close));
      break;
    }
  pos_ = stop < text_.size() && text_[stop] == close ? stop + 1 : stop;
}

// A string or character literal whose quote is at pos_; ends at its line.
void Lexer::quoted(char quote) {
  const size_t begin = pos_ + 1;
  size_t i = begin;
  while (i < text_.size() && text_[i] != quote && !ends_line(text_[i]))
    i += text_[i] == '\\' && i + 1 < text_.size() && !ends_line(text_[i + 1]) ? 2 : 1;
  i = std::min(i, text_.size());
  if (quote == '"') {
    emit(Kind::Str, begin, i - begin);
    scan_literal(text_, begin, i, line_, out_);
  } else {
    emit(Kind::Num, begin, i - begin);
  }
  pos_ = i < text_.size() && text_[i] == quote ? i + 1 : i;
}

// R"delim( ... )delim", the quote at `quote`. False when it is not one after all.
bool Lexer::raw_string(size_t quote) {
  size_t open = quote + 1;
  while (open < text_.size() && open - quote <= 17 && text_[open] != '(' && text_[open] != ')' &&
         text_[open] != '\\' && static_cast<unsigned char>(text_[open]) > ' ')
    ++open;
  if (at(open) != '(' || open - quote > 17)
    return false;
  const std::string_view delimiter = text_.substr(quote + 1, open - quote - 1);
  const size_t begin = open + 1;
  const uint32_t first_line = line_;
  size_t i = begin;
  size_t end = text_.size();
  while (i < text_.size()) {
    const char c = text_[i];
    if (c == '\x01') {
      end = i;
      break;
    }
    if (c == '\n')
      ++line_;
    if (c == ')' && text_.substr(i + 1, delimiter.size()) == delimiter &&
        at(i + 1 + delimiter.size()) == '"') {
      end = i;
      i += 2 + delimiter.size();
      break;
    }
    ++i;
  }
  analyzer_.push(Token{Kind::Str, first_line, static_cast<uint32_t>(begin),
                       static_cast<uint32_t>(end - begin)});
  scan_literal(text_, begin, end, first_line, out_);
  pos_ = std::max(i, end);
  return true;
}

} // namespace

void scan_cxx(std::string_view text, Findings& out) {
  Analyzer analyzer(text, out);
  Lexer(text, out, analyzer).run();
}

} // namespace keval::checks::detail
