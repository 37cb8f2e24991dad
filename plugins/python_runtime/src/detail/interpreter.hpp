// The one embedded CPython interpreter of a keval-worker process.
#pragma once

#include <pybind11/pybind11.h> // Python.h, first, as CPython requires

#include <string>

namespace keval::python_runtime::detail {

// Starts the interpreter on first call; later calls return at once. Throws keval::sdk::Error
// (KEVAL_ERROR_INTERNAL) when it cannot start, then and on every later call.
//
// Which interpreter: $KEVAL_PYTHON (a python executable or a name on PATH; virtual environments
// work: their pyvenv.cfg is honoured and their site-packages are on sys.path), else the one keval
// was built with. It must be the Python version whose libpython keval links. keval's own Python
// modules (keval_runtime) are put first on sys.path, from the python/ folder beside this library.
// The GIL is released when this returns: every entry point takes it with Gil.
void ensure_interpreter();

// Puts `dir` (a plugin's driver folder) on sys.path once, after keval's own modules. GIL held.
void add_driver_directory(const std::string& dir);

// The interpreter's executable, as chosen (for messages).
const std::string& interpreter_executable();

// Holds the GIL for a scope. Usable from any thread once the interpreter runs.
class Gil {
public:
  Gil() : state_(PyGILState_Ensure()) {}
  ~Gil() { PyGILState_Release(state_); }
  Gil(const Gil&) = delete;
  Gil& operator=(const Gil&) = delete;

private:
  PyGILState_STATE state_;
};

} // namespace keval::python_runtime::detail
