"""A real, stock ``llama-server`` for tests: built once by ``make llama-server`` (``tools/llama_server.py``)
from the llama.cpp that the pinned llama-cpp-python vendors, into the user cache.

    from helpers.llama_server import LlamaServer, llama_server_binary, DEMO_MODEL

    exe = llama_server_binary()          # the binary; builds it when missing, skips without a compiler
    with LlamaServer(exe, DEMO_MODEL, "--slots") as ls:
        httpx.get(ls.url + "/metrics")

The ``llama_server`` fixture (module scope, registered in tests/conftest.py) is one such server on
the demo model with ``--metrics``, one slot, a 512-token context and one thread. Start your own
:class:`LlamaServer` for other flags (``--api-key``, ``--parallel 2``, no ``--metrics``, ...).
A missing binary is built on first use (a few minutes, once, under a lock); the test is skipped
(with the reason) only when no C/C++ compiler or CMake is there.
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import threading
import time
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from . import REPO
from .procs import stop_process

TOOL = REPO / "tools" / "llama_server.py"
#: the trained demo model that ships in the package
DEMO_MODEL = sorted((REPO / "bmoe_top" / "data").glob("*.gguf"))[0]


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bmoe_llama_server_tool", TOOL)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def llama_server_binary() -> Path:
    """The stock llama-server; built now when missing (``RuntimeError`` if the build fails).
    ``pytest.skip`` with the reason when the tools to build it are absent."""
    tool = _tool()
    exe = tool.binary_path()
    if exe.is_file():
        return exe
    missing = tool.missing_tools()
    if missing:
        pytest.skip(f"llama-server is not built ({exe}) and cannot be: missing {', '.join(missing)}")
    return tool.build()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServer:
    """``llama-server -m MODEL --host 127.0.0.1 --port P`` plus ``args`` as a child process; ``url``
    once ``/health`` answers 200. ``log``: its stderr/stdout lines. ``stop()`` (or the context
    manager) ends it and returns its exit code."""

    def __init__(self, exe: Path, model: Path, *args: str, ctx: int = 512, threads: int = 1,
                 ready_timeout: float = 180.0):
        self.log: list[str] = []
        last = ""
        for _ in range(3):  # a free port can be taken by another process before the child binds it
            self.port = _free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            self.cmd = [str(exe), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port),
                        "-c", str(ctx), "-t", str(threads), "-np", "1", *args]
            self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                         errors="replace")
            self._t = threading.Thread(target=self._drain, daemon=True)
            self._t.start()
            if self._wait_ready(ready_timeout):
                return
            self.stop()
            last = "".join(self.log[-20:])
            if "bind" not in last.lower():
                break
            self.log = []
        raise AssertionError(f"llama-server did not become ready: {' '.join(self.cmd)}\n{last}")

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.log.append(line)

    def _wait_ready(self, timeout: float) -> bool:
        end = time.monotonic() + timeout
        with httpx.Client(trust_env=False, timeout=5) as c:
            while time.monotonic() < end:
                if self.proc.poll() is not None:
                    return False
                try:
                    if c.get(self.url + "/health").status_code == 200:
                        return True
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
        return False

    def stop(self) -> int:
        code = stop_process(self.proc)
        self._t.join(5)
        return code

    def __enter__(self) -> LlamaServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


@pytest.fixture(scope="module")
def llama_server():
    """A stock llama-server on the demo model with ``--metrics`` (module scope)."""
    ls = LlamaServer(llama_server_binary(), DEMO_MODEL, "--metrics")
    yield ls
    ls.stop()
