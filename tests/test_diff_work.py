"""`perfdoctor diff` per step or per unit of work: samples and tokens per step from run.json, the trace's input
shapes or the flags; the verdict and the gate read the throughput when the work per step differs.

Every expected work figure is read here from the raw JSON (or written by hand into a run.json); every expected
change is worked out from the diff's per-step numbers, which tests/test_diff.py checks by hand.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import pytest
from tracebuilder import TraceBuilder

from perfdoctor.cli import main
from perfdoctor.diff.compare import compare, regression
from perfdoctor.diff.model import Diff
from perfdoctor.diff.sides import load_side
from perfdoctor.render.diff_html import render_diff_html
from perfdoctor.render.diff_markdown import render_diff_markdown

LUATIL_05 = "luatil__rtx3060_compile_cudagraphs__trace_05.json"
LUATIL_06 = "luatil__rtx3060_cudagraphs_batch32__trace_06.json"
REPO = Path(__file__).resolve().parents[1]
RUN_DIR = REPO / "sample_traces" / "tiny_gpt_cpu_run"


def _compiled_inputs(path: Path) -> list[tuple[list[int], str]]:
    """The first input (dims, type) of each CompiledFunction cpu_op inside a host ProfilerStep annotation, read
    from the raw Kineto JSON without perfdoctor."""
    events = json.loads(path.read_text())["traceEvents"]
    host_steps = [
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") == "user_annotation" and e.get("name", "").startswith("ProfilerStep#")
    ]
    out = []
    for e in events:
        if e.get("cat") == "cpu_op" and e.get("name") == "CompiledFunction":
            if any(a <= e["ts"] <= b for a, b in host_steps):
                out.append((e["args"]["Input Dims"][0], e["args"]["Input type"][0]))
    return out


def _diff_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = main(["diff", *args, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def _throughput(w: float, step_change_pct: float) -> float:
    """Throughput change (%) of a step time change (%) with ``w`` = AFTER's work per step ÷ BEFORE's."""
    return 100.0 * (w / (1.0 + step_change_pct / 100.0) - 1.0)


# -- the RTX 3060 pair: batch 4 → 32 of 256 tokens ----------------------------------------------------------------


def test_batch_4_to_32_reads_per_token_not_a_635_percent_regression(capsys):
    """traces/README: trace_05 is the tiny LM at batch 4×256, trace_06 the same script at batch 32. In the raw JSON
    each step's CompiledFunction (torch.compile's forward) takes the token ids first: long int [4, 256] and
    [32, 256], i.e. 1,024 and 8,192 tokens, 4 and 32 samples per step. Per step the job is +635% slower; per token
    it is faster: tokens/s × 8 ÷ 7.35."""
    from conftest import shared_trace

    before, after = shared_trace(LUATIL_05), shared_trace(LUATIL_06)
    assert {tuple(d) + (t,) for d, t in _compiled_inputs(before)} == {(4, 256, "long int")}
    assert {tuple(d) + (t,) for d, t in _compiled_inputs(after)} == {(32, 256, "long int")}
    assert len(_compiled_inputs(before)) == len(_compiled_inputs(after)) == 5

    code, d = _diff_json(capsys, str(before), str(after), "--fail-on-regression", "5")
    w = d["work"]
    assert code == 0  # +635% per step, but no regression per token
    assert d["change_pct"] == pytest.approx(635, abs=1) and w["step_verdict"] == "slower"
    assert (w["basis"], w["unit"]) == ("per-token", "token")
    assert (w["before"]["job_tokens"], w["after"]["job_tokens"]) == (1024, 8192)
    assert (w["before"]["job_samples"], w["after"]["job_samples"]) == (4, 32)
    assert w["before"]["origin"] == "trace" and "CompiledFunction" in w["before"]["source"]
    assert "long int [4×256]" in w["before"]["source"] and "long int [32×256]" in w["after"]["source"]
    # the time per token: each side's mean step ÷ its tokens per step
    mb, ma = d["mean_step_us"]["before"], d["mean_step_us"]["after"]
    assert w["mean_us_per_unit"]["before"] == pytest.approx(mb / 1024)
    assert w["mean_us_per_unit"]["after"] == pytest.approx(ma / 8192)
    assert w["throughput_change_pct"] == pytest.approx(_throughput(8, d["change_pct"]))
    # the interval carried over: the step interval ÷ 8 work, inverted for throughput
    lo, hi = d["ci95_pct"]
    assert w["ci95_pct"] == pytest.approx([100 * ((1 + lo / 100) / 8 - 1), 100 * ((1 + hi / 100) / 8 - 1)])
    assert w["throughput_ci95_pct"] == pytest.approx([_throughput(8, hi), _throughput(8, lo)])
    assert d["verdict"] == "faster" and w["throughput_ci95_pct"][0] > 2  # the interval clears the 2% threshold
    assert d["headline"].startswith(f"faster per token: +{w['throughput_change_pct']:.1f}% tokens/s")
    assert "per step: slower: mean step" in d["headline"]
    job = {r["unit"]: r for r in w["rates"] if r["rank"] is None}
    assert job["tokens/s"]["before"] == pytest.approx(1024 / (mb / 1e6))
    assert job["tokens/s"]["after"] == pytest.approx(8192 / (ma / 1e6))


def test_flags_override_the_trace_and_the_gate_reads_per_step_then(capsys):
    """--tokens-per-step 1024,1024 says the steps did the same work: the +635% per step is then a regression,
    and the diff says the trace read 8,192."""
    from conftest import shared_trace

    before, after = shared_trace(LUATIL_05), shared_trace(LUATIL_06)
    code, d = _diff_json(capsys, str(before), str(after), "--tokens-per-step", "1024,1024", "--fail-on-regression", "5")
    assert code == 1 and d["work"]["basis"] == "per-step" and d["verdict"] == "slower"
    assert d["work"]["after"]["origin"] == "flag"
    assert any("AFTER: --tokens-per-step 1,024 used; the trace says 8,192 tokens per step" in x for x in d["warnings"])


# -- flags on traces without shapes -------------------------------------------------------------------------------


def _steps(path: Path, step_us: list[float], dims: list | None = None) -> Path:
    """Steps of the given lengths, each with one 'aten::mm' cpu_op (with ``dims`` as its Input Dims when given)
    and one 100 µs kernel."""
    tb = TraceBuilder()
    t0 = 0.0
    for i, dur in enumerate(step_us, start=1):
        tb.step(i, t0, dur)
        tb.cpu_op("aten::mm", t0 + 2, 5, input_dims=dims)
        tb.launch("k", launch_ts=t0 + 8, start=t0 + 10, dur=100, launch_dur=1)
        t0 += dur
    return tb.write(path)


BEFORE_US = [1000.0, 1010.0, 990.0, 1005.0, 995.0, 1000.0]
AFTER_US = [2 * x for x in [1000.0, 1020.0, 980.0, 1000.0, 1010.0, 990.0]]


def test_flags_make_a_twice_longer_step_of_four_times_the_samples_faster(tmp_path, capsys):
    """AFTER's step is 2× BEFORE's; with 8 and 32 samples per step it does 4× the work: time per sample × 0.5,
    samples/s +100%. Without the flags (no shapes recorded) the step is compared as before: slower."""
    b, a = _steps(tmp_path / "b.json", BEFORE_US), _steps(tmp_path / "a.json", AFTER_US)
    code, plain = _diff_json(capsys, str(b), str(a), "--fail-on-regression", "5")
    assert code == 1 and plain["work"]["basis"] == "per-step" and plain["verdict"] == "slower"
    assert "no input shapes to compare" in plain["work"]["reason"]

    code, d = _diff_json(capsys, str(b), str(a), "--samples-per-step", "8,32", "--fail-on-regression", "5")
    w = d["work"]
    assert code == 0 and (w["basis"], w["unit"], d["verdict"]) == ("per-sample", "sample", "faster")
    assert d["change_pct"] == pytest.approx(100.0 * (sum(AFTER_US) / sum(BEFORE_US) - 1))  # the step's, as before
    assert w["mean_us_per_unit"]["before"] == pytest.approx(sum(BEFORE_US) / 6 / 8)
    assert w["mean_us_per_unit"]["after"] == pytest.approx(sum(AFTER_US) / 6 / 32)
    assert w["throughput_change_pct"] == pytest.approx(_throughput(4, d["change_pct"]))
    # the per-sample interval is the step interval's on the log scale, shifted by ln 4
    lo, hi = d["ci95_pct"]
    assert math.log1p(w["ci95_pct"][0] / 100) == pytest.approx(math.log1p(lo / 100) - math.log(4))
    assert math.log1p(w["ci95_pct"][1] / 100) == pytest.approx(math.log1p(hi / 100) - math.log(4))
    assert (w["before"]["source"], w["after"]["job_samples"]) == ("samples from --samples-per-step", 32)


@pytest.mark.parametrize("value", ["8", "8,0", "a,b", "8,32,4", "8,nan"])
def test_a_bad_work_flag_is_one_line_exit_2(tmp_path, capsys, value):
    b, a = _steps(tmp_path / "b.json", BEFORE_US), _steps(tmp_path / "a.json", AFTER_US)
    assert main(["diff", str(b), str(a), f"--samples-per-step={value}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--samples-per-step: give BEFORE,AFTER as two positive numbers" in err[0]


def test_unknown_work_and_different_shapes_cannot_tell(tmp_path, capsys):
    """aten::mm is not an op the batch is read from, so the work per step is unknown on both sides; its first call
    has [[8, 64], [64, 64]] before and [[32, 64], [64, 64]] after: the steps differ in shape, so the 2× step is
    neither called a regression nor faster; the gate says it could not judge."""
    b = _steps(tmp_path / "b.json", BEFORE_US, [[8, 64], [64, 64]])
    a = _steps(tmp_path / "a.json", AFTER_US, [[32, 64], [64, 64]])
    code = main(["diff", str(b), str(a), "--format", "json", "--fail-on-regression", "5"])
    out, err = capsys.readouterr()
    d = json.loads(out)
    w = d["work"]
    assert code == 0 and d["verdict"] == "inconclusive" and w["basis"] == "cannot-tell"
    assert w["step_verdict"] == "slower" and w["change_pct"] is None
    assert w["shapes_differ"] == ["aten::mm: [[8,64],[64,64]] → [[32,64],[64,64]]"]
    assert d["headline"].startswith("cannot tell per step from per sample")
    assert "--samples-per-step A,B or --tokens-per-step A,B" in w["reason"]
    assert "regression gate could not judge" in err
    # the same shapes on both sides: per step, as before
    same = _steps(tmp_path / "same.json", AFTER_US, [[8, 64], [64, 64]])
    code, d = _diff_json(capsys, str(b), str(same))
    assert d["work"]["basis"] == "per-step" and d["verdict"] == "slower"
    assert "called with the same input shapes" in d["work"]["reason"]


def _linear_steps(path: Path, step_us: list[float], batch: int) -> Path:
    """Steps whose forward is one aten::linear of a float [batch, 64] input (the batch read from its input 0)."""
    tb = TraceBuilder()
    t0 = 0.0
    for i, dur in enumerate(step_us, start=1):
        tb.step(i, t0, dur)
        tb.cpu_op("aten::linear", t0 + 2, 5, input_dims=[[batch, 64], [64, 64], [64]])
        tb.launch("k", launch_ts=t0 + 8, start=t0 + 10, dur=100, launch_dur=1)
        t0 += dur
    return tb.write(path)


def test_identical_work_per_step_keeps_the_per_step_verdict(tmp_path, capsys):
    """Both sides' aten::linear reads float [16, 64]: 16 samples a step, no tokens (a floating input), the same on
    both sides: the verdict and headline are today's per-step ones, and the gate reads the step."""
    b = _linear_steps(tmp_path / "b.json", BEFORE_US, 16)
    a = _linear_steps(tmp_path / "a.json", AFTER_US, 16)
    code, d = _diff_json(capsys, str(b), str(a), "--fail-on-regression", "5")
    w = d["work"]
    assert code == 1 and d["verdict"] == "slower" == w["step_verdict"] and w["basis"] == "per-step"
    assert w["reason"] == "the same samples per step on both sides (16): compared per step"
    assert (w["before"]["job_samples"], w["before"]["job_tokens"]) == (16, None)
    assert "aten::linear" in w["before"]["source"] and d["headline"].startswith("slower: mean step")
    samples = next(r for r in w["rates"] if r["unit"] == "samples/s")
    assert samples["before"] == pytest.approx(16 / (sum(BEFORE_US) / 6 / 1e6))
    # batch 16 → 64 on the same linear: 4× the samples in a 2× step, faster per sample
    a64 = _linear_steps(tmp_path / "a64.json", AFTER_US, 64)
    code, d = _diff_json(capsys, str(b), str(a64), "--fail-on-regression", "5")
    assert code == 0 and d["work"]["basis"] == "per-sample" and d["verdict"] == "faster"


# -- perfdoctor profile run directories ---------------------------------------------------------------------------


def _run_copy(tmp_path: Path, name: str, factor: float, tokens: int | None, samples: int | None) -> Path:
    """A copy of the bundled CPU run with every steps.csv duration × ``factor`` and the tokens and samples per step
    of run.json and of every steps.csv row set by hand (None: removed, as a script the batch probe cannot read)."""
    out = tmp_path / name
    shutil.copytree(RUN_DIR, out)
    with open(out / "steps.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        r["duration_s"] = repr(float(r["duration_s"]) * factor)
        r["tokens"], r["samples"] = ("" if v is None else str(v) for v in (tokens, samples))
    with open(out / "steps.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    run = json.loads((out / "run.json").read_text())
    run["tokens_per_step"], run["samples_per_step"] = tokens, samples
    (out / "run.json").write_text(json.dumps(run))
    return out


def test_run_dirs_with_a_larger_batch_in_run_json_compare_per_token(tmp_path, capsys):
    """The bundled run (run.json: 2,048 tokens, 16 samples per step: tiny_gpt's batch 16 × 128) against a copy
    whose run.json says 4,096 tokens and 32 samples with every step 1.5× longer: time per token × 0.75, tokens/s
    +33.3%; run.json wins over the AFTER trace's embedding input (still [16, 128])."""
    run = json.loads((RUN_DIR / "run.json").read_text())
    assert (run["tokens_per_step"], run["samples_per_step"]) == (2048, 16)
    after = _run_copy(tmp_path, "big", 1.5, 4096, 32)
    code, d = _diff_json(capsys, str(RUN_DIR), str(after), "--run-noise-pct", "0", "--fail-on-regression", "5")
    w = d["work"]
    assert code == 0 and d["change_pct"] == pytest.approx(50.0) and w["step_verdict"] == "slower"
    assert (w["basis"], d["verdict"]) == ("per-token", "faster")
    assert w["change_pct"] == pytest.approx(-25.0) and w["throughput_change_pct"] == pytest.approx(100 / 3)
    assert w["after"]["origin"] == "run.json" and "run.json" in w["after"]["source"]
    # the run's own train-only tokens/s (steps.csv's tokens ÷ train time) moves as the per-token verdict does
    rate = next(t for t in d["throughput"] if t["key"] == "train_tokens_per_s")
    assert rate["change_pct"] == pytest.approx(100 / 3)
    # AFTER = 1.5 × BEFORE step for step: the per-token log interval is centred on ln 0.75
    lo, hi = w["ci95_pct"]
    assert (1 + lo / 100) * (1 + hi / 100) == pytest.approx(0.75**2)
    # the same run.json work on both sides: the step's verdict, and the gate fires on +50%
    same = _run_copy(tmp_path, "same", 1.5, 2048, 16)
    code, d = _diff_json(capsys, str(RUN_DIR), str(same), "--run-noise-pct", "0", "--fail-on-regression", "5")
    assert code == 1 and d["work"]["basis"] == "per-step" and d["verdict"] == "slower"
    assert d["work"]["reason"] == "the same tokens per step on both sides (2,048): compared per step"


def test_run_json_without_work_falls_back_to_the_trace(tmp_path, capsys):
    """run.json without tokens/samples (a script the probe could not read): the trace's aten::embedding indices,
    long int [16, 128] in the raw JSON, give 2,048 tokens and 16 samples per step."""
    import gzip

    raw = json.loads(gzip.open(RUN_DIR / "trace.rank0.pt.trace.json.gz").read())["traceEvents"]
    emb = [e["args"] for e in raw if e.get("cat") == "cpu_op" and e.get("name") == "aten::embedding"]
    assert emb and emb[0]["Input Dims"][1] == [16, 128] and emb[0]["Input type"][1] == "long int"
    bare = _run_copy(tmp_path, "bare", 1.0, None, None)
    code, d = _diff_json(capsys, str(bare), str(RUN_DIR))
    w = d["work"]
    assert w["before"]["origin"] == "trace" and w["after"]["origin"] == "run.json"
    assert (w["before"]["job_tokens"], w["before"]["job_samples"]) == (2048, 16)
    assert "aten::embedding" in w["before"]["source"] and w["basis"] == "per-step"


# -- every format shows it -----------------------------------------------------------------------------------------


def test_every_format_shows_the_per_token_verdict_and_the_throughput(tmp_path):
    b = _linear_steps(tmp_path / "b.json", BEFORE_US, 16)
    a = _linear_steps(tmp_path / "a.json", AFTER_US, 64)
    d = compare(load_side(str(b)), load_side(str(a)))
    assert d.work.basis == "per-sample" and not regression(d, 5)
    back = Diff.from_json(d.to_json())
    assert back.work == d.work
    html, md = render_diff_html(d), render_diff_markdown(d)
    from io import StringIO

    from rich.console import Console

    from perfdoctor.render.diff_terminal import render_diff_terminal

    buf = StringIO()
    render_diff_terminal(d, Console(file=buf, width=200, color_system=None))
    term = buf.getvalue()
    pct = f"{d.work.throughput_change_pct:+.1f}%"
    for text in (html, md, term):
        assert f"faster per sample: {pct} samples/s" in text
        assert "Throughput (work per step ÷ step time)" in text
        assert "time per sample" in text and "per step: change" in text
    assert '"basis":"per-sample"' in html.replace(" ", "")


def _rank_dir(root: Path, batch: int, step_us: list[float]) -> Path:
    """Two ranks of one job, each an aten::linear of float [batch, 64] per step; rank 1's steps 10% longer."""
    root.mkdir()
    for rank, scale in ((0, 1.0), (1, 1.1)):
        tb = TraceBuilder(rank=rank, world_size=2)
        t0 = 0.0
        for i, dur in enumerate(step_us, start=1):
            tb.step(i, t0, dur * scale)
            tb.cpu_op("aten::linear", t0 + 2, 5, input_dims=[[batch, 64], [64, 64], [64]])
            tb.launch("k", launch_ts=t0 + 8, start=t0 + 10, dur=100, launch_dur=1)
            t0 += dur * scale
        tb.write(root / f"rank{rank}.json")
    return root


def test_two_ranks_a_side_sum_their_batches_and_rate_each_rank(tmp_path, capsys):
    """Each rank reads 16 (then 64) samples from its own trace: the job's work per step is their sum, 32 → 128;
    each rank's samples/s is its batch ÷ its own mean step (rank 1's steps are 1.1× rank 0's)."""
    b = _rank_dir(tmp_path / "b", 16, BEFORE_US)
    a = _rank_dir(tmp_path / "a", 64, AFTER_US)
    code, d = _diff_json(capsys, str(b), str(a))
    w = d["work"]
    assert (w["before"]["ranks"], w["before"]["job_samples"], w["after"]["job_samples"]) == (2, 32, 128)
    assert "the sum over its 2 ranks" in w["before"]["source"] and w["basis"] == "per-sample"
    rows = {(r["rank"], r["unit"]): r for r in w["rates"]}
    mean_b = sum(BEFORE_US) / len(BEFORE_US) / 1e6
    assert rows[(0, "samples/s")]["before"] == pytest.approx(16 / mean_b)
    assert rows[(1, "samples/s")]["before"] == pytest.approx(16 / (1.1 * mean_b))
    assert rows[(1, "samples/s")]["after"] == pytest.approx(64 / (1.1 * sum(AFTER_US) / 6 / 1e6))
    job = rows[(None, "samples/s")]
    assert job["before"] == pytest.approx(32 / (d["mean_step_us"]["before"] / 1e6))


def test_a_report_json_side_says_it_keeps_no_shapes(tmp_path, capsys):
    b = _steps(tmp_path / "b.json", BEFORE_US, [[8, 64], [64, 64]])
    assert main(["report", str(b), "-o", str(tmp_path / "b.report.json")]) == 0
    capsys.readouterr()
    _, d = _diff_json(capsys, str(tmp_path / "b.report.json"), str(b))
    assert d["work"]["basis"] == "per-step" and "a report JSON keeps no input shapes" in d["work"]["reason"]


def test_batch_read_skips_position_indices_and_floating_compiled_inputs(tmp_path):
    """In each step: an aten::embedding of positions (long int [128], one dimension: tells nothing), then one of
    the token ids (long int [8, 128]): 8 samples, 1,024 tokens. A CompiledFunction whose first input is float
    [512, 64] (a parameter, perhaps) is not read; without an embedding the aten::linear input float [8, 64] is."""
    from perfdoctor import pipeline

    def build(name: str, embedding: bool) -> Path:
        tb = TraceBuilder()
        for i in range(3):
            t0 = 1000.0 * i
            tb.step(i + 1, t0, 1000)
            tb.cpu_op("CompiledFunction", t0 + 1, 3, input_dims=[[512, 64], [8, 64]])
            if embedding:
                tb.cpu_op("aten::embedding", t0 + 5, 2, input_dims=[[50, 64], [128]], input_type=["float", "long int"])
                tb.cpu_op(
                    "aten::embedding", t0 + 8, 2, input_dims=[[50, 64], [8, 128]], input_type=["float", "long int"]
                )
            tb.cpu_op("aten::linear", t0 + 12, 5, input_dims=[[8, 64], [64, 64], [64]])
            tb.launch("k", launch_ts=t0 + 20, start=t0 + 30, dur=100, launch_dur=1)
        return tb.write(tmp_path / name)

    with_emb = pipeline.build([str(build("emb.json", True))]).job.summaries[0].batch
    assert with_emb is not None and (with_emb.samples, with_emb.tokens) == (8, 1024)
    assert (with_emb.op, with_emb.arg, with_emb.shape, with_emb.steps) == ("aten::embedding", 1, [8, 128], 3)
    plain = pipeline.build([str(build("lin.json", False))]).job.summaries[0].batch
    assert plain is not None and (plain.op, plain.samples, plain.tokens) == ("aten::linear", 8, None)
