# Attack (issue 13): its ReLU runs on a stream of its own and it returns without making the caller's
# stream wait, so the work can escape the timed stream. The static scan flags the stream (`static`),
# and `strict` turns that into a failure.
import torch
import torch.nn as nn

_side = None


class ModelNew(nn.Module):
    def forward(self, x):
        global _side
        if _side is None:
            _side = torch.cuda.Stream()
        _side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(_side):
            y = torch.relu(x)
        return y
