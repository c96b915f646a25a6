"""Metadata becomes JSON in one conversion: exact values converted, the rest refused naming the
field, and no two field names made one (docs/guarantees.md, section 7).

References: the expected JSON of each generated value is stated without the conversion under test:
numpy numbers by their Python equivalents (`int(...)`, the float a finite float32/16 widens to),
a decimal of at most 15 significant digits by the float that `float(str)` reads (IEEE doubles
round-trip 15 digits, DBL_DIG), one of 18 or more by nothing (no float's shortest text has more
than 17), dates by `isoformat`; YAML's spellings of one boolean or null by the list PyYAML resolves.
"""

from __future__ import annotations

import datetime
import json
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import embedkit
from embedkit.data.corpus import read_documents
from embedkit.data.values import json_metadata
from embedkit.errors import InputError

_NUMPY_INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32]


@st.composite
def convertible(draw) -> tuple[object, object]:
    """(a value with an exact JSON value, that JSON value)."""
    kinds = ["np-int", "np-float", "np-bool", "np-date", "decimal", "date", "datetime", "array"]
    kind = draw(st.sampled_from(kinds))
    if kind == "np-int":
        dtype = draw(st.sampled_from(_NUMPY_INTS))
        info = np.iinfo(dtype)
        number = draw(st.integers(int(info.min), int(info.max)))
        return dtype(number), number
    if kind == "np-float":
        dtype, width = draw(st.sampled_from([(np.float16, 16), (np.float32, 32), (np.float64, 64)]))
        number = draw(st.floats(allow_nan=False, allow_infinity=False, width=width))
        return dtype(number), number
    if kind == "np-bool":
        flag = draw(st.booleans())
        return np.bool_(flag), flag
    if kind == "np-date":  # a datetime64 as ISO text, never its count of days or nanoseconds
        day = draw(st.dates())
        return np.datetime64(day, "D"), day.isoformat()
    if kind == "decimal":  # at most 15 significant digits: a float reads it back exactly
        digits = draw(st.integers(1, 10**15 - 1))
        exponent = draw(st.integers(-290, 290))
        text = f"{digits}e{exponent}"
        value = Decimal(text)
        expected = int(value) if value == value.to_integral_value() and abs(value) < 2**63 else float(text)
        return value, expected
    if kind == "date":
        day = draw(st.dates())
        return day, day.isoformat()
    if kind == "datetime":
        moment = draw(st.datetimes())
        return moment, moment.isoformat(sep=" ")
    numbers = draw(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=5))
    return np.array(numbers, dtype=np.int64), numbers


@st.composite
def refused(draw) -> object:
    kinds = ["set", "frozenset", "bytes", "object", "complex", "decimal", "time", "timedelta64"]
    kind = draw(st.sampled_from(kinds))
    if kind == "decimal":  # 18 to 30 significant digits, not an integer: no float's shortest text
        digits = draw(st.integers(10**17 + 1, 10**30).filter(lambda d: d % 10 != 0))
        return Decimal(f"{digits}e-{draw(st.integers(1, 300))}")
    return {
        "set": {1, 2},
        "frozenset": frozenset({"a"}),
        "bytes": b"\x00\x01",
        "object": object(),
        "complex": 1 + 2j,
        "time": datetime.time(10, 30),
        "timedelta64": np.timedelta64(5, "s"),
    }[kind]


@settings(max_examples=300, deadline=None)
@given(st.lists(convertible(), min_size=1, max_size=4), st.integers(0, 3))
def test_exact_values_become_their_json_value_at_any_depth(pairs, depth):
    value = {f"f{i}": given for i, (given, _) in enumerate(pairs)}
    expected = {f"f{i}": want for i, (_, want) in enumerate(pairs)}
    for _ in range(depth):
        value, expected = {"a": [value]}, {"a": [expected]}
    converted = json_metadata(value, "document 'd'")
    assert converted == expected
    assert json.loads(json.dumps(converted, allow_nan=False)) == expected  # plain JSON, no default=


@settings(max_examples=200, deadline=None)
@given(refused(), st.lists(st.sampled_from(["a", "b"]), max_size=3))
def test_a_value_json_lacks_is_refused_naming_its_field(value, path):
    nested: object = value
    for name in reversed(["top", *path]):
        nested = {name: nested}
    where = ".".join(["top", *path])
    with pytest.raises(
        InputError,
        match=rf"^document 'd': field '{where}' holds .*not a JSON value|"
        rf"^document 'd': field '{where}' holds .*no float holds exactly",
    ) as caught:
        json_metadata(nested, "document 'd'")  # type: ignore[arg-type]
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "keys",
    [
        (True, "true"),
        (None, "null"),
        (1, "1"),
        (np.int64(1), "1"),
        (1.5, "1.5"),
        (datetime.date(2024, 1, 31), "2024-01-31"),
    ],
)
def test_two_field_names_that_become_one_are_refused(keys):
    with pytest.raises(InputError, match="are both .* in JSON: rename one"):
        json_metadata({keys[0]: 1, keys[1]: 2}, "document 'd'")


@pytest.mark.parametrize("key", [("a", "b"), frozenset({1}), b"k", object()])
def test_a_field_name_that_is_not_text_is_refused(key):
    with pytest.raises(InputError, match=r"a field name \(in 'outer'\) is a .*; field names are text"):
        json_metadata({"outer": {key: 1}}, "document 'd'")


# YAML 1.1 spellings that PyYAML resolves to one value: each pair, as field names, were one field
_SAME_VALUE = [
    ["yes", "Yes", "YES", "on", "On", "ON", "true", "True", "TRUE"],
    ["no", "No", "NO", "off", "Off", "OFF", "false", "False", "FALSE"],
    ["~", "null", "Null", "NULL"],
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.sampled_from(_SAME_VALUE).flatmap(
        lambda group: st.lists(st.sampled_from(group), min_size=2, max_size=4, unique=True)
    ),
    st.booleans(),
)
def test_front_matter_field_names_are_kept_as_written(tmp_path_factory, names, nested):
    folder = tmp_path_factory.mktemp("notes")
    lines = [f"{name}: {i}" for i, name in enumerate(names)]
    body = "\n".join(f"  {line}" for line in lines) if nested else "\n".join(lines)
    (folder / "a.md").write_text(("---\nouter:\n" if nested else "---\n") + body + "\n---\nwing flow\n")
    (document,) = read_documents(folder)
    fields = {name: i for i, name in enumerate(names)}
    assert document.metadata == ({"outer": fields} if nested else fields)


@pytest.mark.parametrize(
    ("yaml_text", "match"),
    [
        ("tags: !!set {a, b}", r"field 'tags' holds a set, which is not a JSON value"),
        ("blob: !!binary aGk=", r"field 'blob' holds a bytes, which is not a JSON value"),
        ("a:\n  b: !!set {x}", r"field 'a.b' holds a set"),
        ("a: 1\na: 2", r"names the field 'a' twice \(line 3\)"),
        ("? [a, b]\n: 1", r"has a field name that is a list or a mapping"),
    ],
)
def test_front_matter_that_json_cannot_hold_is_refused_in_one_line(tmp_path, yaml_text, match):
    (tmp_path / "a.md").write_text(f"---\n{yaml_text}\n---\nwing flow\n")
    with pytest.raises(InputError, match=match) as caught:
        list(read_documents(tmp_path))
    assert "\n" not in str(caught.value) and "a.md" in str(caught.value)


def test_front_matter_dates_as_values_and_names_are_iso_text(tmp_path):
    (tmp_path / "a.md").write_text("---\nday: 2024-01-31\nby:\n  2024-02-01: x\n---\nwing flow\n")
    (document,) = read_documents(tmp_path)
    assert document.metadata == {"day": "2024-01-31", "by": {"2024-02-01": "x"}}


def test_numbers_of_numpy_and_decimal_are_filtered_as_numbers(tmp_path, tiny_onnx):
    notes = embedkit.create_collection(tmp_path / "idx", tiny_onnx, device="cpu", calibrate=False)
    metadatas = [{"x": Decimal("1.5")}, {"x": np.float32(1.5)}, {"x": np.int64(0)}, {"x": Decimal("0.5")}]
    notes.add(
        ["a", "b", "c", "d"], documents=["wing lift", "wing flow", "shock wave", "drag"], metadatas=metadatas
    )
    hits = notes.query("wing", k=10, where="x > 1", mode="dense")
    assert sorted(hit["id"] for hit in hits) == ["a", "b"]
    assert notes.get(["a", "b", "c"])["metadatas"] == [{"x": 1.5}, {"x": 1.5}, {"x": 0}]
    for bad in ({"x": {1, 2}}, {("a", "b"): 1}, {"when": datetime.time(1, 2)}):
        with pytest.raises(InputError):
            notes.add(["e"], documents=["more"], metadatas=[bad])
    assert notes.get(["e"])["ids"] == []


@pytest.mark.parametrize(
    ("record", "name"),
    [
        ('{"_id": "1", "text": "x", "year": 2020, "year": 2021}', "year"),
        ('{"_id": "1", "text": "x", "m": {"a": 1, "b": [{"c": 1, "c": 2}]}}', "c"),
    ],
)
def test_a_jsonl_record_naming_a_field_twice_is_refused(tmp_path, record, name):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "0", "text": "fine"}\n' + record + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=rf"corpus\.jsonl: line 2 names the field '{name}' twice"):
        list(read_documents(corpus))
