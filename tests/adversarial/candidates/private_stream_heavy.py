# Attack (issue 13): behaves while it is checked and cheats once it believes it is timed. For its
# first 5 calls (the correctness trials) it makes the caller's stream wait for its private stream;
# after that it returns at once, leaving a millisecond of device-side spinning (torch.cuda._sleep)
# and the ReLU running on that stream, past the timing's stop event. Its outputs are still right
# when read, but the events never saw the work. The device trace does: flagged
# work_after_completion, the time added to the samples (so no speedup), and `strict` fails it.
import torch
import torch.nn as nn

_side = None
_calls = 0


class ModelNew(nn.Module):
    def forward(self, x):
        global _side, _calls
        _calls += 1
        if _side is None:
            _side = torch.cuda.Stream()
        _side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(_side):
            torch.cuda._sleep(2_000_000)
            y = torch.relu(x)
        if _calls <= 5:
            torch.cuda.current_stream().wait_stream(_side)
        return y
