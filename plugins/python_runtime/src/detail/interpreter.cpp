#include "detail/interpreter.hpp"

#include <keval/plugin.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace keval::python_runtime::detail {

namespace fs = std::filesystem;
using sdk::Error;

namespace {

// Plain data only: statics holding Python objects would be destroyed at exit without the GIL.
struct StartState {
  std::once_flag once;
  std::string failure; // empty once started
  std::string executable;
};

StartState& start_state() {
  static StartState state;
  return state;
}

std::string compiled_python_version() {
  return std::to_string(PY_MAJOR_VERSION) + "." + std::to_string(PY_MINOR_VERSION);
}

std::optional<fs::path> find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr)
    return std::nullopt;
  std::stringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0)
      return fs::absolute(candidate);
  }
  return std::nullopt;
}

// Runs `executable -I -c code` and returns its stdout, or nullopt when it does not run.
std::optional<std::string> run_python(const std::string& executable, const char* code) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0)
    return std::nullopt;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  std::vector<char*> argv{const_cast<char*>(executable.c_str()), const_cast<char*>("-I"),
                          const_cast<char*>("-c"), const_cast<char*>(code), nullptr};
  pid_t pid = -1;
  const int spawned =
      ::posix_spawn(&pid, executable.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  std::string out;
  if (spawned == 0) {
    char buffer[256];
    ssize_t n;
    while ((n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0 || (n < 0 && errno == EINTR))
      if (n > 0)
        out.append(buffer, static_cast<size_t>(n));
  }
  ::close(pipe_fds[0]);
  if (spawned != 0)
    return std::nullopt;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return std::nullopt;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r'))
    out.pop_back();
  return out;
}

// The interpreter to embed: $KEVAL_PYTHON, checked to be the Python version keval links, else
// the build's interpreter.
std::string choose_executable() {
  const char* requested = std::getenv("KEVAL_PYTHON");
  if (requested == nullptr || requested[0] == '\0')
    return KEVAL_PYTHON_EXECUTABLE;
  std::string executable = requested;
  if (executable.find('/') == std::string::npos) {
    auto found = find_on_path(executable);
    if (!found)
      throw Error(KEVAL_ERROR_INTERNAL, "KEVAL_PYTHON=" + executable + ": not found on PATH");
    executable = found->string();
  }
  if (::access(executable.c_str(), X_OK) != 0)
    throw Error(KEVAL_ERROR_INTERNAL, "KEVAL_PYTHON=" + executable + ": not an executable file (" +
                                          std::strerror(errno) + ")");
  const auto version = run_python(executable, "import sys; print('%d.%d' % sys.version_info[:2])");
  if (!version)
    throw Error(KEVAL_ERROR_INTERNAL, "KEVAL_PYTHON=" + executable + " does not run");
  if (*version != compiled_python_version())
    throw Error(KEVAL_ERROR_INTERNAL,
                "KEVAL_PYTHON=" + executable + " is Python " + *version +
                    ", but keval's Python runtime was built against Python " +
                    compiled_python_version() + " (libpython" + compiled_python_version() +
                    "); choose a " + compiled_python_version() +
                    " interpreter or virtual environment, or rebuild keval with that one");
  return executable;
}

fs::path runtime_library_dir() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<const void*>(&ensure_interpreter), &info) == 0 ||
      info.dli_fname == nullptr)
    throw Error(KEVAL_ERROR_INTERNAL, "cannot locate libkeval_python_runtime.so (dladdr failed)");
  return fs::canonical(info.dli_fname).parent_path();
}

// Extension modules (torch, numpy, ...) are linked against nothing: they expect libpython's
// symbols in the global scope. keval-worker loads plugins with RTLD_LOCAL, which keeps the
// libpython they pull in local, so its symbols are made global here.
void make_libpython_global() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<const void*>(&Py_InitializeFromConfig), &info) == 0 ||
      info.dli_fname == nullptr)
    throw Error(KEVAL_ERROR_INTERNAL, "cannot locate libpython (dladdr failed)");
  if (::dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD) == nullptr) {
    const char* why = ::dlerror();
    throw Error(KEVAL_ERROR_INTERNAL, std::string("cannot make ") + info.dli_fname +
                                          " global: " + (why ? why : "dlopen failed"));
  }
}

void check(PyStatus status, const std::string& what) {
  if (PyStatus_Exception(status))
    throw Error(KEVAL_ERROR_INTERNAL,
                what + ": " + (status.func ? std::string(status.func) + ": " : std::string()) +
                    (status.err_msg ? status.err_msg : "failed"));
}

// Python must find keval_runtime before anything else of that name.
void add_keval_modules(const fs::path& dir) {
  if (!fs::exists(dir / "keval_runtime" / "__init__.py"))
    throw Error(KEVAL_ERROR_INTERNAL,
                "keval's Python modules are missing: no keval_runtime in " + dir.string());
  PyObject* sys_path = PySys_GetObject("path"); // borrowed
  PyObject* entry = PyUnicode_DecodeFSDefault(dir.c_str());
  const bool inserted =
      sys_path != nullptr && entry != nullptr && PyList_Insert(sys_path, 0, entry) == 0;
  Py_XDECREF(entry);
  if (!inserted) {
    PyErr_Clear();
    throw Error(KEVAL_ERROR_INTERNAL, "cannot add " + dir.string() + " to sys.path");
  }
}

void start(StartState& state) {
  state.executable = choose_executable();
  const fs::path modules = runtime_library_dir() / "python";

  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  // The worker owns its signals (the host ends a job by its process group) and its arguments.
  config.install_signal_handlers = 0;
  config.parse_argv = 0;
  // User code prints through Python; the worker captures fd 1 and 2. Unbuffered, nothing is
  // left in a Python buffer when the worker exits (the interpreter is never finalised).
  config.buffered_stdio = 0;
  try {
    // From the program name CPython finds its prefix, and site finds a venv's pyvenv.cfg.
    check(PyConfig_SetBytesString(&config, &config.program_name, state.executable.c_str()),
          "setting the Python program name");
    check(Py_InitializeFromConfig(&config), "starting Python " + state.executable);
  } catch (...) {
    PyConfig_Clear(&config);
    throw;
  }
  PyConfig_Clear(&config);

  make_libpython_global();
  add_keval_modules(modules);
  // Every entry point takes the GIL when it needs it; deleters may run on any thread.
  PyEval_SaveThread();
}

} // namespace

void ensure_interpreter() {
  StartState& state = start_state();
  std::call_once(state.once, [&] {
    if (Py_IsInitialized()) { // embedded in a process that already runs Python
      state.executable = "(already running)";
      return;
    }
    try {
      start(state);
    } catch (const Error& e) {
      state.failure = e.what();
    } catch (const std::exception& e) {
      state.failure = std::string("starting Python failed: ") + e.what();
    }
  });
  if (!state.failure.empty())
    throw Error(KEVAL_ERROR_INTERNAL, state.failure);
}

const std::string& interpreter_executable() {
  return start_state().executable;
}

void add_driver_directory(const std::string& dir) {
  PyObject* sys_path = PySys_GetObject("path"); // borrowed
  PyObject* entry = PyUnicode_DecodeFSDefault(dir.c_str());
  const int present =
      sys_path != nullptr && entry != nullptr ? PySequence_Contains(sys_path, entry) : -1;
  // Index 1: after keval_runtime's folder, which add_keval_modules put first.
  const bool ok = present == 1 || (present == 0 && PyList_Insert(sys_path, 1, entry) == 0);
  Py_XDECREF(entry);
  if (!ok) {
    PyErr_Clear();
    throw Error(KEVAL_ERROR_INTERNAL, "cannot add the driver folder " + dir + " to sys.path");
  }
}

} // namespace keval::python_runtime::detail
