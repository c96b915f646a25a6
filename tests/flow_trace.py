"""Which of embedkit's modules a command's code passes, in order, and whether it returns to one.

    python tests/flow_trace.py MODULE:FUNCTION embedkit-args...

runs `embedkit ARGS` in this process under `sys.setprofile` (every thread) and prints one JSON
object: the modules entered while the first call of MODULE:FUNCTION runs (on its thread and the
threads it hands work to), in order (`modules`), and the calls into a module that is already on
the calling thread's stack below another one (`returns`: a lower layer calling back up, or a
module passed, left and entered again from below).

Counted: every call of a function written in an embedkit module. Not counted: code run while a
module is imported, the methods `dataclasses` generates, and the command's own modules
(`embedkit.cli`: parsing and printing). The model is one stage: everything that runs inside a call
into `embedkit.encode` is `embedkit.encode`'s (the encoder's own code, behind its protocol).
"""

from __future__ import annotations

import json
import sys
import threading
from types import FrameType
from typing import Any

ENCODER = "embedkit.encode"
COMMAND = "embedkit.cli"


class Flow:
    def __init__(self, start: str) -> None:
        self.start = start  # "module:function" where recording begins
        self.recording = False
        self.done = False
        self._root: FrameType | None = None  # the traced call's frame
        self.modules: list[str] = []
        self.returns: list[dict[str, Any]] = []
        self._stacks: dict[int, list[tuple[str, FrameType]]] = {}

    def profile(self, frame: FrameType, event: str, arg: object) -> None:
        if event not in ("call", "return"):
            return
        stack = self._stacks.setdefault(threading.get_ident(), [])
        if event == "return":
            if stack and stack[-1][1] is frame:
                stack.pop()
            if frame is self._root:
                self.done = True
            return
        if self.done:
            return
        module = str(frame.f_globals.get("__name__", ""))
        code = frame.f_code
        if not module.startswith("embedkit") or code.co_filename.startswith("<") or _importing(frame):
            return
        if not self.recording:
            if f"{module}:{code.co_name}" != self.start:
                return
            self.recording, self._root = True, frame
        below = [stage for stage, _ in stack]
        stage = ENCODER if module.startswith(ENCODER) or ENCODER in below else module
        if stage.startswith(COMMAND):
            stack.append((stage, frame))
            return
        if below and stage != below[-1] and stage in below:
            self.returns.append({"into": stage, "function": code.co_name, "from": below[-1], "stack": below})
        if stage not in self.modules:
            self.modules.append(stage)
        stack.append((stage, frame))


def _importing(frame: FrameType | None) -> bool:
    """Whether `frame` runs while a module is imported (under its body; the script's own is not)."""
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") != "__main__":
            return True
        frame = frame.f_back
    return False


def main(start: str, args: list[str]) -> None:
    from typer.testing import CliRunner

    from embedkit.cli.app import app

    flow = Flow(start)
    threading.setprofile(flow.profile)
    sys.setprofile(flow.profile)
    try:
        result = CliRunner().invoke(app, args)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    print(json.dumps({"exit_code": result.exit_code, "modules": flow.modules, "returns": flow.returns}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
