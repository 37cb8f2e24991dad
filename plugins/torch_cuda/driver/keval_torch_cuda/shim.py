"""Serving torch.utils.cpp_extension.load_inline and load with keval's builder.

The submitted source runs unchanged in the embedded interpreter; these replacements stand in for
torch's functions for the job's lifetime (one worker process per job), so the source's own calls
(at module level, in ``ModelNew.__init__``, through ``from ... import load_inline`` or the module
attribute) build with build.py instead of torch's ninja build. No source is parsed.

Accepted as torch accepts them: ``cpp_sources``/``cuda_sources`` as one string or a list,
``functions`` as a name, a list or a dict of name -> docstring (or None: the sources bind
themselves with PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)), ``extra_cflags``,
``extra_cuda_cflags``, ``extra_ldflags``, ``extra_include_paths``, ``with_cuda``, ``verbose``.
Arguments that only steer torch's own build (``build_directory``, ``keep_intermediates``,
``with_pytorch_error_handling``, ``use_pch``, ``is_python_module``, ``is_standalone``) are
accepted and recorded as ignored: keval builds in the job's directory and its cache.
"""
import functools

from .build import Extension

# torch's parameters that keval's build does not need; accepted so real sources run unchanged.
IGNORED_ARGUMENTS = ("build_directory", "keep_intermediates", "with_pytorch_error_handling",
                     "use_pch", "is_python_module", "is_standalone")


def load_inline_extension(name, cpp_sources, cuda_sources=None, functions=None,
                          extra_cflags=None, extra_cuda_cflags=None, extra_ldflags=None,
                          extra_include_paths=None, with_cuda=None, **ignored):
    """The Extension torch's load_inline would build, from load_inline's own arguments."""
    _check_ignored(ignored)
    return Extension.inline(name, cpp_sources, cuda_sources, functions,
                            extra_cflags=extra_cflags, extra_cuda_cflags=extra_cuda_cflags,
                            extra_ldflags=extra_ldflags, extra_include_paths=extra_include_paths,
                            with_cuda=with_cuda)


def load_extension(name, sources, extra_cflags=None, extra_cuda_cflags=None, extra_ldflags=None,
                   extra_include_paths=None, with_cuda=None, **ignored):
    _check_ignored(ignored)
    return Extension.from_files(name, sources, extra_cflags=extra_cflags,
                                extra_cuda_cflags=extra_cuda_cflags, extra_ldflags=extra_ldflags,
                                extra_include_paths=extra_include_paths, with_cuda=with_cuda)


def _check_ignored(ignored):
    unknown = sorted(set(ignored) - set(IGNORED_ARGUMENTS) - {"verbose"})
    if unknown:
        raise TypeError(f"unexpected keyword argument(s) {', '.join(unknown)}")


def install(builder, cpp_extension=None):
    """Replaces load_inline and load in torch.utils.cpp_extension with ones using ``builder``.
    Returns the module patched (tests pass a stand-in)."""
    if cpp_extension is None:
        import torch.utils.cpp_extension as cpp_extension

    @functools.wraps(cpp_extension.load_inline)
    def load_inline(name, cpp_sources, cuda_sources=None, functions=None, *args, verbose=False,
                    **kwargs):
        if args:  # positional use beyond functions, in torch's parameter order
            order = ("extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths",
                     "build_directory", "verbose", "with_cuda")
            kwargs.update(zip(order, args))
            verbose = kwargs.pop("verbose", verbose)
        extension = load_inline_extension(name, cpp_sources, cuda_sources, functions, **kwargs)
        return builder.load(extension, verbose=bool(verbose))

    @functools.wraps(cpp_extension.load)
    def load(name, sources, *args, verbose=False, **kwargs):
        if args:
            order = ("extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths",
                     "build_directory", "verbose", "with_cuda")
            kwargs.update(zip(order, args))
            verbose = kwargs.pop("verbose", verbose)
        return builder.load(load_extension(name, sources, **kwargs), verbose=bool(verbose))

    cpp_extension.load_inline = load_inline
    cpp_extension.load = load
    return cpp_extension
