"""The rule catalogue: ``rules/PDnnn.toml`` files, loaded and validated.

A rule's TOML half (ruff's model: the check module is the other half, joined
by the code)::

    code = "PD101"                      # [A-Z]{1,4} + 3 digits; never reused
    name = "dataloader-starvation"      # kebab-case, unique
    category = "input-pipeline"         # one of CATEGORIES
    severity = "high"                   # the most severe level it reports (low|medium|high);
                                        #   the saving share picks lower levels (engine.toml)
    message = "... {dataloader_idle_ms:.1f} ms ..."   # str.format over the evidence values
    headline = "DataLoader stalls the GPU {dataloader_idle_ms:.1f} ms per step"   # the claim and its key number:
                                        #   one sentence, at most 120 characters filled; the same fields as message
    summary = "what it detects"
    why = "why it costs time"
    saving = "how the saving is estimated"
    fix = "what to change"
    fix_rocm = "what to change on ROCm"   # optional variants of fix / example_before / example_after, one per
                                        #   situation a check tells apart (its ADVICE names them; it picks one)
    example_before = '''code'''
    example_after = '''code'''
    references = ["https://..."]
    requires = ["steps", "device"]      # data it needs (REQUIREMENTS); skipped with the reason otherwise
    builds_on = ["PD101"]               # rules whose outcome on the rank its check reads (RankContext.built_on);
                                        #   they run first (a property of the check: a user file cannot change it)
    scope = "rank"                      # "rank": checked per trace; "job": across all ranks
    runs_after_others = false           # true: runs after every other check (it reads their skip reasons)
    whole_trace_note = true             # false: its message is not per step, so a trace without step markers
                                        #   gets no "'per step' means over the whole trace window" note
    [thresholds]                        # every number the check compares against
    min_saving_pct = 5.0

A user's rules (``--rules DIR``) are TOML files too: one with a built-in code
overrides fields of that rule (``[thresholds]`` merged key by key); one with a
new code is a *metric rule*, which needs a ``[when]`` table over a metric a
built-in check computes::

    [when]
    metric = "PD101.dataloader_idle_pct"   # CODE.metric (``perfdoctor rule PD101`` lists them)
    above = 5.0                            # or below = ...
    saving_metric = "PD101.dataloader_idle_us"   # optional: µs per step saved

The catalogue is found inside the installed package (``perfdoctor/_rules``,
force-included by the wheel build) or, in a source checkout, at the repository's
``rules/``.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeAlias

from perfdoctor.errors import PerfDoctorError
from perfdoctor.findings import SEVERITIES

# the code families of STYLE.md: PD1xx input pipeline and host, PD2xx compute, PD3xx distributed,
# PD4xx synchronization, PD5xx memory, PD6xx measurement validity, PD9xx trace quality
CATEGORIES = (
    "input-pipeline",
    "host",
    "gpu-compute",
    "cpu-compute",
    "distributed",
    "synchronization",
    "memory",
    "measurement",
    "trace-quality",
)
# "device_side": GPU activity, or a genuine CPU-only run (not a GPU trace that lost or never recorded its device side)
REQUIREMENTS = (
    "steps",
    "device",
    "host_only",
    "multi_rank",
    "shapes",
    "memory",
    "device_properties",
    "run",
    "mfu",
    "device_side",
)
SCOPES = ("rank", "job")
_TEXT_KEYS = (
    "name",
    "category",
    "severity",
    "message",
    "headline",
    "summary",
    "why",
    "saving",
    "fix",
    "example_before",
    "example_after",
)
_BOOL_KEYS = ("runs_after_others", "whole_trace_note")
_ALL_KEYS = set(_TEXT_KEYS) | set(_BOOL_KEYS) | {"code", "references", "requires", "builds_on", "scope"}
_ALL_KEYS |= {"thresholds", "when", "verdict"}
# the words of a report's one-line verdict when the rule's finding tops it (perfdoctor.model.verdict)
_VERDICT_KEYS = ("kind", "removes", "replayed_with")
# a variant of an advice text, for one situation the check tells apart: fix_rocm, example_after_fsdp, ...; cause_X is
# the phrase a check that names causes puts in its message for situation X (PD501's allocator causes)
VARIANT_RX = re.compile(r"^(fix|example_before|example_after|cause)_([a-z0-9]+(?:_[a-z0-9]+)*)$")
_CODE_RX = re.compile(r"^[A-Z]{1,4}\d{3}$")
_NAME_RX = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_BUILTIN_FILE_RX = re.compile(r"^[A-Z]{1,4}\d{3}\.toml$")

# a TOML document as tomllib reads it (dates aside: no rule key takes one); each key's type is checked by _validate
TomlValue: TypeAlias = "str | int | float | bool | list[TomlValue] | dict[str, TomlValue]"
TomlTable: TypeAlias = "dict[str, TomlValue]"


@dataclass(frozen=True)
class VerdictWords:
    """A rule's words in the report's verdict when its finding tops it (``[verdict]`` in its TOML).

    Attributes:
        kind: what bounds the step ("input-bound").
        removes: what its fix removes, after "fixing" ("the wait for the DataLoader").
        replayed_with: the fix its replayed saving was replayed with, after "replaying the step with" ("" when
            its saving is never replayed). ``{word}`` in either: the finding's evidence value of that name.
    """

    kind: str
    removes: str
    replayed_with: str = ""


@dataclass(frozen=True)
class RuleSpec:
    """One rule's TOML half (see the module docstring for each field)."""

    code: str
    name: str
    category: str
    severity: str
    message: str
    headline: str
    summary: str
    why: str
    saving: str
    fix: str
    example_before: str
    example_after: str
    references: tuple[str, ...]
    requires: tuple[str, ...] = ()
    builds_on: tuple[str, ...] = ()
    scope: str = "rank"
    thresholds: TomlTable = field(default_factory=dict)
    # a user metric rule's [when] (metric, above or below, saving_metric), its value types checked at load
    when: dict[str, Any] | None = None
    runs_after_others: bool = False
    whole_trace_note: bool = True
    verdict: VerdictWords | None = None
    path: str = ""
    builtin: bool = True
    # alternative advice texts by TOML key (``fix_rocm``, ``example_after_fsdp``, ...): see :meth:`advice`
    variants: dict[str, str] = field(default_factory=dict)

    def advice(self, variant: str) -> dict[str, str]:
        """The rule's advice for one situation, as ``Hit.advice``: ``fix_<variant>`` as the fix, and
        ``example_before_<variant>`` / ``example_after_<variant>`` where the TOML has them (else the rule's own
        examples stay).

        Raises:
            KeyError: the TOML has no ``fix_<variant>`` (the contract check refuses such a catalogue at load).
        """
        out = {"fix": self.variants[f"fix_{variant}"]}
        for key in ("example_before", "example_after"):
            if f"{key}_{variant}" in self.variants:
                out[key] = self.variants[f"{key}_{variant}"]
        return out

    def to_dict(self) -> dict[str, object]:
        return {
            "code": self.code,
            "name": self.name,
            "category": self.category,
            "severity": self.severity,
            "message": self.message,
            "headline": self.headline,
            "summary": self.summary,
            "why": self.why,
            "saving": self.saving,
            "fix": self.fix,
            "example_before": self.example_before,
            "example_after": self.example_after,
            "references": list(self.references),
            "requires": list(self.requires),
            "scope": self.scope,
            "thresholds": dict(self.thresholds),
            "when": self.when,
            "path": self.path,
            "builtin": self.builtin,
            "variants": dict(self.variants),
        }


@dataclass
class Catalogue:
    """All rules by code, plus the engine settings of ``rules/engine.toml``."""

    rules: dict[str, RuleSpec]
    severity_high_pct: float = 10.0
    severity_medium_pct: float = 3.0

    def by_name(self, name: str) -> RuleSpec | None:
        for r in self.rules.values():
            if r.name == name:
                return r
        return None

    def get(self, code_or_name: str) -> RuleSpec | None:
        """A rule by code (case-insensitive) or name, else None."""
        return self.rules.get(code_or_name.upper()) or self.by_name(code_or_name)

    def sorted(self) -> list[RuleSpec]:
        return [self.rules[c] for c in sorted(self.rules)]


def builtin_rules_dir() -> Path:
    """The built-in catalogue: ``perfdoctor/_rules`` when installed, the repo's ``rules/`` in a checkout.

    Raises:
        PerfDoctorError: neither exists (a broken installation).
    """
    pkg = Path(__file__).resolve().parent.parent
    for cand in (pkg / "_rules", pkg.parent / "rules"):
        if cand.is_dir() and any(cand.glob("*.toml")):
            return cand
    raise PerfDoctorError(
        f"the rule catalogue is missing: neither {pkg / '_rules'} nor {pkg.parent / 'rules'} "
        "holds rules/*.toml (broken installation?)"
    )


def _read_toml(path: Path) -> TomlTable:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise PerfDoctorError(f"{path}: not valid TOML ({exc})") from None
    except OSError as exc:
        raise PerfDoctorError(f"{path}: cannot read ({exc.strerror})") from None


def _check_value(path: Path, key: str, value: TomlValue) -> None:
    def bad(what: str) -> PerfDoctorError:
        return PerfDoctorError(f"{path}: {key} {what}")

    if (key in _TEXT_KEYS or VARIANT_RX.match(key)) and not isinstance(value, str):
        raise bad("must be a string")
    if key in _BOOL_KEYS and not isinstance(value, bool):
        raise bad("must be true or false")
    if key == "code" and not (isinstance(value, str) and _CODE_RX.match(value)):
        raise bad(f"{value!r} is not a rule code like PD101")
    if key == "name" and not (isinstance(value, str) and _NAME_RX.match(value)):
        raise bad(f"{value!r} is not kebab-case")
    if key == "category" and value not in CATEGORIES:
        raise bad(f"{value!r} is not one of {', '.join(CATEGORIES)}")
    if key == "severity" and value not in SEVERITIES:
        raise bad(f"{value!r} is not one of {', '.join(SEVERITIES)}")
    if key == "scope" and value not in SCOPES:
        raise bad(f"{value!r} is not one of {', '.join(SCOPES)}")
    if key == "verdict" and not (
        isinstance(value, dict)
        and {"kind", "removes"} <= set(value) <= set(_VERDICT_KEYS)
        and all(isinstance(v, str) for v in value.values())
    ):
        raise bad("must be a table of strings: kind, removes (and replayed_with)")
    if key in ("references", "requires"):
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise bad("must be a list of strings")
        if key == "requires":
            unknown = [v for v in value if v not in REQUIREMENTS]
            if unknown:
                raise bad(f"has unknown requirement(s) {unknown}; known: {', '.join(REQUIREMENTS)}")
    if key == "builds_on" and not (
        isinstance(value, list) and all(isinstance(v, str) and _CODE_RX.match(v) for v in value)
    ):
        raise bad("must be a list of rule codes like PD101")
    if key == "thresholds":
        if not isinstance(value, dict):
            raise bad("must be a table")
        for k, v in value.items():
            if isinstance(v, bool) or not isinstance(v, (int, float, str, list)):
                raise PerfDoctorError(f"{path}: thresholds.{k} must be a number, string or list")
    if key == "when":
        _check_when(path, value)


def _check_when(path: Path, when: TomlValue) -> None:
    if not isinstance(when, dict):
        raise PerfDoctorError(f"{path}: [when] must be a table")
    unknown = set(when) - {"metric", "above", "below", "saving_metric"}
    if unknown:
        raise PerfDoctorError(f"{path}: [when] has unknown key(s) {sorted(unknown)}")
    for k in ("metric", "saving_metric"):
        value = when.get(k)
        if k in when and not (isinstance(value, str) and re.match(r"^[A-Z]{1,4}\d{3}\.\w+$", value)):
            raise PerfDoctorError(f"{path}: when.{k} must look like 'PD101.metric_name'")
    if "metric" not in when or ("above" in when) == ("below" in when):
        raise PerfDoctorError(f"{path}: [when] needs metric and exactly one of above / below")
    bound = when.get("above", when.get("below"))
    if isinstance(bound, bool) or not isinstance(bound, (int, float)):
        raise PerfDoctorError(f"{path}: when.above / when.below must be a number")


def _validate(path: Path, data: TomlTable, full: bool) -> None:
    unknown = {k for k in data if k not in _ALL_KEYS and not VARIANT_RX.match(k)}
    if unknown:
        raise PerfDoctorError(f"{path}: unknown key(s) {sorted(unknown)}")
    if "code" not in data:
        raise PerfDoctorError(f"{path}: missing key 'code'")
    _check_value(path, "code", data["code"])
    if full:
        # a user's metric rule may leave out its headline: its message stands for it
        needed = [k for k in (*_TEXT_KEYS, "references") if k != "headline" or "when" not in data]
        missing = [k for k in needed if k not in data]
        if missing:
            raise PerfDoctorError(f"{path}: missing key(s) {missing}")
    for k, v in data.items():
        _check_value(path, k, v)


def prose(text: str) -> str:
    """Re-flow TOML prose: lines of one paragraph joined, paragraphs kept (blank-line separated)."""
    paras = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text.strip())]
    return "\n\n".join(p for p in paras if p)


_PROSE = ("summary", "why", "saving", "fix")


def _is_prose(key: str) -> bool:
    """Prose is re-flowed (:func:`prose`); a template or code example is kept as written."""
    return key in _PROSE or key.startswith("fix_")


def _text(data: TomlTable, key: str, default: str | None = None) -> str:
    """``data[key]`` (or ``default``), a string: :func:`_validate` checked it; prose re-flowed (:func:`prose`)."""
    value = data.get(key, default)
    if not isinstance(value, str):
        raise PerfDoctorError(f"{key} must be a string")  # unreachable after _validate
    return prose(value) if _is_prose(key) else value


def _texts(data: TomlTable, key: str) -> tuple[str, ...]:
    """``data[key]``, a list of strings (:func:`_validate` checked it), as a tuple; () when absent."""
    value = data.get(key, [])
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def _table(data: TomlTable, key: str) -> TomlTable:
    """``data[key]``, a table (:func:`_validate` checked it), copied; {} when absent."""
    value = data.get(key, {})
    return dict(value) if isinstance(value, dict) else {}


def _number(path: Path, table: TomlTable, key: str, default: float) -> float:
    """``table[key]`` (``default`` when absent) as a float.

    Raises:
        PerfDoctorError: a value that is not a number (names the file and key).
    """
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PerfDoctorError(f"{path}: {key} must be a number")
    return float(value)


def _flag(data: TomlTable, key: str, default: bool) -> bool:
    value = data.get(key, default)
    return value if isinstance(value, bool) else default


def _variants(data: TomlTable) -> dict[str, str]:
    """The advice variants (``fix_rocm``, ``example_after_fsdp``...) of ``data``, prose re-flowed."""
    return {k: _text(data, k) for k in data if VARIANT_RX.match(k)}


def _verdict(data: TomlTable) -> VerdictWords | None:
    """The ``[verdict]`` table as :class:`VerdictWords` (:func:`_validate` checked its keys), None when absent."""
    if "verdict" not in data:
        return None
    table = _table(data, "verdict")
    return VerdictWords(**{k: str(v) for k, v in table.items()})


def _spec(path: Path, data: TomlTable, builtin: bool) -> RuleSpec:
    when = data.get("when")
    return RuleSpec(
        code=_text(data, "code"),
        name=_text(data, "name"),
        category=_text(data, "category"),
        severity=_text(data, "severity"),
        message=_text(data, "message"),
        headline=_text(data, "headline", _text(data, "message")),
        summary=_text(data, "summary"),
        why=_text(data, "why"),
        saving=_text(data, "saving"),
        fix=_text(data, "fix"),
        example_before=_text(data, "example_before"),
        example_after=_text(data, "example_after"),
        references=_texts(data, "references"),
        requires=_texts(data, "requires"),
        builds_on=_texts(data, "builds_on"),
        scope=_text(data, "scope", "rank"),
        thresholds=_table(data, "thresholds"),
        when=dict(when) if isinstance(when, dict) else None,
        runs_after_others=_flag(data, "runs_after_others", False),
        whole_trace_note=_flag(data, "whole_trace_note", True),
        verdict=_verdict(data),
        path=str(path),
        builtin=builtin,
        variants=_variants(data),
    )


def _override(base: RuleSpec, path: Path, data: TomlTable) -> RuleSpec:
    if "when" in data:
        raise PerfDoctorError(f"{path}: {base.code} is a built-in rule; [when] is only for new codes")
    if "builds_on" in data:
        raise PerfDoctorError(f"{path}: builds_on of {base.code} is its check's, not a setting to override")
    unknown = set(_table(data, "thresholds")) - set(base.thresholds)
    if unknown:
        raise PerfDoctorError(
            f"{path}: {base.code} has no threshold(s) {sorted(unknown)}; "
            f"known: {', '.join(sorted(base.thresholds)) or 'none'}"
        )
    texts: dict[str, Any] = {k: _text(data, k) for k in data if k in _TEXT_KEYS}  # RuleSpec's str fields
    spec = replace(base, path=str(path), **texts)
    if variants := _variants(data):
        spec = replace(spec, variants={**base.variants, **variants})
    if "runs_after_others" in data:
        spec = replace(spec, runs_after_others=_flag(data, "runs_after_others", False))
    if "whole_trace_note" in data:
        spec = replace(spec, whole_trace_note=_flag(data, "whole_trace_note", True))
    if "verdict" in data:
        spec = replace(spec, verdict=_verdict(data))
    if "references" in data:
        spec = replace(spec, references=_texts(data, "references"))
    if "requires" in data:
        spec = replace(spec, requires=_texts(data, "requires"))
    if "thresholds" in data:
        spec = replace(spec, thresholds={**base.thresholds, **_table(data, "thresholds")})
    return spec


def load_catalogue(user_dirs: list[str] | tuple[str, ...] = (), builtin_dir: Path | None = None) -> Catalogue:
    """Load the built-in rules, then each user directory's ``*.toml`` over them.

    Raises:
        PerfDoctorError: a file is not valid TOML, lacks a key, has a bad value,
            reuses a code or a name, overrides an unknown threshold, or a user
            directory does not exist. The message names the file.
    """
    bdir = builtin_dir or builtin_rules_dir()
    cat = Catalogue(rules={})
    engine_toml = bdir / "engine.toml"
    if engine_toml.exists():
        sev = _table(_read_toml(engine_toml), "severity")
        cat.severity_high_pct = _number(engine_toml, sev, "high_pct", cat.severity_high_pct)
        cat.severity_medium_pct = _number(engine_toml, sev, "medium_pct", cat.severity_medium_pct)
    for path in sorted(bdir.glob("*.toml")):
        if not _BUILTIN_FILE_RX.match(path.name):
            continue
        data = _read_toml(path)
        _validate(path, data, full=True)
        if data["code"] != path.stem:
            raise PerfDoctorError(f"{path}: code {data['code']} does not match the file name")
        _add(cat, _spec(path, data, builtin=True))
    for d in user_dirs:
        udir = Path(d)
        if not udir.is_dir():
            raise PerfDoctorError(f"--rules {d}: not a directory")
        for path in sorted(udir.glob("*.toml")):
            data = _read_toml(path)
            if "code" in data and isinstance(data["code"], str) and data["code"] in cat.rules:
                _validate(path, data, full=False)
                cat.rules[data["code"]] = _override(cat.rules[data["code"]], path, data)
                continue
            _validate(path, data, full=True)
            if "when" not in data:
                raise PerfDoctorError(
                    f"{path}: {data['code']} is not a built-in rule, so it needs a [when] table "
                    "over a built-in check's metric"
                )
            _add(cat, _spec(path, data, builtin=False))
    return cat


def _add(cat: Catalogue, spec: RuleSpec) -> None:
    if spec.code in cat.rules:
        raise PerfDoctorError(f"{spec.path}: code {spec.code} already defined in {cat.rules[spec.code].path}")
    other = cat.by_name(spec.name)
    if other is not None:
        raise PerfDoctorError(f"{spec.path}: name {spec.name} already used by {other.code} ({other.path})")
    cat.rules[spec.code] = spec
