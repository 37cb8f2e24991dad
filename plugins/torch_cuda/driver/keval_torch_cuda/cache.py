"""The content-addressed cache of built extensions.

A build is reused only when everything that changes the binary is the same, so the key is a
SHA-256 over all of it: the generated translation units, every flag, the headers in the user's
include directories (by content, not path: load()'s files sit in each job's own directory and
still hit the cache across jobs), and the toolchain's key parts (toolchain.py).

An entry is a directory ``<key[:2]>/<key>/`` holding the library and a manifest with the
library's SHA-256. It enters the cache by the atomic rename of a finished directory and is
checked before every use, so a half-written or corrupted entry is never loaded: it is refused,
rebuilt and replaced. Concurrent jobs building the same key serialise on a lock file: one
builds, the others wait and load its entry.

Location: ``$KEVAL_CACHE_DIR/torch_cuda``, else ``$XDG_CACHE_HOME/keval/torch_cuda``, else
``~/.cache/keval/torch_cuda``.

Who writes it: only the runners of a compare's reference (and their prewarm). A candidate's
runner has it read-only (``KEVAL_CACHE_READ_ONLY=1``, enforced by Landlock where the sandbox
applies it): it uses what is there, asks the trusted worker for what is not (build.py,
``_build_by_host``) and builds for itself, in a cache of its own (``$KEVAL_PRIVATE_CACHE_DIR``,
gone with the runner), only what the trusted worker does not serve. So no library, generated
header or precompiled header a candidate wrote is ever loaded by another job.
"""
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import time
import uuid

# Bumped when the layout of an entry or the way translation units are generated changes.
CACHE_FORMAT = 2
MANIFEST = "manifest.json"

# Files of an include directory that can be #included, and how much of it is read to key a build.
HEADER_SUFFIXES = (".h", ".hh", ".hpp", ".hxx", ".cuh", ".inc", ".inl", ".ipp", ".tcc", ".def",
                   ".c", ".cc", ".cpp", ".cxx", ".cu")
FINGERPRINT_MAX_FILES = 2000
FINGERPRINT_MAX_BYTES = 32 << 20


def cache_root():
    explicit = os.environ.get("KEVAL_CACHE_DIR")
    if explicit:
        base = explicit
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = os.path.join(xdg, "keval") if xdg else os.path.join(
            os.path.expanduser("~"), ".cache", "keval")
    return os.path.join(base, "torch_cuda")


def cache_locations():
    """(the directory this process builds into, the shared ones it may only read): the shared
    cache and none, or, with ``KEVAL_CACHE_READ_ONLY=1`` (a candidate's runner), its own cache and
    the shared one."""
    shared = cache_root()
    if os.environ.get("KEVAL_CACHE_READ_ONLY") != "1":
        return shared, []
    private = os.environ.get("KEVAL_PRIVATE_CACHE_DIR") or os.path.join(
        os.environ.get("TMPDIR") or "/tmp", f"keval-cache-{os.getpid()}")
    return os.path.join(private, "torch_cuda"), [shared]


def fingerprint_include_dir(directory):
    """SHA-256 over the relative path and content of every includable file below ``directory``
    (keval's own build directories left out), or (None, why) when it cannot be read or is too
    large to read for every build."""
    if not os.path.isdir(directory):
        return "absent", None  # the compilers skip it too
    digest = hashlib.sha256()
    files = total = 0
    try:
        for root, dirs, names in os.walk(directory, onerror=_raise):
            dirs[:] = sorted(d for d in dirs if not d.startswith("torch_cuda_build_"))
            for file_name in sorted(names):
                if not file_name.endswith(HEADER_SUFFIXES):
                    continue
                path = os.path.join(root, file_name)
                files += 1
                total += os.path.getsize(path)
                if files > FINGERPRINT_MAX_FILES or total > FINGERPRINT_MAX_BYTES:
                    return None, (f"holds more than {FINGERPRINT_MAX_FILES} headers or "
                                  f"{FINGERPRINT_MAX_BYTES >> 20} MiB")
                digest.update(os.path.relpath(path, directory).encode("utf-8") + b"\0")
                digest.update(_sha256_of(path).encode("ascii"))
    except OSError as exc:
        return None, f"cannot be read ({exc})"
    return "sha256:" + digest.hexdigest(), None


def _raise(error):
    raise error


def cache_key(extension, toolchain_key_parts):
    """SHA-256 of everything that determines the built library, as canonical JSON."""
    material = {"format": CACHE_FORMAT, "extension": extension.describe(),
                "toolchain": toolchain_key_parts}
    text = json.dumps(material, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def module_name(extension, key):
    """A valid Python identifier unique to the key: the user's name plus the key's prefix."""
    safe = "".join(c if c.isalnum() or c == "_" else "_" for c in extension.name) or "ext"
    if safe[0].isdigit():
        safe = "_" + safe
    return f"{safe}_{key[:16]}"


def entry_dir(cache_dir, key):
    """Where the entry for ``key`` is, or goes: ``<key[:2]>/<key>``."""
    return os.path.join(cache_dir, key[:2], key)


@contextlib.contextmanager
def key_lock(entry, key):
    """Held while one job checks and builds the entry for ``key``: one builder per key; the
    other jobs wait here, then find its entry."""
    os.makedirs(os.path.dirname(entry), exist_ok=True)
    with open(os.path.join(os.path.dirname(entry), key + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_entry(entry_dir, key):
    """The entry's library path when it is complete and intact, else None (with why)."""
    if not os.path.isdir(entry_dir):
        return None, "missing"
    try:
        with open(os.path.join(entry_dir, MANIFEST), encoding="utf-8") as f:
            manifest = json.load(f)
        library = os.path.join(entry_dir, manifest["library"])
        if manifest.get("key") != key or manifest.get("format") != CACHE_FORMAT:
            return None, "manifest does not match the key"
        if _sha256_of(library) != manifest["sha256"]:
            return None, "library checksum mismatch"
        return library, None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, f"unreadable manifest: {exc}"


def publish(library, entry, key):
    """Copies the library into a fresh directory next to the entry and renames it into place:
    readers see either no entry or a complete one. Called with the key's lock held."""
    staging = f"{entry}.tmp-{uuid.uuid4().hex}"
    os.makedirs(staging)
    target = os.path.join(staging, os.path.basename(library))
    shutil.copy2(library, target)
    manifest = {"format": CACHE_FORMAT, "key": key, "library": os.path.basename(library),
                "sha256": _sha256_of(target), "created": time.time()}
    with open(os.path.join(staging, MANIFEST), "w", encoding="utf-8") as f:
        json.dump(manifest, f)
        f.flush()
        os.fsync(f.fileno())
    if os.path.exists(entry):  # a refused (corrupt) entry: moved aside, then removed
        trash = f"{entry}.bad-{uuid.uuid4().hex}"
        os.rename(entry, trash)
        shutil.rmtree(trash, ignore_errors=True)
    os.rename(staging, entry)
