"""Rule engine: catalogue, selection, user rules, config, CLI exit codes and rendering."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console
from rules_helpers import DL, SGEMM, run_tb
from tracebuilder import TraceBuilder

from perfdoctor.checks import config, engine
from perfdoctor.checks.catalogue import builtin_rules_dir, load_catalogue
from perfdoctor.cli import main
from perfdoctor.errors import PerfDoctorError


def _dl_trace(tmp_path) -> Path:
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.annotation(DL, 0, 400)
    tb.launch(SGEMM, launch_ts=410, start=420, dur=480)
    return tb.write(tmp_path / "dl.json")


def test_every_check_has_a_toml_and_every_toml_a_check():
    cat = load_catalogue()
    mods = engine.check_modules()
    assert set(mods) <= set(cat.rules)
    missing = set(cat.rules) - set(mods)
    assert missing <= {"PD206"}, missing  # PD206's check belongs to the roofline work
    for code, mod in mods.items():
        assert mod.METRICS and mod.__doc__, code
        assert cat.rules[code].path.endswith(f"{code}.toml")


def test_catalogue_ships_in_the_package_build():
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert '"rules" = "perfdoctor/_rules"' in pyproject
    assert (builtin_rules_dir() / "PD101.toml").exists()


def test_select_prefix_name_and_longest_match():
    cat = load_catalogue()
    assert engine.select_codes(cat, ["dataloader-starvation"], None) == ["PD101"]
    assert engine.select_codes(cat, ["PD1", "PD103"], ["PD10"]) == ["PD103"]
    allc = engine.select_codes(cat, None, ["PD9"])
    assert "PD901" not in allc and "PD101" in allc
    with pytest.raises(PerfDoctorError, match="--select: 'PD7'"):
        engine.select_codes(cat, ["PD7"], None)


def test_empty_selection_is_a_usage_error(tmp_path, capsys):
    cat = load_catalogue()
    with pytest.raises(PerfDoctorError, match="no rule left to run"):
        engine.select_codes(cat, ["PD101"], ["PD101"])
    with pytest.raises(PerfDoctorError, match="--ignore PD1 removes every rule --select PD1 selects"):
        engine.select_codes(cat, ["PD1"], ["PD1"])  # at equal length ignore wins
    assert engine.select_codes(cat, ["PD101"], ["PD1"]) == ["PD101"]  # the longer selector wins
    assert main(["report", str(_dl_trace(tmp_path)), "--select", "PD101", "--ignore", "PD101"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and "no rule left to run" in out.err


def _ranked_dl_traces(tmp_path, fetch_us_by_rank: dict[int, float]) -> list[Path]:
    """One trace per rank: a 1000 µs step whose device waits ``fetch_us`` for the DataLoader."""
    paths = []
    for rank, fetch in fetch_us_by_rank.items():
        tb = TraceBuilder(rank=rank, world_size=len(fetch_us_by_rank))
        tb.step(1, 0, 1000)
        tb.annotation(DL, 0, fetch)
        tb.launch(SGEMM, launch_ts=fetch + 10, start=fetch + 20, dur=1000 - fetch - 30)
        paths.append(tb.write(tmp_path / f"rank{rank}.json"))
    return paths


def test_multi_rank_finding_names_the_rank_its_numbers_come_from(tmp_path):
    from rules_helpers import run_rules

    # replayed with the fetch a hand-off, each step ends `fetch` µs earlier: rank 0 8%, rank 1 40%, rank 2 20%,
    # rank 3 0% (passes)
    r = run_rules(_ranked_dl_traces(tmp_path, {0: 80, 1: 400, 2: 200, 3: 0}), ["PD101"])
    f = r.findings["PD101"]
    assert f["rank"] == 1 and f["position"] == 1 and f["evidence"]["ranks"] == [0, 1, 2]
    assert f["message"].startswith("rank 1: The device idles 0.4 ms per step waiting for the DataLoader (measured")
    assert "takes it from 1.0 ms to 0.6 ms (saves 0.4 ms)" in f["message"]  # rank 1's step, 400 µs of fetch gone
    assert f["message"].endswith("(fires on ranks 0, 1, 2 of 4)")
    assert f["evidence"]["saving_us_by_rank"] == {"0": 80.0, "1": 400.0, "2": 200.0}
    assert "worst_rank" not in f["evidence"]  # the finding's own rank field says it


def test_single_rank_finding_has_no_rank_prefix(tmp_path):
    from rules_helpers import run_rules

    f = run_rules([_dl_trace(tmp_path)], ["PD101"]).findings["PD101"]
    assert f["rank"] == 0 and f["position"] == 1 and not f["message"].startswith("rank")
    assert "fires on" not in f["message"]


def test_user_override_of_threshold(tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "PD101.toml").write_text('code = "PD101"\n[thresholds]\nmin_saving_pct = 50.0\n')
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.annotation(DL, 0, 400)
    tb.launch(SGEMM, launch_ts=410, start=420, dur=480)
    r = run_tb(tb, tmp_path, ["PD101"], rules_dirs=[rules])
    assert "PD101" in r.passed  # 40% < 50%


def test_user_metric_rule(tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    base = load_catalogue().rules["PD101"]
    text = "\n".join(
        f"{k} = {json.dumps(getattr(base, k))}"
        for k in ("summary", "why", "saving", "fix", "example_before", "example_after")
    )
    (rules / "X101.toml").write_text(
        'code = "X101"\nname = "my-dataloader"\ncategory = "input-pipeline"\nseverity = "low"\n'
        'message = "{metric} is {value:.0f}"\nreferences = []\n'
        + text
        + '\n[when]\nmetric = "PD101.dataloader_wait_pct"\nabove = 10\nsaving_metric = "PD101.dataloader_wait_us"\n'
    )
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.annotation(DL, 0, 400)
    tb.launch(SGEMM, launch_ts=410, start=420, dur=480)
    r = run_tb(tb, tmp_path, ["X101"], rules_dirs=[rules])
    f = r.findings["X101"]
    assert f["message"] == "PD101.dataloader_wait_pct is 40" and f["saving_us_per_step"] == 400
    assert f["headline"] == f["message"]  # a metric rule without a headline: its one-line message stands for it
    assert f["severity"] == "low" and "PD101" not in r.findings  # PD101 ran for its metric, not reported


@pytest.mark.parametrize(
    "content, match",
    [
        ('code = "PD101"\n[thresholds]\nno_such = 1\n', "no threshold"),
        ('code = "PD101"\nthresholds = [\n', "not valid TOML"),
        ('code = "X1"\n', "not a rule code"),
        ('code = "X102"\nname = "x"\n', "missing key"),
    ],
)
def test_bad_user_rule_is_one_line_error_exit_2(tmp_path, capsys, content, match):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "bad.toml").write_text(content)
    assert main(["report", str(_dl_trace(tmp_path)), "--rules", str(rules)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "bad.toml" in err and match in err


def test_fail_on_exit_codes(tmp_path, capsys):
    trace = str(_dl_trace(tmp_path))
    assert main(["report", trace, "--select", "PD101", "--fail-on", "low", "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [f["code"] for f in report["findings"]] == ["PD101"] and "upper bound" in report["findings_note"]
    assert main(["report", trace, "--select", "PD103", "--fail-on", "low", "--format", "json"]) == 0
    assert main(["report", trace, "--select", "PD999"]) == 2


def test_pyproject_keys(tmp_path):
    p = tmp_path / "pyproject.toml"
    p.write_text('[tool.perfdoctor]\nselect = ["PD1"]\nignore = "PD103"\nfail-on = "medium"\nrules = "my_rules"\n')
    opts = config.resolve(pyproject=p)
    assert opts.select == ["PD1"] and opts.ignore == ["PD103"] and opts.fail_on == "medium"
    assert opts.rules_dirs == [str((tmp_path / "my_rules").resolve())]
    assert config.resolve(select="PD2", pyproject=p).select == ["PD2"]
    p.write_text('[tool.perfdoctor]\nselcet = ["PD1"]\n')
    with pytest.raises(PerfDoctorError, match="tool.perfdoctor.selcet"):
        config.resolve(pyproject=p)


def test_terminal_findings_section(tmp_path):
    from perfdoctor import pipeline
    from perfdoctor.checks.config import RuleOptions
    from perfdoctor.render.terminal import render_terminal

    built = pipeline.build([str(_dl_trace(tmp_path))], rule_options=RuleOptions(select=["PD101", "PD301"]))
    console = Console(width=100, record=True)
    render_terminal(built.model, console, details=True)
    text = console.export_text()
    assert "PD101" in text and "≈ 0.40 ms (40.0%)" in text and "savings add up" in text
    assert "PD301 exposed-communication: no collective" in text


def test_terminal_findings_name_the_rank_on_multi_rank_jobs(tmp_path):
    from perfdoctor import pipeline
    from perfdoctor.checks.config import RuleOptions
    from perfdoctor.render.terminal import render_terminal

    paths = [str(p) for p in _ranked_dl_traces(tmp_path, {0: 80, 1: 400})]
    built = pipeline.build(paths, rule_options=RuleOptions(select=["PD101"]))
    console = Console(width=640, record=True)  # wide enough that the finding fits on its row
    render_terminal(built.model, console)
    row = next(line for line in console.export_text().splitlines() if "│ 1 │ PD101" in line)
    assert "│ rank 1: DataLoader stalls the GPU 0.4 ms per step (40% of the step) [2 of 2 ranks] │" in row


def test_rules_and_rule_commands(capsys):
    assert main(["rules", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["code"] for r in rows} >= {
        "PD101",
        "PD102",
        "PD103",
        "PD201",
        "PD202",
        "PD203",
        "PD204",
        "PD205",
        "PD301",
        "PD302",
        "PD303",
        "PD401",
        "PD501",
        "PD502",
        "PD901",
    }
    assert main(["rule", "PD101", "--width", "100"]) == 0
    out = capsys.readouterr().out
    assert "num_workers" in out and "min_saving_pct" in out and "PD101.dataloader_wait_us" in out
    assert main(["rule", "nope"]) == 2


def test_rules_listing_reads_on_a_narrow_terminal(capsys):
    assert main(["rules", "--width", "80"]) == 0
    out = capsys.readouterr().out
    assert "PD101  dataloader-starvation  (high, input-pipeline)" in out
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 80 and "│" not in out
    assert main(["rules", "--width", "150"]) == 0
    wide = capsys.readouterr().out
    assert "category" in wide and "PD101" in wide


def test_skip_reasons_of_several_ranks_are_folded_by_wording() -> None:
    """Issue 12: an 8-rank job printed PD206's long skip reason 8 times (it differs only in a number); from 3 ranks
    on, one line per wording names how many ranks share it, and distinct wordings stay apart."""
    from perfdoctor.checks.engine import FOLD_SKIPS_ABOVE, _folded

    assert FOLD_SKIPS_ABOVE == 2
    skips = [(r, f"ops that could not be costed take {28 + r}% of op time") for r in range(8)]
    skips.append((8, "no memory events"))
    text = _folded(skips)
    assert text == (
        "on 8 ranks, e.g. rank 0: ops that could not be costed take 28% of op time; "
        "on 1 rank, e.g. rank 8: no memory events"
    )
    assert text.count("could not be costed") == 1
