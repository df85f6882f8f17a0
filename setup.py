"""The C extensions of bmoe-top (bmoe_top/native_ext.py lists them; everything else is in
pyproject.toml). Each is optional: without a C compiler the package installs and runs its
pure-Python paths. ``BMOE_NATIVE_REQUIRED=1`` (``make native``) makes a failed build an error."""

import importlib.util
import os
import sys
from pathlib import Path

from setuptools import Extension, setup

ROOT = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("_bmoe_native_ext", ROOT / "bmoe_top" / "native_ext.py")
assert _spec is not None and _spec.loader is not None
native_ext = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(native_ext)

required = os.environ.get("BMOE_NATIVE_REQUIRED") == "1"


def extension(ext):
    tag = native_ext.source_tag([(ROOT / p).read_bytes() for p in (*ext.sources, *ext.headers)])
    return Extension(ext.module, sources=[*ext.sources, native_ext.TAG_SOURCE],
                     define_macros=[("BMOE_SOURCE_TAG", f'"{tag}"')],
                     extra_compile_args=[*native_ext.CFLAGS, *ext.flags], extra_link_args=list(ext.flags),
                     depends=list(ext.headers), optional=not required)


setup(ext_modules=[extension(e) for e in native_ext.EXTENSIONS])
