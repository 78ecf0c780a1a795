"""The run settings are described once: workloads' ``RunSettings::FIELDS`` (each setting's
name, type, whether None is a value of it, its default), exported as
``_native.settings_fields()``. The other three descriptions — the stub's ``Settings`` and
``SettingsInput`` and ``sqlwa.measure.engine.RunSettings`` — are checked against it here,
so a setting added, retyped or given another default in one place and not the others
fails. (The Rust test ``the_fields_table_is_the_struct`` holds FIELDS to the struct.)
"""

from __future__ import annotations

import ast
import dataclasses

import pytest

from helpers import REPO
from sqlwa import _native
from sqlwa.measure import engine

STUB = REPO / "analyzer" / "sqlwa" / "_native.pyi"

# How each type of FIELDS is written in Python (a path travels as text); "choice" apart
PYTHON_TYPES = {"bool": "bool", "int": "int", "float": "float", "str": "str", "path": "str", "list[str]": "list[str]"}

FIELDS = {field["name"]: field for field in _native.settings_fields()}


def stub() -> tuple[dict[str, dict[str, str]], dict[str, tuple[str, ...]]]:
    """The stub's classes (each field's annotation, as written) and its Literal aliases
    (``_JournalMode = Literal["delete", ...]``: their values)."""
    tree = ast.parse(STUB.read_text())
    classes: dict[str, dict[str, str]] = {}
    literals: dict[str, tuple[str, ...]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            classes[node.name] = {
                item.target.id: ast.unparse(item.annotation)
                for item in node.body
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
            }
        elif (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Subscript)
            and ast.unparse(node.value.value) == "Literal"
        ):
            values = node.value.slice
            elements = values.elts if isinstance(values, ast.Tuple) else [values]
            literal = tuple(e.value for e in elements if isinstance(e, ast.Constant))
            literals |= {target.id: literal for target in node.targets if isinstance(target, ast.Name)}
    return classes, literals


def annotation(field: dict, *, choice: str | None, optional: bool | None = None) -> str | None:
    """How ``field`` is annotated on a side that spells a choice ``choice`` (None: no alias
    of its values exists) and makes it optional when ``optional`` (None: as FIELDS says)."""
    base = choice if field["type"] == "choice" else PYTHON_TYPES[field["type"]]
    if base is None:
        return None
    return f"{base} | None" if (field["optional"] if optional is None else optional) else base


def alias_of(choices: list[str], literals: dict[str, tuple[str, ...]]) -> str | None:
    """The stub's Literal alias whose values are exactly ``choices``, in order."""
    return next((name for name, values in literals.items() if values == tuple(choices)), None)


def test_the_engine_describes_every_setting_it_takes():
    assert list(FIELDS) == list(_native.default_settings())
    assert {name: field["default"] for name, field in FIELDS.items()} == _native.default_settings()
    assert FIELDS["journal"]["choices"] == list(_native.JOURNAL_MODES)
    assert FIELDS["txns"] == {"name": "txns", "type": "int", "optional": True, "default": None, "choices": None}


def test_the_stubs_settings_are_the_engines():
    # what default_settings() returns: a choice as the Literal alias of its values
    classes, literals = stub()
    expected = {
        name: annotation(field, choice=alias_of(field["choices"] or [], literals)) for name, field in FIELDS.items()
    }
    assert classes["Settings"] == expected


def test_the_stubs_settings_input_are_the_engines():
    # what run_workload takes: any setting left out or None; a choice as any str (the
    # engine reads it case-insensitively)
    classes, _ = stub()
    expected = {name: annotation(field, choice="str", optional=True) for name, field in FIELDS.items()}
    assert classes["SettingsInput"] == expected


def test_the_run_settings_dataclass_has_the_engines_settings():
    assert sorted(name for name, _ in engine.setting_fields()) == sorted(FIELDS)


@pytest.mark.parametrize("name", list(FIELDS))
def test_the_run_settings_dataclass_field_is_the_engines(name):
    fields = dict(engine.setting_fields())
    field, described = fields[name], FIELDS[name]
    assert field.type == annotation(described, choice="str")
    default = field.default_factory() if field.default is dataclasses.MISSING else field.default
    assert default == described["default"]
    if described["choices"] is not None:
        option = engine.option_of(field)
        assert option is not None and option.choices == tuple(described["choices"])
