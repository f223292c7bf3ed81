"""TraceBuilder: tiny synthetic Kineto traces built in code, answers worked out by hand.

Times are µs. Events follow today's Kineto schema (``cpu_op``, ``user_annotation``,
``kernel``, ``cuda_runtime``, ``gpu_memcpy``, ``gpu_memset``, ``ac2g`` flows,
``[memory]`` instants); ``old_format=True`` writes the 2021 generation
(``Operator``/``Kernel``/``Runtime``/``Memcpy``/``Memset``, ``external id``).

Example::

    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch("volta_sgemm_128x64_nn", launch_ts=10, start=20, dur=300)
    path = tb.write(tmp_path / "t.json")
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any


class TraceBuilder:
    def __init__(
        self,
        device_name: str | None = "NVIDIA A100-SXM4-80GB",
        compute_capability: tuple[int, int] = (8, 0),
        total_memory: int = 85_899_345_920,
        rank: int | None = None,
        world_size: int | None = None,
        old_format: bool = False,
        pid: int = 100,
        tid: int = 100,
    ) -> None:
        self.pid, self.tid = pid, tid
        self.old = old_format
        self.events: list[dict[str, Any]] = []
        self.meta: dict[str, Any] = {"schemaVersion": 1}
        if device_name:
            self.meta["deviceProperties"] = [
                {
                    "id": 0,
                    "name": device_name,
                    "totalGlobalMem": total_memory,
                    "computeMajor": compute_capability[0],
                    "computeMinor": compute_capability[1],
                    "numSms": 108,
                }
            ]
        if rank is not None:
            self.meta["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world_size or rank + 1}
        self._corr = 1000
        self._ext = 1

    def _cat(self, new: str, old: str) -> str:
        return old if self.old else new

    def _ext_key(self) -> str:
        return "external id" if self.old else "External id"

    # -- host side -------------------------------------------------------------
    def annotation(self, name: str, ts: float, dur: float, tid: int | None = None) -> TraceBuilder:
        cat = "Operator" if self.old else "user_annotation"
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": self.pid,
                "tid": tid or self.tid,
                "ts": ts,
                "dur": dur,
                "args": {"External id": self._next_ext()},
            }
        )
        return self

    def python_function(
        self, name: str, ts: float, dur: float, parent: int | None = None, caller: str | None = None
    ) -> int:
        """A ``python_function`` event (``with_stack=True``) on the main thread; returns its ``Python id``
        (``parent``: the caller's id; ``caller``: the call's line as ``perfdoctor profile --with-stack`` adds it)."""
        pid_ = 1 + sum(1 for e in self.events if e["cat"] == "python_function")
        args: dict[str, Any] = {"Python id": pid_, "Python parent id": parent, "Python thread": 0}
        if caller is not None:
            args["Python caller"] = caller
        self.events.append(
            {
                "ph": "X",
                "cat": "python_function",
                "name": name,
                "pid": self.pid,
                "tid": self.tid,
                "ts": ts,
                "dur": dur,
                "args": args,
            }
        )
        return pid_

    def step(self, n: int, ts: float, dur: float) -> TraceBuilder:
        """A ``ProfilerStep#n`` annotation on the main thread."""
        return self.annotation(f"ProfilerStep#{n}", ts, dur)

    def cpu_op(
        self,
        name: str,
        ts: float,
        dur: float,
        tid: int | None = None,
        input_dims: list | None = None,
        input_type: list | None = None,
        external_id: int | None = None,
    ) -> TraceBuilder:
        args: dict[str, Any] = {"External id": external_id if external_id is not None else self._next_ext()}
        if input_dims is not None:
            args["Input Dims"] = input_dims
            args["Input type"] = input_type or ["float"] * len(input_dims)
        self.events.append(
            {
                "ph": "X",
                "cat": self._cat("cpu_op", "Operator"),
                "name": name,
                "pid": self.pid,
                "tid": tid or self.tid,
                "ts": ts,
                "dur": dur,
                "args": args,
            }
        )
        return self

    def runtime(self, name: str, ts: float, dur: float, correlation: int | None = None, tid: int | None = None) -> int:
        corr = correlation if correlation is not None else self._next_corr()
        self.events.append(
            {
                "ph": "X",
                "cat": self._cat("cuda_runtime", "Runtime"),
                "name": name,
                "pid": self.pid,
                "tid": tid or self.tid,
                "ts": ts,
                "dur": dur,
                "args": {"correlation": corr, self._ext_key(): 0},
            }
        )
        return corr

    def memory(
        self,
        ts: float,
        nbytes: int,
        total_allocated: int,
        total_reserved: int,
        device: int = 0,
        addr: int | None = None,
        device_type: int = 1,
    ) -> TraceBuilder:
        """A ``[memory]`` instant (an allocation when ``nbytes`` > 0, a free when < 0) of the block at ``addr``."""
        args: dict[str, Any] = {"Addr": addr} if addr is not None else {}
        self.events.append(
            {
                "ph": "i",
                "s": "t",
                "name": "[memory]",
                "pid": self.pid,
                "tid": self.tid,
                "ts": ts,
                "args": {
                    "Device Type": device_type,
                    "Device Id": device,
                    "Bytes": nbytes,
                    "Total Allocated": total_allocated,
                    "Total Reserved": total_reserved,
                    **args,
                },
            }
        )
        return self

    # -- device side -----------------------------------------------------------
    def _gpu(
        self,
        cat_new: str,
        cat_old: str,
        name: str,
        start: float,
        dur: float,
        stream: int,
        device: int,
        corr: int,
        extra: dict[str, Any] | None = None,
    ) -> None:
        args = {"device": device, "stream": stream, "correlation": corr, self._ext_key(): 0}
        args.update(extra or {})
        self.events.append(
            {
                "ph": "X",
                "cat": self._cat(cat_new, cat_old),
                "name": name,
                "pid": device,
                "tid": stream,
                "ts": start,
                "dur": dur,
                "args": args,
            }
        )

    def launch(
        self,
        name: str,
        launch_ts: float,
        start: float,
        dur: float,
        stream: int = 7,
        device: int = 0,
        launch_dur: float = 5.0,
        runtime_name: str = "cudaLaunchKernel",
        extra: dict | None = None,
        tid: int | None = None,
    ) -> int:
        """A runtime launch call on the host and its kernel on the device, joined by correlation."""
        corr = self.runtime(runtime_name, launch_ts, launch_dur, tid=tid)
        self._gpu("kernel", "Kernel", name, start, dur, stream, device, corr, extra)
        self.events.append(
            {
                "ph": "s",
                "cat": "ac2g",
                "name": "ac2g",
                "id": corr,
                "pid": self.pid,
                "tid": tid or self.tid,
                "ts": launch_ts,
            }
        )
        self.events.append(
            {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": device, "tid": stream, "ts": start, "bp": "e"}
        )
        return corr

    def kernel(self, name: str, start: float, dur: float, stream: int = 7, device: int = 0) -> int:
        """A kernel with no launching runtime call in the trace."""
        corr = self._next_corr()
        self._gpu("kernel", "Kernel", name, start, dur, stream, device, corr)
        return corr

    def memcpy(
        self,
        launch_ts: float,
        start: float,
        dur: float,
        kind: str = "HtoD (Pageable -> Device)",
        nbytes: int = 1 << 20,
        stream: int = 7,
        device: int = 0,
        launch_dur: float = 5.0,
        runtime_name: str = "cudaMemcpyAsync",
    ) -> int:
        corr = self.runtime(runtime_name, launch_ts, launch_dur)
        self._gpu("gpu_memcpy", "Memcpy", f"Memcpy {kind}", start, dur, stream, device, corr, {"bytes": nbytes})
        return corr

    def memset(
        self, launch_ts: float, start: float, dur: float, nbytes: int = 1024, stream: int = 7, device: int = 0
    ) -> int:
        corr = self.runtime("cudaMemsetAsync", launch_ts, 3.0)
        self._gpu("gpu_memset", "Memset", "Memset (Device)", start, dur, stream, device, corr, {"bytes": nbytes})
        return corr

    # -- output ------------------------------------------------------------------
    def _next_corr(self) -> int:
        self._corr += 1
        return self._corr

    def _next_ext(self) -> int:
        self._ext += 1
        return self._ext

    def to_dict(self) -> dict[str, Any]:
        events = [{"name": "process_name", "ph": "M", "pid": self.pid, "tid": 0, "args": {"name": "python"}}]
        return {**self.meta, "traceEvents": events + self.events}

    def write(self, path: str | Path, indent: int | None = None) -> Path:
        """Write JSON (gzip when the name ends in .gz); returns the path."""
        p = Path(path)
        data = json.dumps(self.to_dict(), indent=indent).encode()
        if p.name.endswith(".gz"):
            with gzip.open(p, "wb") as fh:
                fh.write(data)
        else:
            p.write_bytes(data)
        return p
