"""Formatting shared by the HTML and Markdown renderers.

Reads the report dict (schema ``perfdoctor.report`` v1, see docs/report-schema.md)
and turns its numbers into labelled, unit-bearing strings. It computes no new
metric: the only arithmetic is per-step means (a total ÷ the number of steps)
and shares of the step time, both stated in the definitions below.
"""

from __future__ import annotations

from typing import Any

CAT_LABELS = {
    "matmul": "matmul / GEMM", "attention": "attention", "conv": "convolution", "elementwise": "elementwise",
    "reduction_norm": "reduction / norm", "optimizer": "optimizer", "other": "other kernels",
    "communication": "communication (exposed)", "memcpy": "memcpy", "memset": "memset",
    "dataloader": "DataLoader (host)", "other_ops": "other ops",
    "host_collective": "host collectives (gloo, on the CPU)",
}
IDLE_LABELS = {
    "dataloader": "idle: waiting for DataLoader", "synchronization": "idle: host synchronization",
    "host_launch_bound": "idle: host busy, nothing queued", "other": "idle: other cause",
    "python": "Python / host outside any op",
}

DEFINITIONS: list[tuple[str, str]] = [
    ("step window", "From one ProfilerStep#N annotation's start to the next; the last GPU work launched inside "
     "step N (joined by correlation id) extends it. Step windows tile the profiled span exactly."),
    ("step time", "end − start of the step window, in ms. Median, p10/p90 and min/max are over the analysed steps."),
    ("busy", "Union over all streams of kernels, memcpys and memsets inside the step window (overlapping streams "
     "count once)."),
    ("device utilization", "numerator: busy time summed over analysed steps; denominator: step time summed over "
     "the same steps. For CPU-only traces: time inside any host op ÷ step time."),
    ("category time", "Busy time split exclusively by priority compute (matmul > attention > conv > "
     "reduction/norm > elementwise > optimizer > other) > communication > memcpy > memset, so the "
     "categories add up to busy. Per step = total over analysed steps ÷ number of steps."),
    ("share", "numerator: that row's time; denominator: step time (both summed over analysed steps)."),
    ("communication total / overlapped / exposed", "total: union of communication kernels; overlapped: the part "
     "running while any compute kernel runs; exposed: total − overlapped. Overlap % = overlapped ÷ total."),
    ("idle causes", "Step time − busy, attributed in order to: the host inside DataLoader __next__; the host "
     "blocked in a synchronize call or blocking copy; the host busy in ops/runtime calls with nothing queued "
     "(launch-bound); other. They add up to idle."),
    ("top kernels", "GPU kernels, memcpys and memsets starting inside the analysed steps, grouped by name. "
     "share: that name's summed duration ÷ the summed duration of all GPU activity (overlapping streams count "
     "twice here)."),
    ("top CPU ops", "Host ops starting inside the analysed steps, grouped by name; inclusive durations, so a "
     "parent and its children both count."),
    ("rank spread", "(slowest rank's median step time − fastest rank's) ÷ fastest rank's, in %."),
    ("memory peak", "Largest total_allocated / total_reserved seen in the trace's [memory] events for that "
     "device (needs profile_memory=True); capacity from deviceProperties.totalGlobalMem."),
    ("MFU", "Model FLOPs per step ÷ median step time (achieved FLOP/s), ÷ the device's dense peak FLOP/s at the "
     "math dtype; the FLOP source (FlopCounter, op sum, formula) and the peak's source are shown with the value."),
    ("roofline", "Per op group: arithmetic intensity = FLOPs ÷ bytes moved; attainable = min(peak, intensity × "
     "memory bandwidth); % of attainable = achieved FLOP/s ÷ attainable."),
    ("estimated saving", "Each finding's own estimate of the step time it would remove, in ms per step and as a "
     "% of the median step time, with the method the check names."),
]


def ms(us: float | None, digits: int = 2) -> str:
    """µs → "12.34 ms" ("–" for None)."""
    return "–" if us is None else f"{us / 1000:,.{digits}f} ms"


def dur(us: float | None) -> str:
    """A duration for tables of short events: "1.23 ms" from 100 µs up, else "12.3 µs"."""
    if us is None:
        return "–"
    return f"{us / 1000:,.2f} ms" if abs(us) >= 100 else f"{us:,.1f} µs"


def pct(x: float | None, digits: int = 1) -> str:
    """fraction → "12.3%"."""
    return "–" if x is None else f"{100 * x:.{digits}f}%"


def nbytes(n: float | None) -> str:
    """bytes → "1.23 GiB" (binary units)."""
    if n is None:
        return "–"
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{v:,.0f} {unit}" if unit == "B" else f"{v:,.2f} {unit}"
        v /= 1024
    return f"{v:,.2f} TiB"


def primary(rank: dict[str, Any]) -> dict[str, Any]:
    """The device section the summary uses (the busiest GPU, or the host)."""
    return next(d for d in rank["devices"] if d["device"] == rank["primary_device"])


def device_name(rank: dict[str, Any], device: int) -> str:
    if device < 0:
        if rank.get("device_properties"):  # a GPU trace without its device side: host ops only, not CPU training
            return "host ops only (the trace lists GPUs but holds no GPU activity)"
        return "CPU (host ops)"
    for p in rank.get("device_properties", []):
        name = str(p.get("name") or "").strip()
        if p.get("id") == device and name:  # an empty name gives "GPU 2", not "GPU 2: "
            return f"GPU {device}: {name}"
    return f"GPU {device}"


def n_steps(dev: dict[str, Any]) -> int:
    return max(int(dev["totals"].get("n_steps", 0) or 0), 1)


def breakdown_rows(dev: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows ``{key, label, per_step_us, total_us, share, kind}`` of the step-time table: categories (largest
    first), the busy subtotal, idle causes (largest first), the idle subtotal. ``key`` is ``idle:<cause>`` for
    idle causes; ``kind`` is "row" or "subtotal". Categories / causes with zero time are dropped."""
    t = dev["totals"]
    n, dur = n_steps(dev), t.get("dur_us", 0.0) or 0.0

    def row(key: str, label: str, us: float, kind: str = "row") -> dict[str, Any]:
        return {"key": key, "label": label, "total_us": us, "per_step_us": us / n,
                "share": us / dur if dur else None, "kind": kind}

    cats = sorted(((us, c) for c, us in t.get("categories_us", {}).items() if us > 0), key=lambda x: (-x[0], x[1]))
    idle = sorted(((us, c) for c, us in t.get("idle_causes_us", {}).items() if us > 0), key=lambda x: (-x[0], x[1]))
    busy_label = "busy (sum of the categories above)" if dev["kind"] == "gpu" else "inside ops (sum of the above)"
    idle_label = "idle (sum of the causes above)" if dev["kind"] == "gpu" else "outside ops"
    rows = [row(c, CAT_LABELS.get(c, c), us) for us, c in cats]
    rows.append(row("busy", busy_label, t.get("busy_us", 0.0), "subtotal"))
    rows += [row(f"idle:{c}", IDLE_LABELS.get(c, c), us) for us, c in idle]
    rows.append(row("idle", idle_label, t.get("idle_us", 0.0), "subtotal"))
    return rows


def _first(d: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if isinstance(d, dict) and d.get(k) is not None:
            return d[k]
    return None


def evidence_value(name: str, value: Any) -> str:
    """One evidence number with its unit, read from the name's suffix (``_us``, ``_ms``, ``_pct``, ``_bytes``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if isinstance(value, list):
            return ", ".join(str(v) for v in value) if value else "–"
        if isinstance(value, dict):
            unit = name[: -len("_by_rank")] if name.endswith("_by_rank") else name
            return "; ".join(f"{k}: {evidence_value(unit, v)}" for k, v in value.items()) or "–"
        return str(value)
    if name.endswith("_us"):
        return dur(value)
    if name.endswith("_ms"):
        return f"{value:,.3f} ms"
    if name.endswith("_pct"):
        return f"{value:.1f}%"
    if name.endswith("_bytes"):
        return nbytes(value)
    if isinstance(value, float):
        return f"{value:,.4g}"
    return f"{value:,}"


def _shown(key: str, value: Any, title: str) -> bool:
    """Whether an evidence entry adds to the finding's title: words the message already says (``what``:
    "ops", a ``reason``) and the rank list of a single-rank report are left out."""
    if key == "events":
        return False
    if key == "ranks":
        return isinstance(value, list) and len(value) > 1
    return not (isinstance(value, str) and value and value in title)


def _evidence(ev: Any, title: str = "") -> tuple[list[tuple[str, str]], list[dict[str, str]]]:
    """Evidence as (name, value text) pairs plus the involved events (each a dict of texts)."""
    if not isinstance(ev, dict):
        return ([("evidence", str(ev))] if ev else []), []
    pairs = [(_unitless(str(k)), evidence_value(str(k), v)) for k, v in ev.items() if _shown(str(k), v, title)]
    events = [{_unitless(str(k)): evidence_value(str(k), v) for k, v in e.items()} for e in ev.get("events") or []
              if isinstance(e, dict)]
    return pairs, events


def _unitless(name: str) -> str:
    """``total_us`` -> ``total``: the formatted value carries its own unit (ms, µs, KB...)."""
    for suffix in ("_us", "_ms", "_bytes"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def finding(f: dict[str, Any], order: int = 0) -> dict[str, Any]:
    """One finding dict (see perfdoctor/findings.py) prepared for display: texts, saving, evidence, snippets."""
    pairs, events = _evidence(f.get("evidence"), str(f.get("message") or ""))
    saving = f.get("saving_us_per_step")
    method = f.get("saving_method") or ""
    estimated = bool(method) or bool(saving)
    ev = f.get("evidence")
    ranks = ev.get("ranks") if isinstance(ev, dict) else None
    return {
        "code": str(f.get("code", "")), "name": str(f.get("name") or ""), "title": str(f.get("message") or ""),
        "severity": str(f.get("severity") or ""), "category": str(f.get("category") or ""),
        "priority": f.get("position"), "rank": f.get("rank"), "order": order, "ranks": list(ranks or []),
        "saving_us": saving if estimated else None,
        "saving_frac": (f.get("saving_pct_of_step") or 0.0) / 100.0 if estimated else None,
        "method": method, "evidence": pairs, "events": events,
        "steps": list(f.get("steps") or []),
        "fix": str(f.get("fix") or "").strip(), "before": str(f.get("example_before") or "").strip("\n"),
        "after": str(f.get("example_after") or "").strip("\n"),
        "references": [str(r) for r in f.get("references") or []],
    }


def findings(report: dict[str, Any]) -> list[dict[str, Any]]:
    """All findings, ranked by estimated saving (largest first); unestimated ones last, in engine order."""
    items = [finding(f, i) for i, f in enumerate(report.get("findings") or []) if isinstance(f, dict)]
    return sorted(items, key=lambda f: (f["saving_us"] is None, -(f["saving_us"] or 0.0), f["order"]))


def skipped(report: dict[str, Any]) -> list[tuple[str, str]]:
    """Skipped checks as (code, reason); accepts a list of dicts or a {code: reason} mapping."""
    sc = report.get("skipped_checks") or []
    if isinstance(sc, dict):
        return [(str(k), str(v)) for k, v in sc.items()]
    out = []
    for s in sc:
        if isinstance(s, dict):
            label = " ".join(x for x in (str(s.get("code") or ""), str(s.get("name") or "")) if x)
            out.append((label, str(_first(s, "reason", "message") or "")))
        else:
            out.append((str(s), ""))
    return out


def step_range(dev: dict[str, Any]) -> str:
    nums = [s["step"] for s in dev["steps"]]
    if not nums:
        return "none"
    return f"#{nums[0]}" if len(nums) == 1 else f"#{nums[0]}–#{nums[-1]}"


def _device_summary(report: dict[str, Any]) -> str:
    """"8 ranks × GPU: Tesla V100 (1 GPU with activity per rank)" style text."""
    used: dict[str, int] = {}
    for r in report["ranks"]:
        for d in r["devices"]:
            if d["kind"] != "gpu":
                continue
            name = device_name(r, d["device"]).split(": ", 1)[-1]
            used[name] = used.get(name, 0) + 1
    if not used:
        listed = sorted({str(p.get("name")) for r in report["ranks"] for p in r.get("device_properties") or []})
        if listed:
            return (f"no GPU activity recorded, although the trace lists {', '.join(listed)} (profiled without "
                    "ProfilerActivity.CUDA?): host side only")
        return "CPU only (no GPU activity in the trace)"
    parts = [f"{n} × {name}" for name, n in sorted(used.items())]
    return ", ".join(parts) + (f" across {len(report['ranks'])} ranks" if len(report["ranks"]) > 1 else "")


def summary_rank(report: dict[str, Any]) -> dict[str, Any] | None:
    """The rank the summary describes: the slowest rank (by median step time) of a multi-rank report;
    None for a run-only report (a ``perfdoctor profile`` run that stopped before its profiled window)."""
    if not report["ranks"]:
        return None
    summ = report.get("summary") or {}
    slow = summ.get("slowest_rank")
    return next((r for r in report["ranks"] if r["rank"] == slow), report["ranks"][0])


def flops(value: float, unit: str) -> str:
    """FLOP or FLOP/s with an SI prefix that keeps 3–4 significant digits (G on CPUs, T on GPUs)."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M")):
        if abs(value) >= scale:
            return f"{value / scale:,.3g} {prefix}{unit}" if value / scale < 100 else f"{value / scale:,.0f} {prefix}{unit}"
    return f"{value:,.0f} {unit}"


def _mfu_text(rank: dict[str, Any]) -> tuple[str, str] | None:
    """(value, numerator/denominator text) of ``rank["mfu"]`` (perfdoctor.analysis.mfu.MfuResult.to_dict())."""
    m = rank.get("mfu")
    if not isinstance(m, dict):
        return None
    if m.get("mfu") is None:
        return ("not computed", str(m.get("note") or "no model FLOP count or no device peak"))
    num = (f"numerator: {flops(m['model_flops_per_step'], 'FLOP')} per step ({m.get('flops_source')}) ÷ "
           f"{m['step_time_s'] * 1e3:,.2f} ms median step = {flops(m['achieved_flops_per_s'], 'FLOP/s')}")
    den = f"denominator: {flops(m['peak_flops_per_s'], 'FLOP/s')} {m.get('dtype') or ''} peak ({m.get('peak_source')})"
    hfu = f"; HFU {pct(m['hfu'])}" if m.get("hfu") is not None and m.get("hfu") != m.get("mfu") else ""
    return (pct(m["mfu"]), f"{num}; {den}{hfu}" + (f". {m['note']}" if m.get("note") else ""))


def summary_facts(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(label, value, detail) rows of the report's summary, in the order the issue lists them."""
    rank = summary_rank(report)
    if rank is None:
        return _run_only_facts(report)
    dev = primary(rank)
    multi = len(report["ranks"]) > 1
    who = f" (rank {rank['rank']}, longest median step)" if multi else ""
    facts = [("devices", _device_summary(report), "GPUs with kernel/memcpy activity; node properties from deviceProperties")]
    run = report.get("run") or {}
    if run.get("partial") or report.get("partial"):
        facts.insert(0, ("PARTIAL RUN", str(run.get("stop_reason") or "the run did not complete"),
                         f"{run.get('steps_completed')} steps ran; everything recorded until then is analysed"))
    dtype = _first(rank.get("mfu") or {}, "dtype") or (rank.get("gemm_dtype") or {}).get("dominant")
    facts.append(("GEMM dtype", str(dtype) if dtype else "not recorded",
                  "the math dtype of the matmul/convolution kernels, weighted by their time (from kernel names, or "
                  "the ops' input types on CPU)" if dtype else "no GEMM kernel or matmul op says which dtype it ran in"))
    n = len(dev["steps"])
    skipped_txt = _skipped_steps(report, rank)
    facts.append(("steps analysed", f"{n} ({rank['steps_source']} {step_range(dev)})" if rank["steps_source"] !=
                  "whole-trace" else "whole trace as one window (no step markers)", skipped_txt))
    st = dev["step_time_us"]
    if st:
        facts.append((f"median step time{who}", ms(st["median"]),
                      f"p10–p90 {ms(st['p10'])} – {ms(st['p90'])}; min–max {ms(st['min'])} – {ms(st['max'])}; "
                      f"std {ms(st['std'])}; n = {st['n']} steps"))
    if multi and (report.get("summary") or {}).get("n_ranks", 0) > 1:
        s = report["summary"]
        facts.append(("rank spread", f"{s['spread_pct']:.1f}%",
                      f"slowest rank {s['slowest_rank']} vs fastest rank {s['fastest_rank']} (median step time)"))
    facts.extend(throughput_facts(report))
    t = dev["totals"]
    label = "device utilization" if dev["kind"] == "gpu" else "host busy in ops"
    detail = (f"busy {ms(t.get('busy_us', 0) / n_steps(dev))} ÷ step {ms(t.get('dur_us', 0) / n_steps(dev))} "
              f"per step (means over {t.get('n_steps', 0)} steps)")
    if dev["kind"] == "gpu" and t.get("dur_us"):
        cats = t.get("categories_us") or {}
        kernels = t.get("busy_us", 0) - cats.get("memcpy", 0) - cats.get("memset", 0)
        detail += (f"; kernels only (memcpy/memset left out, as the TensorBoard profiler plugin's GPU utilization): "
                   f"{pct(kernels / t['dur_us'])}")
    facts.append((label + who, pct(dev["utilization"]), detail))
    mfu = _mfu_text(rank)
    if mfu:
        facts.append(("MFU" + who, mfu[0], mfu[1]))
    return facts


def _run_only_facts(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Summary rows of a report with no trace: what the run's step series (``report["run"]``) says."""
    run = report.get("run") or {}
    facts = []
    if run.get("partial") or report.get("partial"):
        facts.append(("PARTIAL RUN", str(run.get("stop_reason") or "the run did not complete"),
                      f"{run.get('steps_completed')} steps ran; everything recorded until then is analysed"))
    facts.append(("trace", "none", str(report.get("no_trace") or "no trace to analyse")))
    ss = run.get("steady_state") or {}
    if ss.get("median_s"):
        facts.append(("median step time (steady state)", ms(ss["median_s"] * 1e6),
                      f"p10–p90 {ms(ss['p10_s'] * 1e6)} – {ms(ss['p90_s'] * 1e6)}; {ss.get('n_steps')} steps ran, "
                      f"the first {ss.get('warmup_steps')} were warm-up and are left out"))
    facts.extend(throughput_facts(report))
    return facts


def _skipped_steps(report: dict[str, Any], rank: dict[str, Any]) -> str:
    ss = (report.get("run") or {}).get("steady_state") or {}
    if isinstance(ss, dict) and ss:
        warm = _first(ss, "warmup_steps", "n_warmup", "skipped")
        if warm == 0:
            return ("the run showed no warm-up (its first steps were as fast as the rest); the profiled steps are "
                    "analysed as recorded")
        if warm is not None:
            return (f"the run's first {warm} step(s) were warm-up (slower than the first phase) and are left out "
                    "of the run statistics; the profiled steps are analysed as recorded")
    skipped_steps = rank.get("skipped_steps")
    if skipped_steps:
        return f"skipped as warm-up: {', '.join('#' + str(s) for s in skipped_steps)}"
    return "no step skipped by perfdoctor (torch.profiler's own wait/warm-up steps are not in the trace)"


def throughput_facts(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Throughput rows from ``report["run"]["throughput"]`` (written by ``perfdoctor profile``), then the
    evaluation / checkpoint time found inside training steps, when there was any."""
    tp = (report.get("run") or {}).get("throughput")
    if not isinstance(tp, dict):
        return []
    out = []
    nt = (report.get("run") or {}).get("non_training") or {}
    if nt.get("eval_s") or nt.get("checkpoint_s"):
        out.append(("not training, inside steps", f"{nt.get('eval_s', 0) + nt.get('checkpoint_s', 0):,.2f} s",
                    f"evaluation {nt.get('eval_s', 0):,.2f} s in {nt.get('eval_steps', 0)} step(s) (model.eval() to "
                    f"model.train()), checkpoint saving {nt.get('checkpoint_s', 0):,.2f} s in "
                    f"{nt.get('checkpoint_steps', 0)} step(s) (torch.save); left out of train-only step times, "
                    "steady state and train throughput"))
    for key, v in tp.items():
        if isinstance(v, dict):
            val = _first(v, "value", "per_s")
            unit = v.get("unit", "")
            detail = "; ".join(f"{k}: {v[k]}" for k in ("numerator", "denominator", "definition") if v.get(k))
            out.append((f"throughput ({key.replace('_', ' ')})",
                        f"{val:,.1f} {unit}".strip() if isinstance(val, (int, float)) else str(val), detail))
        elif isinstance(v, (int, float)):
            out.append((f"throughput ({key.replace('_', ' ')})", f"{v:,.1f}", ""))
    return out
