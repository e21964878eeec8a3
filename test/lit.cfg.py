# -*- Python -*-
# lit configuration of the ds tests.

import os

import lit.formats
from lit.llvm import llvm_config

config.name = "ds"
# bash runs the RUN lines (tests use $? and redirections).
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir", ".test"]
# Python helpers beside the tests are not tests.
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.ds_obj_root, "test")
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "Utils",
                   "Conformance"]

llvm_config.use_default_substitutions()
config.substitutions.append(("%python", config.ds_python))
config.substitutions.append(("%ds_src", config.ds_src_root))
config.substitutions.append(("%ds_obj", config.ds_obj_root))
config.substitutions.append(
    ("%gen-model", config.ds_python + " " +
     os.path.join(config.ds_src_root, "test", "Import", "gen_models.py")))
# %bad-input CMD: CMD must exit 1 with exactly one 'error: ...' line on
# stderr and nothing on stdout; the line is echoed for FileCheck.
config.substitutions.append(
    ("%bad-input", "bash " +
     os.path.join(config.ds_src_root, "test", "Utils", "bad-input.sh")))

# MPI ranks, oversubscribed on small machines; root is allowed (CI runs as
# root). Each mpirun gets its own TMPDIR: Open MPI keeps its session folder
# there and removes it when a job ends, so two tests' jobs sharing lit's
# temporary folder race (one removes the folder the other is creating).
config.substitutions.append(
    ("%mpirun",
     "env TMPDIR=$(mktemp -d) mpirun --allow-run-as-root --oversubscribe"))

llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.add_tool_substitutions(["ds-opt", "ds-run", "ds-onebit-tests"],
                                   [config.ds_tools_dir])

# GPU tests (REQUIRES: cuda-device) run where ds-run sees a CUDA device;
# elsewhere lit reports them as unsupported, not passed.
import subprocess
try:
    _devices = subprocess.run([os.path.join(config.ds_tools_dir, "ds-run"),
                               "--list-devices"], capture_output=True,
                              text=True, timeout=60).stdout.split()
except Exception:
    _devices = []
if "cuda" in _devices:
    config.available_features.add("cuda-device")

# The Python engine (ds.initialize) needs the pybind11 extension, built
# when pybind11 is found (REQUIRES: ds-python-engine).
import glob
if glob.glob(os.path.join(config.ds_obj_root, "python", "ds", "_ds*.so")):
    config.available_features.add("ds-python-engine")
