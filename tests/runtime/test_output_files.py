"""Every file bmoe-run writes goes through bmoe_top/outfile.py: ``--csv``, ``--route-trace``,
``make-profile -o``, ``make-model OUT`` (a preset, ``--arch``, ``--split`` shards) and the audit
log of ``serve --moe-cache-audit``. For each, as a user runs it (a real process): a symbolic link
at the path is refused and its target untouched; an existing file is refused without ``--force``
(the audit log, a log, is appended to, never truncated); a read-only folder (a real read-only
tmpfs in a private mount namespace; skipped where none can be made) and a write that fails in
the middle of a run end with a non-zero exit and one line that says why, never a traceback."""

from __future__ import annotations

import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.readonly import read_only_prefix
from helpers.serve import Serve

from bmoe_top.runtime.models import make_model

PY = sys.executable
RUN = [PY, "-m", "bmoe_top.runtime.cli"]
TEXT = "The quick brown fox jumps over the lazy dog. " * 8


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return make_model(tmp_path_factory.mktemp("out-files") / "tiny.gguf", preset="tiny", qtype="q8_0", seed=4)


def _writers(tiny: Path, tmp: Path) -> dict[str, tuple[list[str], str]]:
    """Each writer: (argv after ``bmoe-run`` with ``{out}`` for the output path, the output's name)."""
    text = tmp / "t.txt"
    text.write_text(TEXT)
    one = ["-m", str(tiny), "-p", "hi", "-n", "3", "-c", "256", "--quiet"]
    return {
        "csv": ([*one, "--csv", "{out}"], "run.csv"),
        "route-trace": ([*one, "--route-trace", "{out}"], "route.csv"),
        "make-profile": (["make-profile", str(tiny), str(text), "-o", "{out}", "-c", "256", "-t", "1"], "p.strp"),
        "make-model": (["make-model", "--preset", "tiny", "{out}"], "m.gguf"),
        "make-model --arch": (["make-model", "--arch", "qwen2moe", "{out}"], "a.gguf"),
    }


WRITERS = ["csv", "route-trace", "make-profile", "make-model", "make-model --arch"]


def bmoe_run(argv: list[str], out: Path, *extra: str, prefix: list[str] | None = None,
             preexec_fn=None) -> subprocess.CompletedProcess:
    args = [a.replace("{out}", str(out)) for a in argv]
    return subprocess.run([*(prefix or []), *RUN, *args, *extra], capture_output=True, text=True, timeout=300,
                          preexec_fn=preexec_fn)


def one_line(r: subprocess.CompletedProcess) -> str:
    """The error: one line on stderr, no traceback."""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


@pytest.mark.parametrize("writer", WRITERS)
def test_a_symbolic_link_is_refused(tiny, tmp_path, writer):
    argv, name = _writers(tiny, tmp_path)[writer]
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = tmp_path / name
    link.symlink_to(victim)
    for force in ((), ("--force",)):
        r = bmoe_run(argv, link, *force)
        assert r.returncode != 0 and "symbolic link" in one_line(r) and str(link) in r.stderr
        assert victim.read_text() == "precious\n" and link.is_symlink()


@pytest.mark.parametrize("writer", WRITERS)
def test_an_existing_file_is_refused_without_force(tiny, tmp_path, writer):
    argv, name = _writers(tiny, tmp_path)[writer]
    out = tmp_path / name
    out.write_text("earlier\n")
    r = bmoe_run(argv, out)
    assert r.returncode != 0 and "already exists" in one_line(r) and "--force" in r.stderr
    assert out.read_text() == "earlier\n"
    r = bmoe_run(argv, out, "--force")
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() != b"earlier\n" and out.stat().st_size > 100
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert leftovers == []  # no temporary file left beside it


def test_split_shards_are_refused_then_replaced_with_force(tmp_path):
    out = tmp_path / "s.gguf"
    r = bmoe_run(["make-model", "--preset", "tiny", "--split", "8", "{out}"], out)
    assert r.returncode == 0, r.stderr
    shards = sorted(tmp_path.glob("s-*-of-*.gguf"))
    assert len(shards) > 1
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    shards[1].unlink()
    shards[1].symlink_to(victim)  # a link planted where a shard goes
    out.unlink()
    r = bmoe_run(["make-model", "--preset", "tiny", "--split", "8", "--force", "{out}"], out)
    assert r.returncode == 1 and "symbolic link" in one_line(r) and victim.read_text() == "precious\n"
    shards[1].unlink()
    out.unlink()
    r = bmoe_run(["make-model", "--preset", "tiny", "--split", "8", "{out}"], out)
    assert r.returncode == 1 and "already exists" in one_line(r)  # the first shard is still there
    r = bmoe_run(["make-model", "--preset", "tiny", "--split", "8", "--force", "{out}"], out)
    assert r.returncode == 0, r.stderr
    assert sorted(tmp_path.glob("s-*-of-*.gguf")) == shards and not any(p.is_symlink() for p in shards)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("writer", WRITERS)
def test_a_read_only_folder_is_a_non_zero_exit_and_one_line(tiny, tmp_path, writer):
    argv, name = _writers(tiny, tmp_path)[writer]
    ro = tmp_path / "ro"
    ro.mkdir()
    prefix = read_only_prefix(ro)
    if prefix is None:
        pytest.skip("cannot mount a read-only tmpfs in a private mount namespace here")
    r = bmoe_run(argv, ro / name, prefix=prefix)
    line = one_line(r)
    assert r.returncode != 0 and str(ro / name) in line and "read-only (EROFS)" in line, line


def _small_files():
    """The child may write 2 KiB per file: a header fits, the rows soon do not (EFBIG)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))


@pytest.mark.parametrize("writer", ["csv", "route-trace"])
@pytest.mark.parametrize("session", [False, True], ids=["one-shot", "session"])
def test_a_write_that_fails_during_the_run_is_loud(tiny, tmp_path, writer, session):
    argv, name = _writers(tiny, tmp_path)[writer]
    argv = [a if a != "3" else "200" for a in argv]  # enough tokens to outgrow the limit
    out = tmp_path / name
    if session:
        argv = [*argv, "--session"]
        args = [a.replace("{out}", str(out)) for a in argv]
        r = subprocess.run([*RUN, *args], input='{"cmd":"generate","id":1,"prompt":"hi","n_predict":200}\n',
                           capture_output=True, text=True, timeout=300, preexec_fn=_small_files)
        fatal = [ln for ln in r.stdout.splitlines() if ln.startswith("BMOE_ERROR") and '"fatal":true' in ln]
        assert len(fatal) == 1 and "too large" in fatal[0], r.stdout[-2000:]
    else:
        r = bmoe_run(argv, out, preexec_fn=_small_files)
    line = one_line(r)
    assert r.returncode == 1 and str(out) in line and "EFBIG" in line, line
    assert 0 < out.stat().st_size <= 2048


def test_the_audit_log_is_appended_never_truncated_and_a_read_only_folder_fails(tiny, tmp_path):
    """serve --moe-cache-audit: an existing log keeps its lines (a log is appended to); a
    read-only folder is refused before the model loads, in one line, exit 1."""
    log = tmp_path / "audit.jsonl"
    log.write_text('{"event":"exit","earlier":true}\n')
    s = Serve(tiny, "--moe-cache-audit", str(log))
    assert s.stop() == 0
    lines = log.read_text().splitlines()
    assert lines[0] == '{"event":"exit","earlier":true}' and len(lines) >= 3
    ro = tmp_path / "ro"
    ro.mkdir()
    prefix = read_only_prefix(ro)
    if prefix is None:
        pytest.skip("cannot mount a read-only tmpfs in a private mount namespace here")
    r = subprocess.run([*prefix, *RUN, "serve", "-m", str(tiny), "--port", "0", "--moe-cache-audit",
                        str(ro / "a.jsonl")], capture_output=True, text=True, timeout=120)
    line = one_line(r)
    assert r.returncode == 1 and "cannot write the audit log" in line and "read-only (EROFS)" in line, line


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
@pytest.mark.parametrize("argv", [["--progress"], [], ["--progress", "--session"], ["--route-telemetry"]])
def test_a_full_standard_output_is_one_line_and_status_1(tiny, argv):
    # `bmoe-run --progress > /dev/full` ended silently with 1, or 0 with --session (the lines were lost)
    with open("/dev/full", "w") as full:
        p = subprocess.run([*RUN, "-m", str(tiny), "-p", "hi", "-n", "3", "-c", "256", "--quiet", *argv],
                           stdout=full, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120)
    assert p.returncode == 1
    mine = [ln for ln in p.stderr.splitlines() if ln.startswith("bmoe-run")]
    assert mine == ["bmoe-run: error: cannot write standard output: the disk is full (ENOSPC)"], p.stderr[-1500:]
    assert "Exception ignored" not in p.stderr and "Traceback" not in p.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_make_model_with_a_full_standard_output(tmp_path):
    with open("/dev/full", "w") as full:
        p = subprocess.run([*RUN, "make-model", str(tmp_path / "m.gguf"), "--preset", "tiny"], stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=300)
    assert p.returncode == 1 and p.stderr == "bmoe-run: error: cannot write standard output: the disk is full " \
                                              "(ENOSPC)\n"
