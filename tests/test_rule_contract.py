"""The rule contract (issue 9 item 4): each check declares its thresholds and message fields, the catalogue is
checked against them at start, requirements are one table, and run order is declared in the TOML."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perfdoctor.checks import catalogue, contract, engine, requirements
from perfdoctor.checks.catalogue import builtin_rules_dir, load_catalogue
from perfdoctor.errors import PerfDoctorError

REPO = Path(__file__).resolve().parents[1]


def test_every_check_declares_thresholds_and_message_fields_that_fit_its_toml():
    cat, modules = load_catalogue(), engine.check_modules()
    assert set(modules) <= set(cat.rules)
    for code, mod in modules.items():
        assert dataclasses.is_dataclass(mod.Thresholds), code
        names = {f.name for f in dataclasses.fields(mod.Thresholds)}
        assert names == set(cat.rules[code].thresholds), code
        assert isinstance(mod.MESSAGE_FIELDS, tuple), code
    contract.validate(cat, modules)  # the shipped catalogue fits


def _builtin_copy(tmp_path: Path) -> Path:
    d = tmp_path / "rules"
    shutil.copytree(builtin_rules_dir(), d)
    return d


@pytest.mark.parametrize(
    ("edit", "error"),
    [
        (
            ("min_saving_pct = 5.0", "min_saving_pct = 5.0\nmin_savings_pct = 3.0"),
            "PD101 has no threshold 'min_savings_pct'",
        ),
        (("min_saving_pct = 5.0", 'min_saving_pct = "5"'), "thresholds.min_saving_pct of PD101 must be float, not '5'"),
        (("min_saving_pct = 5.0", "min_saving_pct = true"), "thresholds.min_saving_pct must be a number"),
        (("min_saving_pct = 5.0", ""), "PD101 lacks threshold(s) min_saving_pct"),
        (("{recorded_ms:.1f}", "{dataloader_wait_msec:.1f}"), "uses {dataloader_wait_msec}, which its check"),
        (("{recorded_ms:.1f}", "{recorded_ms:.1f"), "is not a valid template"),
        # the headline is held to the same fields as the message, and every built-in rule has one
        (("stalls {stalled}", "stalls {stalld}"), "headline of PD101 uses {stalld}, which its check does not provide"),
        (("stalls {stalled}", "stalls {}"), "headline of PD101 has a positional placeholder"),
        (('\nheadline = "', '\n# headline = "'), "missing key(s) ['headline']"),
    ],
)
def test_a_builtin_toml_that_does_not_fit_its_check_fails_at_load(tmp_path, edit, error):
    d = _builtin_copy(tmp_path)
    toml = d / "PD101.toml"
    text = toml.read_text()
    assert edit[0] in text
    toml.write_text(text.replace(edit[0], edit[1], 1))
    with pytest.raises(PerfDoctorError) as exc:
        contract.validate(load_catalogue(builtin_dir=d), engine.check_modules())
    assert error in exc.value.message and str(toml) in exc.value.message and "\n" not in exc.value.message


def test_int_threshold_refuses_a_float(tmp_path):
    d = _builtin_copy(tmp_path)
    toml = d / "PD901.toml"
    toml.write_text(toml.read_text().replace("min_steps = ", "min_steps = 2.5 #", 1))
    with pytest.raises(PerfDoctorError, match=r"thresholds.min_steps of PD901 must be int, not 2.5"):
        contract.validate(load_catalogue(builtin_dir=d), engine.check_modules())


def test_user_override_with_a_bad_placeholder_stops_report_before_any_trace_is_read(tmp_path):
    rules = tmp_path / "my_rules"
    rules.mkdir()
    bad = rules / "PD101.toml"
    bad.write_text('code = "PD101"\nmessage = "waiting {dataloader_wait_msec:.1f} ms"\n')
    proc = subprocess.run(
        [sys.executable, "-m", "perfdoctor", "report", str(tmp_path / "absent.json"), "--rules", str(rules)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"perfdoctor: error: {bad}: message of PD101 uses {{dataloader_wait_msec}}, which its check does not provide "
        "(fields: measured, recorded_ms, replayed_ms, saving_ms, saving_pct, stall_ms, stall_pct, stalled)"
    ]


def test_user_override_threshold_type_is_checked(tmp_path):
    rules = tmp_path / "r"
    rules.mkdir()
    (rules / "PD101.toml").write_text('code = "PD101"\n[thresholds]\nmin_saving_pct = "lots"\n')
    with pytest.raises(PerfDoctorError, match=r"r/PD101.toml: thresholds.min_saving_pct of PD101 must be float"):
        contract.validate(load_catalogue([str(rules)]), engine.check_modules())


def test_user_metric_rule_message_may_use_metric_and_value_only(tmp_path):
    rules = tmp_path / "r"
    rules.mkdir()
    base = (
        'code = "X101"\nname = "x"\ncategory = "host"\nseverity = "low"\nsummary = "s"\nwhy = "w"\n'
        'saving = "s"\nfix = "f"\nexample_before = ""\nexample_after = ""\nreferences = []\n'
        '[when]\nmetric = "PD101.dataloader_wait_pct"\nabove = 1.0\n'
    )
    (rules / "X101.toml").write_text('message = "{metric} is {value:.1f}"\n' + base)
    contract.validate(load_catalogue([str(rules)]), engine.check_modules())
    (rules / "X101.toml").write_text('message = "{metric} is {valeu:.1f}"\n' + base)
    with pytest.raises(PerfDoctorError, match=r"uses \{valeu\}"):
        contract.validate(load_catalogue([str(rules)]), engine.check_modules())


def test_requirements_are_one_table_matching_the_catalogue_names():
    assert set(requirements.REQUIREMENTS) == set(catalogue.REQUIREMENTS)
    assert set(requirements.JOB_REQUIREMENTS) <= set(requirements.REQUIREMENTS)
    source = (REPO / "perfdoctor" / "checks" / "engine.py").read_text()
    assert "PD901" not in source and 'req == "' not in source  # no rule- or requirement-specific branch


def test_run_order_is_declared_in_the_toml(tmp_path):
    cat = load_catalogue()
    order = engine.check_order(cat, sorted(cat.rules))
    assert order[-1] == "PD901" and cat.rules["PD901"].runs_after_others
    assert not cat.rules["PD901"].whole_trace_note and cat.rules["PD101"].whole_trace_note
    rules = tmp_path / "r"
    rules.mkdir()
    (rules / "PD101.toml").write_text('code = "PD101"\nruns_after_others = true\n')
    order = engine.check_order(load_catalogue([str(rules)]), sorted(cat.rules))
    assert order[-2:] == ["PD101", "PD901"]
    (rules / "PD101.toml").write_text('code = "PD101"\nruns_after_others = "yes"\n')
    with pytest.raises(PerfDoctorError, match="runs_after_others must be true or false"):
        load_catalogue([str(rules)])


def test_advice_variants_fit_the_situations_their_check_tells_apart(tmp_path):
    # PD203 gives advice for three GPU situations; each needs its fix_<situation>, and a variant no situation
    # names (a misspelt key) is refused rather than never shown
    assert engine.check_modules()["PD203"].ADVICE == ("fp16", "bf16", "tf32")
    spec = load_catalogue().rules["PD203"]
    assert spec.advice("bf16")["fix"] == spec.variants["fix_bf16"] and "example_before" not in spec.advice("bf16")
    d = _builtin_copy(tmp_path)
    toml = d / "PD203.toml"
    text = toml.read_text()
    toml.write_text(text.replace("\nfix_bf16 = ", "\nfix_bf6 = ", 1))
    with pytest.raises(PerfDoctorError, match=r"PD203.toml: PD203 lacks fix_bf16 \(its check gives advice for it\)"):
        contract.validate(load_catalogue(builtin_dir=d), engine.check_modules())
    toml.write_text(text.replace("\nfix_fp16 = ", '\nfix_amd = "x"\nfix_fp16 = ', 1))
    with pytest.raises(PerfDoctorError, match=r"fix_amd of PD203 is for a situation its check does not tell apart"):
        contract.validate(load_catalogue(builtin_dir=d), engine.check_modules())


def test_a_user_override_of_an_advice_variant_replaces_that_text_only(tmp_path):
    rules = tmp_path / "r"
    rules.mkdir()
    (rules / "PD501.toml").write_text('code = "PD501"\nfix_retry = """\nOur cluster: see the wiki."""\n')
    cat = load_catalogue([str(rules)])
    contract.validate(cat, engine.check_modules())
    base = load_catalogue().rules["PD501"]
    assert cat.rules["PD501"].advice("retry") == {**base.advice("retry"), "fix": "Our cluster: see the wiki."}
    assert cat.rules["PD501"].advice("empty_cache") == base.advice("empty_cache")
    assert cat.rules["PD501"].fix == base.fix


def test_a_check_reads_its_thresholds_typed_with_user_overrides_applied(tmp_path):
    from perfdoctor.checks import pd101_dataloader_starvation as pd101
    from perfdoctor.checks.context import RankContext

    rules = tmp_path / "r"
    rules.mkdir()
    (rules / "PD101.toml").write_text('code = "PD101"\n[thresholds]\nmin_saving_pct = 7\n')
    spec = load_catalogue([str(rules)]).rules["PD101"]
    th = RankContext(None, None, spec).thresholds(pd101.Thresholds)
    assert isinstance(th, pd101.Thresholds) and th.min_saving_pct == 7  # the user's value, not the built-in 5.0
    assert load_catalogue().rules["PD101"].thresholds == {"min_saving_pct": 5.0}
    with pytest.raises(PerfDoctorError, match="lacks threshold"):
        RankContext(None, None, dataclasses.replace(spec, thresholds={})).thresholds(pd101.Thresholds)


def test_checks_talk_through_the_contract_not_a_cache():
    # thresholds typed (no ctx.th["..."]), another rule's outcome through builds_on (no ctx.cache side channel)
    for path in sorted((REPO / "perfdoctor" / "checks").glob("pd[0-9]*.py")):
        text = path.read_text()
        for banned in (".th[", ".th.get(", "ctx.cache", "job.cache"):
            assert banned not in text, f"{path.name} uses {banned}"


def test_a_rule_reads_only_the_rules_it_builds_on(tmp_path):
    from perfdoctor.checks.context import Outcome, RankContext

    cat = load_catalogue()
    assert cat.rules["PD103"].builds_on == ("PD101",)
    ctx = RankContext(None, None, cat.rules["PD103"])
    assert ctx.built_on("PD101") is None  # PD101 did not run on this rank
    ctx.earlier["PD101"] = first = Outcome(skip="no DataLoader")
    ctx.earlier["PD102"] = Outcome()
    assert ctx.built_on("PD101") is first
    with pytest.raises(PerfDoctorError, match=r'PD103 reads PD102\'s outcome without builds_on = \["PD102"\]'):
        ctx.built_on("PD102")
    with pytest.raises(PerfDoctorError, match="runs_after_others"):
        ctx.skip_reasons()
    ctx.spec = cat.rules["PD901"]
    assert ctx.skip_reasons() == [("PD101", "no DataLoader")]


@pytest.mark.parametrize(
    ("edit", "error"),
    [
        (('builds_on = ["PD101"]', 'builds_on = ["PD109"]'), "PD103 builds on PD109, which runs after it"),
        (('builds_on = ["PD101"]', 'builds_on = ["PD199"]'), "PD103 builds on PD199, which has no check"),
        (('builds_on = ["PD101"]', 'builds_on = ["pd101"]'), "builds_on must be a list of rule codes like PD101"),
    ],
)
def test_builds_on_names_a_rule_that_runs_first(tmp_path, edit, error):
    d = _builtin_copy(tmp_path)
    toml = d / "PD103.toml"
    text = toml.read_text()
    assert edit[0] in text
    toml.write_text(text.replace(edit[0], edit[1], 1))
    with pytest.raises(PerfDoctorError) as exc:
        contract.validate(load_catalogue(builtin_dir=d), engine.check_modules())
    assert error in exc.value.message and str(toml) in exc.value.message


def test_builds_on_is_not_a_user_setting(tmp_path):
    rules = tmp_path / "r"
    rules.mkdir()
    (rules / "PD103.toml").write_text('code = "PD103"\nbuilds_on = []\n')
    with pytest.raises(PerfDoctorError, match=r"r/PD103.toml: builds_on of PD103 is its check's"):
        load_catalogue([str(rules)])


def test_placeholders_come_from_the_hit_alone():
    # a template may name only what a hit gives (MESSAGE_FIELDS) and what the engine adds: a metric that is not
    # also in the hit's evidence would fail when the rule first fires, so the contract refuses it at load
    cat, modules = load_catalogue(), engine.check_modules()
    for code, mod in modules.items():
        spec = cat.rules[code]
        used = {p for t in contract.TEMPLATES for p in contract.placeholders(spec, t)}
        assert used <= {*mod.MESSAGE_FIELDS, *contract.ENGINE_FIELDS}, code
    spec = dataclasses.replace(cat.rules["PD101"], headline="{dataloader_wait_pct:.0f}% waiting")  # a METRIC
    with pytest.raises(PerfDoctorError, match=r"uses \{dataloader_wait_pct\}, which its check does not provide"):
        contract.validate_rule(spec, modules["PD101"])
