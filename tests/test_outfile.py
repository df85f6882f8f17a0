"""bmoe_top/outfile.py with real files: symbolic links are never followed, existing files are never
silently replaced, and write errors (a full disk, a read-only file system, a closed pipe) raise at
once. The full and read-only file systems are real tmpfs mounts in a private mount namespace
(``unshare -m``, needs root or user namespaces; skipped otherwise) and /dev/full."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from bmoe_top.outfile import OutputFileError, check_output, open_output, place_file, temp_beside, write_atomic


def test_a_new_file_is_written(tmp_path):
    p = tmp_path / "run.csv"
    with open_output(p) as f:
        assert f.write("step,wall_ms\n") == 13
        f.write(b"1,2.5\n")
    assert p.read_text() == "step,wall_ms\n1,2.5\n" and f.bytes_written == 19 and f.closed


def test_an_existing_file_is_refused_then_replaced_with_force_or_appended(tmp_path):
    p = tmp_path / "run.csv"
    p.write_text("precious\n")
    with pytest.raises(OutputFileError) as ei:
        open_output(p)
    assert ei.value.errno == errno.EEXIST and "already exists" in str(ei.value) and "--force" in str(ei.value)
    assert str(ei.value).startswith(f"cannot write {p}:")
    assert p.read_text() == "precious\n"
    with open_output(p, append=True) as f:
        f.write("more\n")
    assert p.read_text() == "precious\nmore\n"
    with open_output(p, force=True) as f:
        f.write("new\n")
    assert p.read_text() == "new\n"


@pytest.mark.parametrize("how", [{}, {"force": True}, {"append": True}])
def test_a_symlink_is_never_followed(tmp_path, how):
    target = tmp_path / "victim"
    target.write_text("do not touch\n")
    link = tmp_path / "out.csv"
    link.symlink_to(target)
    with pytest.raises(OutputFileError) as ei:
        open_output(link, **how)
    assert "symbolic link" in str(ei.value) and str(target) in str(ei.value)
    assert target.read_text() == "do not touch\n"
    dangling = tmp_path / "dangling.csv"
    dangling.symlink_to(tmp_path / "would_be_created")
    with pytest.raises(OutputFileError, match="symbolic link"):
        open_output(dangling, **how)
    assert not (tmp_path / "would_be_created").exists()


def test_a_symlink_swapped_in_after_the_check_is_still_refused(tmp_path, monkeypatch):
    from bmoe_top import outfile

    target = tmp_path / "victim"
    target.write_text("do not touch\n")
    p = tmp_path / "out.csv"
    real = outfile._refuse_existing

    def race(path, force):  # the link appears between the check and the open
        r = real(path, force)
        if not os.path.lexists(path):
            os.symlink(target, path)
        return r
    monkeypatch.setattr(outfile, "_refuse_existing", race)
    for how in ({"force": True}, {"append": True}):
        with pytest.raises(OutputFileError):
            open_output(p, **how)
        p.unlink()
    assert target.read_text() == "do not touch\n"


def test_a_directory_and_a_missing_folder(tmp_path):
    with pytest.raises(OutputFileError, match="directory"):
        open_output(tmp_path, force=True)
    with pytest.raises(OutputFileError, match="folder does not exist") as ei:
        open_output(tmp_path / "no" / "such.csv")
    assert ei.value.errno == errno.ENOENT


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_a_folder_that_takes_no_new_file_is_not_called_missing():
    """/proc exists but no file can be created in it (ENOENT): the reason is the system's, not 'the
    folder does not exist'."""
    with pytest.raises(OutputFileError) as ei:
        open_output("/proc/bmoe-top-x.jsonl")
    assert ei.value.errno == errno.ENOENT and "folder does not exist" not in str(ei.value)
    assert str(ei.value) == ("cannot write /proc/bmoe-top-x.jsonl: a file cannot be created in that folder: "
                             "no such file or directory (ENOENT)")


def test_dev_full_write_error_is_raised_at_flush_and_stays(tmp_path):
    f = open_output("/dev/full", append=True)
    f.write("x" * 100)  # buffered
    with pytest.raises(OutputFileError) as ei:
        f.flush()
    assert ei.value.errno == errno.ENOSPC and "disk is full (ENOSPC)" in str(ei.value)
    with pytest.raises(OutputFileError):  # sticky
        f.write("more")
    with pytest.raises(OutputFileError):
        f.close()
    assert f.closed
    g = open_output("/dev/full", force=True, buffer_size=0)
    with pytest.raises(OutputFileError, match="ENOSPC"):
        g.write("at once")
    with pytest.raises(OutputFileError):
        g.close()


def test_an_error_at_close_is_not_swallowed():
    f = open_output("/dev/full", append=True)
    f.write("unflushed")
    with pytest.raises(OutputFileError, match="ENOSPC"):
        f.close()


def test_a_pipe_whose_reader_went_away(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OutputFileError, match="no one reads"):
        open_output(fifo, append=True)
    opened = threading.Event()

    def reader():  # opens the pipe, then goes away before anything is written
        fd = os.open(fifo, os.O_RDONLY)
        opened.set()
        os.close(fd)
    t = threading.Thread(target=reader)
    t.start()
    while not opened.is_set():
        try:
            f = open_output(fifo, append=True, buffer_size=0)
            break
        except OutputFileError:
            continue
    opened.wait()
    t.join()
    with pytest.raises(OutputFileError) as ei:
        for _ in range(1000):
            f.write("line\n")
    assert ei.value.errno == errno.EPIPE
    with pytest.raises(OutputFileError):
        f.close()


def test_write_atomic_refuses_then_replaces_and_never_follows_a_link(tmp_path):
    p = tmp_path / "p.strp"
    assert write_atomic(p, b"one") == 3 and p.read_bytes() == b"one"
    with pytest.raises(OutputFileError, match="already exists"):
        write_atomic(p, b"two")
    os.chmod(p, 0o600)
    write_atomic(p, b"two", force=True)
    assert p.read_bytes() == b"two" and (p.stat().st_mode & 0o777) == 0o600
    target = tmp_path / "victim"
    target.write_bytes(b"keep")
    link = tmp_path / "l.strp"
    link.symlink_to(target)
    with pytest.raises(OutputFileError, match="symbolic link"):
        write_atomic(link, b"x", force=True)
    assert target.read_bytes() == b"keep"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["l.strp", "p.strp", "victim"]  # no temp file left


def test_a_file_made_by_name_is_placed_by_the_same_rules(tmp_path):
    """temp_beside + place_file: what another writer makes by its name (a GGUF writer, a quantizer)."""
    out = tmp_path / "m.gguf"
    fd, tmp = temp_beside(out)
    os.close(fd)
    assert Path(tmp).parent == tmp_path and Path(tmp).name.startswith(".m.gguf.")
    Path(tmp).write_bytes(b"GGUF one")
    place_file(tmp, out)
    assert out.read_bytes() == b"GGUF one" and (out.stat().st_mode & 0o777) == 0o644 and not Path(tmp).exists()
    with pytest.raises(OutputFileError, match="already exists"):
        temp_beside(out)
    # the file appeared while the temporary one was being made: still not replaced
    fd, tmp = temp_beside(tmp_path / "late.gguf")
    os.close(fd)
    (tmp_path / "late.gguf").write_bytes(b"someone else's")
    with pytest.raises(OutputFileError, match="already exists"):
        place_file(tmp, tmp_path / "late.gguf")
    assert (tmp_path / "late.gguf").read_bytes() == b"someone else's" and not Path(tmp).exists()
    fd, tmp = temp_beside(out, force=True)
    os.close(fd)
    Path(tmp).write_bytes(b"GGUF two")
    place_file(tmp, out, force=True)
    assert out.read_bytes() == b"GGUF two"
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    link = tmp_path / "l.gguf"
    link.symlink_to(victim)
    with pytest.raises(OutputFileError, match="symbolic link"):
        temp_beside(link, force=True)
    fd, tmp = temp_beside(tmp_path / "n.gguf")
    os.close(fd)
    (tmp_path / "n.gguf").symlink_to(victim)  # a link swapped in before the move
    with pytest.raises(OutputFileError, match="symbolic link"):
        place_file(tmp, tmp_path / "n.gguf", force=True)
    assert victim.read_bytes() == b"keep" and not Path(tmp).exists()
    with pytest.raises(OutputFileError, match="folder does not exist"):
        temp_beside(tmp_path / "no" / "m.gguf")
    with pytest.raises(OutputFileError, match="folder does not exist"):
        check_output(tmp_path / "no" / "m.gguf")
    with pytest.raises(OutputFileError, match="already exists"):
        check_output(out)
    check_output(out, force=True)
    check_output(tmp_path / "new.gguf")  # nothing is created
    assert sorted(x.name for x in tmp_path.iterdir()) == ["l.gguf", "late.gguf", "m.gguf", "n.gguf", "victim"]


# --- real file systems: a full tmpfs and a read-only one, in a private mount namespace ----------

CHILD = textwrap.dedent(r"""
    import errno, os, sys
    from bmoe_top.outfile import OutputFileError, check_output, open_output, temp_beside, write_atomic
    full, ro = sys.argv[1], sys.argv[2]
    f = open_output(os.path.join(full, "run.csv"), buffer_size=4096)
    try:
        for i in range(100000):
            f.write(f"{i},1.000,2.000\n")
        print("no error")
    except OutputFileError as e:
        print("full", e.errno == errno.ENOSPC, f.bytes_written < 70000, str(e))
    try:
        f.close()
    except OutputFileError:
        print("close raises")
    try:
        open_output(os.path.join(ro, "run.csv"))
    except OutputFileError as e:
        print("ro", e.errno == errno.EROFS, str(e))
    try:
        write_atomic(os.path.join(ro, "p.strp"), b"x")
    except OutputFileError as e:
        print("ro atomic", e.errno == errno.EROFS)
    try:
        temp_beside(os.path.join(ro, "m.gguf"))
    except OutputFileError as e:
        print("ro temp", e.errno == errno.EROFS, str(e))
    try:
        check_output(os.path.join(ro, "m.gguf"))
    except OutputFileError as e:
        print("ro check", e.errno == errno.EROFS, str(e))
""")


def _unshare_ok() -> bool:
    if not shutil.which("unshare"):
        return False
    r = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /mnt"], capture_output=True)
    return r.returncode == 0


@pytest.mark.skipif(not sys.platform.startswith("linux") or not _unshare_ok(),
                    reason="cannot mount a tmpfs in a private mount namespace here")
def test_a_full_and_a_read_only_file_system(tmp_path):
    full, ro = tmp_path / "full", tmp_path / "ro"
    full.mkdir()
    ro.mkdir()
    script = (f"mount -t tmpfs -o size=64k tmpfs {full} && mount -t tmpfs -o ro tmpfs {ro} && "
              f"exec {sys.executable} -c \"$0\" {full} {ro}")
    r = subprocess.run(["unshare", "-m", "sh", "-c", script, CHILD], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0].startswith("full True True cannot write") and "disk is full (ENOSPC)" in out[0], out
    assert out[1] == "close raises"
    assert out[2].startswith("ro True cannot write") and "read-only (EROFS)" in out[2], out
    assert out[3] == "ro atomic True"
    assert out[4] == f"ro temp True cannot write {ro}/m.gguf: the file system is read-only (EROFS)", out
    assert out[5] == f"ro check True cannot write {ro}/m.gguf: the file system is read-only (EROFS)", out


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder anyway")
def test_a_read_only_folder(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o555)
    try:
        with pytest.raises(OutputFileError, match="permission denied"):
            open_output(d / "x.csv")
    finally:
        d.chmod(0o755)


def test_the_module_imports_nothing_of_the_project():
    src = Path(__file__).resolve().parents[1] / "bmoe_top" / "outfile.py"
    assert "bmoe_top." not in "\n".join(ln for ln in src.read_text().splitlines() if ln.startswith(("import", "from")))
