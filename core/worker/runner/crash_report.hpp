// A note on standard error when a keval-worker process dies of a fault signal, before it dies of
// it. A runner that crashes is reported as "killed by SIGSEGV" and nothing more; what it was
// doing is lost with it (a runner is not dumpable: no core). The note says which signal, whether
// a fault raised it (and at which address) or a process sent it (and which one), and the stack it
// came from, so a crash that happens once in a GPU run can still be read afterwards: a runner's
// standard error is its trusted worker's, which the result carries (metadata.worker.stderr).
//
// Only a diagnostic: the process still dies of the same signal, so every verdict is as it was.
// User code in a runner can replace the handlers, which costs it nothing but the note.
#pragma once

namespace keval::worker {

// Installs the note's handlers for SIGSEGV, SIGBUS, SIGILL, SIGFPE and SIGABRT; on the calling
// thread they run on a stack of their own, so that its stack overflowing (a SIGSEGV too) still
// gets a note. `who` names the process in the note ("keval runner") and must outlive it. Call
// once, early, on the main thread before any other starts.
void install_crash_report(const char* who);

} // namespace keval::worker
