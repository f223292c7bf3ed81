"""The rule contract, checked when the catalogue loads: a rule's TOML half must fit its check module.

A check module declares what its TOML may say:

- ``Thresholds``: a frozen dataclass whose fields are the ``[thresholds]`` keys with their types
  (``float`` takes an integer too; ``int`` takes integers only; booleans are never numbers); the check reads its
  rule's thresholds typed, ``th = ctx.thresholds(Thresholds)``, so mypy checks every use.
- ``METRICS``: the numbers the check computes on every trace (a user's metric rule compares against them).
- ``MESSAGE_FIELDS``: every name a hit provides (its evidence values and fields), which the ``message`` and
  ``headline`` templates may use (plus :data:`ENGINE_FIELDS`, which the engine adds from the estimate).
- ``ADVICE`` (optional): the situations the check tells apart for its advice (``"rocm"``, ``"fsdp"``...); the TOML
  must hold a ``fix_<situation>`` for each (:meth:`perfdoctor.checks.catalogue.RuleSpec.advice`).

And the TOML's ``builds_on`` names the rules whose outcome the check reads (``ctx.built_on(code)``): each must have
a check that runs first.

:func:`validate` compares every rule of the catalogue (built-in files and user overrides alike) with its module,
so a mistyped key, a wrong type or a misspelt ``{placeholder}`` stops ``perfdoctor`` at start with one line naming
the file, instead of failing (or silently using a default) when the rule first fires on some trace.
"""

from __future__ import annotations

import dataclasses
import string
import typing
from types import ModuleType
from typing import TypeVar

from perfdoctor.checks.catalogue import VARIANT_RX, Catalogue, RuleSpec
from perfdoctor.errors import PerfDoctorError

# filled in by the engine from the hit's estimate; ``replayed_ms`` = the hit's ``recorded_ms`` − ``saving_ms`` (the
# rank's mean step replayed with the fix), for a check that gives ``recorded_ms``
ENGINE_FIELDS = ("saving_ms", "saving_pct", "replayed_ms")
USER_RULE_FIELDS = ("metric", "value")  # what a user metric rule's evidence holds
T = TypeVar("T")  # a check module's ``Thresholds``


def _type_ok(expected: object, value: object) -> bool:
    if isinstance(value, bool):
        return expected is bool
    if expected is float:
        return isinstance(value, (int, float))
    return isinstance(value, expected) if isinstance(expected, type) else True


_FIELDS: dict[type, dict[str, object]] = {}  # the field types of each Thresholds class, resolved once
# each rule's typed thresholds, made once per loaded rule (a check asks on every rank: 7 µs each, 143,000 times at
# 4,096 ranks); keyed by the rule's identity, the rule kept beside its value so that the key is never reused
_MADE: dict[tuple[type, int], tuple[RuleSpec, object]] = {}


def _fields(cls: type) -> dict[str, object]:
    """The field types of a ``Thresholds`` dataclass (a check asks per rank and rule: resolved once per class)."""
    if cls not in _FIELDS:
        hints = typing.get_type_hints(cls)
        _FIELDS[cls] = {f.name: hints[f.name] for f in dataclasses.fields(cls)}
    return _FIELDS[cls]


def thresholds_of(spec: RuleSpec | None, cls: type[T]) -> T:
    """``spec.thresholds`` (the rule's ``[thresholds]``, user overrides applied) as an instance of the check
    module's ``Thresholds`` dataclass ``cls``; values are kept as the TOML wrote them (an ``int`` for a
    ``float`` field stays an ``int``).

    Raises:
        PerfDoctorError: an unknown key, a missing key or a value of the wrong type (one line naming the file), or
            no rule (``spec`` None: a check run outside the engine).
    """
    if spec is None:
        raise PerfDoctorError(f"{cls.__module__}: its check ran without its rule, so without thresholds")
    made = _MADE.get((cls, id(spec)))
    if made is not None and made[0] is spec and isinstance(made[1], cls):
        return made[1]
    fields = _fields(cls)
    known = ", ".join(fields) or "none"
    for key, value in spec.thresholds.items():
        if key not in fields:
            raise PerfDoctorError(f"{spec.path}: {spec.code} has no threshold {key!r} (known: {known})")
        expected = fields[key]
        if not _type_ok(expected, value):
            name = expected.__name__ if isinstance(expected, type) else str(expected)
            raise PerfDoctorError(f"{spec.path}: thresholds.{key} of {spec.code} must be {name}, not {value!r}")
    missing = [n for n in fields if n not in spec.thresholds]
    if missing:
        raise PerfDoctorError(f"{spec.path}: {spec.code} lacks threshold(s) {', '.join(missing)}")
    out = cls(**spec.thresholds)
    _MADE[(cls, id(spec))] = (spec, out)
    return out


TEMPLATES = ("message", "headline")  # the RuleSpec fields filled from a hit's fields


def placeholders(spec: RuleSpec, template: str = "message") -> list[str]:
    """The field names (before any ``.attr`` or ``[index]``) the ``template`` (one of :data:`TEMPLATES`) uses, in
    order.

    Raises:
        PerfDoctorError: the template is not a valid ``str.format`` template.
    """
    try:
        parsed = list(string.Formatter().parse(getattr(spec, template)))
    except ValueError as exc:
        raise PerfDoctorError(f"{spec.path}: {template} of {spec.code} is not a valid template ({exc})") from None
    out: list[str] = []
    for _, field_name, _, _ in parsed:
        if field_name is None:
            continue
        root = field_name.split(".")[0].split("[")[0]
        if not root or root.isdigit():
            raise PerfDoctorError(
                f"{spec.path}: {template} of {spec.code} has a positional placeholder "
                f"{{{field_name}}}; name a field instead"
            )
        if root not in out:
            out.append(root)
    return out


def message_fields(spec: RuleSpec, module: ModuleType | None) -> set[str]:
    """The names ``spec``'s message and headline may use: its module's ``MESSAGE_FIELDS`` (built-in rules: every
    name a hit gives, its evidence values and fields, the one place the placeholders come from) or a metric rule's
    evidence, plus :data:`ENGINE_FIELDS`."""
    if spec.when is not None or module is None:
        return {*USER_RULE_FIELDS, *ENGINE_FIELDS}
    return {*getattr(module, "MESSAGE_FIELDS", ()), *ENGINE_FIELDS}


def validate_rule(spec: RuleSpec, module: ModuleType | None) -> None:
    """Check one rule against its module (``None``: a user metric rule, or a rule without a check yet).

    Raises:
        PerfDoctorError: see :func:`thresholds_of` and :func:`placeholders`; a placeholder the check
            never provides; or a situation of the check's ``ADVICE`` without its ``fix_<situation>``.
    """
    cls = getattr(module, "Thresholds", None) if module is not None else None
    if cls is not None:
        thresholds_of(spec, cls)
    _check_advice(spec, tuple(getattr(module, "ADVICE", ())))
    if spec.when is None and (module is None or not hasattr(module, "MESSAGE_FIELDS")):
        # not implemented yet (reported as skipped, its message never filled), or a module that has not declared
        # its fields: tests/test_rule_contract.py fails on that one rather than every run of perfdoctor
        return
    allowed = message_fields(spec, module)
    for template in TEMPLATES:
        unknown = [p for p in placeholders(spec, template) if p not in allowed]
        if unknown:
            raise PerfDoctorError(
                f"{spec.path}: {template} of {spec.code} uses {{{unknown[0]}}}, which its check does not "
                f"provide (fields: {', '.join(sorted(allowed))})"
            )


def _check_advice(spec: RuleSpec, situations: tuple[str, ...]) -> None:
    """Each situation the check gives advice for has its ``fix_<situation>``; each variant text is for one of them
    (a variant no check picks is a misspelt key, never shown)."""
    lacking = [v for v in situations if f"fix_{v}" not in spec.variants]
    if lacking:
        raise PerfDoctorError(f"{spec.path}: {spec.code} lacks fix_{lacking[0]} (its check gives advice for it)")
    for key in sorted(spec.variants):
        m = VARIANT_RX.match(key)
        if m is not None and m.group(2) not in situations:
            raise PerfDoctorError(
                f"{spec.path}: {key} of {spec.code} is for a situation its check does not tell apart "
                f"(it gives advice for: {', '.join(situations) or 'none'})"
            )


def _check_builds_on(spec: RuleSpec, cat: Catalogue, modules: dict[str, ModuleType]) -> None:
    """Each rule ``spec`` builds on is a built-in rule with a check that runs before it (the engine's order:
    :func:`perfdoctor.checks.engine.check_order`, rules with ``runs_after_others`` last, then by code)."""
    for code in spec.builds_on:
        dep = cat.rules.get(code)
        if dep is None or code not in modules:
            raise PerfDoctorError(f"{spec.path}: {spec.code} builds on {code}, which has no check")
        if (dep.runs_after_others, dep.code) >= (spec.runs_after_others, spec.code):
            raise PerfDoctorError(f"{spec.path}: {spec.code} builds on {code}, which runs after it")


def validate(cat: Catalogue, modules: dict[str, ModuleType]) -> None:
    """:func:`validate_rule` and the ``builds_on`` order for every rule of ``cat``; raises on the first that does
    not fit."""
    for code in sorted(cat.rules):
        validate_rule(cat.rules[code], modules.get(code))
        _check_builds_on(cat.rules[code], cat, modules)
