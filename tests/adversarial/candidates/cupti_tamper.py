# Attack (issue 17's trace read once for several samples): the candidate reaches into the CUPTI
# library its runner loaded (it is in the process's memory map) and interferes with the device trace
# that would show work it leaves running past the timing's stop event. Like private_stream_heavy,
# it behaves during its first 5 calls (the correctness trials) and then returns at once, leaving a
# millisecond of device-side spinning and the ReLU on a stream of its own. (The static scan flags
# its stream and its ctypes; that decides nothing here, where the trace and the wall time are
# tested.) @MODE@ picks the interference:
#   off     turns kernel, copy and memset tracing off for good once it starts cheating;
#   flush   forces CUPTI's buffers out itself after every launch, while its work still runs;
#   early   forces them out at the start of every call, once the device is synchronised (only
#           complete records, which reach keval before keval reads them);
#   steal   registers buffer callbacks of its own, so the records go to it instead;
#   blind   turns kernel tracing off around its own launch only, and back on before returning
#           (keval's markers, before and after the launch, are still traced);
#   joined  the honest control: the same work, the caller's stream made to wait for it, no
#           interference.
import ctypes
import os

import torch
import torch.nn as nn

MODE = "@MODE@"
_KINDS = (10, 1, 2)  # CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, _MEMCPY, _MEMSET
_CONCURRENT_KERNEL = 10
_FLUSH_FORCED = 1

_side = None
_calls = 0
_cupti = []
_kept = []  # the stolen buffers and callbacks, alive as long as CUPTI may use them


def _loaded_cupti():
    paths = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "libcupti.so" in path and path not in paths:
                paths.append(path)
    return [ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW) for path in paths]


_REQUESTED = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p),
                              ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t))
_COMPLETED = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p,
                              ctypes.c_size_t, ctypes.c_size_t)


def _requested(buffer, size, max_records):
    raw = ctypes.create_string_buffer((1 << 20) + 8)
    _kept.append(raw)
    address = ctypes.addressof(raw)
    buffer[0] = address + (-address % 8)
    size[0] = 1 << 20
    max_records[0] = 0


def _completed(context, stream, buffer, size, valid):
    pass  # the records are dropped


def _steal(lib):
    callbacks = (_REQUESTED(_requested), _COMPLETED(_completed))
    _kept.append(callbacks)
    lib.cuptiActivityRegisterCallbacks(*callbacks)


def _start_cheating():
    global _cupti
    _cupti = _loaded_cupti()
    for lib in _cupti:
        if MODE == "off":
            for kind in _KINDS:
                lib.cuptiActivityDisable(kind)
        elif MODE == "steal":
            _steal(lib)


class ModelNew(nn.Module):
    def forward(self, x):
        global _side, _calls
        _calls += 1
        cheating = MODE != "joined" and _calls > 5
        if cheating and _calls == 6:
            _start_cheating()
        if cheating and MODE == "early":
            torch.cuda.synchronize()  # every record complete
            for lib in _cupti:
                lib.cuptiActivityFlushAll(_FLUSH_FORCED)
        if _side is None:
            _side = torch.cuda.Stream()
        if cheating and MODE == "blind":
            for lib in _cupti:
                lib.cuptiActivityDisable(_CONCURRENT_KERNEL)
        _side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(_side):
            torch.cuda._sleep(2_000_000)
            y = torch.relu(x)
        if cheating and MODE == "blind":
            for lib in _cupti:
                lib.cuptiActivityEnable(_CONCURRENT_KERNEL)
        if cheating and MODE == "flush":
            for lib in _cupti:
                lib.cuptiActivityFlushAll(_FLUSH_FORCED)
        if not cheating:
            torch.cuda.current_stream().wait_stream(_side)
        return y
