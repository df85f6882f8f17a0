"""bmoe_top/native_ext.py: the C extensions are built at install from the package's sources, and a
library built from other sources is refused (never run stale)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from bmoe_top import native_ext

COMPILER = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


@pytest.mark.parametrize("ext", native_ext.EXTENSIONS, ids=lambda e: e.module)
def test_every_extension_is_built_from_the_sources_beside_it(ext: native_ext.Extension) -> None:
    if COMPILER is None:
        pytest.skip("no C compiler: the extensions are not built and the pure-Python paths run")
    lib = native_ext.load(ext.module)  # raises when missing or stale: run `make native`
    assert lib is not None


@pytest.mark.parametrize("ext", native_ext.EXTENSIONS, ids=lambda e: e.module)
def test_a_library_built_from_other_sources_is_refused(ext: native_ext.Extension, tmp_path: Path) -> None:
    spec = importlib.util.find_spec(ext.module)
    if spec is None or not spec.origin:
        pytest.skip(f"{ext.module} is not built")
    package = importlib.util.find_spec(ext.module.rsplit(".", 1)[0])
    assert package is not None and package.submodule_search_locations
    pkg_dir = Path(next(iter(package.submodule_search_locations)))
    for p in (*ext.sources, *ext.headers):
        shutil.copy(pkg_dir / Path(p).name, tmp_path / Path(p).name)
    so = tmp_path / Path(spec.origin).name
    shutil.copy(spec.origin, so)
    assert native_ext.load_file(ext, so, tmp_path) is not None  # the same sources: accepted
    src = tmp_path / Path(ext.sources[0]).name
    src.write_bytes(src.read_bytes() + b"\n/* changed since the build */\n")
    with pytest.raises(OSError, match=r"built from other sources .*make native"):
        native_ext.load_file(ext, so, tmp_path)


def test_an_unknown_module_is_not_loaded() -> None:
    with pytest.raises(OSError, match="not one of bmoe-top's C extensions"):
        native_ext.load("bmoe_top.runtime.nothing")


def test_the_tag_depends_on_every_byte_and_the_order() -> None:
    a, b = b"int x;", b"int y;"
    assert native_ext.source_tag([a, b]) != native_ext.source_tag([b, a])
    assert native_ext.source_tag([a]) != native_ext.source_tag([b"int z;"])
    assert native_ext.source_tag([a, b]) == native_ext.source_tag([a, b])
