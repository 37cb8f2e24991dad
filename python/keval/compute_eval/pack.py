"""Datapacks from directories: keval's test problems, and solutions to them.

A problem directory (tests/compute_eval/problems/<name>/, see python/README.md):

    problem.json        every Problem field but context_files, test_files, baseline_solution
    context/            the files the solver sees -> context_files, path relative to context/
    test/               the held-out harness -> test_files, path relative to the problem
                        directory (test/test_main.cpp stays test/test_main.cpp, the path the
                        build command names)
    solution/           the baseline solution -> baseline_solution.files, relative to solution/
    variants/<variant>/ other solutions (used by tests), relative to variants/<variant>/

A solution directory is one of: a problem directory (its solution/), a problem's solution/ or
variants/<variant>/ (the task_id is the problem's), or any directory holding a solution.json
``{"task_id": ...}`` beside the solution's files.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Iterable, List, Optional, Sequence

from .datapack import normalize_problem, write_problems, write_solutions

__all__ = [
    "PackError",
    "load_problem_dir",
    "load_solution_dir",
    "pack_problems",
    "pack_solutions",
    "read_tree",
]

PROBLEM_JSON = "problem.json"
SOLUTION_JSON = "solution.json"
_FROM_DIRECTORIES = ("context_files", "test_files", "baseline_solution")


class PackError(ValueError):
    """A directory that is not a problem or a solution in our format; the message names it."""


def read_tree(root: str, prefix: str = "", skip: Sequence[str] = ()) -> List[Dict[str, str]]:
    """Every regular file under ``root`` as ``{"path": prefix + relative path, "content"}``,
    sorted by path. Symbolic links and files that are not UTF-8 text are errors."""
    files: List[Dict[str, str]] = []
    for directory, subdirs, names in os.walk(root):
        subdirs.sort()
        for name in names:
            full = os.path.join(directory, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if rel in skip:
                continue
            if os.path.islink(full):
                raise PackError(f"{full}: a symbolic link; datapacks hold file contents only")
            if not os.path.isfile(full):
                raise PackError(f"{full}: not a regular file")
            try:
                with open(full, "r", encoding="utf-8", newline="") as f:
                    content = f.read()
            except UnicodeDecodeError as e:
                raise PackError(f"{full}: not UTF-8 text ({e})") from e
            files.append({"path": prefix + rel, "content": content})
    for directory, subdirs, _ in os.walk(root):
        for name in subdirs:
            if os.path.islink(os.path.join(directory, name)):
                raise PackError(f"{os.path.join(directory, name)}: a symbolic link; datapacks "
                                "hold file contents only")
    files.sort(key=lambda f: f["path"])
    return files


def _read_json(path: str) -> Dict[str, Any]:
    try:
        with open(path, "r", encoding="utf-8") as f:
            value = json.load(f)
    except OSError as e:
        raise PackError(f"{path}: {e.strerror or e}") from e
    except ValueError as e:
        raise PackError(f"{path}: not valid JSON: {e}") from e
    if not isinstance(value, dict):
        raise PackError(f"{path}: must be a JSON object")
    return value


def load_problem_dir(directory: str) -> Dict[str, Any]:
    """The problem (ComputeEval's schema version 2, normalized) a problem directory defines."""
    spec_path = os.path.join(directory, PROBLEM_JSON)
    if not os.path.isfile(spec_path):
        raise PackError(f"{directory}: not a problem directory (no {PROBLEM_JSON})")
    problem = _read_json(spec_path)
    for key in _FROM_DIRECTORIES:
        if key in problem:
            raise PackError(f"{spec_path}: {key!r} comes from the directory "
                            f"({'context/' if key == 'context_files' else 'test/' if key == 'test_files' else 'solution/'}), "
                            "not from problem.json")
    task_id = problem.get("task_id")
    if not isinstance(task_id, str) or not task_id:
        raise PackError(f"{spec_path}: 'task_id' must be a non-empty string")
    context = os.path.join(directory, "context")
    test = os.path.join(directory, "test")
    solution = os.path.join(directory, "solution")
    problem["context_files"] = read_tree(context) if os.path.isdir(context) else []
    problem["test_files"] = read_tree(test, prefix="test/") if os.path.isdir(test) else []
    if os.path.isdir(solution):
        files = read_tree(solution)
        if not files:
            raise PackError(f"{solution}: empty (a baseline solution needs files)")
        problem["baseline_solution"] = {"schema_version": 1, "type": "file",
                                        "task_id": task_id, "files": files}
    try:
        return normalize_problem(problem)
    except (KeyError, ValueError, TypeError) as e:
        raise PackError(f"{spec_path}: {e}") from e


def _problem_task_id(problem_dir: str) -> str:
    spec = _read_json(os.path.join(problem_dir, PROBLEM_JSON))
    task_id = spec.get("task_id")
    if not isinstance(task_id, str) or not task_id:
        raise PackError(f"{os.path.join(problem_dir, PROBLEM_JSON)}: 'task_id' must be a "
                        "non-empty string")
    return task_id


def load_solution_dir(directory: str, variant: Optional[str] = None) -> Dict[str, Any]:
    """The file solution a solution directory defines (see the module's docstring).

    ``variant``: for a problem directory, its ``variants/<variant>/`` instead of ``solution/``.
    """
    directory = os.path.normpath(directory)
    if not os.path.isdir(directory):
        raise PackError(f"{directory}: no such directory")
    parent = os.path.dirname(os.path.abspath(directory))
    if os.path.isfile(os.path.join(directory, PROBLEM_JSON)):
        task_id = _problem_task_id(directory)
        files_dir = (os.path.join(directory, "variants", variant) if variant
                     else os.path.join(directory, "solution"))
        if not os.path.isdir(files_dir):
            raise PackError(f"{directory}: has no {os.path.relpath(files_dir, directory)}/")
        files = read_tree(files_dir)
    elif variant:
        raise PackError(f"{directory}: a variant is chosen from a problem directory, and this "
                        f"is not one (no {PROBLEM_JSON})")
    elif os.path.isfile(os.path.join(directory, SOLUTION_JSON)):
        spec = _read_json(os.path.join(directory, SOLUTION_JSON))
        task_id = spec.get("task_id")
        if not isinstance(task_id, str) or not task_id:
            raise PackError(f"{os.path.join(directory, SOLUTION_JSON)}: 'task_id' must be a "
                            "non-empty string")
        files = read_tree(directory, skip=(SOLUTION_JSON,))
    elif (os.path.basename(directory) == "solution"
          and os.path.isfile(os.path.join(parent, PROBLEM_JSON))):
        task_id = _problem_task_id(parent)
        files = read_tree(directory)
    elif (os.path.basename(parent) == "variants"
          and os.path.isfile(os.path.join(os.path.dirname(parent), PROBLEM_JSON))):
        task_id = _problem_task_id(os.path.dirname(parent))
        files = read_tree(directory)
    else:
        raise PackError(f"{directory}: not a solution directory (a problem directory, its "
                        f"solution/ or variants/<name>/, or a directory with {SOLUTION_JSON})")
    if not files:
        raise PackError(f"{directory}: holds no files")
    return {"schema_version": 1, "type": "file", "task_id": task_id, "files": files}


def pack_problems(directories: Iterable[str], out: str, release: str,
                  description: Optional[str] = None) -> Dict[str, Any]:
    """A problems datapack from problem directories; returns its metadata."""
    directories = list(directories)
    problems = [load_problem_dir(d) for d in directories]
    seen: Dict[str, str] = {}
    for d, p in zip(directories, problems):
        if p["task_id"] in seen:
            raise PackError(f"{d}: task_id {p['task_id']!r} is also {seen[p['task_id']]}'s")
        seen[p["task_id"]] = d
    return write_problems(out, problems, release=release, description=description)


def pack_solutions(directories: Iterable[str], out: str, release: str,
                   description: Optional[str] = None, groups: Optional[Sequence[str]] = None,
                   variants: Sequence[Optional[str]] = (None,)) -> Dict[str, Any]:
    """A solutions datapack from solution directories; returns its metadata.

    ``variants``: for each problem directory among ``directories``, the solutions to take, in
    order (None: its baseline ``solution/``). Other directories give one solution each.
    """
    solutions = []
    for d in directories:
        if os.path.isfile(os.path.join(d, PROBLEM_JSON)):
            solutions.extend(load_solution_dir(d, v) for v in variants)
        else:
            solutions.append(load_solution_dir(d))
    return write_solutions(out, solutions, release=release, description=description,
                           groups=groups)
