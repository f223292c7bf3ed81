"""The maintainer tools: the new-rule scaffold and the one refresh command."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rules_helpers import SGEMM
from tracebuilder import TraceBuilder

from perfdoctor.checks import context as cx
from perfdoctor.checks import contract, engine
from perfdoctor.checks.catalogue import builtin_rules_dir, load_catalogue
from perfdoctor.tools import new_rule, refresh

REPO = Path(__file__).resolve().parents[1]


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(builtin_rules_dir(), root / "rules")
    return root


def _import(path: Path, monkeypatch):
    spec = importlib.util.spec_from_file_location(f"scaffolded_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, mod)  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_scaffold_writes_a_rule_that_loads_fits_its_contract_and_runs(tmp_path, capsys, monkeypatch):
    root = _root(tmp_path)
    assert new_rule.main(["PD123", "some-name", "--root", str(root)]) == 0
    toml, module, test = (
        root / "rules" / "PD123.toml",
        root / "perfdoctor" / "checks" / "pd123_some_name.py",
        root / "tests" / "rules" / "test_pd123.py",
    )
    assert capsys.readouterr().out.splitlines()[:3] == [f"wrote {toml}", f"wrote {module}", f"wrote {test}"]
    cat = load_catalogue(builtin_dir=root / "rules")
    spec = cat.rules["PD123"]
    assert (spec.name, spec.category, spec.requires) == ("some-name", "input-pipeline", ("steps",))
    assert spec.headline == "TODO the claim: {example_ms:.1f} ms per step of TODO"  # checked against the fields
    mod = _import(module, monkeypatch)
    contract.validate_rule(spec, mod)
    compile(test.read_text(), str(test), "exec")
    # the skeleton check runs in the engine: nothing detected yet, so the rule passes on a one-step trace
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch(SGEMM, launch_ts=10, start=20, dur=900)
    from analysed import rank_analysis

    analysis = rank_analysis(tb.write(tmp_path / "t.json"))
    ctx = [cx.RankContext(analysis, r) for r in analysis.ranks]
    modules = {**engine.check_modules(), "PD123": mod}
    per_rank = [engine.rank_outcomes(analysis, c, cat, ["PD123"], modules) for c in ctx]
    res = engine.combine(analysis, ctx, per_rank, cat, ["PD123"], modules)
    assert res.passed == ["PD123"] and res.metrics["PD123"]["0"]["example_us"] == 0.0


def test_scaffolded_files_are_lint_clean(tmp_path):
    ruff = Path(sys.executable).with_name("ruff")
    if not ruff.exists():
        pytest.skip("ruff not installed (pip install -e '.[lint]')")
    root = _root(tmp_path)
    new_rule.scaffold("PD577", "lint-me", root)
    proc = subprocess.run(
        [str(ruff), "check", "--config", str(REPO / "pyproject.toml"), str(root / "perfdoctor"), str(root / "tests")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["PD101", "fresh-name"], "already has this code or name"),
        (["PD124", "dataloader-starvation"], "already has this code or name"),
        (["PD723", "x"], "no code family PD7xx"),
        (["PD12", "x"], "a rule code is PD and three digits"),
        (["PD124", "Bad_Name"], "kebab-case"),
    ],
)
def test_scaffold_refuses_in_one_line(tmp_path, capsys, argv, error):
    root = _root(tmp_path)
    assert new_rule.main([*argv, "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert error in err and err.count("\n") == 1
    assert not (root / "perfdoctor").exists()


def test_scaffold_never_overwrites(tmp_path, capsys):
    root = _root(tmp_path)
    test = root / "tests" / "rules" / "test_pd124.py"
    test.parent.mkdir(parents=True)
    test.write_text("# mine\n")
    assert new_rule.main(["PD124", "new-one", "--root", str(root)]) == 2
    assert test.read_text() == "# mine\n" and not (root / "rules" / "PD124.toml").exists()
    assert "already exists: nothing written" in capsys.readouterr().err


def test_refresh_covers_every_golden_that_a_test_rewrites():
    rewriting = sorted(
        f"tests/{p.name}"
        for p in (REPO / "tests").glob("test_*.py")
        if "PERFDOCTOR_UPDATE_GOLDEN" in p.read_text() and p.name != "test_tools.py"
    )
    assert rewriting == sorted(refresh.GOLDEN_TESTS)
