"""ComputeEval datapacks: writing, reading back, and the checks that catch a corrupt one."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile

import pytest

from compute_eval_support import PROBLEMS_DIR, make_problem, make_solution
from keval.compute_eval.datapack import (
    DatapackError,
    datapack_name,
    dump_line,
    normalize_problem,
    read_problems,
    read_solutions,
    write_problems,
    write_solutions,
)
from keval.compute_eval.pack import (
    PackError,
    load_problem_dir,
    load_solution_dir,
    pack_problems,
    pack_solutions,
)


def members(path):
    with tarfile.open(path, "r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


def retar(path, changes):
    """Rewrite the datapack at path with some members replaced (None: removed)."""
    content = members(path)
    content.update(changes)
    with tarfile.open(path, "w:gz") as tar:
        for name, data in content.items():
            if data is None:
                continue
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def problems():
    return [make_problem("T/0", group="cccl", difficulty="easy"),
            make_problem("T/1", group="cublas", difficulty="hard", baseline=None,
                         prompt="Ünïcode prompt — kept as UTF-8 ✓"),
            make_problem("T/2", group="cccl", difficulty="medium",
                         source_references={"any": ["thrust::sort"]})]


def test_problems_round_trip(tmp_path, problems):
    path = str(tmp_path / "2025-1-problems.tar.gz")
    metadata = write_problems(path, problems, release="2025-1", description="test")
    assert set(members(path)) == {"metadata.json", "problems.jsonl"}
    pack = read_problems(path)
    assert pack.metadata == metadata
    assert pack.metadata["total_count"] == 3
    assert pack.release == "2025-1"
    assert pack.name == "2025-1"
    assert [p["task_id"] for p in pack.problems] == ["T/0", "T/1", "T/2"]
    assert pack.problems == [normalize_problem(p) for p in problems]
    # One compact line per problem, as pydantic writes them, hashed "\n" included.
    lines = members(path)["problems.jsonl"].decode("utf-8").splitlines(keepends=True)
    assert lines == [dump_line(p) for p in pack.problems]
    assert "Ünïcode prompt — kept as UTF-8 ✓" in lines[1]
    for line, problem in zip(lines, pack.problems):
        assert metadata["task_id_hashes"][problem["task_id"]] == \
            hashlib.md5(line.encode("utf-8")).hexdigest()
    assert json.loads(members(path)["metadata.json"])["task_id_hashes"] == \
        metadata["task_id_hashes"]


def test_groups_filter(tmp_path, problems):
    path = str(tmp_path / "p.tar.gz")
    write_problems(path, problems, release="internal")
    assert [p["task_id"] for p in read_problems(path, groups=["cccl"]).problems] == ["T/0", "T/2"]
    assert read_problems(path, groups=[]).problems == []


def test_normalized_like_computeeval(problems):
    p = normalize_problem({**problems[2], "source_references": "cublasSgemm"})
    assert p["source_references"] == {"any": None, "all": ["cublasSgemm"]}
    p = normalize_problem({**problems[2], "source_references": ["a", "b"]})
    assert p["source_references"] == {"any": None, "all": ["a", "b"]}
    p = normalize_problem(problems[2])
    assert p["source_references"] == {"any": ["thrust::sort"], "all": None}
    assert list(p)[:3] == ["type", "schema_version", "task_id"]
    minimal = {"task_id": "M/0", "date": "d", "prompt": "p", "group": "cccl",
               "metadata": {}, "test_command": "./t"}
    p = normalize_problem(minimal)
    assert p["compute_capability"] == "8.0"
    assert p["timing_mode"] == {"type": "process"}
    assert p["metadata"] == {"difficulty": None, "tags": [], "releases": [],
                             "do_not_release": False}
    with pytest.raises(ValueError, match="unknown fields typo"):
        normalize_problem({**minimal, "typo": 1})
    with pytest.raises(ValueError, match="'prompt' is required"):
        normalize_problem({k: v for k, v in minimal.items() if k != "prompt"})


def test_corrupt_problem_is_rejected_naming_task_id_and_datapack(tmp_path, problems):
    path = str(tmp_path / "x-problems.tar.gz")
    write_problems(path, problems, release="internal")
    lines = members(path)["problems.jsonl"].decode("utf-8").splitlines(keepends=True)
    edited = json.loads(lines[1])
    edited["test_command"] = "true"  # a harness that always passes
    lines[1] = dump_line(edited)
    retar(path, {"problems.jsonl": "".join(lines).encode("utf-8")})
    with pytest.raises(DatapackError) as e:
        read_problems(path)
    assert "'T/1'" in str(e.value)
    assert path in str(e.value)
    assert "does not match its hash" in str(e.value)


def test_whitespace_change_breaks_the_hash(tmp_path, problems):
    path = str(tmp_path / "p.tar.gz")
    write_problems(path, problems, release="internal")
    raw = members(path)["problems.jsonl"]
    retar(path, {"problems.jsonl": raw.replace(b"\n", b"\r\n", 1)})
    with pytest.raises(DatapackError, match="'T/0'"):
        read_problems(path)


def test_task_id_missing_from_hashes(tmp_path, problems):
    path = str(tmp_path / "p.tar.gz")
    metadata = write_problems(path, problems, release="internal")
    del metadata["task_id_hashes"]["T/2"]
    retar(path, {"metadata.json": json.dumps(metadata).encode()})
    with pytest.raises(DatapackError, match=r"task_id 'T/2' .* not in the metadata's task_id_hashes"):
        read_problems(path)


def test_hashes_naming_absent_problems(tmp_path, problems):
    path = str(tmp_path / "p.tar.gz")
    metadata = write_problems(path, problems, release="internal")
    metadata["task_id_hashes"]["T/9"] = "0" * 32
    retar(path, {"metadata.json": json.dumps(metadata).encode()})
    with pytest.raises(DatapackError, match="T/9"):
        read_problems(path)


def test_total_count_mismatch(tmp_path, problems):
    path = str(tmp_path / "p.tar.gz")
    metadata = write_problems(path, problems, release="internal")
    metadata["total_count"] = 4
    retar(path, {"metadata.json": json.dumps(metadata).encode()})
    with pytest.raises(DatapackError, match="total_count is 4 but problems.jsonl holds 3"):
        read_problems(path)

    spath = str(tmp_path / "s-solutions.tar.gz")
    smeta = write_solutions(spath, [make_solution("T/0", "pass")], release="internal")
    smeta["total_count"] = 2
    retar(spath, {"metadata.json": json.dumps(smeta).encode()})
    with pytest.raises(DatapackError, match="total_count is 2 but solutions.jsonl holds 1"):
        read_solutions(spath)


def test_duplicate_task_ids(tmp_path, problems):
    path = str(tmp_path / "p.tar.gz")
    with pytest.raises(ValueError, match="Duplicate task_id|duplicate task_id"):
        write_problems(path, [problems[0], problems[0]], release="internal")
    # A datapack written by hand with the line twice.
    write_problems(path, problems[:1], release="internal")
    line = members(path)["problems.jsonl"]
    metadata = json.loads(members(path)["metadata.json"])
    metadata["total_count"] = 2
    retar(path, {"problems.jsonl": line + line, "metadata.json": json.dumps(metadata).encode()})
    with pytest.raises(DatapackError, match="duplicate task_id 'T/0'"):
        read_problems(path)


def test_last_line_without_newline_and_blank_lines(tmp_path, problems):
    path = str(tmp_path / "p.tar.gz")
    write_problems(path, problems, release="internal")
    raw = members(path)["problems.jsonl"]
    retar(path, {"problems.jsonl": b"\n" + raw.rstrip(b"\n") + b"\n"[:0]})
    assert len(read_problems(path).problems) == 3


@pytest.mark.parametrize("change,message", [
    ({"metadata.json": None}, "metadata.json is missing"),
    ({"problems.jsonl": None}, "problems.jsonl is missing"),
    ({"metadata.json": b"{not json"}, "metadata.json is not valid JSON"),
    ({"metadata.json": b"[]"}, "must be a JSON object"),
    ({"problems.jsonl": b"{\"task_id\": \"T/0\"\n"}, "line 1 is not valid JSON"),
    ({"problems.jsonl": b"\xff\xfe\n"}, "not UTF-8"),
])
def test_malformed_datapacks(tmp_path, problems, change, message):
    path = str(tmp_path / "p.tar.gz")
    write_problems(path, problems, release="internal")
    retar(path, change)
    with pytest.raises(DatapackError, match=message):
        read_problems(path)


def test_not_a_datapack(tmp_path):
    path = tmp_path / "junk.tar.gz"
    path.write_bytes(b"not a tarball")
    with pytest.raises(DatapackError, match="not a .tar.gz datapack"):
        read_problems(str(path))
    with pytest.raises(DatapackError, match="no such file"):
        read_solutions(str(tmp_path / "absent.tar.gz"))


def test_solutions_datapack_is_not_a_problems_datapack(tmp_path):
    path = str(tmp_path / "m-solutions.tar.gz")
    write_solutions(path, [make_solution("T/0", "pass")], release="internal")
    with pytest.raises(DatapackError, match="holds solutions.jsonl, not problems.jsonl"):
        read_problems(path)
    ppath = str(tmp_path / "p.tar.gz")
    write_problems(ppath, [make_problem("T/0")], release="internal")
    with pytest.raises(DatapackError, match="not a solutions datapack"):
        read_solutions(ppath)


def test_problem_fields_checked(tmp_path, problems):
    path = str(tmp_path / "p.tar.gz")
    bad = dict(problems[0], schema_version=1)
    write_problems(path, [bad], release="internal", normalize=False)
    with pytest.raises(DatapackError, match="schema_version 1; expected 2"):
        read_problems(path)
    write_problems(path, [dict(problems[0], group="nope")], release="internal", normalize=False)
    with pytest.raises(DatapackError, match="'group' must be one of"):
        read_problems(path)


def test_solutions_round_trip(tmp_path):
    path = str(tmp_path / "model-a-solutions.tar.gz")
    solutions = [make_solution("T/0", "pass"), make_solution("T/0", "wrong"),
                 make_solution("T/1", "pass")]
    metadata = write_solutions(path, solutions, release="2025-2", groups=["cccl"])
    pack = read_solutions(path)
    assert pack.metadata == metadata
    assert pack.solutions == solutions
    assert pack.groups == ["cccl"]
    assert pack.name == "model-a"
    assert set(members(path)) == {"metadata.json", "solutions.jsonl"}


def test_solution_checks(tmp_path):
    path = str(tmp_path / "s-solutions.tar.gz")
    write_solutions(path, [{"schema_version": 1, "type": "patch", "task_id": "T/0",
                            "patch": "--- a"}], release="internal", normalize=False)
    with pytest.raises(DatapackError, match="patch solutions are not supported"):
        read_solutions(path)
    write_solutions(path, [dict(make_solution("T/0", "pass"), schema_version=2)],
                    release="internal")
    with pytest.raises(DatapackError, match="schema_version 2; expected 1"):
        read_solutions(path)
    write_solutions(path, [make_solution("T/0", "pass")], release="internal", groups=["bogus"])
    with pytest.raises(DatapackError, match="unknown groups bogus"):
        read_solutions(path)


def test_datapack_name():
    assert datapack_name("/x/gpt-5-solutions.tar.gz") == "gpt-5"
    assert datapack_name("2025-1-problems.tar.gz") == "2025-1"
    assert datapack_name("odd.tar.gz") == "odd"
    assert datapack_name("plain") == "plain"


# -- our problem directories ---------------------------------------------------------------------

ALL_PROBLEMS = sorted(os.listdir(PROBLEMS_DIR))


def test_every_test_problem_packs(tmp_path):
    assert {"host_saxpy", "nvcc_host_sum", "vector_add_kernel", "thrust_sort",
            "cublas_sgemm"} <= set(ALL_PROBLEMS)
    path = str(tmp_path / "keval-problems.tar.gz")
    dirs = [os.path.join(PROBLEMS_DIR, d) for d in ALL_PROBLEMS]
    metadata = pack_problems(dirs, path, release="internal")
    pack = read_problems(path)
    assert metadata["total_count"] == len(ALL_PROBLEMS)
    by_id = {p["task_id"]: p for p in pack.problems}
    saxpy = by_id["KEVAL/host_saxpy"]
    assert saxpy["compute_capability"] is None
    assert [f["path"] for f in saxpy["context_files"]] == ["include/saxpy.h"]
    assert [f["path"] for f in saxpy["test_files"]] == ["test/test_main.cpp"]
    assert [f["path"] for f in saxpy["baseline_solution"]["files"]] == ["solution.cpp"]
    assert saxpy["baseline_solution"]["task_id"] == "KEVAL/host_saxpy"
    assert saxpy["source_references"] == {"any": ["std::transform", "std::for_each"],
                                          "all": ["std::fill"]}
    assert saxpy["timeout_seconds"] == 5.0
    host_sum = by_id["KEVAL/nvcc_host_sum"]
    assert [f["path"] for f in host_sum["test_files"]] == \
        ["test/check.cu", "test/check.h", "test/test_main.cu"]
    assert by_id["KEVAL/cublas_sgemm"]["source_references"] == {"any": None,
                                                                "all": ["cublasSgemm"]}
    for problem in pack.problems:
        assert problem["task_id"].startswith("KEVAL/")
        assert problem["baseline_solution"] is not None
        for f in problem["test_files"]:
            assert f["path"].startswith("test/")
        # No -arch: the same command builds on a machine without a GPU.
        assert "-arch" not in (problem["build_command"] or "")


def test_variants_pack_as_solutions(tmp_path):
    saxpy = os.path.join(PROBLEMS_DIR, "host_saxpy")
    path = str(tmp_path / "v-solutions.tar.gz")
    pack_solutions([saxpy], path, release="internal", variants=["pass", "wrong"])
    pack = read_solutions(path)
    assert [s["task_id"] for s in pack.solutions] == ["KEVAL/host_saxpy"] * 2
    assert pack.solutions[0]["files"][0]["path"] == "solution.cpp"
    assert "n - 1" in pack.solutions[1]["files"][0]["content"]
    # The same from the variant directories themselves, and the baseline from the problem.
    s = load_solution_dir(os.path.join(saxpy, "variants", "crash"))
    assert s["task_id"] == "KEVAL/host_saxpy"
    assert load_solution_dir(saxpy)["files"] == \
        load_problem_dir(saxpy)["baseline_solution"]["files"]
    assert load_solution_dir(os.path.join(saxpy, "solution"))["task_id"] == "KEVAL/host_saxpy"


def test_solution_json_directories(tmp_path):
    d = tmp_path / "mine"
    (d / "sub").mkdir(parents=True)
    (d / "solution.json").write_text(json.dumps({"task_id": "T/0"}))
    (d / "solution.cu").write_text("int x;\n")
    (d / "sub" / "helper.cu").write_text("int y;\n")
    s = load_solution_dir(str(d))
    assert s == {"schema_version": 1, "type": "file", "task_id": "T/0",
                 "files": [{"path": "solution.cu", "content": "int x;\n"},
                           {"path": "sub/helper.cu", "content": "int y;\n"}]}


def test_pack_errors(tmp_path):
    with pytest.raises(PackError, match="not a solution directory"):
        load_solution_dir(str(tmp_path))
    with pytest.raises(PackError, match="not a problem directory"):
        load_problem_dir(str(tmp_path))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "problem.json").write_text(json.dumps({"task_id": "B/0", "context_files": []}))
    with pytest.raises(PackError, match="'context_files' comes from the directory"):
        load_problem_dir(str(bad))
    (bad / "problem.json").write_text(json.dumps({"task_id": "B/0", "group": "cccl"}))
    with pytest.raises(PackError, match="is required"):
        load_problem_dir(str(bad))
    saxpy = os.path.join(PROBLEMS_DIR, "host_saxpy")
    with pytest.raises(PackError, match="has no variants/nope"):
        load_solution_dir(saxpy, "nope")
    with pytest.raises(PackError, match="also"):
        pack_problems([saxpy, saxpy], str(tmp_path / "p.tar.gz"), release="internal")
