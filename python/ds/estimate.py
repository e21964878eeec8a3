"""`ds.estimate`: the `--plan=auto` search's ranked table as Python objects.

It exports the model with `ds.export`, runs the planner in-process (no
subprocess, no plan file) and returns every candidate the search looked
at: the fitting ones ranked by predicted step time, the others with why
they lost (docs/python.md, docs/planner.md)."""

import dataclasses
import json
import os
import shutil
import sys
import tempfile

from . import _native
from .engine import _load_config, _optimizer_flags
from .export import export


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One layout the search considered (docs/planner.md, plan.candidates[])."""
    layout: str
    family: str
    dp: int
    tp: int
    pp: int
    sequence_parallel: bool
    zero: int
    micro_batch: int
    grad_accum: int
    schedule: str
    recompute: str
    offload_optimizer: bool
    bucket: int
    state: str           # "fits", "too big", "pruned", "not compiled", ...
    chosen: bool
    memory_bound: int    # analytic lower bound, bytes
    peak: int            # exact planned per-device peak, bytes (-1: not compiled)
    step_time_s: float   # predicted (fitting candidates only)
    tokens_per_s: float
    mfu: float
    bottleneck: str
    why: str
    offload_param: bool = False  # ZeRO-3: the parameters on the host too

    @property
    def fits(self):
        return self.state == "fits"


@dataclasses.dataclass
class Estimate:
    """The search's outcome: `ranked` (fitting, fastest first), `chosen`
    (ranked[0]), `candidates` (all, as the report lists them), the chosen
    plan's `predicted` step and the whole JSON `report`."""
    chosen: Candidate
    ranked: list
    candidates: list
    predicted: dict
    report: dict


def _candidate(entry):
    names = {f.name for f in dataclasses.fields(Candidate)}
    return Candidate(**{k: v for k, v in entry.items() if k in names})


def estimate(model, example_inputs, config=None, cluster=None,
             global_batch=None, optimizer=None, explain=False):
    """Plans `model` (a torch module whose forward(**example_inputs)
    returns the scalar loss) on `cluster` (a preset such as
    "h100-80g:2x8" or a cluster JSON file) for `global_batch` samples per
    step (default: the config's train_batch_size). The optimizer comes
    from the config's section or a torch Adam, AdamW or SGD `optimizer`.
    `explain` lists every enumerated candidate, not only those compiled.
    Raises ValueError for bad arguments and RuntimeError with the
    planner's message when nothing fits."""
    if cluster is None:
        raise ValueError("ds.estimate: give cluster (a preset such as "
                         "'h100-80g:2x8' or a cluster JSON file)")
    native = _native.load()
    folder = tempfile.mkdtemp(prefix="ds-estimate-")
    try:
        config_path, config_dict = _load_config(config, folder)
        if global_batch is None:
            global_batch = config_dict.get("train_batch_size")
        if not isinstance(global_batch, int) or global_batch <= 0:
            raise ValueError(
                "ds.estimate: give global_batch (or train_batch_size in the "
                "config), a positive number of samples per step")
        flags = [("plan", "auto"), ("cluster", os.fspath(cluster)),
                 ("global-batch", str(global_batch)), ("report", "json")]
        if explain:
            flags.append(("explain", "true"))
        if optimizer is not None:
            if "optimizer" in config_dict:
                raise ValueError("ds.estimate: the config has an optimizer "
                                 "section and an optimizer was passed too")
            flags += _optimizer_flags(optimizer)[0]
        model_path = os.path.join(folder, "model.onnx")
        export(model, dict(example_inputs), model_path)
        ok, messages, report = native.estimate(model_path, flags, config_path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    for line in messages.splitlines():
        if line.startswith("warning:"):
            print(line, file=sys.stderr)
    if not ok:
        raise RuntimeError("ds.estimate: " + messages.strip())
    parsed = json.loads(report)
    candidates = [_candidate(c) for c in parsed["plan"]["candidates"]]
    ranked = sorted((c for c in candidates if c.fits),
                    key=lambda c: (c.step_time_s, c.peak))
    chosen = next(c for c in candidates if c.chosen)
    return Estimate(chosen=chosen, ranked=ranked, candidates=candidates,
                    predicted=parsed.get("predicted", {}), report=parsed)
