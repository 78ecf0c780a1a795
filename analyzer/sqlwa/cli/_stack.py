"""The click options of the storage stack, made once from :class:`~sqlwa.lab.stack.StackSpec`'s
fields for ``sqlwa run`` and ``sqlwa crash`` (one value each) and ``sqlwa matrix`` and
``sqlwa demo`` (an axis of values, or one value every cell shares)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import click

from sqlwa.lab.stack import STACK_FIELDS, Layer, StackSpec, layer_of, stack_fields

SPEC_FIELDS = {f.name: f for f in stack_fields()}


class FiniteFloat(click.FloatRange):
    """A float in range that is a number: nan and inf are refused like any value out of
    range (FloatRange alone lets nan through, as every comparison with it is false)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


def split_list(_ctx, _param, value: str | None) -> tuple[str, ...] | None:
    """'a,b, c' → ('a', 'b', 'c'); lower-cased, empty items dropped."""
    if value is None:
        return None
    return tuple(item.strip().lower() for item in value.split(",") if item.strip())


def _flag(name: str, layer: Layer) -> str:
    return layer.flag or f"--{name.replace('_', '-')}"


def _int(bound: float | None) -> int | None:
    return None if bound is None else int(bound)


def _type(name: str, layer: Layer) -> click.ParamType | None:
    kind = str(SPEC_FIELDS[name].type)
    if layer.choices:
        return click.Choice(layer.choices)
    if kind.startswith("float"):
        return FiniteFloat(layer.minimum, layer.maximum)
    if kind.startswith("int"):
        return click.IntRange(_int(layer.minimum), _int(layer.maximum))
    return None


def stack_option(name: str, sweep: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The option of the StackSpec field ``name`` (a click decorator): as ``sqlwa run``
    takes it, or with ``sweep`` as ``sqlwa matrix`` does (an axis of comma-separated
    values, named as the plan's axis, where the field has one)."""
    layer = layer_of(SPEC_FIELDS[name])
    assert layer is not None, f"{name} is no option"
    default = SPEC_FIELDS[name].default
    flag = _flag(name, layer)
    if sweep:
        assert layer.sweep is not None, f"{flag} is no option of a sweep"
    help_text = layer.sweep.help if sweep and layer.sweep else layer.help
    if isinstance(default, bool):
        return click.option(flag, name, is_flag=True, help=help_text)
    if sweep and layer.sweep and layer.sweep.axis is not None:
        return click.option(
            flag,
            layer.sweep.axis,
            default=layer.sweep.default,
            show_default=True,
            callback=split_list,
            metavar=layer.sweep.metavar,
            help=help_text,
        )
    return click.option(
        flag,
        name,
        type=_type(name, layer),
        default=default,
        show_default=layer.show_default,
        metavar=layer.metavar,
        help=help_text,
    )


def stack_options(*names: str, sweep: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator adding the options of these StackSpec fields, in this order."""

    def apply(command: Callable[..., Any]) -> Callable[..., Any]:
        for name in reversed(names):
            command = stack_option(name, sweep)(command)
        return command

    return apply


def with_stack(callback: Callable[..., Any]) -> Callable[..., Any]:
    """``callback`` called with the stack options' values as one ``stack=StackSpec.from_flat(...)``."""

    @functools.wraps(callback)
    def call(**values: Any) -> Any:
        stack = StackSpec.from_flat(**{name: values.pop(name) for name in STACK_FIELDS if name in values})
        return callback(stack=stack, **values)

    return call
