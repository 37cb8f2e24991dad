"""ComputeEval datapacks: read (and check) and write them, standard library only.

A datapack is a ``.tar.gz`` holding ``metadata.json`` and one JSONL file: ``problems.jsonl``
(a problems datapack) or ``solutions.jsonl`` (a solutions datapack). ComputeEval's
``compute_eval/data/data_pack.py`` defines the format; this module reads what it writes and writes
what it reads:

- problems metadata: ``{release, total_count, created_at, description, task_id_hashes}``, where
  ``task_id_hashes[task_id]`` is the MD5 (hex) of the problem's JSONL line, its ``"\\n"``
  included;
- solutions metadata: ``{release, total_count, created_at, description, groups}``;
- a line is the item as compact JSON (``separators=(",", ":")``, non-ASCII kept as UTF-8).

Reading checks what a corrupt or edited datapack would break: every problem line's MD5 against
``task_id_hashes`` (a mismatch, or a task_id the hashes do not name, is an error naming the
task_id and the datapack), ``total_count`` against the items, duplicate task_ids, the schema
versions ComputeEval accepts, and the fields an evaluation uses. Every failure is a
``DatapackError`` whose message names the datapack.
"""

from __future__ import annotations

import datetime
import hashlib
import io
import json
import os
import tarfile
import tempfile
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence

__all__ = [
    "DatapackError",
    "PROBLEM_SCHEMA_VERSION",
    "ProblemDatapack",
    "SOLUTION_SCHEMA_VERSION",
    "SolutionDatapack",
    "VALID_GROUPS",
    "datapack_name",
    "dump_line",
    "normalize_problem",
    "normalize_solution",
    "read_problems",
    "read_solutions",
    "write_problems",
    "write_solutions",
]

PROBLEM_SCHEMA_VERSION = 2
SOLUTION_SCHEMA_VERSION = 1
PROBLEM_TYPES = ("cuda_cpp", "cuda_python")
VALID_GROUPS = ("cuda-runtime", "cuda-kernels", "cccl", "cublas", "mathlibs", "cutile", "cudnn")
PROBLEMS_FILE = "problems.jsonl"
SOLUTIONS_FILE = "solutions.jsonl"
METADATA_FILE = "metadata.json"


class DatapackError(ValueError):
    """A datapack that cannot be read, or that fails a check; the message names it."""


@dataclass
class _Datapack:
    path: str
    metadata: Dict[str, Any]

    @property
    def name(self) -> str:
        return datapack_name(self.path)

    @property
    def release(self) -> Any:
        return self.metadata.get("release")


@dataclass
class ProblemDatapack(_Datapack):
    problems: List[Dict[str, Any]] = field(default_factory=list)


@dataclass
class SolutionDatapack(_Datapack):
    solutions: List[Dict[str, Any]] = field(default_factory=list)

    @property
    def groups(self) -> Optional[List[str]]:
        groups = self.metadata.get("groups")
        return list(groups) if groups is not None else None


def datapack_name(path: str) -> str:
    """ComputeEval's name of a datapack: its file name less ``-solutions.tar.gz``.

    (``-problems.tar.gz`` and a bare ``.tar.gz`` are taken off too, for problems datapacks and
    for names that follow no convention.)
    """
    name = os.path.basename(os.fspath(path))
    for suffix in ("-solutions.tar.gz", "-problems.tar.gz", ".tar.gz", ".tgz"):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def dump_line(item: Any) -> str:
    """One JSONL line as ComputeEval (pydantic's ``model_dump_json``) writes it, ``\\n`` included."""
    return json.dumps(item, ensure_ascii=False, separators=(",", ":")) + "\n"


# -- reading -----------------------------------------------------------------------------------

def _open(path: str) -> tarfile.TarFile:
    if not os.path.exists(path):
        raise DatapackError(f"{path}: no such file")
    try:
        return tarfile.open(path, "r:gz")
    except (tarfile.TarError, OSError, EOFError) as e:
        raise DatapackError(f"{path}: not a .tar.gz datapack ({e})") from e


def _member(tar: tarfile.TarFile, path: str, name: str) -> bytes:
    try:
        info = tar.getmember(name)
    except KeyError:
        raise DatapackError(f"{path}: invalid datapack: {name} is missing") from None
    f = tar.extractfile(info) if info.isfile() else None
    if f is None:
        raise DatapackError(f"{path}: invalid datapack: {name} is not a regular file")
    try:
        return f.read()
    except (tarfile.TarError, OSError, EOFError, ValueError) as e:
        raise DatapackError(f"{path}: cannot read {name}: {e}") from e


def _data(tar: tarfile.TarFile, path: str, name: str, other: str, kind: str) -> bytes:
    names = set(tar.getnames())
    if name not in names and other in names:
        raise DatapackError(f"{path}: holds {other}, not {name}: not a {kind} datapack")
    return _member(tar, path, name)


def _read_metadata(tar: tarfile.TarFile, path: str) -> Dict[str, Any]:
    raw = _member(tar, path, METADATA_FILE)
    try:
        metadata = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise DatapackError(f"{path}: {METADATA_FILE} is not valid JSON: {e}") from e
    if not isinstance(metadata, dict):
        raise DatapackError(f"{path}: {METADATA_FILE} must be a JSON object")
    if not isinstance(metadata.get("release"), str):
        raise DatapackError(f"{path}: {METADATA_FILE}: 'release' must be a string")
    count = metadata.get("total_count")
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise DatapackError(f"{path}: {METADATA_FILE}: 'total_count' must be a non-negative integer")
    return metadata


def _lines(raw: bytes, path: str, name: str):
    """(line number, the line's bytes with its "\\n", the parsed object) of each non-blank line."""
    start = 0
    number = 0
    while start < len(raw):
        end = raw.find(b"\n", start)
        line = raw[start:] + b"\n" if end < 0 else raw[start:end + 1]
        start = len(raw) if end < 0 else end + 1
        number += 1
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DatapackError(f"{path}: {name} line {number} is not UTF-8: {e}") from e
        if not text.strip():
            continue
        try:
            item = json.loads(text, strict=False)
        except ValueError as e:
            raise DatapackError(f"{path}: {name} line {number} is not valid JSON: {e}") from e
        if not isinstance(item, dict):
            raise DatapackError(f"{path}: {name} line {number} must be a JSON object")
        yield number, line, item


def _check_files(value: Any, where: str, path: str) -> None:
    if not isinstance(value, list):
        raise DatapackError(f"{path}: {where} must be a list of {{path, content}}")
    for i, f in enumerate(value):
        if not (isinstance(f, dict) and isinstance(f.get("path"), str)
                and isinstance(f.get("content"), str)):
            raise DatapackError(f"{path}: {where}[{i}] must be {{\"path\": str, \"content\": str}}")


def _check_solution(item: Dict[str, Any], where: str, path: str) -> None:
    task_id = item.get("task_id")
    if not isinstance(task_id, str) or not task_id:
        raise DatapackError(f"{path}: {where}: 'task_id' must be a non-empty string")
    kind = item.get("type", "file")
    if kind == "patch":
        raise DatapackError(f"{path}: {where} ({task_id}): patch solutions are not supported "
                            "(ComputeEval does not apply them either)")
    if kind != "file":
        raise DatapackError(f"{path}: {where} ({task_id}): 'type' must be \"file\" (got {kind!r})")
    version = item.get("schema_version", SOLUTION_SCHEMA_VERSION)
    if version != SOLUTION_SCHEMA_VERSION:
        raise DatapackError(f"{path}: {where} ({task_id}): schema_version {version!r}; expected "
                            f"{SOLUTION_SCHEMA_VERSION}")
    _check_files(item.get("files", []), f"{where} ({task_id}).files", path)


def _check_problem(item: Dict[str, Any], where: str, path: str) -> None:
    task_id = item["task_id"]
    what = f"{where} ({task_id})"
    if item.get("type") not in PROBLEM_TYPES:
        raise DatapackError(f"{path}: {what}: 'type' must be one of {', '.join(PROBLEM_TYPES)} "
                            f"(got {item.get('type')!r})")
    version = item.get("schema_version", PROBLEM_SCHEMA_VERSION)
    if version != PROBLEM_SCHEMA_VERSION:
        raise DatapackError(f"{path}: {what}: schema_version {version!r}; expected "
                            f"{PROBLEM_SCHEMA_VERSION}")
    if item.get("group") not in VALID_GROUPS:
        raise DatapackError(f"{path}: {what}: 'group' must be one of {', '.join(VALID_GROUPS)} "
                            f"(got {item.get('group')!r})")
    if not isinstance(item.get("test_command"), str):
        raise DatapackError(f"{path}: {what}: 'test_command' must be a string")
    for key in ("build_command", "benchmark_command"):
        if item.get(key) is not None and not isinstance(item.get(key), str):
            raise DatapackError(f"{path}: {what}: {key!r} must be a string or null")
    if item.get("metadata") is not None and not isinstance(item.get("metadata"), dict):
        raise DatapackError(f"{path}: {what}: 'metadata' must be an object")
    for key in ("context_files", "test_files"):
        _check_files(item.get(key, []), f"{what}.{key}", path)
    baseline = item.get("baseline_solution")
    if baseline is not None:
        if not isinstance(baseline, dict):
            raise DatapackError(f"{path}: {what}: 'baseline_solution' must be an object or null")
        _check_solution(baseline, f"{what}.baseline_solution", path)


def read_problems(path: str, groups: Optional[Sequence[str]] = None) -> ProblemDatapack:
    """Read and check a problems datapack; keep the problems of ``groups`` (None: all)."""
    path = os.fspath(path)
    with _open(path) as tar:
        raw = _data(tar, path, PROBLEMS_FILE, SOLUTIONS_FILE, "problems")
        metadata = _read_metadata(tar, path)
    hashes = metadata.get("task_id_hashes")
    if not isinstance(hashes, dict):
        raise DatapackError(f"{path}: {METADATA_FILE}: 'task_id_hashes' must be an object "
                            "(is this a solutions datapack?)")
    problems: List[Dict[str, Any]] = []
    seen: Dict[str, int] = {}
    for number, line, item in _lines(raw, path, PROBLEMS_FILE):
        where = f"{PROBLEMS_FILE} line {number}"
        task_id = item.get("task_id")
        if not isinstance(task_id, str) or not task_id:
            raise DatapackError(f"{path}: {where}: 'task_id' must be a non-empty string")
        if task_id in seen:
            raise DatapackError(f"{path}: duplicate task_id {task_id!r} ({PROBLEMS_FILE} lines "
                                f"{seen[task_id]} and {number})")
        seen[task_id] = number
        expected = hashes.get(task_id)
        if expected is None:
            raise DatapackError(f"{path}: task_id {task_id!r} ({where}) is not in the metadata's "
                                "task_id_hashes")
        actual = hashlib.md5(line).hexdigest()
        if not isinstance(expected, str) or actual != expected.lower():
            raise DatapackError(f"{path}: task_id {task_id!r} ({where}) does not match its hash "
                                f"in task_id_hashes (md5 {actual}, expected {expected}): the "
                                "problem was changed after the datapack was made")
        _check_problem(item, where, path)
        problems.append(item)
    if metadata["total_count"] != len(problems):
        raise DatapackError(f"{path}: total_count is {metadata['total_count']} but "
                            f"{PROBLEMS_FILE} holds {len(problems)} problems")
    extra = sorted(set(hashes) - set(seen))
    if extra:
        raise DatapackError(f"{path}: task_id_hashes names task_ids that {PROBLEMS_FILE} does "
                            f"not hold: {', '.join(extra)}")
    if groups is not None:
        wanted = set(groups)
        problems = [p for p in problems if p.get("group") in wanted]
    return ProblemDatapack(path, metadata, problems)


def read_solutions(path: str) -> SolutionDatapack:
    """Read and check a solutions datapack (its solutions in file order)."""
    path = os.fspath(path)
    with _open(path) as tar:
        raw = _data(tar, path, SOLUTIONS_FILE, PROBLEMS_FILE, "solutions")
        metadata = _read_metadata(tar, path)
    groups = metadata.get("groups")
    if groups is not None:
        if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
            raise DatapackError(f"{path}: {METADATA_FILE}: 'groups' must be a list of strings or "
                                "null")
        unknown = [g for g in groups if g not in VALID_GROUPS]
        if unknown:
            raise DatapackError(f"{path}: {METADATA_FILE}: unknown groups {', '.join(unknown)} "
                                f"(valid: {', '.join(VALID_GROUPS)})")
    solutions: List[Dict[str, Any]] = []
    for number, _line, item in _lines(raw, path, SOLUTIONS_FILE):
        _check_solution(item, f"{SOLUTIONS_FILE} line {number}", path)
        solutions.append(item)
    if metadata["total_count"] != len(solutions):
        raise DatapackError(f"{path}: total_count is {metadata['total_count']} but "
                            f"{SOLUTIONS_FILE} holds {len(solutions)} solutions")
    return SolutionDatapack(path, metadata, solutions)


# -- writing -----------------------------------------------------------------------------------

_PROBLEM_ORDER = ("type", "schema_version", "task_id", "date", "prompt", "metadata", "group",
                  "context_files", "test_files", "source_references", "build_command",
                  "test_command", "benchmark_command", "timing_mode", "min_cuda_toolkit",
                  "compute_capability", "requires_datacenter_gpu", "timeout_seconds",
                  "baseline_solution")
_METADATA_ORDER = ("difficulty", "tags", "releases", "do_not_release")


def _normalize_references(refs: Any) -> Any:
    # ComputeEval serializes source_references as {"any": [...]|null, "all": [...]|null}.
    if refs is None:
        return None
    if isinstance(refs, str):
        return {"any": None, "all": [refs]}
    if isinstance(refs, list):
        return {"any": None, "all": list(refs)}
    if isinstance(refs, dict):
        if refs.get("any") is None and refs.get("all") is None:
            raise ValueError("source_references: give at least one of 'any' and 'all'")
        return {"any": refs.get("any"), "all": refs.get("all")}
    raise ValueError(f"source_references must be a string, a list or {{any, all}} (got {refs!r})")


def normalize_solution(solution: Dict[str, Any]) -> Dict[str, Any]:
    """A file solution with ComputeEval's field order and defaults."""
    out: Dict[str, Any] = {
        "schema_version": solution.get("schema_version", SOLUTION_SCHEMA_VERSION),
        "type": solution.get("type", "file"),
        "task_id": solution["task_id"],
        "files": [{"path": f["path"], "content": f["content"]} for f in solution.get("files", [])],
    }
    for key, value in solution.items():  # ComputeEval keeps a solution's extra fields
        if key not in out:
            out[key] = value
    return out


def normalize_problem(problem: Dict[str, Any]) -> Dict[str, Any]:
    """A problem as ComputeEval serializes it: its field order, defaults filled in, and
    ``source_references`` in the ``{"any", "all"}`` form."""
    meta_in = problem.get("metadata") or {}
    metadata = {
        "difficulty": meta_in.get("difficulty"),
        "tags": list(meta_in.get("tags") or []),
        "releases": list(meta_in.get("releases") or []),
        "do_not_release": bool(meta_in.get("do_not_release", False)),
    }
    for key, value in meta_in.items():
        if key not in _METADATA_ORDER:
            metadata[key] = value
    defaults = {
        "type": "cuda_cpp",
        "schema_version": PROBLEM_SCHEMA_VERSION,
        "context_files": [],
        "test_files": [],
        "source_references": None,
        "build_command": None,
        "benchmark_command": None,
        "timing_mode": {"type": "process"},
        "min_cuda_toolkit": None,
        "compute_capability": "8.0",
        "requires_datacenter_gpu": False,
        "timeout_seconds": None,
        "baseline_solution": None,
    }
    out: Dict[str, Any] = {}
    for key in _PROBLEM_ORDER:
        if key == "metadata":
            out[key] = metadata
        elif key in problem:
            out[key] = problem[key]
        elif key in defaults:
            out[key] = defaults[key]
        else:
            raise ValueError(f"problem {problem.get('task_id', '?')!r}: {key!r} is required")
    out["source_references"] = _normalize_references(out["source_references"])
    if out["timeout_seconds"] is not None:
        out["timeout_seconds"] = float(out["timeout_seconds"])
    for key in ("context_files", "test_files"):
        out[key] = [{"path": f["path"], "content": f["content"]} for f in out[key]]
    if out["baseline_solution"] is not None:
        out["baseline_solution"] = normalize_solution(out["baseline_solution"])
    unknown = sorted(set(problem) - set(_PROBLEM_ORDER))
    if unknown:
        raise ValueError(f"problem {problem.get('task_id', '?')!r}: unknown fields "
                         f"{', '.join(unknown)}")
    return out


def _write(path: str, data_name: str, lines: List[str], metadata: Dict[str, Any]) -> None:
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    metadata_bytes = json.dumps(metadata, ensure_ascii=False, indent=2).encode("utf-8")
    data_bytes = "".join(lines).encode("utf-8")
    fd, tmp = tempfile.mkstemp(prefix=".datapack-", suffix=".tar.gz", dir=directory)
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            for name, data in ((METADATA_FILE, metadata_bytes), (data_name, data_bytes)):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(data))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _now() -> str:
    return datetime.datetime.now().isoformat()


def write_problems(path: str, problems: Iterable[Dict[str, Any]], release: str,
                   description: Optional[str] = None, created_at: Optional[str] = None,
                   normalize: bool = True) -> Dict[str, Any]:
    """Write a problems datapack with its task_id_hashes; returns its metadata.

    ``normalize`` gives each problem ComputeEval's field order and defaults first (as
    ComputeEval's own writer does); without it each problem is written as given.
    """
    lines: List[str] = []
    hashes: Dict[str, str] = {}
    for problem in problems:
        item = normalize_problem(problem) if normalize else problem
        task_id = item["task_id"]
        if task_id in hashes:
            raise ValueError(f"duplicate task_id found when writing problem datapack: {task_id}")
        line = dump_line(item)
        lines.append(line)
        hashes[task_id] = hashlib.md5(line.encode("utf-8")).hexdigest()
    metadata = {
        "release": release,
        "total_count": len(lines),
        "created_at": created_at or _now(),
        "description": description,
        "task_id_hashes": hashes,
    }
    _write(path, PROBLEMS_FILE, lines, metadata)
    return metadata


def write_solutions(path: str, solutions: Iterable[Dict[str, Any]], release: str,
                    description: Optional[str] = None, groups: Optional[Sequence[str]] = None,
                    created_at: Optional[str] = None, normalize: bool = True) -> Dict[str, Any]:
    """Write a solutions datapack; returns its metadata."""
    lines = [dump_line(normalize_solution(s) if normalize else s) for s in solutions]
    metadata = {
        "release": release,
        "total_count": len(lines),
        "created_at": created_at or _now(),
        "description": description,
        "groups": list(groups) if groups is not None else None,
    }
    _write(path, SOLUTIONS_FILE, lines, metadata)
    return metadata
