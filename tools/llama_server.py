"""Build a stock ``llama-server`` once from the llama.cpp that the pinned llama-cpp-python vendors.

    python tools/llama_server.py build     # (make llama-server) build it into the user cache if missing
    python tools/llama_server.py build --optional   # (make test) the same, or say why not and exit 0
    python tools/llama_server.py path      # print where the binary is (or would be)
    python tools/llama_server.py check     # exit 0 when it is built, 1 when not, 3 when no compiler

The source is the llama-cpp-python sdist (``pip download llama_cpp_python==VERSION --no-binary :all:
--no-deps``), its ``vendor/llama.cpp``, configured with CMake for the CPU only (no CUDA, no
OpenSSL, no web UI download: nothing is fetched but the sdist) and built as one static
``llama-server`` into ``platformdirs.user_cache_dir("bmoe-top")/llama-server-VERSION/``. The
install is atomic (built in a temporary folder beside it, then renamed), so a half build is never
taken for a build; a lock file serializes concurrent builders. Tests find it through
:func:`binary_path` (``tests/helpers/llama_server.py``).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from importlib import metadata
from pathlib import Path

import platformdirs

DIST = "llama_cpp_python"
BINARY = "llama-server"
CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=OFF",  # a binary that runs on any x86-64 / arm64 the cache is copied to
    "-DGGML_CUDA=OFF",
    "-DGGML_METAL=OFF",
    "-DGGML_VULKAN=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_LLGUIDANCE=OFF",
]


def version() -> str:
    """The installed llama-cpp-python version (the pin in pyproject.toml)."""
    return metadata.version(DIST)


def install_dir(ver: str | None = None) -> Path:
    """``<user cache>/bmoe-top/llama-server-VERSION``."""
    return Path(platformdirs.user_cache_dir("bmoe-top")) / f"{BINARY}-{ver or version()}"


def binary_path(ver: str | None = None) -> Path:
    """Where the built ``llama-server`` is (it may not exist yet)."""
    return install_dir(ver) / BINARY


def missing_tools() -> list[str]:
    """The build tools that are not on PATH (empty when a build can run)."""
    need = ["cmake", "make"]
    cc = [c for c in ("cc", "gcc", "clang") if shutil.which(c)]
    cxx = [c for c in ("c++", "g++", "clang++") if shutil.which(c)]
    out = [t for t in need if shutil.which(t) is None]
    if not cc:
        out.append("a C compiler (cc)")
    if not cxx:
        out.append("a C++ compiler (c++)")
    return out


#: a build step's progress: Ninja's ``[12/206]``, Make's ``[ 45%]``
_STEP = re.compile(r"^\[\s*(?:(\d+)/(\d+)|(\d+)%)\]")


def _run(cmd: list[str], log, cwd: Path | None = None, progress=None) -> None:
    """Run ``cmd`` with its output into ``log``; ``progress(percent)`` at each tenth of the way
    its build steps report."""
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    if progress is None:
        r = subprocess.run(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
        code = r.returncode
    else:
        shown = 0
        with subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              errors="replace") as p:
            assert p.stdout is not None
            for line in p.stdout:
                log.write(line)
                m = _STEP.match(line)
                if m:
                    pct = int(m[1]) * 100 // int(m[2]) if m[1] else int(m[3])
                    if pct >= shown + 10:
                        shown = pct - pct % 10
                        progress(pct)
            code = p.wait()
    if code != 0:
        raise RuntimeError(f"{cmd[0]} {cmd[1] if len(cmd) > 1 else ''} failed (exit {code}); see {log.name}")


def _safe_extract(tar: tarfile.TarFile, dest: Path) -> None:
    tar.extractall(dest, filter="data")  # no absolute paths, no links out of dest


def build(jobs: int | None = None, quiet: bool = False) -> Path:
    """Build ``llama-server`` into :func:`install_dir` unless it is there; return the binary's path.

    Raises ``RuntimeError`` with the step that failed (the full log's path in the message)."""
    ver = version()
    dest = install_dir(ver)
    exe = dest / BINARY
    if exe.is_file():
        return exe
    missing = missing_tools()
    if missing:
        raise RuntimeError("cannot build llama-server: missing " + ", ".join(missing))
    dest.parent.mkdir(parents=True, exist_ok=True)
    lock_path = dest.parent / f".{dest.name}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another builder finishes first; then the binary is there
        if exe.is_file():
            return exe
        work = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
        log_path = dest.parent / f"{dest.name}.build.log"
        t0 = time.monotonic()
        try:
            with open(log_path, "w") as log:
                say = (lambda _m: None) if quiet else (lambda m: print(f"llama-server: {m}", file=sys.stderr,
                                                                       flush=True))
                say(f"downloading the llama-cpp-python {ver} sdist (log: {log_path})")
                _run([sys.executable, "-m", "pip", "download", "-q", f"{DIST}=={ver}", "--no-binary", ":all:",
                      "--no-deps", "-d", str(work / "sdist")], log)
                tars = sorted((work / "sdist").glob("*.tar.gz"))
                if not tars:
                    raise RuntimeError(f"pip download gave no sdist; see {log_path}")
                with tarfile.open(tars[0]) as tar:
                    _safe_extract(tar, work / "src")
                srcs = list((work / "src").glob("*/vendor/llama.cpp/CMakeLists.txt"))
                if not srcs:
                    raise RuntimeError(f"{tars[0].name} has no vendor/llama.cpp")
                src = srcs[0].parent
                bld = work / "build"
                n = jobs or os.cpu_count() or 1
                say(f"configuring {src.relative_to(work / 'src')} (CPU only)")
                gen = ["-G", "Ninja"] if shutil.which("ninja") else []
                _run(["cmake", "-S", str(src), "-B", str(bld), *gen, *CMAKE_FLAGS], log)
                say(f"building {BINARY} with {n} jobs (a few minutes)")
                _run(["cmake", "--build", str(bld), "--target", BINARY, "-j", str(n)], log,
                     progress=None if quiet else lambda pct: say(f"building: {pct}%"))
                built = bld / "bin" / BINARY
                if not built.is_file():
                    raise RuntimeError(f"the build produced no {built}; see {log_path}")
                stage = work / "install"
                stage.mkdir()
                shutil.copy2(built, stage / BINARY)
                (stage / "SOURCE").write_text(f"{DIST} {ver} sdist, vendor/llama.cpp; cmake {' '.join(CMAKE_FLAGS)}\n")
                os.replace(stage, dest)
            say(f"built {exe} in {time.monotonic() - t0:.0f} s")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return exe


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="llama_server.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=["build", "path", "check"])
    ap.add_argument("-j", "--jobs", type=int, default=None, help="build jobs (default: all cores)")
    ap.add_argument("--optional", action="store_true",
                    help="build: when the build tools are missing, say so and exit 0 (the tests that drive it skip)")
    args = ap.parse_args(argv)
    if args.action == "path":
        print(binary_path())
        return 0
    if args.action == "check":
        if binary_path().is_file():
            return 0
        return 3 if missing_tools() else 1
    missing = missing_tools()
    if args.optional and missing and not binary_path().is_file():
        print(f"llama-server: not built (missing {', '.join(missing)}); the tests that drive it will skip",
              file=sys.stderr)
        return 0
    try:
        print(build(jobs=args.jobs))
    except RuntimeError as exc:
        print(f"llama-server: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
