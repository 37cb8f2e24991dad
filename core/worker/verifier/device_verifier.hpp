// The device verifier: one long-lived trusted process per GPU (`keval-worker --device-verifier N`,
// started by `keval serve --device-verifier`) that holds that GPU's CUDA context for the jobs'
// trusted workers, so that a job's processes make and release one context (its runner's) instead
// of two or three.
//
// Why: the driver makes and releases contexts one at a time across the machine, about 86 ms of its
// time for each with one work queue, and a fresh trusted worker made and released one for every
// job. bench/verifier_floor.cpp measured the device skeleton of a cuda evaluate on the H200: 896
// jobs/min against 430 with fresh contexts on both sides (2.08x), 95 ms against 166 from a job's
// start to its last process reaped (README, "The device verifier").
//
// What stays as it was: the trusted worker is fresh for every job and makes every decision (the
// inputs' seeds, the checks, the verdict, the timings' books); the runners that run user code are
// fresh, sandboxed, and never see the verifier (its socket is an abstract one, outside their
// network namespace, and a connection must first present a token that only the grant carries,
// which no runner receives). The verifier runs no user code, is not dumpable, and does only what
// an engine does (worker/engine/engine.hpp): allocate, fill, upload, copy, map a runner's shared
// buffer, poison, compare, read the clock and the memory. Each connection gets an engine of its
// own on the verifier's context (its own stream, its own memory) and reaches only the tensors it
// made or mapped: a view naming memory of no tensor of the connection is refused. When the
// connection ends (the job's trusted worker exits, whatever the reason) everything it held is
// freed, and a context that a fault broke ends the verifier, which the daemon starts again.
#pragma once

#include "common/unique_fd.hpp"
#include "worker/engine/engine.hpp"

#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

namespace keval::worker::verifier {

// Where a job's trusted worker finds its GPU's verifier, as the grant says: the name of an
// abstract Unix socket ("@keval-verifier-..."), and the token a connection must present first.
struct VerifierAddress {
  std::string socket;
  std::string token;
};

// The verifier could not be reached, refused the token, or ended while serving.
class VerifierUnavailable : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// Connects to the verifier at `address`, presents its token, and returns an engine whose every
// operation the verifier performs on its context (tensors stay in the verifier's device memory;
// only their descriptions, summaries and shared descriptors travel). The engine's operations throw
// as an engine's do (std::invalid_argument, std::runtime_error), and VerifierUnavailable when the
// verifier is gone or its context broke (keval's failure: no user code runs there). Throws
// VerifierUnavailable when no engine could be had within `within`.
std::unique_ptr<Engine> connect_remote_engine(const VerifierAddress& address,
                                              std::chrono::milliseconds within);

// The same over a socket already connected to a server (tests).
std::unique_ptr<Engine> remote_engine_over(UniqueFd connection, const std::string& token);

// The server's side of one connection: checks the token (within `hello_within`), makes an engine
// with `make_engine` on the calling thread, and performs what the peer asks until it closes the
// connection; then frees everything the connection held. Returns false when the engine's context
// is broken (a fault the engine reports on synchronising at the end): the process must end.
using EngineFactory = std::function<std::unique_ptr<Engine>()>;
bool serve_connection(UniqueFd connection, const std::string& token,
                      const EngineFactory& make_engine,
                      std::chrono::milliseconds hello_within = std::chrono::seconds(2));

// `keval-worker --device-verifier ORDINAL`: reads the token from the first line of its standard
// input, opens device ORDINAL, listens on a fresh abstract socket, prints one JSON line
// ({"ready": true, "socket", "open_ms", "device"} or {"ready": false, "reason"}), then serves
// each connection on a thread of its own until its standard input ends.
int run_device_verifier(int ordinal);

} // namespace keval::worker::verifier
