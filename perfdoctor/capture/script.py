"""Run a user's script in this process as ``__main__``, as ``python SCRIPT ARGS`` would.

- ``sys.argv`` = ``[SCRIPT, *ARGS]`` (``-m``: the module's file path, like ``python -m``);
- ``sys.path[0]`` = the script's directory (``-m``: the working directory);
- the working directory is left as it is, so ``exec(open('configurator.py').read())``
  and relative data paths behave as they do without perfdoctor;
- the module runs as ``__main__`` (``if __name__ == "__main__":`` blocks run) and
  ``torch.multiprocessing.spawn`` children can re-import it as ``__mp_main__``.

``sys.argv`` and ``sys.path`` are restored afterwards.
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from perfdoctor.errors import PerfDoctorError


def check_target(target: str, module: bool) -> None:
    """Raise PerfDoctorError when the script file or module cannot be found."""
    if module:
        try:
            with _patched_sys(sys.argv[:], os.getcwd()):  # as python -m sees it: cwd first on sys.path
                spec = importlib.util.find_spec(target)
        except (ImportError, ValueError) as exc:
            raise PerfDoctorError(f"-m {target}: cannot import ({exc})") from None
        if spec is None:
            raise PerfDoctorError(f"-m {target}: no module named {target!r}")
        return
    path = Path(target)
    if not path.exists():
        raise PerfDoctorError(f"{target}: no such file")
    if path.is_dir() and not (path / "__main__.py").exists():
        raise PerfDoctorError(f"{target}: is a directory without __main__.py")


@contextmanager
def _patched_sys(argv: list[str], path0: str) -> Iterator[None]:
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = argv
    if sys.path:
        sys.path[0] = path0
    else:
        sys.path.append(path0)
    try:
        yield
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def run_target(target: str, args: list[str], module: bool = False) -> None:
    """Execute the script (or ``-m`` module) to completion; its exceptions propagate.

    Raises:
        PerfDoctorError: the target does not exist.
        BaseException: whatever the script raises, including SystemExit.
    """
    check_target(target, module)
    if module:
        with _patched_sys([target, *args], os.getcwd()):
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        return
    script_dir = os.path.dirname(os.path.realpath(target))
    with _patched_sys([target, *args], script_dir):
        runpy.run_path(target, run_name="__main__")
