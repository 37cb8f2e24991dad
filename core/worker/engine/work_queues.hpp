// How many hardware work queues (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default) a process's CUDA
// contexts get. A context with one is made and torn down in about half the time (H100: 60 ms
// and 25 ms against 135 ms and 73 ms, and the driver serialises both across processes), so
// keval's own processes that need no more use one: the trusted worker (one stream, no user code)
// and runners whose kernel type declares KEVAL_CAP_ONE_STREAM. Nothing else may inherit that:
// a Python kernel or a whole program that uses streams of its own would have them serialised.
// An operator's own CUDA_DEVICE_MAX_CONNECTIONS is never changed and is passed on as it was;
// KEVAL_ONE_WORK_QUEUE=0 in keval's environment leaves every process at the driver's default.
#pragma once

#include <string_view>

namespace keval::worker {

// Gives the contexts this process creates from now on one work queue, unless the environment
// already names a number or KEVAL_ONE_WORK_QUEUE=0 turns it off. Call before any CUDA call and
// while no other thread runs.
void use_one_work_queue();

// Whether `entry` ("NAME=value", of this process's environment) is keval's own one-queue
// setting, which a child's environment leaves out.
bool is_own_work_queue_setting(std::string_view entry);

} // namespace keval::worker
