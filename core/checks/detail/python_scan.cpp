#include "checks/detail/python_scan.hpp"

#include <algorithm>
#include <array>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace keval::checks::detail {

namespace {

// ---------------------------------------------------------------------------------------------
// Tokens and the lexer
//
// The lexer hands over one logical line at a time (physical lines joined inside brackets and
// after a backslash), with the indentation of its first line, so that statements can be read
// whole: `setattr(\n torch.cuda, ...)` is one statement. Comments are dropped, strings become one
// token each (their contents go to the sink separately), and the expressions inside f-string
// braces are code like any other: an f-string is no hiding place.

enum class Kind : uint8_t { Name, Op, Str, Num };

struct Token {
  Kind kind;
  uint32_t line;
  uint32_t begin; // for Str: the contents, quotes and prefix excluded
  uint32_t len;
};

class LineSink {
public:
  // `continuation`: the logical line was longer than kMaxLineTokens and these tokens follow the
  // ones handed over before; its statement structure is unknown.
  virtual void logical_line(std::span<const Token> tokens, int indent, bool continuation) = 0;
  virtual void string_literal(const Token& token, bool raw, bool fstring) = 0;

protected:
  ~LineSink() = default;
};

// A logical line holds at most this many tokens at once, so memory stays bounded on a source
// that opens a bracket and never closes it.
constexpr size_t kMaxLineTokens = 4096;
// f-strings nested deeper than this are read as plain strings: the lexer recurses on them.
constexpr int kMaxNesting = 8;

bool is_ident_start(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
}
bool is_digit(unsigned char c) {
  return c >= '0' && c <= '9';
}
bool is_ident_char(unsigned char c) {
  return is_ident_start(c) || is_digit(c);
}
bool is_blank(unsigned char c) {
  return c <= ' ' || c == 0x7f;
}

// r, b, u, f, t and their two-letter combinations; sets what the prefix means.
bool string_prefix(std::string_view prefix, bool& raw, bool& fstring) {
  raw = false;
  fstring = false;
  if (prefix.empty() || prefix.size() > 2)
    return false;
  for (char c : prefix) {
    switch (c) {
    case 'r':
    case 'R':
      raw = true;
      break;
    case 'f':
    case 'F':
    case 't':
    case 'T':
      fstring = true;
      break;
    case 'b':
    case 'B':
    case 'u':
    case 'U':
      break;
    default:
      return false;
    }
  }
  return true;
}

class Lexer {
public:
  Lexer(std::string_view src, LineSink& sink) : src_(src), sink_(sink) { tokens_.reserve(256); }

  void run() {
    if (src_.substr(0, 3) == "\xEF\xBB\xBF") // a UTF-8 byte order mark, which Python skips
      pos_ = line_start_ = 3;
    while (pos_ < src_.size()) {
      const unsigned char c = src_[pos_];
      if (c == '\n') {
        newline();
      } else if (c == '#') {
        while (pos_ < src_.size() && src_[pos_] != '\n')
          ++pos_;
      } else if (c == '\\') {
        // A backslash joins the next line; a stray one is skipped.
        if (at(pos_ + 1) == '\n') {
          pos_ += 2;
          physical_line();
        } else if (at(pos_ + 1) == '\r' && at(pos_ + 2) == '\n') {
          pos_ += 3;
          physical_line();
        } else {
          ++pos_;
        }
      } else if (is_blank(c)) {
        ++pos_;
      } else {
        if (tokens_.empty() && !continuing_)
          indent_ = column(pos_);
        token(0, true);
      }
    }
    flush();
    continuing_ = false;
  }

private:
  unsigned char at(size_t i) const { return i < src_.size() ? src_[i] : 0; }

  void physical_line() {
    ++line_;
    line_start_ = pos_;
  }

  void newline() {
    ++pos_;
    physical_line();
    if (depth_ == 0) {
      flush();
      continuing_ = false;
    }
  }

  int column(size_t pos) const {
    int col = 0;
    for (size_t i = line_start_; i < pos; ++i) {
      const char c = src_[i];
      if (c == '\t')
        col = (col / 8 + 1) * 8;
      else if (c == '\f')
        col = 0;
      else
        ++col;
    }
    return col;
  }

  void flush() {
    if (!tokens_.empty())
      sink_.logical_line(tokens_, indent_, continuing_);
    tokens_.clear();
  }

  void emit(Kind kind, size_t begin, size_t len, uint32_t line) {
    tokens_.push_back(Token{kind, line, static_cast<uint32_t>(begin), static_cast<uint32_t>(len)});
    if (tokens_.size() >= kMaxLineTokens) {
      flush();
      continuing_ = true;
    }
  }

  // One token at pos_ (not blank). `track_depth`: brackets count toward the logical line (not
  // inside f-string expressions, which close their own).
  void token(int nesting, bool track_depth) {
    const unsigned char c = src_[pos_];
    if (is_ident_start(c)) {
      size_t end = pos_ + 1;
      while (end < src_.size() && is_ident_char(src_[end]))
        ++end;
      const unsigned char next = at(end);
      bool raw = false;
      bool fstring = false;
      if ((next == '"' || next == '\'') &&
          string_prefix(src_.substr(pos_, end - pos_), raw, fstring)) {
        pos_ = end;
        string(raw, fstring, nesting);
        return;
      }
      emit(Kind::Name, pos_, end - pos_, line_);
      pos_ = end;
      return;
    }
    if (c == '"' || c == '\'') {
      string(false, false, nesting);
      return;
    }
    if (is_digit(c) || (c == '.' && is_digit(at(pos_ + 1)))) {
      size_t end = pos_ + 1;
      while (end < src_.size() && (is_ident_char(src_[end]) || src_[end] == '.')) {
        const char d = src_[end++];
        if ((d == 'e' || d == 'E') && (at(end) == '+' || at(end) == '-'))
          ++end;
      }
      emit(Kind::Num, pos_, end - pos_, line_);
      pos_ = end;
      return;
    }
    static constexpr std::array<std::string_view, 4> kThree = {"**=", "//=", ">>=", "<<="};
    static constexpr std::array<std::string_view, 19> kTwo = {
        "==", "!=", "<=", ">=", "+=", "-=", "*=", "/=", "%=", "&=",
        "|=", "^=", "@=", ":=", "->", "**", "//", "<<", ">>"};
    size_t len = 1;
    const std::string_view rest = src_.substr(pos_, 3);
    if (std::find(kThree.begin(), kThree.end(), rest) != kThree.end())
      len = 3;
    else if (std::find(kTwo.begin(), kTwo.end(), rest.substr(0, 2)) != kTwo.end())
      len = 2;
    if (track_depth && len == 1) {
      if (c == '(' || c == '[' || c == '{')
        ++depth_;
      else if ((c == ')' || c == ']' || c == '}') && depth_ > 0)
        --depth_;
    }
    emit(Kind::Op, pos_, len, line_);
    pos_ += len;
  }

  // A string whose opening quote is at pos_.
  void string(bool raw, bool fstring, int nesting) {
    const char quote = src_[pos_];
    const bool triple = at(pos_ + 1) == quote && at(pos_ + 2) == quote;
    const uint32_t start_line = line_;
    pos_ += triple ? 3 : 1;
    const size_t begin = pos_;
    size_t end = src_.size();
    const bool expressions = fstring && nesting < kMaxNesting;
    while (pos_ < src_.size()) {
      const char c = src_[pos_];
      if (c == '\\') {
        if (at(pos_ + 1) == '\n') {
          pos_ += 2;
          physical_line();
        } else {
          pos_ += 2;
        }
        continue;
      }
      if (c == '\n') {
        if (!triple) { // unterminated: the string ends with its line
          end = pos_;
          break;
        }
        ++pos_;
        physical_line();
        continue;
      }
      if (c == quote && (!triple || (at(pos_ + 1) == quote && at(pos_ + 2) == quote))) {
        end = pos_;
        pos_ += triple ? 3 : 1;
        break;
      }
      if (expressions && c == '{') {
        if (at(pos_ + 1) == '{')
          pos_ += 2;
        else
          fstring_expression(quote, triple, nesting + 1);
        continue;
      }
      ++pos_;
    }
    end = std::min(end, src_.size());
    pos_ = std::min(pos_, src_.size());
    const Token t{Kind::Str, start_line, static_cast<uint32_t>(begin),
                  static_cast<uint32_t>(end - begin)};
    emit(t.kind, t.begin, t.len, t.line);
    sink_.string_literal(t, raw, fstring);
  }

  // The replacement field that starts at pos_ ('{') inside an f-string: code up to its '}'.
  void fstring_expression(char quote, bool triple, int nesting) {
    ++pos_;
    int depth = 0;
    while (pos_ < src_.size()) {
      const unsigned char c = src_[pos_];
      if (c == '\n') {
        if (!triple)
          return;
        ++pos_;
        physical_line();
      } else if (c == '}' && depth == 0) {
        ++pos_;
        return;
      } else if (depth == 0 && c == '!' && at(pos_ + 1) != '=') { // conversion: !r !s !a
        ++pos_;
        while (pos_ < src_.size() && is_ident_char(src_[pos_]))
          ++pos_;
      } else if (depth == 0 && c == ':' && at(pos_ + 1) != '=') {
        ++pos_;
        format_spec(quote, triple, nesting);
        return;
      } else if (c == '#' || c == '\\' || is_blank(c)) {
        ++pos_;
      } else {
        if (c == '(' || c == '[' || c == '{')
          ++depth;
        else if ((c == ')' || c == ']' || c == '}') && depth > 0)
          --depth;
        token(nesting, false);
      }
    }
  }

  // After ':' in a replacement field: literal text and nested fields, up to the field's '}'.
  void format_spec(char quote, bool triple, int nesting) {
    while (pos_ < src_.size()) {
      const char c = src_[pos_];
      if (c == '\n') {
        if (!triple)
          return;
        ++pos_;
        physical_line();
      } else if (c == '{' && nesting < kMaxNesting) {
        fstring_expression(quote, triple, nesting + 1);
      } else if (c == '}') {
        ++pos_;
        return;
      } else if (c == quote && (!triple || (at(pos_ + 1) == quote && at(pos_ + 2) == quote))) {
        return; // malformed: let the string end here
      } else {
        ++pos_;
      }
    }
  }

  std::string_view src_;
  LineSink& sink_;
  size_t pos_ = 0;
  uint32_t line_ = 1;
  size_t line_start_ = 0;
  int depth_ = 0;
  int indent_ = 0;
  bool continuing_ = false;
  std::vector<Token> tokens_;
};

// ---------------------------------------------------------------------------------------------
// Token helpers

class Text {
public:
  explicit Text(std::string_view src) : src_(src) {}
  std::string_view operator()(const Token& t) const { return src_.substr(t.begin, t.len); }
  bool op(const Token& t, std::string_view what) const {
    return t.kind == Kind::Op && (*this)(t) == what;
  }
  bool name(const Token& t, std::string_view what) const {
    return t.kind == Kind::Name && (*this)(t) == what;
  }

private:
  std::string_view src_;
};

bool is_keyword(std::string_view name) {
  static const std::unordered_set<std::string_view> kKeywords = {
      "False", "None",     "True",  "and",    "as",   "assert", "async",  "await",    "break",
      "class", "continue", "def",   "del",    "elif", "else",   "except", "finally",  "for",
      "from",  "global",   "if",    "import", "in",   "is",     "lambda", "nonlocal", "not",
      "or",    "pass",     "raise", "return", "try",  "while",  "with",   "yield"};
  return kKeywords.count(name) != 0;
}

bool has_non_ascii(std::string_view name) {
  return std::any_of(name.begin(), name.end(),
                     [](char c) { return static_cast<unsigned char>(c) >= 0x80; });
}

bool starts_with_path(std::string_view name, std::string_view prefix) {
  return name.size() >= prefix.size() && name.substr(0, prefix.size()) == prefix &&
         (name.size() == prefix.size() || name[prefix.size()] == '.');
}

// A dotted name `a.b.c` starting at tokens[first]: its parts and the index after it.
struct Dotted {
  static constexpr size_t kMaxParts = 16;
  std::array<size_t, kMaxParts> index{}; // token index of each part
  size_t count = 0;
  size_t end = 0;
};

Dotted parse_dotted(std::span<const Token> toks, size_t first, const Text& text) {
  Dotted d;
  d.index[d.count++] = first;
  size_t i = first + 1;
  while (d.count < Dotted::kMaxParts && i + 1 < toks.size() && text.op(toks[i], ".") &&
         toks[i + 1].kind == Kind::Name) {
    d.index[d.count++] = i + 1;
    i += 2;
  }
  d.end = i;
  return d;
}

std::string join(std::span<const Token> toks, const Dotted& d, const Text& text) {
  std::string out;
  for (size_t k = 0; k < d.count; ++k) {
    if (k)
      out += '.';
    out += text(toks[d.index[k]]);
  }
  return out;
}

// Index of the bracket that closes the one at `open`, or `limit`.
size_t matching(std::span<const Token> toks, size_t open, size_t limit, const Text& text) {
  int depth = 0;
  for (size_t i = open; i < limit; ++i) {
    if (toks[i].kind != Kind::Op || toks[i].len != 1)
      continue;
    const char c = text(toks[i])[0];
    if (c == '(' || c == '[' || c == '{')
      ++depth;
    else if ((c == ')' || c == ']' || c == '}') && --depth == 0)
      return i;
  }
  return limit;
}

// An import statement's names, from the keyword at `first` ("import" or "from").
struct Imported {
  std::string local;      // the name it binds; empty for `from m import *`
  std::string bound_path; // what the local name stands for
  std::string path;       // what is imported (`import a.b.c` binds a, imports a.b.c)
  size_t token = 0;
  bool relative = false;
};

// Returns the index after the statement, or `first` when tokens[first] starts no import.
template <class OnName>
size_t parse_import(std::span<const Token> toks, size_t first, const Text& text, OnName&& on) {
  const size_t n = toks.size();
  auto stops = [&](size_t i) { return i >= n || text.op(toks[i], ";"); };
  if (text.name(toks[first], "import")) {
    size_t i = first + 1;
    while (!stops(i) && toks[i].kind == Kind::Name) {
      const Dotted d = parse_dotted(toks, i, text);
      Imported item;
      item.path = join(toks, d, text);
      item.token = i;
      item.local = std::string(text(toks[i]));
      item.bound_path = item.local;
      i = d.end;
      if (i + 1 < n && text.name(toks[i], "as") && toks[i + 1].kind == Kind::Name) {
        item.local = std::string(text(toks[i + 1]));
        item.bound_path = item.path;
        i += 2;
      }
      on(item);
      if (stops(i) || !text.op(toks[i], ","))
        break;
      ++i;
    }
    return i;
  }
  if (!text.name(toks[first], "from"))
    return first;
  size_t i = first + 1;
  bool relative = false;
  while (i < n && (text.op(toks[i], ".") || text.op(toks[i], "..."))) {
    relative = true;
    ++i;
  }
  std::string module;
  if (i < n && toks[i].kind == Kind::Name && !text.name(toks[i], "import")) {
    const Dotted d = parse_dotted(toks, i, text);
    module = join(toks, d, text);
    i = d.end;
  }
  if (i >= n || !text.name(toks[i], "import"))
    return first; // `raise X from e`, `yield from g`
  ++i;
  if (i < n && text.op(toks[i], "("))
    ++i;
  while (!stops(i)) {
    if (text.op(toks[i], "*")) {
      Imported item;
      item.path = module;
      item.token = i;
      item.relative = relative;
      on(item);
      ++i;
      break;
    }
    if (toks[i].kind != Kind::Name)
      break;
    Imported item;
    const std::string_view name = text(toks[i]);
    item.path = module.empty() ? std::string(name) : module + "." + std::string(name);
    item.bound_path = item.path;
    item.local = std::string(name);
    item.token = i;
    item.relative = relative;
    ++i;
    if (i + 1 < n && text.name(toks[i], "as") && toks[i + 1].kind == Kind::Name) {
      item.local = std::string(text(toks[i + 1]));
      i += 2;
    }
    on(item);
    if (i < n && text.op(toks[i], ","))
      ++i;
    else
      break;
  }
  while (i < n && text.op(toks[i], ")"))
    ++i;
  return i;
}

// ---------------------------------------------------------------------------------------------
// What the patterns say

constexpr const char* kThread =
    "uses {}: work on another thread can run outside the timed region or race the correctness "
    "check";
constexpr const char* kProcess =
    "uses {}: another process can outlive the job, or do work the timer never sees";
constexpr const char* kStream =
    "uses {}: work queued on another stream can escape the stream that is timed (flagged by "
    "design, even when the use is honest)";
constexpr const char* kGraph =
    "uses {}: replaying a captured graph can hand back results prepared before timing began";
constexpr const char* kSubclass =
    "uses {}: a tensor subclass can defer or fake the computation until its result is inspected";
constexpr const char* kCtypes =
    "uses {}: foreign calls reach native memory and functions past every Python-level check";
constexpr const char* kMemory =
    "uses {}: mapping or writing raw memory can read the reference's results or rewrite the "
    "harness";
constexpr const char* kIntrospection =
    "uses {}: inspecting frames, modules or the heap reaches the harness and the reference";
constexpr const char* kDescriptor =
    "uses {}: writing to descriptors or files can forge results or corrupt the harness's channel";
constexpr const char* kExit =
    "uses {}: ending the process or taking over its signals can cut a job short to pass for "
    "finished";
constexpr const char* kPatchUse =
    "uses {}: patching or reloading modules changes what the reference or the harness runs";
constexpr const char* kDynamic =
    "uses {}: code built or loaded at run time is hidden from this scan";
constexpr const char* kCacheUse =
    "uses {}: a cache across calls answers a repeated input without computing it";
constexpr const char* kFinalizer =
    "uses {}: work deferred to exit or to a finalizer runs outside the timed region";
constexpr const char* kSetting =
    "calls {}: a global torch setting also changes the reference and the precision it is compared "
    "at";
constexpr const char* kInterpose =
    "uses {}: a library loaded at run time can replace CUDA or timing functions";
constexpr const char* kReference =
    "uses {}, the reference's class, without defining it: the candidate would run or return the "
    "reference's work";
constexpr const char* kReferenceImport =
    "imports {}: the candidate would run or return the reference's work";
constexpr const char* kUnicode =
    "identifier {} has non-ASCII letters: Python folds look-alikes (NFKC) into other names, which "
    "hides a name from review and from this scan";
constexpr const char* kTimingAssign =
    "assigns {}: replacing a timing function makes the measured time meaningless";
constexpr const char* kPatchAssign =
    "assigns {}: replacing a library function changes what the reference or the harness runs";
constexpr const char* kForwardAssign =
    "assigns {}: replacing a model's forward changes what runs in place of the reference or the "
    "candidate";
constexpr const char* kClassAssign =
    "assigns {}: changing an object's class lets a result pose as a tensor it is not";
constexpr const char* kStdoutAssign =
    "assigns {}: redirecting the standard streams can hide output or forge what the harness reads";
constexpr const char* kSettingAssign =
    "assigns {}: a global torch setting also changes the reference and the precision it is "
    "compared at";
constexpr const char* kBuiltinsAssign =
    "assigns {}: patching builtins changes what every module, the harness's included, runs";
constexpr const char* kSelfInForward =
    "stores {} during forward: state kept between calls lets a later call return an earlier "
    "result without computing it";
constexpr const char* kContainer =
    "keeps {} across calls: a container that outlives a call can hold results to hand back later";
constexpr const char* kGlobalInForward =
    "declares {} global in forward: state kept between calls lets a later call return an earlier "
    "result";
constexpr const char* kDelDef =
    "defines {}: a finalizer runs when the harness drops an object, outside the timed region";
constexpr const char* kHookDef =
    "defines {}: a tensor subclass hook can defer or fake computation until its result is "
    "inspected";
constexpr const char* kTensorBase =
    "subclasses {}: a tensor subclass can defer or fake the computation until its result is "
    "inspected";
constexpr const char* kCustomReturn =
    "forward returns a {} object defined here: a lazy result can do its work when it is compared "
    "rather than when it is timed";
constexpr const char* kFallbackCall =
    "calls {} in an except block: a kernel that fails falls back to torch and still passes";
constexpr const char* kFallbackReturn =
    "returns a value from an except block that catches everything: a kernel that fails still "
    "hands back a result";

enum RuleFlag : uint8_t {
  kCall = 1, // only when called: `open(...)`, not a variable named open
};

// Rules on what a dotted name stands for once aliases are followed; a rule names a module or
// anything under it (longest match wins). Only names that an import binds are looked up here,
// so a local variable called `signal` is not the signal module.
constexpr std::array kModuleRules = {
    Rule{"threading", Pattern::thread, kThread},
    Rule{"_thread", Pattern::thread, kThread},
    Rule{"concurrent.futures", Pattern::thread, kThread},
    Rule{"asyncio", Pattern::thread, kThread},
    Rule{"threading.settrace", Pattern::introspection, kIntrospection},
    Rule{"threading.setprofile", Pattern::introspection, kIntrospection},
    Rule{"concurrent.futures.ProcessPoolExecutor", Pattern::multiprocessing, kProcess},
    Rule{"multiprocessing", Pattern::multiprocessing, kProcess},
    Rule{"torch.multiprocessing", Pattern::multiprocessing, kProcess},
    Rule{"subprocess", Pattern::multiprocessing, kProcess},
    Rule{"pty", Pattern::multiprocessing, kProcess},
    Rule{"os.fork", Pattern::multiprocessing, kProcess},
    Rule{"os.forkpty", Pattern::multiprocessing, kProcess},
    Rule{"os.system", Pattern::multiprocessing, kProcess},
    Rule{"os.popen", Pattern::multiprocessing, kProcess},
    Rule{"os.register_at_fork", Pattern::multiprocessing, kProcess},
    Rule{"os.wait", Pattern::multiprocessing, kProcess},
    Rule{"os.waitpid", Pattern::multiprocessing, kProcess},
    Rule{"os.wait3", Pattern::multiprocessing, kProcess},
    Rule{"os.wait4", Pattern::multiprocessing, kProcess},
    Rule{"os.waitid", Pattern::multiprocessing, kProcess},
    Rule{"torch.cuda.Stream", Pattern::stream, kStream},
    Rule{"torch.cuda.stream", Pattern::stream, kStream},
    Rule{"torch.cuda.streams", Pattern::stream, kStream},
    Rule{"torch.cuda.ExternalStream", Pattern::stream, kStream},
    Rule{"torch.cuda.set_stream", Pattern::stream, kStream},
    Rule{"torch.cuda.StreamContext", Pattern::stream, kStream},
    Rule{"torch.Stream", Pattern::stream, kStream},
    Rule{"cupy.cuda.Stream", Pattern::stream, kStream},
    Rule{"cupy.cuda.ExternalStream", Pattern::stream, kStream},
    Rule{"torch.cuda.CUDAGraph", Pattern::cuda_graph, kGraph},
    Rule{"torch.cuda.graph", Pattern::cuda_graph, kGraph},
    Rule{"torch.cuda.graphs", Pattern::cuda_graph, kGraph},
    Rule{"torch.cuda.make_graphed_callables", Pattern::cuda_graph, kGraph},
    Rule{"torch.cuda.graph_pool_handle", Pattern::cuda_graph, kGraph},
    Rule{"torch.Tensor._make_subclass", Pattern::tensor_subclass, kSubclass},
    Rule{"torch.Tensor._make_wrapper_subclass", Pattern::tensor_subclass, kSubclass},
    Rule{"torch.Tensor.__new__", Pattern::tensor_subclass, kSubclass},
    Rule{"torch._C._TensorBase", Pattern::tensor_subclass, kSubclass},
    Rule{"torch._C.TensorBase", Pattern::tensor_subclass, kSubclass},
    Rule{"torch.utils._python_dispatch", Pattern::tensor_subclass, kSubclass},
    Rule{"torch.overrides", Pattern::tensor_subclass, kSubclass},
    Rule{"torch._subclasses", Pattern::tensor_subclass, kSubclass},
    Rule{"ctypes", Pattern::ctypes, kCtypes},
    Rule{"_ctypes", Pattern::ctypes, kCtypes},
    Rule{"cffi", Pattern::ctypes, kCtypes},
    Rule{"mmap", Pattern::raw_memory, kMemory},
    Rule{"gc.get_objects", Pattern::introspection, kIntrospection},
    Rule{"gc.get_referrers", Pattern::introspection, kIntrospection},
    Rule{"gc.get_referents", Pattern::introspection, kIntrospection},
    Rule{"sys._getframe", Pattern::introspection, kIntrospection},
    Rule{"sys._current_frames", Pattern::introspection, kIntrospection},
    Rule{"sys.modules", Pattern::introspection, kIntrospection},
    Rule{"sys.settrace", Pattern::introspection, kIntrospection},
    Rule{"sys.setprofile", Pattern::introspection, kIntrospection},
    Rule{"sys.addaudithook", Pattern::introspection, kIntrospection},
    Rule{"sys.meta_path", Pattern::introspection, kIntrospection},
    Rule{"sys.path_hooks", Pattern::introspection, kIntrospection},
    Rule{"inspect.currentframe", Pattern::introspection, kIntrospection},
    Rule{"inspect.stack", Pattern::introspection, kIntrospection},
    Rule{"inspect.getouterframes", Pattern::introspection, kIntrospection},
    Rule{"inspect.getinnerframes", Pattern::introspection, kIntrospection},
    Rule{"inspect.trace", Pattern::introspection, kIntrospection},
    Rule{"traceback.extract_stack", Pattern::introspection, kIntrospection},
    Rule{"traceback.walk_stack", Pattern::introspection, kIntrospection},
    Rule{"__main__", Pattern::introspection, kIntrospection},
    Rule{"os.write", Pattern::descriptor_write, kDescriptor},
    Rule{"os.writev", Pattern::descriptor_write, kDescriptor},
    Rule{"os.pwrite", Pattern::descriptor_write, kDescriptor},
    Rule{"os.dup", Pattern::descriptor_write, kDescriptor},
    Rule{"os.dup2", Pattern::descriptor_write, kDescriptor},
    Rule{"os.open", Pattern::descriptor_write, kDescriptor},
    Rule{"os.openpty", Pattern::descriptor_write, kDescriptor},
    Rule{"os.fdopen", Pattern::descriptor_write, kDescriptor},
    Rule{"os.pipe", Pattern::descriptor_write, kDescriptor},
    Rule{"os.pipe2", Pattern::descriptor_write, kDescriptor},
    Rule{"os.close", Pattern::descriptor_write, kDescriptor},
    Rule{"os.closerange", Pattern::descriptor_write, kDescriptor},
    Rule{"os.sendfile", Pattern::descriptor_write, kDescriptor},
    Rule{"os.truncate", Pattern::descriptor_write, kDescriptor},
    Rule{"os.ftruncate", Pattern::descriptor_write, kDescriptor},
    Rule{"os.remove", Pattern::descriptor_write, kDescriptor},
    Rule{"os.unlink", Pattern::descriptor_write, kDescriptor},
    Rule{"os.rename", Pattern::descriptor_write, kDescriptor},
    Rule{"os.replace", Pattern::descriptor_write, kDescriptor},
    Rule{"os.rmdir", Pattern::descriptor_write, kDescriptor},
    Rule{"os.removedirs", Pattern::descriptor_write, kDescriptor},
    Rule{"os.symlink", Pattern::descriptor_write, kDescriptor},
    Rule{"os.link", Pattern::descriptor_write, kDescriptor},
    Rule{"os.mkfifo", Pattern::descriptor_write, kDescriptor},
    Rule{"os.mknod", Pattern::descriptor_write, kDescriptor},
    Rule{"os.chmod", Pattern::descriptor_write, kDescriptor},
    Rule{"os.chown", Pattern::descriptor_write, kDescriptor},
    Rule{"os.set_inheritable", Pattern::descriptor_write, kDescriptor},
    Rule{"shutil", Pattern::descriptor_write, kDescriptor},
    Rule{"socket", Pattern::descriptor_write, kDescriptor},
    Rule{"fcntl", Pattern::descriptor_write, kDescriptor},
    Rule{"io.open", Pattern::descriptor_write, kDescriptor},
    Rule{"io.FileIO", Pattern::descriptor_write, kDescriptor},
    Rule{"os._exit", Pattern::process_control, kExit},
    Rule{"os.abort", Pattern::process_control, kExit},
    Rule{"os.kill", Pattern::process_control, kExit},
    Rule{"os.killpg", Pattern::process_control, kExit},
    Rule{"os.setsid", Pattern::process_control, kExit},
    Rule{"os.setpgid", Pattern::process_control, kExit},
    Rule{"signal", Pattern::process_control, kExit},
    Rule{"sys.exit", Pattern::process_control, kExit},
    Rule{"resource", Pattern::process_control, kExit},
    Rule{"builtins", Pattern::monkeypatch, kPatchUse},
    Rule{"importlib.reload", Pattern::monkeypatch, kPatchUse},
    Rule{"imp.reload", Pattern::monkeypatch, kPatchUse},
    Rule{"unittest.mock", Pattern::monkeypatch, kPatchUse},
    Rule{"mock", Pattern::monkeypatch, kPatchUse},
    Rule{"torch.library.Library", Pattern::monkeypatch, kPatchUse},
    Rule{"torch.library.impl", Pattern::monkeypatch, kPatchUse},
    Rule{"torch.library.register_kernel", Pattern::monkeypatch, kPatchUse},
    Rule{"torch.library.register_torch_dispatch", Pattern::monkeypatch, kPatchUse},
    Rule{"importlib.import_module", Pattern::dynamic_code, kDynamic},
    Rule{"importlib.util", Pattern::dynamic_code, kDynamic},
    Rule{"importlib.machinery", Pattern::dynamic_code, kDynamic},
    Rule{"importlib.__import__", Pattern::dynamic_code, kDynamic},
    Rule{"runpy", Pattern::dynamic_code, kDynamic},
    Rule{"marshal", Pattern::dynamic_code, kDynamic},
    Rule{"pickle.loads", Pattern::dynamic_code, kDynamic},
    Rule{"pickle.load", Pattern::dynamic_code, kDynamic},
    Rule{"dill", Pattern::dynamic_code, kDynamic},
    Rule{"cloudpickle", Pattern::dynamic_code, kDynamic},
    Rule{"base64", Pattern::dynamic_code, kDynamic},
    Rule{"codecs.decode", Pattern::dynamic_code, kDynamic},
    Rule{"zlib.decompress", Pattern::dynamic_code, kDynamic},
    Rule{"types.CodeType", Pattern::dynamic_code, kDynamic},
    Rule{"types.FunctionType", Pattern::dynamic_code, kDynamic},
    Rule{"functools.lru_cache", Pattern::output_cache, kCacheUse},
    Rule{"functools.cache", Pattern::output_cache, kCacheUse},
    Rule{"functools.cached_property", Pattern::output_cache, kCacheUse},
    Rule{"cachetools", Pattern::output_cache, kCacheUse},
    Rule{"joblib.Memory", Pattern::output_cache, kCacheUse},
    Rule{"atexit", Pattern::finalizer, kFinalizer},
    Rule{"weakref.finalize", Pattern::finalizer, kFinalizer},
    Rule{"torch.ops.load_library", Pattern::interposition, kInterpose},
    Rule{"torch.set_float32_matmul_precision", Pattern::torch_setting, kSetting, kCall},
    Rule{"torch.set_default_dtype", Pattern::torch_setting, kSetting, kCall},
    Rule{"torch.set_default_tensor_type", Pattern::torch_setting, kSetting, kCall},
    Rule{"torch.set_default_device", Pattern::torch_setting, kSetting, kCall},
    Rule{"torch.set_flush_denormal", Pattern::torch_setting, kSetting, kCall},
};

// Builtins: bare names that no import rebinds.
constexpr std::array kBuiltinRules = {
    Rule{"open", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"exit", Pattern::process_control, kExit, kCall},
    Rule{"quit", Pattern::process_control, kExit, kCall},
    Rule{"SystemExit", Pattern::process_control, kExit},
    Rule{"globals", Pattern::introspection, kIntrospection, kCall},
    Rule{"vars", Pattern::introspection, kIntrospection, kCall},
    Rule{"exec", Pattern::dynamic_code, kDynamic, kCall},
    Rule{"eval", Pattern::dynamic_code, kDynamic, kCall},
    Rule{"compile", Pattern::dynamic_code, kDynamic, kCall},
    Rule{"__import__", Pattern::dynamic_code, kDynamic, kCall},
    Rule{"__builtins__", Pattern::monkeypatch, kPatchUse},
};

// Attributes, whatever they are read from: what a frame, a graph or a stream offers is
// recognisable by name even when the object came from somewhere this scan cannot follow.
constexpr std::array kAttributeRules = {
    Rule{"wait_stream", Pattern::stream, kStream, kCall},
    Rule{"record_stream", Pattern::stream, kStream, kCall},
    Rule{"replay", Pattern::cuda_graph, kGraph, kCall},
    Rule{"capture_begin", Pattern::cuda_graph, kGraph, kCall},
    Rule{"capture_end", Pattern::cuda_graph, kGraph, kCall},
    Rule{"_make_subclass", Pattern::tensor_subclass, kSubclass},
    Rule{"_make_wrapper_subclass", Pattern::tensor_subclass, kSubclass},
    Rule{"as_subclass", Pattern::tensor_subclass, kSubclass, kCall},
    Rule{"__torch_function__", Pattern::tensor_subclass, kSubclass},
    Rule{"__torch_dispatch__", Pattern::tensor_subclass, kSubclass},
    Rule{"f_back", Pattern::introspection, kIntrospection},
    Rule{"f_globals", Pattern::introspection, kIntrospection},
    Rule{"f_locals", Pattern::introspection, kIntrospection},
    Rule{"f_builtins", Pattern::introspection, kIntrospection},
    Rule{"tb_frame", Pattern::introspection, kIntrospection},
    Rule{"gi_frame", Pattern::introspection, kIntrospection},
    Rule{"cr_frame", Pattern::introspection, kIntrospection},
    Rule{"ag_frame", Pattern::introspection, kIntrospection},
    Rule{"__globals__", Pattern::introspection, kIntrospection},
    Rule{"__subclasses__", Pattern::introspection, kIntrospection},
    Rule{"_getframe", Pattern::introspection, kIntrospection},
    Rule{"_current_frames", Pattern::introspection, kIntrospection},
    Rule{"get_objects", Pattern::introspection, kIntrospection},
    Rule{"get_referrers", Pattern::introspection, kIntrospection},
    Rule{"get_referents", Pattern::introspection, kIntrospection},
    Rule{"write_text", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"write_bytes", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"fileno", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"dup2", Pattern::descriptor_write, kDescriptor, kCall},
    Rule{"_exit", Pattern::process_control, kExit, kCall},
    Rule{"fork", Pattern::multiprocessing, kProcess, kCall},
    Rule{"forkpty", Pattern::multiprocessing, kProcess, kCall},
};

const RuleIndex& module_rules() {
  static const auto index = index_rules(kModuleRules);
  return index;
}
const RuleIndex& builtin_rules() {
  static const auto index = index_rules(kBuiltinRules);
  return index;
}
const RuleIndex& attribute_rules() {
  static const auto index = index_rules(kAttributeRules);
  return index;
}

// The longest rule that `path` falls under (os.spawn*, os.exec* and os.posix_spawn* by prefix).
const Rule* match_module(std::string_view path) {
  static constexpr Rule kSpawn{"os.spawn", Pattern::multiprocessing, kProcess};
  for (std::string_view prefix = path;;) {
    if (const Rule* rule = find_rule(module_rules(), prefix))
      return rule;
    const size_t dot = prefix.rfind('.');
    if (dot == std::string_view::npos)
      break;
    prefix = prefix.substr(0, dot);
  }
  for (std::string_view family : {"os.spawn", "os.exec", "os.posix_spawn"})
    if (path.substr(0, family.size()) == family)
      return &kSpawn;
  return nullptr;
}

bool is_timing_path(std::string_view path) {
  for (std::string_view prefix :
       {"time", "timeit", "torch.cuda", "torch.utils.benchmark", "triton.testing"})
    if (starts_with_path(path, prefix))
      return true;
  return false;
}

bool is_timing_attribute(std::string_view name) {
  static const std::unordered_set<std::string_view> kNames = {
      "synchronize", "elapsed_time", "perf_counter",   "perf_counter_ns",
      "monotonic",   "monotonic_ns", "process_time",   "record",
      "Event",       "replay",       "current_stream", "default_stream"};
  return kNames.count(name) != 0;
}

// Calls to torch that are not computation: building an extension, querying the device.
bool is_torch_compute(std::string_view path) {
  if (!starts_with_path(path, "torch") || path == "torch")
    return false;
  for (std::string_view prefix :
       {"torch.cuda", "torch.utils", "torch.version", "torch.backends", "torch._C", "torch.library",
        "torch.jit", "torch.compiler", "torch._dynamo", "torch.device", "torch.Size",
        "torch.is_tensor", "torch.get_default_dtype", "torch.ops.load_library"})
    if (starts_with_path(path, prefix))
      return false;
  return true;
}

// ---------------------------------------------------------------------------------------------
// Pass 1: what the source binds (imports, aliases, classes), wherever it binds it

struct Facts {
  std::unordered_map<std::string, std::string> aliases; // local name -> dotted path
  std::vector<std::string> star_modules;                // `from m import *`
  struct ClassDef {
    std::string name;
    std::vector<std::string> bases; // as written
  };
  std::vector<ClassDef> classes;
  std::unordered_set<std::string> plain_classes;                     // defined here, no torch base
  std::unordered_set<std::string> defined;                           // def and class names
  std::vector<std::pair<std::string, std::string>> assigned_aliases; // x = a.b (resolved later)
  std::vector<std::pair<std::string, std::string>> imported_modules; // x = __import__("m")

  struct Canon {
    std::string path;
    bool bound = false; // the root is an import (or torch's usual names)
  };

  Canon canonical(std::span<const std::string_view> parts) const {
    Canon c;
    const std::string root(parts[0]);
    if (auto it = aliases.find(root); it != aliases.end()) {
      c.path = it->second;
      c.bound = true;
    } else if (auto known = default_alias(root); !known.empty()) {
      c.path = known;
      c.bound = true;
    } else {
      c.path = root;
      for (const std::string& module : star_modules) {
        const std::string candidate = module + "." + root;
        if (match_module(candidate) != nullptr) {
          c.path = candidate;
          c.bound = true;
          break;
        }
      }
    }
    for (size_t k = 1; k < parts.size(); ++k) {
      c.path += '.';
      c.path += parts[k];
    }
    return c;
  }

  // Names a torch source uses without importing them under that name in every file.
  static std::string_view default_alias(std::string_view root) {
    if (root == "torch")
      return "torch";
    if (root == "nn")
      return "torch.nn";
    if (root == "F")
      return "torch.nn.functional";
    if (root == "triton")
      return "triton";
    if (root == "tl")
      return "triton.language";
    return {};
  }

  Canon canonical(const std::string& dotted) const {
    std::vector<std::string_view> parts;
    std::string_view rest = dotted;
    while (!rest.empty() && parts.size() < Dotted::kMaxParts) {
      const size_t dot = rest.find('.');
      parts.push_back(rest.substr(0, dot));
      if (dot == std::string_view::npos)
        break;
      rest.remove_prefix(dot + 1);
    }
    if (parts.empty())
      return {};
    return canonical(parts);
  }

  void resolve() {
    for (const auto& [local, dotted] : assigned_aliases) {
      Canon c = canonical(dotted);
      if (c.bound)
        aliases[local] = c.path;
    }
    for (const auto& [local, module] : imported_modules)
      aliases[local] = module;
    // A class is plain when nothing in its ancestry, as far as this source shows, is torch's.
    std::unordered_map<std::string, bool> torch_based;
    for (const ClassDef& cls : classes)
      torch_based[cls.name] = false;
    const auto local_torch_based = [&](const std::string& name) {
      auto it = torch_based.find(name);
      return it != torch_based.end() && it->second;
    };
    for (int round = 0; round < 8; ++round) {
      bool changed = false;
      for (const ClassDef& cls : classes) {
        if (torch_based[cls.name])
          continue;
        for (const std::string& base : cls.bases) {
          const Canon c = canonical(base);
          if ((c.bound && starts_with_path(c.path, "torch")) || local_torch_based(base)) {
            torch_based[cls.name] = true;
            changed = true;
            break;
          }
        }
      }
      if (!changed)
        break;
    }
    for (const auto& [name, based] : torch_based)
      if (!based)
        plain_classes.insert(name);
  }
};

bool is_dotted_identifier(std::string_view s) {
  if (s.empty() || s.size() > 128)
    return false;
  for (char c : s)
    if (!is_ident_char(static_cast<unsigned char>(c)) && c != '.')
      return false;
  return true;
}

class Collector final : public LineSink {
public:
  Collector(std::string_view src, Facts& facts) : text_(src), facts_(facts) {}

  void logical_line(std::span<const Token> toks, int, bool continuation) override {
    const size_t n = toks.size();
    for (size_t i = 0; i < n; ++i) {
      const Token& t = toks[i];
      if (t.kind != Kind::Name)
        continue;
      const std::string_view word = text_(t);
      if (word == "import" || word == "from") {
        const size_t end = parse_import(toks, i, text_, [&](const Imported& item) {
          if (item.relative)
            return;
          if (item.local.empty())
            facts_.star_modules.push_back(item.path);
          else
            facts_.aliases[item.local] = item.bound_path;
        });
        if (end > i)
          i = end - 1;
      } else if ((word == "def" || word == "class") && i + 1 < n &&
                 toks[i + 1].kind == Kind::Name) {
        facts_.defined.emplace(text_(toks[i + 1]));
        if (word == "class")
          collect_class(toks, i + 1);
      }
    }
    if (!continuation)
      collect_alias(toks);
  }

  void string_literal(const Token&, bool, bool) override {}

private:
  void collect_class(std::span<const Token> toks, size_t name) {
    Facts::ClassDef cls;
    cls.name = std::string(text_(toks[name]));
    if (name + 1 < toks.size() && text_.op(toks[name + 1], "(")) {
      const size_t close = matching(toks, name + 1, toks.size(), text_);
      for (size_t i = name + 2; i < close; ++i) {
        const bool starts_base = text_.op(toks[i - 1], "(") || text_.op(toks[i - 1], ",");
        if (toks[i].kind == Kind::Name && starts_base &&
            !(i + 1 < close && text_.op(toks[i + 1], "="))) {
          const Dotted d = parse_dotted(toks, i, text_);
          cls.bases.push_back(join(toks, d, text_));
        }
      }
    }
    facts_.classes.push_back(std::move(cls));
  }

  // `x = a.b.c`, `x = __import__("m")`, `x = importlib.import_module("m")`: names for modules.
  void collect_alias(std::span<const Token> toks) {
    if (toks.size() < 3 || toks[0].kind != Kind::Name || !text_.op(toks[1], "=") ||
        toks[2].kind != Kind::Name)
      return;
    const Dotted d = parse_dotted(toks, 2, text_);
    const std::string rhs = join(toks, d, text_);
    const std::string local(text_(toks[0]));
    if (d.end == toks.size()) {
      facts_.assigned_aliases.emplace_back(local, rhs);
    } else if (d.end + 3 == toks.size() && text_.op(toks[d.end], "(") &&
               toks[d.end + 1].kind == Kind::Str && text_.op(toks[d.end + 2], ")") &&
               (rhs == "__import__" || rhs == "importlib.import_module")) {
      const std::string_view module = text_(toks[d.end + 1]);
      if (is_dotted_identifier(module))
        facts_.imported_modules.emplace_back(local, std::string(module));
    }
  }

  Text text_;
  Facts& facts_;
};

// ---------------------------------------------------------------------------------------------
// Pass 2: statements and names

// Whether a Python string holds C++ (a load_inline source) rather than a message or a docstring.
bool looks_like_cxx(std::string_view body, bool fstring) {
  if (body.find(';') != std::string_view::npos || body.find("#include") != std::string_view::npos ||
      body.find("__global__") != std::string_view::npos)
    return true;
  return body.find(fstring ? "{{" : "{") != std::string_view::npos;
}

class Analyzer final : public LineSink {
public:
  Analyzer(std::string_view src, const Facts& facts, Findings& out, std::string& cxx)
      : src_(src), text_(src), facts_(facts), out_(out), cxx_(cxx) {}

  void logical_line(std::span<const Token> toks, int indent, bool continuation) override {
    if (continuation) {
      names(toks, toks.size());
      return;
    }
    size_t start = 0;
    bool first = true;
    for (size_t i = 0; i <= toks.size(); ++i) {
      if (i < toks.size() && !text_.op(toks[i], ";"))
        continue;
      if (i > start)
        statement(toks.subspan(start, i - start), indent, first);
      first = false;
      start = i + 1;
    }
  }

  void string_literal(const Token& t, bool raw, bool fstring) override {
    scan_literal(src_, t.begin, t.begin + t.len, t.line, out_);
    if (looks_like_cxx(text_(t), fstring))
      copy_to_cxx(t, raw);
  }

private:
  struct Context {
    enum Kind : uint8_t { Def, Class, Except } kind;
    int indent;
    bool forward = false;  // a def named forward or __call__
    bool broad = false;    // except:, except Exception, except BaseException
    bool reported = false; // an except block that was already reported
  };
  static constexpr size_t kMaxContexts = 64;

  struct Summary {
    const Token* torch_call = nullptr; // the first call into torch (or the reference)
    std::string torch_call_name;
  };

  void report(Pattern pattern, const Token& at, const char* reason, std::string_view subject) {
    out_.add(pattern, at.line, at.begin, reason, subject);
  }

  // -- contexts -----------------------------------------------------------------------------

  void push(Context::Kind kind, int indent, bool forward = false, bool broad = false) {
    if (contexts_.size() < kMaxContexts)
      contexts_.push_back(Context{kind, indent, forward, broad});
  }

  bool in_forward() const {
    for (auto it = contexts_.rbegin(); it != contexts_.rend(); ++it)
      if (it->kind != Context::Except)
        return it->kind == Context::Def && it->forward;
    return false;
  }
  bool module_level() const {
    return std::none_of(contexts_.begin(), contexts_.end(),
                        [](const Context& c) { return c.kind != Context::Except; });
  }
  bool class_body() const {
    for (auto it = contexts_.rbegin(); it != contexts_.rend(); ++it)
      if (it->kind != Context::Except)
        return it->kind == Context::Class;
    return false;
  }
  Context* active_except() {
    if (contexts_.empty() || contexts_.back().kind != Context::Except)
      return nullptr;
    return &contexts_.back();
  }

  // -- statements ---------------------------------------------------------------------------

  size_t header_colon(std::span<const Token> toks) const {
    int depth = 0;
    for (size_t i = 0; i < toks.size(); ++i) {
      if (toks[i].kind != Kind::Op)
        continue;
      const std::string_view op = text_(toks[i]);
      if (op == "(" || op == "[" || op == "{")
        ++depth;
      else if ((op == ")" || op == "]" || op == "}") && depth > 0)
        --depth;
      else if (op == ":" && depth == 0)
        return i;
    }
    return toks.size();
  }

  void statement(std::span<const Token> toks, int indent, bool line_start) {
    if (line_start)
      while (!contexts_.empty() && contexts_.back().indent >= indent)
        contexts_.pop_back();
    size_t k = 0;
    if (text_.name(toks[0], "async") && toks.size() > 1)
      k = 1;
    const std::string_view keyword = toks[k].kind == Kind::Name ? text_(toks[k]) : "";
    const bool compound = keyword == "def" || keyword == "class" || keyword == "except" ||
                          keyword == "if" || keyword == "elif" || keyword == "else" ||
                          keyword == "for" || keyword == "while" || keyword == "with" ||
                          keyword == "try" || keyword == "finally";
    if (!compound) {
      simple_statement(toks);
      return;
    }
    const size_t colon = header_colon(toks);
    const auto header = toks.subspan(0, colon);
    size_t skip = toks.size();
    if ((keyword == "def" || keyword == "class") && k + 1 < toks.size() &&
        toks[k + 1].kind == Kind::Name) {
      skip = k + 1;
      const std::string_view name = text_(toks[skip]);
      if (keyword == "def") {
        if (name == "__del__")
          report(Pattern::finalizer, toks[skip], kDelDef, name);
        else if (name == "__torch_function__" || name == "__torch_dispatch__")
          report(Pattern::tensor_subclass, toks[skip], kHookDef, name);
        push(Context::Def, indent, name == "forward" || name == "__call__");
      } else {
        class_bases(header, skip);
        push(Context::Class, indent);
      }
    } else if (keyword == "except") {
      bool broad = colon == k + 1;
      for (size_t i = k + 1; i < colon; ++i)
        broad = broad || text_.name(toks[i], "Exception") || text_.name(toks[i], "BaseException");
      push(Context::Except, indent, false, broad);
    }
    names(header, skip);
    if (colon + 1 < toks.size())
      simple_statement(toks.subspan(colon + 1));
  }

  void class_bases(std::span<const Token> header, size_t name) {
    if (name + 1 >= header.size() || !text_.op(header[name + 1], "("))
      return;
    for (size_t i = name + 2; i < header.size(); ++i) {
      if (header[i].kind != Kind::Name ||
          !(text_.op(header[i - 1], "(") || text_.op(header[i - 1], ",")))
        continue;
      const Dotted d = parse_dotted(header, i, text_);
      const auto c = canonical(header, d);
      if (c.bound && (starts_with_path(c.path, "torch.Tensor") ||
                      starts_with_path(c.path, "torch._C._TensorBase") ||
                      starts_with_path(c.path, "torch._C.TensorBase")))
        report(Pattern::tensor_subclass, header[i], kTensorBase, c.path);
    }
  }

  void simple_statement(std::span<const Token> toks) {
    if (toks.empty())
      return;
    const std::string_view keyword = toks[0].kind == Kind::Name ? text_(toks[0]) : "";
    if (keyword == "import" || keyword == "from") {
      if (parse_import(toks, 0, text_, [&](const Imported& item) { imported(toks, item); }) > 0)
        return;
    }
    const Summary summary = names(toks, toks.size());
    if (keyword == "global" && in_forward()) {
      for (size_t i = 1; i < toks.size(); ++i)
        if (toks[i].kind == Kind::Name)
          report(Pattern::output_cache, toks[i], kGlobalInForward, text_(toks[i]));
    }
    if (Context* except = active_except(); except != nullptr && !except->reported) {
      if (summary.torch_call != nullptr) {
        report(Pattern::torch_fallback, toks[0], kFallbackCall, summary.torch_call_name);
        except->reported = true;
      } else if (except->broad && keyword == "return" && returns_computed_value(toks)) {
        // Only a broad except: `except KeyError: return default` is ordinary Python.
        report(Pattern::torch_fallback, toks[0], kFallbackReturn, {});
        except->reported = true;
      }
    }
    if (keyword == "return" && in_forward() && toks.size() >= 3 && toks[1].kind == Kind::Name &&
        text_.op(toks[2], "(")) {
      const std::string name(text_(toks[1]));
      if (facts_.plain_classes.count(name) != 0)
        report(Pattern::tensor_subclass, toks[1], kCustomReturn, name);
    }
    assignment(toks);
  }

  // `return x`, `return a @ b`: anything but nothing, None or a literal (a probe like
  // `except ImportError: return False` is no fallback).
  bool returns_computed_value(std::span<const Token> toks) const {
    if (toks.size() < 2)
      return false;
    size_t i = 1;
    if (toks.size() == 3 && text_.op(toks[1], "-"))
      i = 2;
    if (i + 1 != toks.size())
      return true;
    const Token& value = toks[i];
    if (value.kind == Kind::Num || value.kind == Kind::Str)
      return false;
    const std::string_view word = text_(value);
    return !(word == "None" || word == "True" || word == "False");
  }

  void imported(std::span<const Token> toks, const Imported& item) {
    const Token& at = toks[item.token];
    const std::string_view last = std::string_view(item.path).substr(item.path.rfind('.') + 1);
    if (last == "Model" && !item.local.empty())
      report(Pattern::reference_call, at, kReferenceImport, item.path);
    if (item.relative)
      return;
    const Rule* rule = match_module(item.path);
    if (rule != nullptr && (rule->flags & kCall) == 0)
      report(rule->pattern, at, rule->reason, item.path);
  }

  // -- names --------------------------------------------------------------------------------

  Facts::Canon canonical(std::span<const Token> toks, const Dotted& d) const {
    std::array<std::string_view, Dotted::kMaxParts> parts;
    for (size_t k = 0; k < d.count; ++k)
      parts[k] = text_(toks[d.index[k]]);
    return facts_.canonical(std::span<const std::string_view>(parts.data(), d.count));
  }

  // Every name in `toks` against the rules; `skip` is a definition's own name.
  Summary names(std::span<const Token> toks, size_t skip) {
    Summary summary;
    int depth = 0;
    const size_t n = toks.size();
    for (size_t i = 0; i < n; ++i) {
      const Token& t = toks[i];
      if (t.kind == Kind::Op) {
        const std::string_view op = text_(t);
        if (op == "(" || op == "[" || op == "{")
          ++depth;
        else if ((op == ")" || op == "]" || op == "}") && depth > 0)
          --depth;
        continue;
      }
      if (t.kind != Kind::Name || i == skip)
        continue;
      const std::string_view word = text_(t);
      if (has_non_ascii(word))
        report(Pattern::unicode_identifier, t, kUnicode, word);
      const bool call_follows = i + 1 < n && text_.op(toks[i + 1], "(");
      if (i > 0 && text_.op(toks[i - 1], ".")) {
        attribute(t, word, call_follows);
        continue;
      }
      if (is_keyword(word))
        continue;
      const Dotted d = parse_dotted(toks, i, text_);
      const bool call = d.end < n && text_.op(toks[d.end], "(");
      if (depth > 0 && d.count == 1 && d.end < n && text_.op(toks[d.end], "="))
        continue; // a keyword argument: f(open=...)
      // The whole name first: "os.fork" says more than ".fork" on the same line.
      dotted_name(toks, d, call, summary);
      for (size_t k = 1; k < d.count; ++k) {
        const Token& part = toks[d.index[k]];
        attribute(part, text_(part), k + 1 == d.count && call);
      }
      i = d.end - 1;
    }
    return summary;
  }

  void attribute(const Token& at, std::string_view name, bool call) {
    const Rule* rule = find_rule(attribute_rules(), name);
    if (rule != nullptr && ((rule->flags & kCall) == 0 || call))
      report(rule->pattern, at, rule->reason, "." + std::string(name));
  }

  void dotted_name(std::span<const Token> toks, const Dotted& d, bool call, Summary& summary) {
    const Token& first = toks[d.index[0]];
    const std::string_view root = text_(first);
    const Facts::Canon c = canonical(toks, d);
    if (root == "Model" && facts_.defined.count("Model") == 0) {
      // Imported or not, a Model this source does not define is the reference's.
      report(Pattern::reference_call, first, kReference, root);
      if (call && summary.torch_call == nullptr) {
        summary.torch_call = &first;
        summary.torch_call_name = "Model";
      }
    }
    if (c.bound) {
      if (const Rule* rule = match_module(c.path);
          rule != nullptr && ((rule->flags & kCall) == 0 || call))
        report(rule->pattern, first, rule->reason, c.path);
      if (call && summary.torch_call == nullptr && is_torch_compute(c.path)) {
        summary.torch_call = &first;
        summary.torch_call_name = c.path;
      }
      return;
    }
    if (const Rule* rule = find_rule(builtin_rules(), root);
        rule != nullptr && ((rule->flags & kCall) == 0 || (call && d.count == 1)))
      report(rule->pattern, first, rule->reason, root);
    if ((root == "setattr" || root == "delattr") && call && d.count == 1)
      setattr_call(toks, d.end + 1, first);
  }

  // setattr(target, "name", value): an assignment spelled as a call.
  void setattr_call(std::span<const Token> toks, size_t arg, const Token& at) {
    if (arg >= toks.size() || toks[arg].kind != Kind::Name)
      return;
    const Dotted d = parse_dotted(toks, arg, text_);
    const Facts::Canon target = canonical(toks, d);
    std::string path = target.path;
    if (d.end + 1 < toks.size() && text_.op(toks[d.end], ",") &&
        toks[d.end + 1].kind == Kind::Str && is_dotted_identifier(text_(toks[d.end + 1]))) {
      path += '.';
      path += text_(toks[d.end + 1]);
    }
    if (text_(toks[arg]) == "self") {
      if (in_forward())
        report(Pattern::output_cache, at, kSelfInForward, path);
      return;
    }
    if (target.bound)
      module_target(path, at);
  }

  // -- assignments --------------------------------------------------------------------------

  void assignment(std::span<const Token> toks) {
    int depth = 0;
    size_t last_assign = toks.size();
    std::vector<size_t> assigns;
    for (size_t i = 0; i < toks.size(); ++i) {
      if (toks[i].kind != Kind::Op)
        continue;
      const std::string_view op = text_(toks[i]);
      if (op == "(" || op == "[" || op == "{") {
        ++depth;
      } else if ((op == ")" || op == "]" || op == "}") && depth > 0) {
        --depth;
      } else if (depth == 0 && op.size() >= 1 && op.back() == '=' && op != "==" && op != "!=" &&
                 op != "<=" && op != ">=") {
        if (op != "=" && op != ":=") { // augmented: x += 1 has one target
          if (assigns.empty())
            assigns.push_back(i);
          break;
        }
        if (op == "=")
          assigns.push_back(i);
      }
    }
    if (assigns.empty())
      return;
    last_assign = assigns.back();
    const auto rhs = toks.subspan(last_assign + 1);
    size_t start = 0;
    for (size_t a : assigns) {
      // Targets separated by top-level commas: a.b, c = ...
      size_t element = start;
      depth = 0;
      for (size_t i = start; i <= a; ++i) {
        if (i < a && toks[i].kind == Kind::Op) {
          const std::string_view op = text_(toks[i]);
          if (op == "(" || op == "[" || op == "{")
            ++depth;
          else if ((op == ")" || op == "]" || op == "}") && depth > 0)
            --depth;
          if (!(depth == 0 && op == ","))
            continue;
        } else if (i < a) {
          continue;
        }
        if (i > element)
          target(toks.subspan(element, i - element), rhs);
        element = i + 1;
      }
      start = a + 1;
    }
  }

  void target(std::span<const Token> t, std::span<const Token> rhs) {
    for (size_t i = 0; i < t.size(); ++i) // x: Dict[str, int] = ... is judged by its name
      if (text_.op(t[i], ":")) {
        t = t.subspan(0, i);
        break;
      }
    size_t b = 0;
    if (b < t.size() && text_.op(t[b], "*"))
      ++b;
    if (b >= t.size() || t[b].kind != Kind::Name || is_keyword(text_(t[b])))
      return;
    const Dotted d = parse_dotted(t, b, text_);
    size_t k = d.end;
    bool subscript = false;
    while (k < t.size() && text_.op(t[k], "[")) {
      k = matching(t, k, t.size(), text_) + 1;
      subscript = true;
    }
    const Token& at = t[b];
    if (k < t.size()) {
      // getattr(torch, "cuda").synchronize = f, type(m).forward = f: judged by the last name.
      if (t.size() >= 2 && t.back().kind == Kind::Name && text_.op(t[t.size() - 2], ".")) {
        const std::string_view last = text_(t.back());
        const std::string subject = "." + std::string(last);
        if (last == "forward" || last == "__call__")
          report(Pattern::monkeypatch, at, kForwardAssign, subject);
        else if (last == "__class__")
          report(Pattern::tensor_subclass, at, kClassAssign, subject);
        else if (is_timing_attribute(last))
          report(Pattern::timing_patch, at, kTimingAssign, subject);
      }
      return;
    }
    const std::string_view root = text_(at);
    if (d.count == 1) {
      if (root == "__builtins__")
        report(Pattern::monkeypatch, at, kBuiltinsAssign, root);
      else if (!subscript && (module_level() || class_body()) && !is_dunder(root) &&
               is_empty_container(rhs))
        report(Pattern::output_cache, at, kContainer, root);
      return;
    }
    const std::string written = join(t, d, text_);
    const std::string_view last = text_(t[d.index[d.count - 1]]);
    if (last == "__class__") {
      report(Pattern::tensor_subclass, at, kClassAssign, written);
      return;
    }
    if (root == "self") {
      if (in_forward())
        report(Pattern::output_cache, at, kSelfInForward, written);
      else if (!subscript && is_empty_container(rhs))
        report(Pattern::output_cache, at, kContainer, written);
      return;
    }
    if (last == "forward" || last == "__call__") {
      report(Pattern::monkeypatch, at, kForwardAssign, written);
      return;
    }
    if (last == "__code__" || last == "__defaults__" || last == "__kwdefaults__") {
      report(Pattern::monkeypatch, at, kPatchAssign, written);
      return;
    }
    const Facts::Canon c = canonical(t, d);
    if (c.bound)
      module_target(c.path, at);
  }

  // An assignment to something a module owns.
  void module_target(const std::string& path, const Token& at) {
    for (std::string_view stream : {"sys.stdout", "sys.stderr", "sys.stdin", "sys.__stdout__",
                                    "sys.__stderr__", "sys.__stdin__"})
      if (starts_with_path(path, stream)) {
        report(Pattern::descriptor_write, at, kStdoutAssign, path);
        return;
      }
    if (starts_with_path(path, "os.environ"))
      return; // what matters is which variable: LD_PRELOAD is caught in the string
    if (starts_with_path(path, "torch.backends"))
      report(Pattern::torch_setting, at, kSettingAssign, path);
    else if (is_timing_path(path))
      report(Pattern::timing_patch, at, kTimingAssign, path);
    else if (starts_with_path(path, "builtins"))
      report(Pattern::monkeypatch, at, kBuiltinsAssign, path);
    else
      report(Pattern::monkeypatch, at, kPatchAssign, path);
  }

  static bool is_dunder(std::string_view name) {
    return name.size() > 4 && name.substr(0, 2) == "__" && name.substr(name.size() - 2) == "__";
  }

  // {}, [], dict(), OrderedDict(), defaultdict(list)...
  bool is_empty_container(std::span<const Token> rhs) const {
    if (rhs.size() == 2)
      return (text_.op(rhs[0], "{") && text_.op(rhs[1], "}")) ||
             (text_.op(rhs[0], "[") && text_.op(rhs[1], "]"));
    if (rhs.empty() || rhs[0].kind != Kind::Name)
      return false;
    const Dotted d = parse_dotted(rhs, 0, text_);
    if (d.end >= rhs.size() || !text_.op(rhs[d.end], "(") ||
        matching(rhs, d.end, rhs.size(), text_) + 1 != rhs.size())
      return false;
    static const std::unordered_set<std::string_view> kContainers = {"dict",
                                                                     "list",
                                                                     "set",
                                                                     "OrderedDict",
                                                                     "defaultdict",
                                                                     "deque",
                                                                     "Counter",
                                                                     "WeakValueDictionary",
                                                                     "WeakKeyDictionary"};
    return kContainers.count(text_(rhs[d.index[d.count - 1]])) != 0;
  }

  // -- C++ in strings -----------------------------------------------------------------------

  void copy_to_cxx(const Token& t, bool raw) {
    if (cxx_.empty()) {
      cxx_.assign(src_.size(), ' ');
      for (size_t i = src_.find('\n'); i != std::string_view::npos; i = src_.find('\n', i + 1))
        cxx_[i] = '\n';
    }
    const size_t begin = t.begin;
    const size_t end = std::min<size_t>(t.begin + t.len, src_.size());
    for (size_t i = begin; i < end; ++i) {
      const char c = src_[i];
      if (!raw && c == '\\' && i + 1 < end) {
        // "\n" in a Python string is a newline in the C++ it holds: without it, a `//` comment
        // would hide the rest of a one-line source.
        const char escaped = src_[i + 1];
        cxx_[i] = escaped == 'n' ? ' ' : c;
        cxx_[i + 1] = escaped == 'n' ? '\x02' : escaped;
        ++i;
        continue;
      }
      cxx_[i] = c;
    }
    if (begin > 0 && src_[begin - 1] != '\n')
      cxx_[begin - 1] = '\x01';
    if (end < src_.size() && src_[end] != '\n')
      cxx_[end] = '\x01';
  }

  std::string_view src_;
  Text text_;
  const Facts& facts_;
  Findings& out_;
  std::string& cxx_;
  std::vector<Context> contexts_;
};

} // namespace

void scan_python(std::string_view source, Findings& out, std::string& cxx_text) {
  cxx_text.clear();
  Facts facts;
  {
    Collector collector(source, facts);
    Lexer(source, collector).run();
  }
  facts.resolve();
  Analyzer analyzer(source, facts, out, cxx_text);
  Lexer(source, analyzer).run();
}

bool looks_like_python(std::string_view source) {
  constexpr size_t kMaxLines = 2000;
  size_t lines = 0;
  for (size_t pos = 0; pos < source.size() && lines < kMaxLines; ++lines) {
    size_t end = source.find('\n', pos);
    if (end == std::string_view::npos)
      end = source.size();
    std::string_view line = source.substr(pos, end - pos);
    pos = end + 1;
    while (!line.empty() && is_blank(static_cast<unsigned char>(line.front())))
      line.remove_prefix(1);
    while (!line.empty() && is_blank(static_cast<unsigned char>(line.back())))
      line.remove_suffix(1);
    if (line.empty())
      continue;
    const auto starts = [&](std::string_view prefix) {
      return line.substr(0, prefix.size()) == prefix;
    };
    for (std::string_view directive :
         {"#include", "#define", "#pragma", "#if", "#ifdef", "#ifndef", "//", "/*"})
      if (starts(directive))
        return false;
    if (line.front() == '#')
      continue; // a Python comment, or a directive this list does not name
    if (starts("import ") || starts("def ") || starts("async def ") || starts("\"\"\"") ||
        starts("'''") || (starts("from ") && line.find(" import ") != std::string_view::npos) ||
        (starts("class ") && line.back() == ':') ||
        (line.size() > 1 && line[0] == '@' && is_ident_start(line[1])))
      return true;
    for (std::string_view cxx : {"__global__", "__device__", "template", "extern ", "namespace ",
                                 "typedef ", "struct ", "using ", "static "})
      if (starts(cxx))
        return false;
  }
  return false;
}

} // namespace keval::checks::detail
