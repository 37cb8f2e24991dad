#include "plan/build_command.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <array>
#include <optional>
#include <set>

namespace keval::cuda_program {

namespace {

// Longer commands are refused: ComputeEval's are a line, and globs are matched word by word
// against every file.
constexpr size_t kMaxCommandBytes = 64u << 10;

// One shell word after quote removal; `quoted[i]` says whether text[i] was quoted or escaped (a
// quoted `*` is not a glob, a quoted `=` makes no assignment).
struct Word {
  std::string text;
  std::vector<bool> quoted;

  void add(char c, bool is_quoted) {
    text += c;
    quoted.push_back(is_quoted);
  }
};

using Words = std::vector<Word>;

std::string operator_reason(std::string_view op) {
  return "uses shell operators (" + std::string(op) + ")";
}

// POSIX sh's token recognition for one simple command of plain words; anything that would make
// it more (an operator, an expansion, a comment) is the reason it cannot be split.
std::variant<Words, std::string> shell_words(std::string_view s) {
  Words words;
  std::optional<Word> word; // the word being read, if any
  auto finish = [&] {
    if (word)
      words.push_back(std::move(*word));
    word.reset();
  };
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == ' ' || c == '\t') {
      finish();
      continue;
    }
    if (c == '\\') {
      if (i + 1 >= s.size()) { // a trailing backslash stays, as dash leaves it
        (word ? *word : word.emplace()).add('\\', true);
        continue;
      }
      if (s[i + 1] == '\n') { // a line continuation
        ++i;
        continue;
      }
      (word ? *word : word.emplace()).add(s[++i], true);
      continue;
    }
    if (c == '\n')
      return operator_reason("newline");
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      return std::string("has a control character");
    if (c == '&' || c == '|' || c == ';' || c == '<' || c == '>' || c == '(' || c == ')') {
      const bool doubled = i + 1 < s.size() && s[i + 1] == c && c != '(' && c != ')';
      return operator_reason(s.substr(i, doubled ? 2 : 1));
    }
    if (c == '$' || c == '`')
      return "uses shell expansion (" + std::string(1, c) + ")";
    if (c == '{' || c == '}')
      return "uses braces (" + std::string(1, c) + ")";
    if (!word && c == '#')
      return std::string("has a shell comment (#)");
    if (!word && c == '~')
      return std::string("uses tilde expansion (~)");
    if (c == '\'') {
      const size_t end = s.find('\'', i + 1);
      if (end == std::string_view::npos)
        return std::string("has an unterminated quote (')");
      Word& w = word ? *word : word.emplace();
      for (size_t k = i + 1; k < end; ++k)
        w.add(s[k], true);
      i = end;
      continue;
    }
    if (c == '"') {
      Word& w = word ? *word : word.emplace();
      size_t k = i + 1;
      for (; k < s.size() && s[k] != '"'; ++k) {
        if (s[k] == '$' || s[k] == '`')
          return "uses shell expansion (" + std::string(1, s[k]) + ")";
        if (s[k] == '\\' && k + 1 < s.size()) {
          const char next = s[k + 1];
          if (next == '\n') { // a line continuation, inside quotes too
            ++k;
            continue;
          }
          if (next == '$' || next == '`' || next == '"' || next == '\\') {
            w.add(next, true);
            ++k;
            continue;
          }
        }
        w.add(s[k], true);
      }
      if (k >= s.size())
        return std::string("has an unterminated quote (\")");
      i = k;
      continue;
    }
    (word ? *word : word.emplace()).add(c, false);
  }
  finish();
  return words;
}

bool has_glob(const Word& w) {
  for (size_t i = 0; i < w.text.size(); ++i)
    if (!w.quoted[i] && (w.text[i] == '*' || w.text[i] == '?' || w.text[i] == '['))
      return true;
  return false;
}

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

std::string basename(std::string_view path) {
  const size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

bool is_source(std::string_view path) {
  for (const std::string_view extension : {".cu", ".cpp", ".cc", ".cxx", ".c", ".C"})
    if (ends_with(path, extension) && path.size() > extension.size() &&
        path[path.size() - extension.size() - 1] != '/')
      return true;
  return false;
}

// .o, .a, .so and versioned .so.1.2: what nvcc hands the linker as it is.
bool is_link_input(std::string_view path) {
  const std::string name = basename(path);
  if (ends_with(name, ".o") || ends_with(name, ".a"))
    return name.size() > 2;
  size_t so = name.rfind(".so");
  while (so != std::string::npos && so > 0) {
    const std::string_view rest = std::string_view(name).substr(so + 3);
    if (std::all_of(rest.begin(), rest.end(),
                    [](char c) { return c == '.' || (c >= '0' && c <= '9'); }) &&
        (rest.empty() || rest[0] == '.'))
      return true;
    so = so == 0 ? std::string::npos : name.rfind(".so", so - 1);
  }
  return false;
}

// What sh's pathname expansion can see: the workspace's files and the folders they imply.
std::set<std::string> glob_candidates(const std::vector<std::string>& files) {
  std::set<std::string> candidates;
  for (const std::string& file : files) {
    candidates.insert(file);
    for (size_t slash = file.find('/'); slash != std::string::npos;
         slash = file.find('/', slash + 1))
      candidates.insert(file.substr(0, slash));
  }
  return candidates;
}

// The paths a glob word expands to, sorted (sh's order in the C locale); empty when it matches
// nothing, nullopt when it would look outside the workspace (absolute, or through ..), where this
// cannot tell.
std::optional<std::vector<std::string>> expand_glob(const Word& w,
                                                    const std::set<std::string>& candidates) {
  // fnmatch's pattern: quoted characters escaped, so only the unquoted ones are special.
  std::string pattern;
  for (size_t i = 0; i < w.text.size(); ++i) {
    const char c = w.text[i];
    if (w.quoted[i] && (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\'))
      pattern += '\\';
    pattern += c;
  }
  // ./test/*.cu expands to ./test/a.cu: match without the ./, give it back after.
  std::string prefix;
  while (pattern.compare(0, 2, "./") == 0) {
    size_t end = 2;
    while (end < pattern.size() && pattern[end] == '/')
      ++end;
    prefix += pattern.substr(0, end);
    pattern.erase(0, end);
  }
  if (pattern.empty() || pattern[0] == '/' || pattern == ".." ||
      pattern.compare(0, 3, "../") == 0 || pattern.find("/../") != std::string::npos ||
      ends_with(pattern, "/.."))
    return std::nullopt;
  std::vector<std::string> matches;
  for (const std::string& candidate : candidates)
    if (fnmatch(pattern.c_str(), candidate.c_str(), FNM_PATHNAME | FNM_PERIOD) == 0)
      matches.push_back(prefix + candidate);
  return matches;
}

// nvcc's options, by name without the dashes (nvcc takes a long or a short name after one dash
// or two): whether one takes a value, and why one makes the command unsplittable.
struct OptionRule {
  std::string_view name;
  bool takes_value = false;
  std::string_view refusal; // empty: allowed
};

constexpr std::string_view kCompilesOnly = "compiles only";
constexpr std::string_view kNoLink = "stops before linking";
constexpr std::string_view kDependencies = "generates dependencies";
constexpr std::string_view kDeviceLink = "device linking";
constexpr std::string_view kLto = "device link-time optimization";
constexpr std::string_view kNoBuild = "does not build";

constexpr std::array kOptionRules = {
    // What a single command does: none of these is one compile-and-link.
    OptionRule{"c", false, kCompilesOnly},
    OptionRule{"compile", false, kCompilesOnly},
    OptionRule{"E", false, "preprocesses only"},
    OptionRule{"preprocess", false, "preprocesses only"},
    OptionRule{"M", false, kDependencies},
    OptionRule{"generate-dependencies", false, kDependencies},
    OptionRule{"MM", false, kDependencies},
    OptionRule{"generate-nonsystem-dependencies", false, kDependencies},
    OptionRule{"MD", false, kDependencies},
    OptionRule{"generate-dependencies-with-compile", false, kDependencies},
    OptionRule{"MMD", false, kDependencies},
    OptionRule{"generate-nonsystem-dependencies-with-compile", false, kDependencies},
    OptionRule{"cuda", false, kNoLink},
    OptionRule{"cubin", false, kNoLink},
    OptionRule{"fatbin", false, kNoLink},
    OptionRule{"ptx", false, kNoLink},
    OptionRule{"optix-ir", false, kNoLink},
    OptionRule{"ltoir", false, kNoLink},
    OptionRule{"fdevice-syntax-only", false, kNoLink},
    OptionRule{"dc", false, kDeviceLink},
    OptionRule{"device-c", false, kDeviceLink},
    OptionRule{"dw", false, kDeviceLink},
    OptionRule{"device-w", false, kDeviceLink},
    OptionRule{"dlink", false, kDeviceLink},
    OptionRule{"device-link", false, kDeviceLink},
    OptionRule{"r", false, kDeviceLink},
    OptionRule{"relocatable-link", false, kDeviceLink},
    OptionRule{"dlto", false, kLto},
    OptionRule{"dlink-time-opt", false, kLto},
    OptionRule{"lto", false, kLto},
    OptionRule{"gen-opt-lto", false, kLto},
    OptionRule{"lib", false, "builds a library"},
    OptionRule{"shared", false, "builds a shared library"},
    OptionRule{"run", false, "runs the program"},
    OptionRule{"run-args", true, "runs the program"},
    OptionRule{"x", true, "forces the language of every input"},
    OptionRule{"dryrun", false, "only prints the commands"},
    OptionRule{"optf", true, "reads options from a file"},
    OptionRule{"options-file", true, "reads options from a file"},
    OptionRule{"h", false, kNoBuild},
    OptionRule{"help", false, kNoBuild},
    OptionRule{"V", false, kNoBuild},
    OptionRule{"version", false, kNoBuild},
    OptionRule{"code-ls", false, kNoBuild},
    OptionRule{"list-gpu-code", false, kNoBuild},
    OptionRule{"arch-ls", false, kNoBuild},
    OptionRule{"list-gpu-arch", false, kNoBuild},
    OptionRule{"clean", false, kNoBuild},
    OptionRule{"clean-targets", false, kNoBuild},
    OptionRule{"qpp-config", false, kNoBuild},
    // Flags: known, so that -lineinfo is not -l ineinfo, nor -objtemp an output file.
    OptionRule{"link", false, {}},
    OptionRule{"objtemp", false, {}},
    OptionRule{"objdir-as-tempdir", false, {}},
    OptionRule{"allow-unsupported-compiler", false, {}},
    OptionRule{"use-local-env", false, {}},
    OptionRule{"force-cl-env-setup", false, {}},
    OptionRule{"pg", false, {}},
    OptionRule{"profile", false, {}},
    OptionRule{"g", false, {}},
    OptionRule{"debug", false, {}},
    OptionRule{"G", false, {}},
    OptionRule{"device-debug", false, {}},
    OptionRule{"lineinfo", false, {}},
    OptionRule{"generate-line-info", false, {}},
    OptionRule{"noeh", false, {}},
    OptionRule{"no-exceptions", false, {}},
    OptionRule{"nohdinitlist", false, {}},
    OptionRule{"nohdmoveforward", false, {}},
    OptionRule{"no-host-device-initializer-list", false, {}},
    OptionRule{"no-host-device-move-forward", false, {}},
    OptionRule{"expt-relaxed-constexpr", false, {}},
    OptionRule{"extended-lambda", false, {}},
    OptionRule{"expt-extended-lambda", false, {}},
    OptionRule{"m64", false, {}},
    OptionRule{"forward-unknown-to-host-compiler", false, {}},
    OptionRule{"forward-unknown-to-host-linker", false, {}},
    OptionRule{"forward-unknown-opts", false, {}},
    OptionRule{"noprof", false, {}},
    OptionRule{"dont-use-profile", false, {}},
    OptionRule{"v", false, {}},
    OptionRule{"verbose", false, {}},
    OptionRule{"keep", false, {}},
    OptionRule{"save-temps", false, {}},
    OptionRule{"no-align-double", false, {}},
    OptionRule{"nodlink", false, {}},
    OptionRule{"no-device-link", false, {}},
    OptionRule{"use_fast_math", false, {}},
    OptionRule{"extra-device-vectorization", false, {}},
    OptionRule{"w", false, {}},
    OptionRule{"disable-warnings", false, {}},
    OptionRule{"keep-device-functions", false, {}},
    OptionRule{"src-in-ptx", false, {}},
    OptionRule{"source-in-ptx", false, {}},
    OptionRule{"restrict", false, {}},
    OptionRule{"Wreorder", false, {}},
    OptionRule{"Wdefault-stream-launch", false, {}},
    OptionRule{"Wmissing-launch-bounds", false, {}},
    OptionRule{"Wext-lambda-captures-this", false, {}},
    OptionRule{"Wno-deprecated-declarations", false, {}},
    OptionRule{"Wno-deprecated-gpu-targets", false, {}},
    OptionRule{"res-usage", false, {}},
    OptionRule{"resource-usage", false, {}},
    OptionRule{"ewp", false, {}},
    OptionRule{"extensible-whole-program", false, {}},
    OptionRule{"no-compress", false, {}},
    OptionRule{"astoolspatch", false, {}},
    OptionRule{"compile-as-tools-patch", false, {}},
    OptionRule{"err-no", false, {}},
    OptionRule{"display-error-number", false, {}},
    OptionRule{"no-err-no", false, {}},
    OptionRule{"no-display-error-number", false, {}},
    OptionRule{"aug-hls", false, {}},
    OptionRule{"augment-host-linker-script", false, {}},
    OptionRule{"reloc-ptx", false, {}},
    OptionRule{"relocatable-ptx", false, {}},
    OptionRule{"jobserver", false, {}},
    OptionRule{"MP", false, {}},
    OptionRule{"generate-dependency-targets", false, {}},
    // Options with a value (nvcc --help: <file>, <path>, {a|b}, ...); -rdc and -o are judged by
    // their value below.
    OptionRule{"o", true, {}},
    OptionRule{"output-file", true, {}},
    OptionRule{"rdc", true, {}},
    OptionRule{"relocatable-device-code", true, {}},
    OptionRule{"include", true, {}},
    OptionRule{"pre-include", true, {}},
    OptionRule{"l", true, {}},
    OptionRule{"library", true, {}},
    OptionRule{"D", true, {}},
    OptionRule{"define-macro", true, {}},
    OptionRule{"U", true, {}},
    OptionRule{"undefine-macro", true, {}},
    OptionRule{"I", true, {}},
    OptionRule{"include-path", true, {}},
    OptionRule{"isystem", true, {}},
    OptionRule{"system-include", true, {}},
    OptionRule{"L", true, {}},
    OptionRule{"library-path", true, {}},
    OptionRule{"odir", true, {}},
    OptionRule{"output-directory", true, {}},
    OptionRule{"ccbin", true, {}},
    OptionRule{"compiler-bindir", true, {}},
    OptionRule{"arbin", true, {}},
    OptionRule{"archiver-binary", true, {}},
    OptionRule{"cudart", true, {}},
    OptionRule{"cudadevrt", true, {}},
    OptionRule{"ldir", true, {}},
    OptionRule{"libdevice-directory", true, {}},
    OptionRule{"target-dir", true, {}},
    OptionRule{"target-directory", true, {}},
    OptionRule{"opt-info", true, {}},
    OptionRule{"optimization-info", true, {}},
    OptionRule{"O", true, {}},
    OptionRule{"optimize", true, {}},
    OptionRule{"Ofc", true, {}},
    OptionRule{"Ofast-compile", true, {}},
    OptionRule{"dopt", true, {}},
    OptionRule{"ftemplate-backtrace-limit", true, {}},
    OptionRule{"ftemplate-depth", true, {}},
    OptionRule{"std", true, {}},
    OptionRule{"m", true, {}},
    OptionRule{"machine", true, {}},
    OptionRule{"Xcompiler", true, {}},
    OptionRule{"compiler-options", true, {}},
    OptionRule{"Xlinker", true, {}},
    OptionRule{"linker-options", true, {}},
    OptionRule{"Xarchive", true, {}},
    OptionRule{"archive-options", true, {}},
    OptionRule{"Xptxas", true, {}},
    OptionRule{"ptxas-options", true, {}},
    OptionRule{"Xnvlink", true, {}},
    OptionRule{"nvlink-options", true, {}},
    OptionRule{"static-global-template-stub", true, {}},
    OptionRule{"device-entity-has-hidden-visibility", true, {}},
    OptionRule{"t", true, {}},
    OptionRule{"threads", true, {}},
    OptionRule{"split-compile", true, {}},
    OptionRule{"split-compile-extended", true, {}},
    OptionRule{"fdevice-time-trace", true, {}},
    OptionRule{"keep-dir", true, {}},
    OptionRule{"time", true, {}},
    OptionRule{"idp", true, {}},
    OptionRule{"input-drive-prefix", true, {}},
    OptionRule{"ddp", true, {}},
    OptionRule{"dependency-drive-prefix", true, {}},
    OptionRule{"dp", true, {}},
    OptionRule{"drive-prefix", true, {}},
    OptionRule{"MT", true, {}},
    OptionRule{"dependency-target-name", true, {}},
    OptionRule{"MF", true, {}},
    OptionRule{"dependency-output", true, {}},
    OptionRule{"arch", true, {}},
    OptionRule{"gpu-architecture", true, {}},
    OptionRule{"code", true, {}},
    OptionRule{"gpu-code", true, {}},
    OptionRule{"gencode", true, {}},
    OptionRule{"generate-code", true, {}},
    OptionRule{"e", true, {}},
    OptionRule{"entries", true, {}},
    OptionRule{"maxrregcount", true, {}},
    OptionRule{"ftz", true, {}},
    OptionRule{"prec-div", true, {}},
    OptionRule{"prec-sqrt", true, {}},
    OptionRule{"fmad", true, {}},
    OptionRule{"default-stream", true, {}},
    OptionRule{"Werror", true, {}},
    OptionRule{"diag-error", true, {}},
    OptionRule{"diag-suppress", true, {}},
    OptionRule{"diag-warn", true, {}},
    OptionRule{"hls", true, {}},
    OptionRule{"host-linker-script", true, {}},
    OptionRule{"brief-diag", true, {}},
    OptionRule{"brief-diagnostics", true, {}},
    OptionRule{"jtd", true, {}},
    OptionRule{"jump-table-density", true, {}},
    OptionRule{"device-stack-protector", true, {}},
    OptionRule{"compress-mode", true, {}},
    OptionRule{"frandom-seed", true, {}},
    OptionRule{"sanitize", true, {}},
};

// Short options of one letter take their value attached too: -Iinclude, -lcublas, -O3, -ofile.
constexpr std::string_view kAttachedLetters = "oIlLDUOxtme";

const OptionRule* find_rule(std::string_view name) {
  for (const OptionRule& rule : kOptionRules)
    if (rule.name == name)
      return &rule;
  return nullptr;
}

// An option word read: its rule (null for an option nvcc would pass on or reject itself) and its
// value when attached (-Iinc, -arch=sm_90, --output-file=x).
struct ParsedOption {
  const OptionRule* rule = nullptr;
  std::optional<std::string> value;
};

ParsedOption parse_option(const std::string& word) {
  const bool long_dashes = word.compare(0, 2, "--") == 0;
  const std::string body = word.substr(long_dashes ? 2 : 1);
  const size_t equals = body.find('=');
  if (equals != std::string::npos)
    if (const OptionRule* rule = find_rule(body.substr(0, equals)))
      return {rule, body.substr(equals + 1)};
  if (const OptionRule* rule = find_rule(body))
    return {rule, std::nullopt};
  if (!long_dashes && body.size() > 1 && kAttachedLetters.find(body[0]) != std::string::npos)
    return {find_rule(body.substr(0, 1)), body.substr(1)};
  return {};
}

std::string listed(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items)
    out += (out.empty() ? "" : ", ") + item;
  return out;
}

} // namespace

std::variant<SplitBuild, std::string> split_build_command(std::string_view command,
                                                          const std::vector<std::string>& files) {
  if (command.size() > kMaxCommandBytes)
    return "is longer than " + std::to_string(kMaxCommandBytes) + " bytes";
  auto parsed = shell_words(command);
  if (auto* reason = std::get_if<std::string>(&parsed))
    return std::move(*reason);
  const Words& words = std::get<Words>(parsed);
  if (words.empty())
    return std::string("is empty");

  // FOO=1 nvcc ...: an assignment for the command's environment.
  const Word& first = words.front();
  const size_t equals = first.text.find('=');
  if (equals != std::string::npos && equals > 0 &&
      std::all_of(first.quoted.begin(), first.quoted.begin() + equals + 1,
                  [](bool q) { return !q; }) &&
      !(first.text[0] >= '0' && first.text[0] <= '9') &&
      std::all_of(first.text.begin(), first.text.begin() + equals, [](char c) {
        return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
               (c >= '0' && c <= '9');
      }))
    return "sets the environment (" + first.text + ")";
  if (basename(first.text) != "nvcc")
    return "compiler is " + first.text + ", not nvcc";
  if (has_glob(first))
    return "compiler is a glob (" + first.text + ")";

  SplitBuild split;
  split.compiler = first.text;
  std::optional<std::set<std::string>> candidates; // computed at the first glob
  std::vector<std::string> outputs;

  // A word sh would expand as a glob where nvcc wants a value or an option: fine when it matches
  // nothing (sh passes it on as written), else not what the command seems to say.
  auto literal_word = [&](const Word& w) -> std::optional<std::string> {
    if (!has_glob(w))
      return std::nullopt;
    if (!candidates)
      candidates = glob_candidates(files);
    const auto matches = expand_glob(w, *candidates);
    if (!matches)
      return "glob " + w.text + " reaches outside the workspace";
    if (!matches->empty())
      return "glob " + w.text + " in an option matches " + listed(*matches);
    return std::nullopt;
  };

  for (size_t i = 1; i < words.size(); ++i) {
    const Word& w = words[i];
    if (w.text.size() > 1 && w.text[0] == '-') {
      if (auto reason = literal_word(w))
        return *reason;
      const ParsedOption option = parse_option(w.text);
      std::string written = w.text;
      std::optional<std::string> value = option.value;
      const bool separate = option.rule && option.rule->takes_value && !value;
      if (separate) {
        if (i + 1 >= words.size())
          return "option " + w.text + " has no argument";
        if (auto reason = literal_word(words[i + 1]))
          return *reason;
        value = words[i + 1].text;
        written += " " + *value;
      }
      if (option.rule && !option.rule->refusal.empty())
        return "has " + written + " (" + std::string(option.rule->refusal) + ")";
      const std::string_view name = option.rule ? option.rule->name : std::string_view();
      if ((name == "rdc" || name == "relocatable-device-code") && value != "false")
        return "has " + written + " (" + std::string(kDeviceLink) + ")";
      if (name == "o" || name == "output-file") {
        outputs.push_back(*value);
      } else {
        split.options.push_back(w.text);
        if (separate)
          split.options.push_back(*value);
      }
      i += separate ? 1 : 0;
      continue;
    }

    std::vector<std::string> paths;
    if (has_glob(w)) {
      if (!candidates)
        candidates = glob_candidates(files);
      auto matches = expand_glob(w, *candidates);
      if (!matches)
        return "glob " + w.text + " reaches outside the workspace";
      if (matches->empty())
        return "glob " + w.text + " matches nothing";
      paths = std::move(*matches);
    } else {
      paths.push_back(w.text);
    }
    for (std::string& path : paths) {
      if (is_source(path)) {
        if (!split.link_inputs.empty())
          return "has the link input " + split.link_inputs.front() + " before the source " + path +
                 " (splitting would change the link order)";
        split.sources.push_back(std::move(path));
      } else if (is_link_input(path)) {
        split.link_inputs.push_back(std::move(path));
      } else {
        return "argument " + path + " is neither a source (.cu .cpp .cc .cxx .c .C) nor an " +
               "object or library (.o .a .so)";
      }
    }
  }

  if (outputs.empty())
    return std::string("has no -o");
  if (outputs.size() > 1)
    return "has more than one -o (" + listed(outputs) + ")";
  if (outputs.front().empty())
    return std::string("has an empty -o");
  if (split.sources.empty())
    return std::string("has no source");
  split.output = outputs.front();
  return split;
}

std::vector<std::string> compile_argv(const SplitBuild& build, const std::string& source,
                                      const std::string& object) {
  std::vector<std::string> argv;
  argv.reserve(build.options.size() + 5);
  argv.push_back(build.compiler);
  argv.insert(argv.end(), build.options.begin(), build.options.end());
  argv.insert(argv.end(), {"-c", source, "-o", object});
  return argv;
}

std::vector<std::string> link_argv(const SplitBuild& build,
                                   const std::vector<std::string>& objects) {
  std::vector<std::string> argv;
  argv.reserve(build.options.size() + objects.size() + build.link_inputs.size() + 3);
  argv.push_back(build.compiler);
  argv.insert(argv.end(), build.options.begin(), build.options.end());
  argv.insert(argv.end(), objects.begin(), objects.end());
  argv.insert(argv.end(), build.link_inputs.begin(), build.link_inputs.end());
  argv.insert(argv.end(), {"-o", build.output});
  return argv;
}

} // namespace keval::cuda_program
