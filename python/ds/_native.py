"""Finds and loads ds's compiled extension, `ds._ds` (pybind11).

The extension is built by scripts/build.sh when Debian's python3-pybind11
is installed; it lands in `<build>/python/ds/`. It is looked for, in order,
beside this file (a copy or an install), in `$DS_BUILD_DIR/python/ds/`, and
in the checkout's `build/python/ds/`. Under mpirun, Open MPI's library is
loaded with global symbols first (its plugins need them; Python loads
extensions with local symbols)."""

import glob
import importlib.machinery
import importlib.util
import os
import sys

_module = None


def _candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = [here]
    if os.environ.get("DS_BUILD_DIR"):
        dirs.append(os.path.join(os.environ["DS_BUILD_DIR"], "python", "ds"))
    dirs.append(os.path.join(here, "..", "..", "build", "python", "ds"))
    for d in dirs:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            yield from glob.glob(os.path.join(d, "_ds" + suffix))


def _load_mpi_globally():
    import ctypes
    for name in ("libmpi.so.40", "libmpi.so"):
        try:
            ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
            return
        except OSError:
            continue


def load():
    """The `_ds` extension module; ImportError saying how to build it."""
    global _module
    if _module is not None:
        return _module
    paths = list(_candidates())
    if not paths:
        raise ImportError(
            "ds: the compiled extension ds._ds is not built; install Debian's "
            "python3-pybind11 and python3-dev (scripts/setup.sh), run "
            "scripts/build.sh, and use /usr/bin/python3 (or set DS_BUILD_DIR "
            "to the build folder)")
    _load_mpi_globally()
    spec = importlib.util.spec_from_file_location("ds._ds", paths[0])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["ds._ds"] = module
    _module = module
    return module
