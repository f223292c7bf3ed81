"""The rule contract, checked when the catalogue loads: a rule's TOML half must fit its check module.

A check module declares what its TOML may say:

- ``Thresholds``: a frozen dataclass whose fields are the ``[thresholds]`` keys with their types
  (``float`` takes an integer too; ``int`` takes integers only; booleans are never numbers).
- ``METRICS`` and ``MESSAGE_FIELDS``: the names a hit provides, which the ``message`` and ``headline`` templates
  may use (plus ``saving_ms`` and ``saving_pct``, which the engine adds from the estimate).
- ``ADVICE`` (optional): the situations the check tells apart for its advice (``"rocm"``, ``"fsdp"``...); the TOML
  must hold a ``fix_<situation>`` for each (:meth:`perfdoctor.checks.catalogue.RuleSpec.advice`).

:func:`validate` compares every rule of the catalogue (built-in files and user overrides alike) with its module,
so a mistyped key, a wrong type or a misspelt ``{placeholder}`` stops ``perfdoctor`` at start with one line naming
the file, instead of failing (or silently using a default) when the rule first fires on some trace.
"""

from __future__ import annotations

import dataclasses
import string
import typing
from types import ModuleType
from typing import Any

from perfdoctor.checks.catalogue import VARIANT_RX, Catalogue, RuleSpec
from perfdoctor.errors import PerfDoctorError

# filled in by the engine from the hit's estimate; ``replayed_ms`` = the hit's ``recorded_ms`` − ``saving_ms`` (the
# rank's mean step replayed with the fix), for a check that gives ``recorded_ms``
ENGINE_FIELDS = ("saving_ms", "saving_pct", "replayed_ms")
USER_RULE_FIELDS = ("metric", "value")  # what a user metric rule's evidence holds


def _type_ok(expected: Any, value: Any) -> bool:
    if isinstance(value, bool):
        return expected is bool
    if expected is float:
        return isinstance(value, (int, float))
    return isinstance(value, expected) if isinstance(expected, type) else True


def thresholds_of(spec: RuleSpec, cls: type) -> Any:
    """``spec.thresholds`` as an instance of the module's ``Thresholds`` dataclass.

    Raises:
        PerfDoctorError: an unknown key, a missing key or a value of the wrong type (one line naming the file).
    """
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    known = ", ".join(names) or "none"
    for key, value in spec.thresholds.items():
        if key not in hints:
            raise PerfDoctorError(f"{spec.path}: {spec.code} has no threshold {key!r} (known: {known})")
        if not _type_ok(hints[key], value):
            raise PerfDoctorError(
                f"{spec.path}: thresholds.{key} of {spec.code} must be "
                f"{getattr(hints[key], '__name__', hints[key])}, not {value!r}"
            )
    missing = [n for n in names if n not in spec.thresholds]
    if missing:
        raise PerfDoctorError(f"{spec.path}: {spec.code} lacks threshold(s) {', '.join(missing)}")
    return cls(**spec.thresholds)


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
    """The names ``spec``'s message and headline may use: its module's ``METRICS`` and ``MESSAGE_FIELDS`` (built-in
    rules) or a metric rule's evidence, plus :data:`ENGINE_FIELDS`."""
    if spec.when is not None or module is None:
        return {*USER_RULE_FIELDS, *ENGINE_FIELDS}
    return {*getattr(module, "METRICS", {}), *getattr(module, "MESSAGE_FIELDS", ()), *ENGINE_FIELDS}


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


def validate(cat: Catalogue, modules: dict[str, ModuleType]) -> None:
    """:func:`validate_rule` for every rule of ``cat``; raises on the first that does not fit."""
    for code in sorted(cat.rules):
        validate_rule(cat.rules[code], modules.get(code))
