#include "checks/kernel_names.hpp"

#include "checks/static_scan.hpp"

#include <algorithm>
#include <cctype>

namespace keval::checks {

namespace {

bool identifier_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_';
}

bool identifier_char(char c) {
  return identifier_start(c) || std::isdigit(static_cast<unsigned char>(c)) != 0;
}

// Whether `word` occurs at `at` as a whole identifier.
bool word_at(std::string_view text, size_t at, std::string_view word) {
  return text.substr(at, word.size()) == word && (at == 0 || !identifier_char(text[at - 1])) &&
         (at + word.size() >= text.size() || !identifier_char(text[at + word.size()]));
}

void add(std::vector<std::string>& names, std::string_view name) {
  if (name.empty() || names.size() >= kMaxKernelNames)
    return;
  if (std::find(names.begin(), names.end(), name) == names.end())
    names.emplace_back(name);
}

// After `__global__`: the identifier right before the first '(' that does not open an attribute
// (`__launch_bounds__(256)`, `__attribute__((...))`, `__declspec(...)`); template arguments and
// return types are skipped along the way. Stops at ';', '{' or 512 bytes.
std::string_view cuda_kernel_name(std::string_view text, size_t from) {
  std::string_view last;
  size_t i = from;
  const size_t limit = std::min(text.size(), from + 512);
  while (i < limit) {
    const char c = text[i];
    if (c == ';' || c == '{')
      return {};
    if (identifier_start(c)) {
      size_t j = i;
      while (j < text.size() && identifier_char(text[j]))
        ++j;
      last = text.substr(i, j - i);
      i = j;
      continue;
    }
    if (c == '(') {
      if (last == "__launch_bounds__" || last == "__attribute__" || last == "__declspec" ||
          last == "__maxnreg__" || last == "__cluster_dims__") {
        int depth = 0; // skip the attribute's parentheses
        for (; i < limit; ++i) {
          depth += text[i] == '(' ? 1 : text[i] == ')' ? -1 : 0;
          if (depth == 0)
            break;
        }
        ++i;
        last = {};
        continue;
      }
      // A keyword there is a declaration this reader does not follow, not a name.
      for (const std::string_view keyword : {"void", "int", "float", "double", "char", "auto",
                                             "const", "static", "inline", "extern", "unsigned"})
        if (last == keyword)
          return {};
      return last;
    }
    ++i;
  }
  return {};
}

// After a `@triton.jit` / `@jit` / `@triton.autotune(...)` decorator: the name of the next `def`.
std::string_view python_def_name(std::string_view text, size_t from) {
  for (size_t at = text.find("def", from); at != std::string_view::npos && at < from + 4096;
       at = text.find("def", at + 3)) {
    if (!word_at(text, at, "def"))
      continue;
    size_t i = at + 3;
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t'))
      ++i;
    size_t j = i;
    while (j < text.size() && identifier_char(text[j]))
      ++j;
    return j > i && identifier_start(text[i]) ? text.substr(i, j - i) : std::string_view();
  }
  return {};
}

} // namespace

bool contains_identifier(std::string_view text, std::string_view identifier) {
  if (identifier.empty())
    return false;
  for (size_t at = text.find(identifier); at != std::string_view::npos;
       at = text.find(identifier, at + 1))
    if (word_at(text, at, identifier))
      return true;
  return false;
}

std::vector<std::string> defined_kernel_names(std::string_view source) {
  const std::string_view text = source.substr(0, kMaxScannedBytes);
  std::vector<std::string> names;
  for (size_t at = text.find("__global__"); at != std::string_view::npos;
       at = text.find("__global__", at + 10))
    if (word_at(text, at, "__global__"))
      add(names, cuda_kernel_name(text, at + 10));
  // Triton: a decorator line naming jit (triton.jit, tl.jit, @jit) or triton's autotune or
  // heuristics, which sit on top of a jit function.
  for (size_t at = text.find('@'); at != std::string_view::npos; at = text.find('@', at + 1)) {
    const size_t line_end = std::min(text.find('\n', at), text.size());
    const std::string_view decorator = text.substr(at, line_end - at);
    bool jit = false;
    for (const std::string_view word : {"jit", "autotune", "heuristics"})
      for (size_t k = decorator.find(word); k != std::string_view::npos && !jit;
           k = decorator.find(word, k + 1))
        jit = word_at(decorator, k, word);
    if (jit)
      add(names, python_def_name(text, line_end));
  }
  return names;
}

} // namespace keval::checks
