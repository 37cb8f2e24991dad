#include "checks/source_references.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <unordered_map>

namespace keval::checks {

namespace {

// What stands for a literal's token: a string, character or header-name literal is one token, so
// `f("x")` is not `f()`, but what it holds is never compared. No real token starts with 0x01.
constexpr std::string_view kLiteral = "\x01literal";

enum class Language { none, cxx, python };

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// Bytes of UTF-8 sequences count as identifier characters, as compilers and Python take them.
bool identifier_start(char c, Language language) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80 || (c == '$' && language == Language::cxx);
}

bool identifier_char(char c, Language language) {
  return identifier_start(c, language) || is_digit(c);
}

char lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

Language language_of(std::string_view path) {
  const size_t slash = path.rfind('/');
  const std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  const size_t dot = name.rfind('.');
  if (dot == std::string_view::npos || dot == 0)
    return Language::none;
  std::string extension(name.substr(dot + 1));
  std::transform(extension.begin(), extension.end(), extension.begin(), lower);
  static constexpr std::array<std::string_view, 14> kCxx = {
      "cu", "cuh", "c", "cc", "cpp", "cxx", "c++", "h", "hh", "hpp", "hxx", "inl", "ipp", "tpp"};
  if (std::find(kCxx.begin(), kCxx.end(), extension) != kCxx.end())
    return Language::cxx;
  return extension == "py" ? Language::python : Language::none;
}

// The longest of `candidates` (longest first) that `text` has at `at`, else one byte.
template <size_t N>
size_t punctuator_length(std::string_view text, size_t at,
                         const std::array<std::string_view, N>& candidates) {
  for (const std::string_view p : candidates)
    if (text.compare(at, p.size(), p) == 0)
      return p.size();
  return 1;
}

// ---------------------------------------------------------------------------------------------
// C++

// Translation phase 2: backslash-newline joins lines (also with \r\n, and, as GCC allows, with
// blanks between the backslash and the newline).
std::string splice_lines(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\') {
      size_t j = i + 1;
      while (j < text.size() && (text[j] == ' ' || text[j] == '\t'))
        ++j;
      if (j < text.size() && text[j] == '\r')
        ++j;
      if (j < text.size() && text[j] == '\n') {
        i = j;
        continue;
      }
    }
    out += text[i];
  }
  return out;
}

bool cxx_encoding_prefix(std::string_view word) {
  return word == "L" || word == "u" || word == "U" || word == "u8" || word == "R" || word == "LR" ||
         word == "uR" || word == "UR" || word == "u8R";
}

// A "..." or '...' literal whose quote is at `at`: where it ends. An unterminated one ends at the
// end of its line, as the compiler's diagnostic would have it.
size_t skip_quoted(std::string_view s, size_t at) {
  const char quote = s[at];
  size_t k = at + 1;
  while (k < s.size()) {
    if (s[k] == '\\')
      k += 2;
    else if (s[k] == quote)
      return k + 1;
    else if (s[k] == '\n')
      return k;
    else
      ++k;
  }
  return s.size();
}

// R"delim( ... )delim" whose quote is at `at`; a malformed delimiter reads as a plain string.
size_t skip_raw(std::string_view s, size_t at) {
  size_t open = at + 1;
  while (open < s.size() && open - at - 1 <= 16 && s[open] != '(') {
    const char c = s[open];
    if (c == ' ' || c == ')' || c == '\\' || c == '\t' || c == '\v' || c == '\f' || c == '\n' ||
        c == '\r' || c == '"')
      return skip_quoted(s, at);
    ++open;
  }
  if (open >= s.size() || s[open] != '(')
    return skip_quoted(s, at);
  std::string terminator = ")";
  terminator.append(s.substr(at + 1, open - at - 1));
  terminator += '"';
  const size_t end = s.find(terminator, open + 1);
  return end == std::string_view::npos ? s.size() : end + terminator.size();
}

constexpr std::array<std::string_view, 29> kCxxPunctuators = {
    // CUDA's launch brackets first, then C++'s (longest first).
    "<<<", ">>>", "<<=", ">>=", "<=>", "...", "->*", "::", "->", "++", "--", "<<", ">>", "<=", ">=",
    "==",  "!=",  "&&",  "||",  "+=",  "-=",  "*=",  "/=", "%=", "&=", "|=", "^=", "##", ".*"};

// Calls emit(token) for each token of `s` (already spliced): identifiers, pp-numbers and
// punctuators as written, literals as kLiteral; comments and whitespace are skipped.
template <typename Emit> void lex_cxx(std::string_view s, Emit&& emit) {
  constexpr Language cxx = Language::cxx;
  // Where the line stands: `#` first on it starts a directive; after `#include` (or include_next,
  // import), a `<` opens a header name.
  enum class Directive { none, hash, include, other } directive = Directive::none;
  bool line_start = true;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '\n') {
      line_start = true;
      directive = Directive::none;
      ++i;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f') {
      ++i;
      continue;
    }
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '/') {
      i = std::min(s.find('\n', i), s.size());
      continue;
    }
    if (c == '/' && i + 1 < s.size() && s[i + 1] == '*') {
      // A comment is one space (phase 3): a newline inside it does not end a directive.
      const size_t end = s.find("*/", i + 2);
      i = end == std::string_view::npos ? s.size() : end + 2;
      continue;
    }
    const bool first_on_line = line_start;
    line_start = false;
    const Directive previous = directive;
    if (directive == Directive::hash || directive == Directive::include)
      directive = Directive::other;

    if (identifier_start(c, cxx)) {
      size_t j = i + 1;
      while (j < s.size() && identifier_char(s[j], cxx))
        ++j;
      const std::string_view word = s.substr(i, j - i);
      if (j < s.size() && (s[j] == '"' || s[j] == '\'') && cxx_encoding_prefix(word)) {
        i = word.back() == 'R' ? (s[j] == '"' ? skip_raw(s, j) : j) : skip_quoted(s, j);
        if (i == j) { // R'x': the identifier R, then a character literal
          emit(word);
          continue;
        }
        emit(kLiteral);
        continue;
      }
      if (previous == Directive::hash &&
          (word == "include" || word == "include_next" || word == "import"))
        directive = Directive::include;
      emit(word);
      i = j;
      continue;
    }
    if (is_digit(c) || (c == '.' && i + 1 < s.size() && is_digit(s[i + 1]))) {
      size_t j = i + 1;
      while (j < s.size()) {
        const char d = s[j];
        if ((d == '+' || d == '-') && (lower(s[j - 1]) == 'e' || lower(s[j - 1]) == 'p'))
          ++j;
        else if (d == '\'' && j + 1 < s.size() && identifier_char(s[j + 1], cxx))
          j += 2; // a digit separator: 1'000'000
        else if (identifier_char(d, cxx) || d == '.')
          ++j;
        else
          break;
      }
      emit(s.substr(i, j - i));
      i = j;
      continue;
    }
    if (c == '"' || c == '\'') {
      i = skip_quoted(s, i);
      emit(kLiteral);
      continue;
    }
    if (c == '<' && previous == Directive::include) {
      // <cublas_v2.h>: a header name, not the identifiers in it.
      const size_t end = s.find_first_of(">\n", i + 1);
      i = end == std::string_view::npos ? s.size() : s[end] == '>' ? end + 1 : end;
      emit(kLiteral);
      continue;
    }
    if (c == '#' && first_on_line)
      directive = Directive::hash;
    const size_t length = punctuator_length(s, i, kCxxPunctuators);
    emit(s.substr(i, length));
    i += length;
  }
}

// ---------------------------------------------------------------------------------------------
// Python

struct StringPrefix {
  bool raw = false;
  bool formatted = false; // f or t: replacement fields hold expressions with strings of their own
};

// r b u f t, rb br fr rf tr rt, in any case.
std::optional<StringPrefix> python_string_prefix(std::string_view word) {
  if (word.empty() || word.size() > 2)
    return std::nullopt;
  StringPrefix prefix;
  int bytes = 0;
  int unicode = 0;
  for (const char c : word) {
    switch (lower(c)) {
    case 'r':
      if (prefix.raw)
        return std::nullopt;
      prefix.raw = true;
      break;
    case 'f':
    case 't':
      if (prefix.formatted)
        return std::nullopt;
      prefix.formatted = true;
      break;
    case 'b':
      ++bytes;
      break;
    case 'u':
      ++unicode;
      break;
    default:
      return std::nullopt;
    }
  }
  if (unicode > 0 && word.size() > 1)
    return std::nullopt;
  if (bytes > 1 || (bytes > 0 && prefix.formatted))
    return std::nullopt;
  return prefix;
}

// Nested f-strings deeper than this are skipped as plain strings: a bound on recursion that no
// real source reaches (Python itself stops far lower).
constexpr int kMaxFStringDepth = 32;

size_t skip_python_string(std::string_view s, size_t at, StringPrefix prefix, int depth);
size_t skip_replacement_field(std::string_view s, size_t k, char quote, bool triple, int depth);

// After the `{` of a replacement field in a string quoted by `quote` (three of them when
// `triple`): where the field ends, past its `}`. Brackets nest; a string (of any quote, as Python
// 3.12 allows) is skipped whole; `:` at the top level starts the format spec, literal text with
// nested fields, which the enclosing string's quote ends as it ends the string.
size_t skip_replacement_field(std::string_view s, size_t k, char quote, bool triple, int depth) {
  int brackets = 0;
  bool spec = false;
  while (k < s.size()) {
    const char c = s[k];
    if (spec) {
      if (c == '}')
        return k + 1;
      if (c == '{' && depth + 1 < kMaxFStringDepth) {
        k = skip_replacement_field(s, k + 1, quote, triple, depth + 1);
        continue;
      }
      if ((c == quote && (!triple || s.compare(k, 3, std::string(3, quote)) == 0)) ||
          (c == '\n' && !triple))
        return k; // the string ends here (or is broken): its own loop sees it
      k += c == '\\' ? 2 : 1;
      continue;
    }
    if (c == '(' || c == '[' || c == '{') {
      ++brackets;
      ++k;
    } else if (c == ')' || c == ']') {
      brackets = std::max(0, brackets - 1);
      ++k;
    } else if (c == '}') {
      if (brackets == 0)
        return k + 1;
      --brackets;
      ++k;
    } else if (c == ':' && brackets == 0 && !(k + 1 < s.size() && s[k + 1] == '=')) {
      spec = true;
      ++k;
    } else if (c == '"' || c == '\'') {
      k = skip_python_string(s, k, {}, depth + 1);
    } else if (identifier_start(c, Language::python)) {
      size_t j = k + 1;
      while (j < s.size() && identifier_char(s[j], Language::python))
        ++j;
      const auto prefix = j < s.size() && (s[j] == '"' || s[j] == '\'')
                              ? python_string_prefix(s.substr(k, j - k))
                              : std::nullopt;
      k = prefix ? skip_python_string(s, j, *prefix, depth + 1) : j;
    } else if (c == '#') {
      k = std::min(s.find('\n', k), s.size());
    } else {
      ++k;
    }
  }
  return s.size();
}

// A string literal whose (first) quote is at `at`: where it ends. A single-quoted one that is not
// closed ends at the end of its line.
size_t skip_python_string(std::string_view s, size_t at, StringPrefix prefix, int depth) {
  const char quote = s[at];
  const bool triple = s.compare(at, 3, std::string(3, quote)) == 0;
  const bool fields = prefix.formatted && depth < kMaxFStringDepth;
  size_t k = at + (triple ? 3 : 1);
  while (k < s.size()) {
    const char c = s[k];
    if (c == '\\') {
      k += 2; // also in a raw string, where \" does not end it
    } else if (c == quote && (!triple || s.compare(k, 3, std::string(3, quote)) == 0)) {
      return k + (triple ? 3 : 1);
    } else if (c == '\n' && !triple) {
      return k;
    } else if (fields && c == '{') {
      k = k + 1 < s.size() && s[k + 1] == '{'
              ? k + 2
              : skip_replacement_field(s, k + 1, quote, triple, depth);
    } else {
      ++k;
    }
  }
  return s.size();
}

constexpr std::array<std::string_view, 25> kPythonPunctuators = {
    "**=", "//=", ">>=", "<<=", "...", "**", "//", "<<", ">>", "<=", ">=", "==", "!=",
    "->",  ":=",  "+=",  "-=",  "*=",  "/=", "%=", "&=", "|=", "^=", "@=", "<>"};

// As lex_cxx, for Python: `#` comments, string prefixes, no line splicing (a backslash does not
// continue a token there).
template <typename Emit> void lex_python(std::string_view s, Emit&& emit) {
  constexpr Language py = Language::python;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f' || c == '\\') {
      ++i;
      continue;
    }
    if (c == '#') {
      i = std::min(s.find('\n', i), s.size());
      continue;
    }
    if (identifier_start(c, py)) {
      size_t j = i + 1;
      while (j < s.size() && identifier_char(s[j], py))
        ++j;
      const std::string_view word = s.substr(i, j - i);
      const auto prefix =
          j < s.size() && (s[j] == '"' || s[j] == '\'') ? python_string_prefix(word) : std::nullopt;
      if (prefix) {
        i = skip_python_string(s, j, *prefix, 0);
        emit(kLiteral);
      } else {
        emit(word);
        i = j;
      }
      continue;
    }
    if (is_digit(c) || (c == '.' && i + 1 < s.size() && is_digit(s[i + 1]))) {
      size_t j = i + 1;
      while (j < s.size()) {
        const char d = s[j];
        if ((d == '+' || d == '-') && lower(s[j - 1]) == 'e' && lower(s[i + 1]) != 'x')
          ++j;
        else if (identifier_char(d, py) || d == '.')
          ++j;
        else
          break;
      }
      emit(s.substr(i, j - i));
      i = j;
      continue;
    }
    if (c == '"' || c == '\'') {
      i = skip_python_string(s, i, {}, 0);
      emit(kLiteral);
      continue;
    }
    const size_t length = punctuator_length(s, i, kPythonPunctuators);
    emit(s.substr(i, length));
    i += length;
  }
}

// ---------------------------------------------------------------------------------------------
// Matching

// Aho-Corasick over tokens: which of the references' token sequences occur in a token stream, in
// time linear in the stream plus the references, however the references overlap.
class TokenMatcher {
public:
  TokenMatcher(const std::vector<std::string>& references, Language language)
      : patterns_(references.size()), found_(references.size(), false) {
    for (size_t p = 0; p < references.size(); ++p) {
      auto collect = [&](std::string_view token) { patterns_[p].emplace_back(token); };
      if (language == Language::cxx)
        lex_cxx(splice_lines(references[p]), collect);
      else
        lex_python(references[p], collect);
    }
    // The vocabulary's keys point into patterns_, which no longer changes.
    nodes_.emplace_back();
    for (size_t p = 0; p < patterns_.size(); ++p) {
      if (patterns_[p].empty())
        continue; // no tokens: never found
      int32_t node = 0;
      for (const std::string& token : patterns_[p]) {
        const auto [symbol, added] =
            vocabulary_.try_emplace(token, static_cast<int32_t>(vocabulary_.size()));
        const auto [edge, inserted] =
            edges_.try_emplace(key(node, symbol->second), static_cast<int32_t>(nodes_.size()));
        if (inserted)
          nodes_.emplace_back();
        node = edge->second;
      }
      nodes_[node].patterns.push_back(p);
    }
    link();
  }

  // The vocabulary points into patterns_: a matcher stays where it was built.
  TokenMatcher(const TokenMatcher&) = delete;
  TokenMatcher& operator=(const TokenMatcher&) = delete;

  // Tokens of one file end here: no match spans two files.
  void restart() { state_ = 0; }

  void feed(std::string_view token) {
    const auto symbol = vocabulary_.find(token);
    if (symbol == vocabulary_.end()) {
      state_ = 0;
      return;
    }
    for (;;) {
      const auto edge = edges_.find(key(state_, symbol->second));
      if (edge != edges_.end()) {
        state_ = edge->second;
        break;
      }
      if (state_ == 0)
        break;
      state_ = nodes_[state_].fail;
    }
    // Report along the output links; a node reported once needs no second visit, nor do the
    // nodes after it, which were reported with it.
    for (int32_t n = nodes_[state_].patterns.empty() ? nodes_[state_].output : state_;
         n > 0 && !nodes_[n].reported; n = nodes_[n].output) {
      nodes_[n].reported = true;
      for (const size_t p : nodes_[n].patterns)
        found_[p] = true;
    }
  }

  const std::vector<bool>& found() const { return found_; }

private:
  struct Node {
    int32_t fail = 0;
    int32_t output = 0; // the nearest proper suffix that ends a pattern; 0 when none
    bool reported = false;
    std::vector<size_t> patterns; // the references that end here
  };

  static uint64_t key(int32_t node, int32_t symbol) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(node)) << 32) |
           static_cast<uint32_t>(symbol);
  }

  // Failure and output links, breadth first over the trie's edges.
  void link() {
    std::vector<std::vector<std::pair<int32_t, int32_t>>> children(nodes_.size());
    for (const auto& [edge, child] : edges_)
      children[static_cast<size_t>(edge >> 32)].emplace_back(
          static_cast<int32_t>(edge & 0xffffffffu), child);
    std::vector<int32_t> queue;
    queue.push_back(0);
    for (size_t head = 0; head < queue.size(); ++head) {
      const int32_t parent = queue[head];
      for (const auto& [symbol, child] : children[static_cast<size_t>(parent)]) {
        int32_t fail = 0;
        if (parent != 0) {
          for (int32_t f = nodes_[parent].fail;; f = nodes_[f].fail) {
            const auto edge = edges_.find(key(f, symbol));
            if (edge != edges_.end()) {
              fail = edge->second;
              break;
            }
            if (f == 0)
              break;
          }
        }
        nodes_[child].fail = fail;
        nodes_[child].output = nodes_[fail].patterns.empty() ? nodes_[fail].output : fail;
        queue.push_back(child);
      }
    }
  }

  std::vector<std::vector<std::string>> patterns_;
  std::vector<bool> found_;
  std::unordered_map<std::string_view, int32_t> vocabulary_;
  std::unordered_map<uint64_t, int32_t> edges_;
  std::vector<Node> nodes_;
  int32_t state_ = 0;
};

std::string joined(std::vector<std::string>::const_iterator begin,
                   std::vector<std::string>::const_iterator end) {
  std::string out;
  for (auto name = begin; name != end; ++name) {
    if (name != begin)
      out += ", ";
    out += *name;
  }
  return out;
}

} // namespace

ReferenceCheck check_source_references(const std::vector<SourceFile>& files,
                                       const SourceReferences& refs) {
  ReferenceCheck check;
  if (refs.all.empty() && refs.any.empty())
    return check;

  std::vector<std::string> references = refs.all;
  references.insert(references.end(), refs.any.begin(), refs.any.end());
  std::vector<bool> found(references.size(), false);
  // One matcher per tokenizer, built when a file needs it: a reference is tokenized as the file
  // it is looked for in.
  std::optional<TokenMatcher> cxx;
  std::optional<TokenMatcher> python;
  for (const SourceFile& file : files) {
    const Language language = language_of(file.path);
    if (language == Language::none)
      continue;
    std::optional<TokenMatcher>& matcher = language == Language::cxx ? cxx : python;
    if (!matcher)
      matcher.emplace(references, language);
    matcher->restart();
    const std::string_view content =
        std::string_view(file.content).substr(0, kMaxReferenceScanBytes);
    auto feed = [&](std::string_view token) { matcher->feed(token); };
    if (language == Language::cxx)
      lex_cxx(splice_lines(content), feed);
    else
      lex_python(content, feed);
  }
  for (const auto* matcher : {&cxx, &python})
    if (*matcher)
      for (size_t p = 0; p < references.size(); ++p)
        found[p] = found[p] || (**matcher).found()[p];

  const size_t required = refs.all.size();
  for (size_t p = 0; p < required; ++p)
    if (!found[p])
      check.missing.push_back(references[p]);
  const size_t missing_required = check.missing.size();
  const bool any_found = refs.any.empty() || std::any_of(found.begin() + required, found.end(),
                                                         [](bool f) { return f; });
  if (!any_found)
    check.missing.insert(check.missing.end(), refs.any.begin(), refs.any.end());

  check.passed = check.missing.empty();
  if (missing_required > 0)
    check.message = "missing required names: " +
                    joined(check.missing.begin(), check.missing.begin() + missing_required);
  if (!any_found) {
    if (!check.message.empty())
      check.message += "; ";
    check.message += "none of: " + joined(refs.any.begin(), refs.any.end());
  }
  return check;
}

} // namespace keval::checks
