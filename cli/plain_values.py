"""Option values of plain types converted without pydantic, so a command starts fast.

typer (0.29 and later) converts every option's value with a pydantic `TypeAdapter`: importing
pydantic and building the adapters is about a quarter of a second of a cold `embedkit search`.
Here a value of a plain type (str, int, float, bool, Path; optional or not) that is valid is converted
as typer would convert it; anything else, an invalid or out-of-range value included, goes on to
typer's own conversion, so its error messages stay typer's. On a typer without that machinery
(older releases convert with click), `install` leaves the commands as they are. The `getattr`
calls read typer's parameter objects (`type_descriptor`, `parser`, `clamp`: typer 0.29 and later)
and click 8.x's commands (`params`, `commands` on groups), never an embedkit object.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from embedkit.data.values import number_from_text

try:  # typer's internals since 0.29; absent before
    from typer._coercion import RuntimeParam, build_runtime_param
    from typer._param_types import coerce_cli_path
except ImportError:  # pragma: no cover - an older typer converts with click
    RuntimeParam = None  # type: ignore[assignment,misc]

_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")
_TYPER = object()  # "not a plain value: typer converts it"


def _in_range(number: float, info: Any) -> bool:
    return (info.min is None or number >= info.min) and (info.max is None or number <= info.max)


def plain_value(annotation: Any, info: Any, value: Any) -> Any:
    """`value` converted to `annotation` as typer converts it, or `_TYPER` where typer must."""
    if getattr(info, "parser", None) is not None or getattr(info, "clamp", False):
        return _TYPER
    if (annotation is str and isinstance(value, str)) or (annotation is bool and isinstance(value, bool)):
        return value
    if annotation is int and not isinstance(value, bool):
        if isinstance(value, int):
            number: int | None = value
        else:  # embedkit's one conversion of a number written as text: no int() of 5,000 digits
            written = number_from_text(str(value)) if _INTEGER.fullmatch(str(value)) else None
            number = written if isinstance(written, int) else None
        return number if number is not None and _in_range(number, info) else _TYPER
    if annotation is float and not isinstance(value, bool):
        plain = isinstance(value, (int, float)) or _DECIMAL.fullmatch(str(value))
        number = float(value) if plain else None
        return number if number is not None and _in_range(number, info) else _TYPER
    return _TYPER


if RuntimeParam is not None:

    class PlainRuntimeParam(RuntimeParam):  # type: ignore[misc,valid-type]
        """typer's conversion of one parameter, with plain values converted here first."""

        def __init__(self, descriptor: Any) -> None:
            object.__setattr__(self, "annotation", descriptor.annotation)
            object.__setattr__(self, "parameter_info", descriptor.parameter_info)
            object.__setattr__(self, "_descriptor", descriptor)
            object.__setattr__(self, "_typer", None)

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            if self.annotation is Path and isinstance(value, (str, Path)) and str(value):
                # typer's own checks (exists, readable, ...) on a Path, which it takes as it is
                return coerce_cli_path(Path(value), self.parameter_info, path_type=Path, param=param, ctx=ctx)
            converted = plain_value(self.annotation, self.parameter_info, value)
            if converted is not _TYPER:
                return converted
            if self._typer is None:
                object.__setattr__(self, "_typer", build_runtime_param(self._descriptor))
            return self._typer._coerce_value(value, param=param, ctx=ctx)


def install(command: Any) -> None:
    """Give every parameter of `command` (and of its subcommands), `--help` too, the plain
    conversion first."""
    if RuntimeParam is None or getattr(command, "_plain_values", False):
        return
    command._plain_values = True
    for param in getattr(command, "params", ()):
        _install_into(param)
    made = command.get_help_option  # click makes `--help` per command, on first use

    def help_option(ctx: Any) -> Any:
        option = made(ctx)
        if option is not None:
            _install_into(option)
        return option

    command.get_help_option = help_option
    for sub in getattr(command, "commands", {}).values():
        install(sub)


def _install_into(param: Any) -> None:
    descriptor = getattr(param, "type_descriptor", None)
    set_up = getattr(param, "_runtime_param", 0) is not None
    if descriptor is None or descriptor.file_annotation is not None or set_up:
        return  # not typer's, a file, or its conversion already made
    if descriptor.annotation in (str, int, float, bool, Path) and param.nargs == 1 and not param.multiple:
        param._runtime_param = PlainRuntimeParam(descriptor)
