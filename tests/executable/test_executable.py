"""``dl.Executable``: a compiled kernel as data, written without pickle and read back equal.

Every algorithm of ``dl.algorithms`` (dense, and sparse bound to its patterns) round-trips
through its bytes; the read-back executable runs on the local, MPI and Dask runtimes with a
value equal to numpy's / scipy's and measured stats equal to its prediction. Malformed
bytes of any kind are an ``InputError``, never an exception from inside (hypothesis).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from exe_cases import CASES, P, close
from hypothesis import given
from hypothesis import strategies as st

import distal as dl
from distal.runtime import codec
from distal.runtime.base import Runtime, get_runtime, register_runtime, runtime_class
from distal.runtime.executable import Executable
from mpi_jobs import run_job
from runtime_matrix_cases import same_but_peak

SCRIPT = Path(__file__).resolve().parent / "_mpi_exe.py"
DENSE = [n for n in CASES if n.startswith("dense")]
SPARSE = [n for n in CASES if n.startswith("sparse")]


def _round_trip(name: str) -> tuple[Any, Executable, Executable, Any]:
    case = CASES[name]()
    planned = case.planned()
    exe = planned.executable()
    back = Executable.loads(exe.dumps())
    return case, exe, back, planned


@pytest.mark.parametrize("name", list(CASES))
def test_every_algorithm_round_trips_and_runs_the_same_locally(name: str) -> None:
    """Read back equal (and written again byte for byte), then run: the same bits as the
    kernel's own run, the reference's value, and measured stats equal to the prediction."""
    case, exe, back, planned = _round_trip(name)
    assert back == exe
    assert back is not exe
    assert back.dumps() == exe.dumps()
    assert back.key == exe.key
    assert back.source == exe.source
    assert back.tensors == exe.tensors
    assert back.leaves == exe.leaves
    assert back.stats() == planned.stats()
    assert len(back.plan.messages) == len(exe.plan.messages)
    if name in DENSE:  # dense plans compare field by field (regions of sparse ones by identity)
        assert back.plan.programs == exe.plan.programs
        assert back.plan.messages == exe.plan.messages
        assert back.plan.placements == exe.plan.placements
    ours = planned.run(case.inputs)
    theirs = back.run(case.inputs)
    assert close(theirs.value, case.reference)
    assert np.array_equal(_dense(theirs.value), _dense(ours.value))
    assert theirs.stats == ours.stats == planned.stats()


def _dense(x: Any) -> np.ndarray:
    return np.asarray(x.to_dense()) if hasattr(x, "to_dense") else np.asarray(x)


@pytest.mark.dask
@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", list(CASES))
def test_every_read_back_executable_runs_on_dask(dask_client: Any, name: str) -> None:
    case, exe, back, _ = _round_trip(name)
    res = back.run(case.inputs, runtime="dask", client=dask_client, progress=False)
    assert close(res.value, case.reference)
    same_but_peak(res.stats, exe.stats(), exe.plan)  # (the workers measure peak_words)


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_every_read_back_executable_runs_on_mpi() -> None:
    """Rank 0 alone lowers the plans; the other ranks run what they read from its bytes."""
    job = run_job(P, script=SCRIPT, timeout=240)
    assert job.rc == 0, job
    lines = [d for d in job.lines() if "case" in d]
    assert [d for d in lines if not d["ok"]] == [], job
    assert {(d["case"], d["rank"]) for d in lines} == {(n, r) for n in CASES for r in range(P)}


# -- parts: one processor's program -------------------------------------------------------------


@pytest.mark.parametrize("name", ["dense cannon", "dense hierarchical_summa", "sparse spadd3"])
def test_a_part_is_one_processor_s_program(name: str) -> None:
    """``kernel.executable([p])`` holds processor ``p``'s program alone, as
    ``kernel.program(p)`` builds it; a part cut from the whole executable holds the same
    instructions, and both round-trip."""
    case = CASES[name]()
    planned = case.planned()
    whole = planned.executable()
    for p in range(whole.nprocs):
        mine = planned.executable([p])
        assert mine.processors == (p,)
        assert not mine.whole
        cut = whole.part([p])
        assert cut.plan.ops(p) == mine.plan.ops(p) == planned.program(p).ops(p)
        assert len(cut.plan.messages) == len(mine.plan.messages)
        assert Executable.loads(mine.dumps()) == mine
        with pytest.raises(dl.InputError, match="holds the programs of processors"):
            mine.program((p + 1) % whole.nprocs)
    assert whole.part(range(whole.nprocs)) is whole


def test_a_part_of_a_bound_kernel_carries_no_stats() -> None:
    """A bound kernel's stats are counted from its whole plan, which a part never writes."""
    case = CASES["sparse spadd3"]()
    bound = case.planned()
    part = bound.executable([1])
    assert part.predicted is None
    with pytest.raises(dl.InputError, match="counted from the whole plan"):
        part.stats()
    assert "plan" not in bound.__dict__  # the part wrote processor 1's program alone
    assert bound.executable().stats() == bound.stats()


def test_a_sparse_executable_carries_patterns_not_values() -> None:
    """The bound inputs' values are the run's, not the executable's: they are not written."""
    case = CASES["sparse spadd3"]()
    exe = case.planned().executable()
    data = exe.dumps()
    for name in ("B", "C", "D"):
        vals = dl.SparseArray.from_scipy(case.inputs[name], "csr").vals
        assert vals.tobytes()[:64] not in data
    back = Executable.loads(data)
    assert all(not np.any(a.vals) for a in back.plan.patterns.values())
    assert close(back.run(case.inputs).value, case.reference)


def test_a_run_s_inputs_are_checked_against_the_executable() -> None:
    case = CASES["sparse spadd3"]()
    back = Executable.loads(case.planned().executable().dumps())
    other = dict(case.inputs, B=case.inputs["C"])  # same shape, another pattern
    with pytest.raises(dl.InputError, match="another pattern"):
        back.run(other)
    with pytest.raises(dl.InputError, match="missing"):
        back.run({"B": case.inputs["B"]})
    dense = CASES["dense cannon"]()
    exe = Executable.loads(dense.planned().executable().dumps())
    with pytest.raises(dl.InputError, match="shape"):
        exe.run({**dense.inputs, "B": dense.inputs["B"][:-1]})
    with pytest.raises(dl.InputError, match="is the output"):
        exe.run({**dense.inputs, "A": dense.inputs["B"]})


# -- the format: versions and malformed bytes -----------------------------------------------------


@pytest.fixture(scope="module")
def blob() -> bytes:
    return CASES["sparse spmv rows hull"]().planned().executable().dumps()


def test_unknown_versions_and_foreign_bytes_are_input_errors(blob: bytes) -> None:
    head = len(codec.MAGIC)
    newer = blob[:head] + (codec.VERSION + 1).to_bytes(2, "little") + blob[head + 2 :]
    with pytest.raises(dl.InputError, match=f"version {codec.VERSION + 1} is not one"):
        dl.Executable.loads(newer)
    with pytest.raises(dl.InputError, match="not a serialized distal executable"):
        dl.Executable.loads(b"PK\x03\x04" + blob)
    with pytest.raises(dl.InputError, match="from bytes"):
        dl.Executable.loads(blob.decode("latin-1"))  # type: ignore[arg-type]
    with pytest.raises(dl.InputError, match="malformed"):
        dl.Executable.loads(blob[: len(blob) // 2])
    not_an_exe = codec.dumps((1, 2, 3))
    with pytest.raises(dl.InputError, match="not an executable"):
        dl.Executable.loads(not_an_exe)


def _loads_cleanly(data: bytes) -> None:
    """Either an ``InputError`` or an executable that writes itself again."""
    try:
        exe = dl.Executable.loads(data)
    except dl.InputError:
        return
    assert Executable.loads(exe.dumps()) == exe


@given(st.binary(max_size=256))
def test_random_bytes_are_input_errors(data: bytes) -> None:
    with pytest.raises(dl.InputError):
        dl.Executable.loads(data)
    with pytest.raises(dl.InputError):
        dl.Executable.loads(codec.MAGIC + codec.VERSION.to_bytes(2, "little") + data)


@given(st.data())
def test_damaged_executables_are_input_errors_or_executables(blob: bytes, data: Any) -> None:
    """Flipped bits, cut or spliced bytes anywhere in a real executable."""
    raw = bytearray(blob)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        kind = data.draw(st.sampled_from(["flip", "cut", "byte", "splice"]))
        if kind == "flip":
            raw[at] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "byte":
            raw[at] = data.draw(st.integers(0, 255))
        elif kind == "cut":
            del raw[at:]
            if not raw:
                break
        else:
            raw[at:at] = data.draw(st.binary(min_size=1, max_size=16))
    _loads_cleanly(bytes(raw))


@given(st.recursive(st.integers(-3, 3) | st.text(max_size=3) | st.none(), st.lists, max_leaves=30))
def test_well_formed_documents_of_anything_else_are_input_errors(doc: Any) -> None:
    """msgpack documents that are not an executable (any tags, nesting, references)."""
    import msgpack

    body = msgpack.packb({65: doc} if isinstance(doc, list) else doc)
    _loads_cleanly(codec.MAGIC + codec.VERSION.to_bytes(2, "little") + body)


def test_element_wise_passes_are_data_that_keeps_numpy_scalar_types() -> None:
    """A pass's constants keep their numpy types (which decide numpy's promotion)."""
    from distal.kernels.passes import Pass

    p = Pass("map", ("mul", ("slot", 0), ("const", np.float32(2.5))))
    back = codec.loads(codec.dumps(p))
    assert back == p
    assert type(back.key[2][1]) is np.float32
    x = np.ones(3, np.float32)
    assert back([x]).dtype == p([x]).dtype == np.float32


def _format_table() -> dict[int, tuple[str, bool, list[str]]]:
    """The records of docs/executable.md's table: tag -> (class, shared, fields)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "executable.md").read_text()
    body = text.split("<!-- format-table: begin -->")[1].split("<!-- format-table: end -->")[0]
    out = {}
    for line in body.splitlines()[3:]:
        tag, cls, shared, fields = (c.strip() for c in line.strip().strip("|").split("|"))
        out[int(tag)] = (cls.strip("`"), shared == "yes", [f.strip() for f in fields.split(",")])
    return out


def test_the_documented_format_is_the_codec_s() -> None:
    """Every record of the codec is in docs/executable.md with its tag and fields in order
    (a change of a record's fields is a change of the format: a new version, documented)."""
    written = {}
    for tag, kind in codec.TAGS.items():
        if tag in codec.POOL_TAGS:
            continue
        sample = {
            "Machine": ["levels"],
            "IndexVar": ["name"],
            "Tensor": ["name", "shape", "dtype", "format", "dist", "machine"],
            "Format": ["levels", "order"],
            "SparseArray": ["shape", "format", "pos", "crd", "dtype", "offset"],
            "Stats": [f.name for f in dataclasses.fields(dl.Stats)],
        }.get(kind.cls.__name__)
        fields = sample or [f.name for f in dataclasses.fields(kind.cls) if f.init]
        written[tag] = (f"{kind.cls.__module__}.{kind.cls.__qualname__}", kind.shared, fields)
    assert written == _format_table()


@pytest.mark.parametrize(
    "module",
    ["distal.plan.ir", "distal.plan.region", "distal.lang.nodes", "distal.lang.concrete"],
)
def test_every_class_a_plan_is_made_of_has_a_tag(module: str) -> None:
    """A new class of the plan IR or the notation must be given a tag (else an executable
    holding one cannot be written)."""
    import importlib

    mod = importlib.import_module(module)
    known = {k.cls for k in codec.TAGS.values()}
    missing = [
        name
        for name, obj in vars(mod).items()
        if isinstance(obj, type)
        and obj.__module__ == module
        and dataclasses.is_dataclass(obj)
        and obj not in known
    ]
    assert missing == []


# -- the registry ---------------------------------------------------------------------------------


class Recording(Runtime):
    """A runtime that runs on the local one and records what it was handed."""

    name = "recording"
    options = ("trace",)
    handed: ClassVar[list[Any]] = []

    def execute(self, exe: Any, inputs: Any, *, keep: bool = False, dot_with: Any = None) -> Any:
        type(self).handed.append(exe)
        return get_runtime("local", **self.opts).run(exe, inputs)


def test_a_registered_runtime_runs_what_kernel_run_hands_it() -> None:
    assert {"local", "mpi", "dask"} <= set(dl.runtimes())
    register_runtime("recording", Recording, replace=True)
    try:
        assert "recording" in dl.runtimes()
        case = CASES["dense cannon"]()
        kernel = case.planned()
        res = kernel.run(case.inputs, runtime="recording", trace=False)
        assert close(res.value, case.reference)
        assert [type(x) for x in Recording.handed] == [Executable]  # never the kernel
        with pytest.raises(dl.InputError, match=r"unknown option.*'progress'"):
            kernel.run(case.inputs, runtime="recording", progress=True)
        with pytest.raises(dl.InputError, match="registered already"):
            register_runtime("recording", Recording)
    finally:
        from distal.runtime import base

        base._REGISTRY.pop("recording", None)


def test_unknown_runtimes_options_and_missing_extras_name_themselves() -> None:
    case = CASES["dense cannon"]()
    exe = case.planned().executable()
    with pytest.raises(dl.InputError, match=r"unknown runtime 'gpu'.*'local'"):
        exe.run(case.inputs, runtime="gpu")
    for private in ("_hold", "_placed", "_trust", "_excluded", "_dot_with"):
        for name in ("local", "mpi", "dask"):
            with pytest.raises(dl.InputError, match=rf"unknown option.*'{private}'"):
                runtime_class(name)(**{private: 1})
    register_runtime("faraway", "distal_no_such_package.runtime:Far", extra="faraway")
    try:
        with pytest.raises(dl.NotSupportedYet, match=r"pip install 'distal\[faraway\]'"):
            exe.run(case.inputs, runtime="faraway")
    finally:
        from distal.runtime import base

        base._REGISTRY.pop("faraway", None)


def test_executables_of_different_kernels_differ() -> None:
    a = CASES["dense cannon"]().planned().executable()
    b = CASES["dense summa"]().planned().executable()
    c = dataclasses.replace(a, source="another text")
    assert a != b
    assert a != c
    assert a == Executable.loads(a.dumps())
    assert len({a, Executable.loads(a.dumps())}) == 1
    assert json.loads(json.dumps(a.source)) == a.source
