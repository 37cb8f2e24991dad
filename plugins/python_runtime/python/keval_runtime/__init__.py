"""keval's Python runtime: the per-type drivers behind the torch, triton and multi_kernel plugins.

keval-worker embeds one CPython interpreter per job (libkeval_python_runtime.so). Each Python
kernel type is a driver module here with one function, ``compile(...)``, returning a kernel
object that the C++ layer calls through the SDK's life cycle:

    kernel = driver.compile(source, metadata_json, io_json, work_dir, side, cuda_arch)
    kernel.info_json()                      -> JSON text for the compile result
    kernel.bind(device_type, device_id, stream)
    kernel.default_inputs(seed)             -> [(dlpack capsule, is_bool), ...]
    kernel.launch(args)                     -> [(dlpack capsule, is_bool), ...]

Errors that are the user's (their source, their request) are raised as ``errors.KernelError``
with the SDK's error code; anything else escaping a driver is a keval bug and is reported as an
internal error with its traceback.
"""
