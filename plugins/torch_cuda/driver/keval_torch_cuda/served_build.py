"""The trusted worker's builder: one extension that a candidate's runner asked for.

core/worker/pipeline/extension_builds.hpp starts a runner of its own (side "build"), which never
runs user code, and asks it to compile a build_request: the module name, the toolchain the asking
runner saw, and the extension's units and flags, checked and keyed by the trusted worker. This
process refuses a toolchain other than its own (an entry is keyed by the toolchain it claims, so
it must be the one that built it), builds in its own directory, which is the only place it can
write, and names the library; the trusted worker reads it from there and keeps it where no runner
can write. The compilers run the request's flags; whatever they do stays in this runner, and what
it builds is kept only under the key of exactly that request.
"""
import json

from keval_runtime import errors

from .build import Builder, BuildFailed
from .extension import Extension


class ServedBuild:
    """What the runner reports for the build: info.build {library, module, steps}."""

    def __init__(self, info):
        self.info = info

    def info_json(self):
        return json.dumps(self.info)


def build(request_json, work_dir, cuda_arch):
    if not cuda_arch:
        raise errors.UnsupportedError("no GPU architecture to build the extension for")
    request = json.loads(request_json)
    builder = Builder(work_dir, cuda_arch)
    own = json.loads(json.dumps(builder.toolchain.key_parts))
    claimed = request["toolchain"]
    if claimed != own:
        differing = sorted(k for k in set(own) | set(claimed) if own.get(k) != claimed.get(k))
        raise errors.UnsupportedError("the request's toolchain is not this machine's (it differs "
                                      f"in {', '.join(differing)}): nothing is built for it")
    extension = Extension.from_wire(request["extension"])
    try:
        library, steps = builder.build_for_host(extension, request["module"])
    except BuildFailed as failure:
        raise errors.CompileError(str(failure), failure.output) from None
    return ServedBuild({"build": {"library": library, "module": request["module"],
                                  "steps": steps}})
