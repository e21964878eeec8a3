"""`ds.initialize`: DeepSpeed's entry point, compiled ahead of time by ds.

ds compiles the whole training step (forward, backward, optimizer) of the
model into one plan. So the engine runs that step when it is called:
``loss = engine(**batch)`` runs forward, backward and, on a gradient
accumulation boundary, the optimizer update, and returns the loss (a
detached scalar tensor). ``engine.backward(loss)`` checks that the loss came
from the engine's last call and ``engine.step()`` counts the micro-step as
DeepSpeed does; together the three calls do what DeepSpeed's do. See
docs/python.md.
"""

import collections
import inspect
import json
import os
import shutil
import tempfile
import weakref

from . import _native
from .export import _all_named_parameters, export

_OPTIMIZERS = {"Adam": "adam", "AdamW": "adamw", "SGD": "sgd"}


def _first_config(args, config, config_params, deepspeed_config):
    given = [c for c in (config, config_params, deepspeed_config)
             if c is not None]
    if args is not None and getattr(args, "deepspeed_config", None):
        given.append(args.deepspeed_config)
    if len(given) > 1:
        raise ValueError(
            "ds.initialize: give the DeepSpeed config once (config, "
            "config_params, deepspeed_config or args.deepspeed_config)")
    return given[0] if given else None


def _load_config(config, folder):
    """(path for the C++ reader, dict for the Python side)."""
    if config is None:
        return "", {}
    if isinstance(config, dict):
        path = os.path.join(folder, "ds_config.json")
        with open(path, "w") as f:
            json.dump(config, f)
        return path, config
    path = os.fspath(config)
    if not os.path.exists(path):
        raise FileNotFoundError("ds.initialize: no DeepSpeed config '%s'" %
                                path)
    try:
        with open(path) as f:
            parsed = json.load(f)
    except ValueError:
        parsed = {}  # HJSON (comments, trailing commas): the C++ reader's
    return os.path.abspath(path), parsed


def _group_settings(group, kind):
    if kind in ("adam", "adamw"):
        if group.get("amsgrad"):
            raise ValueError("ds.initialize: amsgrad is not supported")
        b1, b2 = group["betas"]
        return {"lr": group["lr"], "beta1": b1, "beta2": b2,
                "eps": group["eps"], "weight-decay": group["weight_decay"]}
    return {"lr": group["lr"], "momentum": group["momentum"],
            "dampening": group["dampening"],
            "nesterov": "true" if group["nesterov"] else "false",
            "weight-decay": group["weight_decay"]}


def _optimizer_flags(optimizer):
    """ds-opt flags for a torch optimizer, and the parameters it trains."""
    kind = _OPTIMIZERS.get(type(optimizer).__name__)
    if kind is None:
        raise ValueError(
            "ds.initialize: the optimizer %s is not supported; pass "
            "torch.optim.Adam, AdamW or SGD, or name one in the config's "
            "optimizer section" % type(optimizer).__name__)
    groups = [g for g in optimizer.param_groups if g["params"]]
    settings = [_group_settings(g, kind) for g in groups]
    overrides = []  # (parameter ids, {"lr": .., "weight_decay": ..})
    for g, s in zip(groups[1:], settings[1:]):
        diff = sorted(k for k in s if s[k] != settings[0][k]
                      and k not in ("lr", "weight-decay"))
        if diff:
            raise ValueError(
                "ds.initialize: the optimizer's parameter groups differ in %s; "
                "a group may have its own lr and weight_decay only" %
                ", ".join(diff))
        if s != settings[0]:
            overrides.append(({id(p) for p in g["params"]},
                              {"lr": float(g["lr"]),
                               "weight_decay": float(g["weight_decay"])}))
    flags = [("optimizer", kind)]
    flags += [(k, repr(float(v)) if not isinstance(v, str) else v)
              for k, v in (settings[0] if settings else {}).items()]
    params = {id(p) for g in groups for p in g["params"]}
    return flags, params, overrides


def _parameter_ids(model_parameters):
    """The parameters to train, and the groups' own lr and weight_decay
    (over the config optimizer's)."""
    ids, overrides = set(), []
    for item in model_parameters:
        if isinstance(item, dict):
            other = set(item) - {"params", "lr", "weight_decay"}
            if other:
                raise ValueError(
                    "ds.initialize: a model_parameters group may set lr and "
                    "weight_decay only (it sets %s)" % ", ".join(sorted(other)))
            group = {id(p) for p in item["params"]}
            ids.update(group)
            own = {k: float(item[k]) for k in ("lr", "weight_decay")
                   if k in item}
            if own:
                overrides.append((group, own))
        else:
            ids.add(id(item))
    return ids, overrides


def _as_numpy(name, value):
    import numpy as np
    import torch
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        if value.dtype == torch.bfloat16:
            value = value.float()
        return value.numpy()
    if isinstance(value, np.ndarray):
        return value
    raise TypeError("engine: input '%s' is a %s; give tensors" %
                    (name, type(value).__name__))


class _PlanOptimizer:
    """What ds.initialize returns as the optimizer: the compiled one's
    settings (its update runs inside the engine's step)."""

    def __init__(self, engine):
        self._engine = engine

    @property
    def param_groups(self):
        return [{"lr": self._engine.get_lr()[0],
                 "params": [p for p in self._engine.module.parameters()
                            if p.requires_grad]}]

    def zero_grad(self, set_to_none=True):
        pass  # gradients live in the plan and are reset by each step

    def step(self, closure=None):
        raise RuntimeError("ds: the optimizer update runs inside the engine: "
                           "call engine.step()")


class _PlanScheduler:
    """What ds.initialize returns as the lr scheduler: the config's
    schedule, compiled into the plan and advanced by the engine."""

    def __init__(self, engine):
        self._engine = engine

    def get_lr(self):
        return self._engine.get_lr()

    get_last_lr = get_lr

    def step(self, *args, **kwargs):
        pass  # the plan's schedule follows the engine's global steps

    def state_dict(self):
        return {"global_steps": self._engine.global_steps}

    def load_state_dict(self, state):
        pass


# What the engine compiles with: ds-opt flags, the config (its path for the
# C++ reader, its dict, what the caller gave), the trained parameters' ids
# (None: requires_grad decides), the groups' own settings, the plan file to
# write (or None), the kernel threads (None: by the cores) and the torch
# lr_scheduler passed in (None: the config's schedule, compiled).
_Setup = collections.namedtuple(
    "_Setup", "flags config_path config config_origin trainable groups "
    "plan_path threads scheduler")


class DeepSpeedEngine:
    """A compiled training step with DeepSpeed's engine interface."""

    def __init__(self, model, setup, example_inputs=None):
        """`setup`: what the compile takes (initialize's _Setup)."""
        self._ds = _native.load()
        self._model = model
        self._setup = setup
        self._folder = tempfile.mkdtemp(prefix="ds-engine-")
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._folder,
                                         True)
        self._session = None
        self._pending_load = None
        self._names = None
        self._last_loss = None
        self._backward_done = True
        self._dirty = False
        self._eval_mode = False  # engine.eval(): calls evaluate, not train
        self.micro_steps = 0
        self.global_steps = 0
        self.global_samples = 0
        self.world_size = self._ds.world_size()
        self.global_rank = self._ds.rank()
        self.local_rank = int(os.environ.get(
            "OMPI_COMM_WORLD_LOCAL_RANK", os.environ.get("LOCAL_RANK", 0)))
        self.report = ""
        if example_inputs is not None:
            self._compile(dict(example_inputs))

    # -- compile -------------------------------------------------------
    def _export(self, batch, path):
        model = self._model
        # The trained set: requires_grad and (when given) in the optimizer.
        switched = []
        if self._setup.trainable is not None:
            for _, p in _all_named_parameters(model):
                if p.requires_grad and id(p) not in self._setup.trainable:
                    p.requires_grad_(False)
                    switched.append(p)
        try:
            proto = export(model, batch, path)
        finally:
            for p in switched:
                p.requires_grad_(True)
        if self._setup.groups:
            self._record_groups(proto, path)

    def _record_groups(self, proto, path):
        """The parameter groups' own settings as the export's
        `ds.param_groups` (by the name the graph kept), for the compiler."""
        import onnx
        present = {i.name for i in proto.graph.initializer}
        names = {}
        for name, p in _all_named_parameters(self._model):
            if name in present and p.requires_grad:
                names.setdefault(id(p), name)
        record = {}
        for ids, settings in self._setup.groups:
            for i in ids:
                if i in names:
                    record[names[i]] = settings
        entry = proto.metadata_props.add()
        entry.key, entry.value = "ds.param_groups", json.dumps(record,
                                                               sort_keys=True)
        onnx.save(proto, path)

    def _compile(self, batch):
        """Exports and compiles on rank 0; every rank gets the model and the
        plan from it (rank 0's weights, as DeepSpeed broadcasts them)."""
        ds = self._ds
        model_path = os.path.join(self._folder, "model.onnx")
        message = b""
        onnx_bytes = plan = b""
        if self.global_rank == 0:
            try:
                self._export(batch, model_path)
                ok, plan, _, messages, report = ds.compile(
                    model_path, self._setup.flags, self._setup.config_path,
                    self._setup.plan_path or "")
                self.report = report
                warnings = [m for m in messages.splitlines()
                            if m.startswith("warning:")]
                for w in warnings:
                    print("ds: " + w)
                if isinstance(self._setup.config_origin, dict):
                    messages = messages.replace(self._setup.config_path,
                                                "the config dict")
                if not ok:
                    message = ("ds.initialize: the compile failed:\n" +
                               messages.strip()).encode()
                with open(model_path, "rb") as f:
                    onnx_bytes = f.read()
                if ok and self._setup.plan_path:
                    plan = ds.read_plan(self._setup.plan_path)
            except Exception as e:  # every rank raises it, not only rank 0
                message = ("%s: %s" % (type(e).__name__, e)).encode()
        if self.world_size > 1:
            message = ds.broadcast_bytes(message, 0)
        if message:
            raise RuntimeError(message.decode())
        if self.world_size > 1:
            onnx_bytes = ds.broadcast_bytes(onnx_bytes, 0)
            plan = ds.broadcast_bytes(plan, 0)
            if self.global_rank != 0:
                with open(model_path, "wb") as f:
                    f.write(onnx_bytes)
        threads = self._setup.threads or max(
            1, (os.cpu_count() or 1) // max(1, self.world_size))
        self._session = ds.Session(
            plan, os.path.join(self._folder, "plan.bin"), threads=threads)
        self._names = [n for n, _, _ in self._session.input_specs()]
        if self._pending_load:
            self._session.load(self._pending_load)
            self._pending_load = None

    # -- DeepSpeed's loop ------------------------------------------------
    def _bind(self, args, kwargs):
        params = list(inspect.signature(self._model.forward).parameters)
        batch = dict(zip(params, args))
        for k, v in kwargs.items():
            if k in batch:
                raise TypeError("engine: got '%s' twice" % k)
            batch[k] = v
        return batch

    def _prepare(self, batch):
        if self._session is None:
            self._compile(batch)
        unknown = sorted(set(batch) - set(self._names))
        if unknown:
            raise ValueError("engine: %s are not inputs of the compiled step "
                             "(it takes %s)" % (unknown, self._names))
        return {k: _as_numpy(k, batch[k]) for k in self._names if k in batch}

    def _evaluate(self, batch):
        """The loss of one batch by the plan's eval section."""
        import torch
        arrays = self._prepare(batch)
        return torch.tensor(self._session.eval(arrays), dtype=torch.float32)

    def forward(self, *args, **kwargs):
        """Runs the compiled step on one micro-batch (forward, backward,
        and the update on an accumulation boundary); returns the loss.
        After engine.eval(), or under torch.no_grad(), it evaluates
        instead: the loss by the plan's eval section, nothing trained."""
        import torch
        batch = self._bind(args, kwargs)
        if self._eval_mode or not torch.is_grad_enabled():
            return self._evaluate(batch)
        arrays = self._prepare(batch)
        if not self._backward_done:
            raise RuntimeError(
                "engine: the previous micro-batch's loss got no "
                "engine.backward(loss) and engine.step(); ds runs the whole "
                "step at the call, so the loop must call both")
        if self._setup.scheduler is not None:
            self._session.set_lr(_scheduler_lr(self._setup.scheduler))
        value = self._session.run(arrays)
        loss = torch.tensor(value, dtype=torch.float32)
        self._last_loss = loss
        self._backward_done = False
        self._dirty = True
        return loss

    __call__ = forward

    def backward(self, loss, allreduce_gradients=True, release_loss=False,
                 retain_graph=False, scale_wrt_gas=True):
        """Checks that `loss` is the engine's last result (its gradients
        were computed with it)."""
        if self._last_loss is None or loss is not self._last_loss:
            raise RuntimeError(
                "engine.backward: the loss did not come from this engine's "
                "last call; ds computes the loss and its gradients together "
                "in engine(batch) and cannot differentiate another tensor")
        self._backward_done = "backward"
        return loss

    def is_gradient_accumulation_boundary(self):
        return (self.micro_steps + 1) % \
            self.gradient_accumulation_steps() == 0

    def step(self, lr_kwargs=None):
        """Ends the micro-step; on an accumulation boundary the optimizer
        step (already applied by the compiled step) is counted."""
        if self._backward_done != "backward":
            raise RuntimeError("engine.step: call engine(batch) and "
                               "engine.backward(loss) first")
        boundary = self.is_gradient_accumulation_boundary()
        self.micro_steps += 1
        self.global_samples += self.train_micro_batch_size_per_gpu() * \
            self.world_size
        if boundary:
            self.global_steps += 1
            # DeepSpeed steps the scheduler after each update it applied
            # (not after an fp16 overflow's skipped one).
            if self._setup.scheduler is not None and \
                    not self._session.last_step_skipped:
                self._setup.scheduler.step(**(lr_kwargs or {}))
        self._backward_done = True
        if self._session.global_steps != self.global_steps:
            raise RuntimeError("engine: internal step count mismatch (%d, "
                               "plan %d)" % (self.global_steps,
                                             self._session.global_steps))
        if boundary and self.world_size > 1:
            self._sync_module()  # collective: every rank is here

    def train_batch(self, data_iter=None):
        """One optimizer step over gradient_accumulation_steps micro-batches
        from `data_iter` (dicts or tuples); returns their mean loss."""
        if data_iter is None:
            raise ValueError("engine.train_batch: give data_iter")
        total = 0.0
        gas = self.gradient_accumulation_steps()
        for _ in range(gas):
            batch = next(data_iter)
            loss = self(**batch) if isinstance(batch, dict) else self(*batch)
            self.backward(loss)
            self.step()
            total += float(loss)
        import torch
        return torch.tensor(total / gas)

    def eval_batch(self, data_iter, return_logits=False, compute_loss=True,
                   reduce_output="avg", bcast_loss=True,
                   num_micro_batches=None):
        """DeepSpeed's eval_batch: the mean loss of num_micro_batches
        (default gradient_accumulation_steps) batches from `data_iter`,
        computed by the plan's eval section (forward only: no gradients,
        no update, dropout off, as torch's eval() and no_grad()); under
        several ranks each gives its own batches and the loss is the mean
        over the ranks. Nothing is trained."""
        import torch
        if return_logits:
            raise ValueError("engine.eval_batch: return_logits is not "
                             "supported (the model returns the loss)")
        if not compute_loss or reduce_output not in ("avg", None):
            raise ValueError("engine.eval_batch: ds computes the loss and "
                             "averages it (compute_loss=True, "
                             "reduce_output='avg')")
        count = num_micro_batches or self.gradient_accumulation_steps()
        losses = []
        for _ in range(count):
            batch = next(data_iter)
            if not isinstance(batch, dict):
                batch = self._bind(tuple(batch), {})
            losses.append(float(self._evaluate(batch)))
        if reduce_output is None:
            return [torch.tensor(x) for x in losses]
        return torch.tensor(sum(losses) / len(losses), dtype=torch.float32)

    # -- the module's values ---------------------------------------------
    def _sync_module(self):
        import torch
        if self._session is None or not self._dirty:
            return
        names = set(self._session.parameter_names())
        with torch.no_grad():
            for name, t in list(_all_named_parameters(self._model)) + \
                    list(self._model.named_buffers()):
                if name in names:
                    value = torch.from_numpy(self._session.parameter(name))
                    t.copy_(value.reshape(t.shape).to(t.dtype))
        self._dirty = False

    @property
    def module(self):
        """The user's torch module with the trained values (copied from
        the plan when read after a step; on several ranks after each
        optimizer step)."""
        self._sync_module()
        return self._model

    def parameters(self):
        return self.module.parameters()

    def named_parameters(self):
        return self.module.named_parameters()

    def train(self, mode=True):
        """mode=False is eval(): engine(batch) then evaluates."""
        self._eval_mode = not mode
        return self

    def eval(self):
        """engine(batch) evaluates (the plan's eval section) until
        engine.train()."""
        self._eval_mode = True
        return self

    # -- figures ---------------------------------------------------------
    def _info(self):
        if self._session is None:
            raise RuntimeError("engine: not compiled yet (give "
                               "example_inputs to ds.initialize, or call "
                               "engine(batch) first)")
        return self._session.info

    def get_lr(self):
        if self._setup.scheduler is not None:
            return list(self._setup.scheduler.get_last_lr())
        return [self._session.lr()] if self._session else \
            [float(dict(self._setup.flags).get("lr", "nan"))]

    def zero_optimization_stage(self):
        if self._session:
            return self._info()["zero_stage"]
        zero = self._setup.config.get("zero_optimization", {})
        return int(zero.get("stage", 0))

    def gradient_accumulation_steps(self):
        if self._session:
            return max(1, int(self._info()["accum_steps"]))
        return int(self._setup.config.get("gradient_accumulation_steps", 1))

    def train_micro_batch_size_per_gpu(self):
        if self._session and self._session.input_specs():
            shape = self._session.input_specs()[0][2]
            if shape:
                return int(shape[0])
        c = self._setup.config
        if "train_micro_batch_size_per_gpu" in c:
            return int(c["train_micro_batch_size_per_gpu"])
        if "train_batch_size" in c:
            return int(c["train_batch_size"]) // (
                self.gradient_accumulation_steps() * self.world_size)
        return 1

    def train_batch_size(self):
        return self.train_micro_batch_size_per_gpu() * \
            self.gradient_accumulation_steps() * self.world_size

    # -- 16-bit weights ----------------------------------------------------
    def zero_gather_16bit_weights_on_model_save(self):
        """The config's stage3_gather_16bit_weights_on_model_save (or its
        old fp16 spelling) is true ("auto" is false, accelerate's
        default)."""
        zero = self._setup.config.get("zero_optimization", {})
        return zero.get("stage3_gather_16bit_weights_on_model_save",
                        zero.get("stage3_gather_fp16_weights_on_model_save",
                                 False)) is True

    def _16bit_state_dict(self):
        """The module's state_dict (names of the user's module, whole
        tensors: ZeRO-3 shards gathered) with its float tensors in the
        training's 16-bit type, rounded to nearest from the f32 masters:
        fp16 or bf16; an fp32 run keeps f32, as DeepSpeed's module is then
        f32. Collective on several ranks."""
        import torch
        precision = self._info()["options"].get("precision", "fp32")
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
        self._sync_module()
        out = collections.OrderedDict()
        for name, t in self._model.state_dict().items():
            t = t.detach().clone()
            if dtype is not None and t.is_floating_point():
                t = t.to(dtype)
            out[name] = t
        return out

    def save_16bit_model(self, save_dir, save_filename="pytorch_model.bin",
                         exclude_frozen_parameters=False):
        """DeepSpeed's save_16bit_model: torch.save of the consolidated
        16-bit state_dict to save_dir/save_filename by rank 0 (every rank
        calls it). Under ZeRO-3 only with the config's
        stage3_gather_16bit_weights_on_model_save true; otherwise nothing
        is written and it returns False (as DeepSpeed)."""
        import torch
        self._info()
        if self.zero_optimization_stage() == 3 and \
                not self.zero_gather_16bit_weights_on_model_save():
            print("ds: save_16bit_model wrote nothing: ZeRO-3 partitions the "
                  "weights and the config's zero_optimization."
                  "stage3_gather_16bit_weights_on_model_save is not true "
                  "(save_checkpoint keeps them)")
            return False
        state = self._16bit_state_dict()
        if exclude_frozen_parameters:
            frozen = {n for n, p in self._model.named_parameters()
                      if not p.requires_grad}
            state = collections.OrderedDict(
                (k, v) for k, v in state.items() if k not in frozen)
        if self.global_rank == 0:
            os.makedirs(save_dir, exist_ok=True)
            torch.save(state, os.path.join(save_dir, save_filename))
        if self.world_size > 1:
            self._ds.barrier()
        return True

    # -- checkpoints -----------------------------------------------------
    def save_checkpoint(self, save_dir, tag=None, client_state=None,
                        save_latest=True):
        """DeepSpeed's layout: save_dir/TAG/ (ds's sharded checkpoint:
        step-N/ and latest inside) and save_dir/latest naming TAG."""
        import torch
        self._info()
        tag = str(tag) if tag is not None else \
            "global_step%d" % self.global_steps
        folder = os.path.join(save_dir, tag)
        self._session.save(folder)
        if self.zero_gather_16bit_weights_on_model_save():
            # The consolidated 16-bit weights beside the sharded state.
            self.save_16bit_model(folder)
        if self.global_rank == 0:
            with open(os.path.join(folder, "engine.json"), "w") as f:
                json.dump({"micro_steps": self.micro_steps,
                           "global_steps": self.global_steps,
                           "global_samples": self.global_samples}, f)
            if client_state:
                torch.save(client_state, os.path.join(folder,
                                                       "client_state.pt"))
            if self._setup.scheduler is not None:
                torch.save(self._setup.scheduler.state_dict(),
                           os.path.join(folder, "lr_scheduler.pt"))
            if save_latest:
                with open(os.path.join(save_dir, "latest"), "w") as f:
                    f.write(tag)
        if self.world_size > 1:
            self._ds.barrier()
        return True

    def load_checkpoint(self, load_dir, tag=None, **kwargs):
        """Returns (path, client_state), or (None, None) when `load_dir` has
        no `latest` and no tag is given (as DeepSpeed)."""
        import torch
        if tag is None:
            # Rank 0's `latest` for every rank (a rank that saw none would
            # leave the others waiting in the load's collective).
            latest = os.path.join(load_dir, "latest")
            tag = b""
            if self.global_rank == 0 and os.path.exists(latest):
                with open(latest) as f:
                    tag = f.read().strip().encode()
            if self.world_size > 1:
                tag = self._ds.broadcast_bytes(tag, 0)
            if not tag:
                print("ds: no checkpoint in '%s' (no 'latest' file)" %
                      load_dir)
                return None, None
            tag = tag.decode()
        folder = os.path.join(load_dir, str(tag))
        if self.world_size == 1 and not os.path.isdir(folder):
            raise FileNotFoundError("engine.load_checkpoint: no checkpoint "
                                    "'%s'" % folder)
        if self._session is None:
            self._pending_load = folder  # loaded by the first engine(batch)
        else:
            self._session.load(folder)
        with open(os.path.join(folder, "engine.json")) as f:
            counts = json.load(f)
        self.micro_steps = counts["micro_steps"]
        self.global_steps = counts["global_steps"]
        self.global_samples = counts["global_samples"]
        self._dirty = True
        if self.world_size > 1:
            self._sync_module()
        sched = os.path.join(folder, "lr_scheduler.pt")
        if self._setup.scheduler is not None and os.path.exists(sched):
            self._setup.scheduler.load_state_dict(torch.load(sched))
            for g, lr in zip(self._setup.scheduler.optimizer.param_groups,
                             self._setup.scheduler.get_last_lr()):
                g["lr"] = lr
        client = os.path.join(folder, "client_state.pt")
        state = torch.load(client) if os.path.exists(client) else {}
        return folder, state


def _scheduler_lr(scheduler):
    """The learning rate a torch lr_scheduler gives the next update: one
    value for every parameter group (ds feeds one base rate)."""
    lrs = set(float(x) for x in scheduler.get_last_lr())
    if len(lrs) != 1:
        raise RuntimeError(
            "engine: the lr_scheduler gives the parameter groups different "
            "learning rates (%s); ds feeds one rate to every group" %
            ", ".join("%g" % x for x in sorted(lrs)))
    return lrs.pop()


def _client_scheduler(lr_scheduler, optimizer, config):
    """A torch lr_scheduler passed to initialize (or DeepSpeed's callable
    that builds one from the optimizer), checked: built on the torch
    optimizer passed in, one learning rate for all its groups, and no
    other hyper-parameter cycled."""
    if "scheduler" in config:
        raise ValueError("ds.initialize: the config has a scheduler section "
                         "and an lr_scheduler was passed too; give one")
    if optimizer is None:
        raise ValueError("ds.initialize: a torch lr_scheduler needs the "
                         "torch optimizer it steps passed as optimizer= "
                         "(or give the config's scheduler section)")
    if not hasattr(lr_scheduler, "get_last_lr") and callable(lr_scheduler):
        lr_scheduler = lr_scheduler(optimizer)
    if not hasattr(lr_scheduler, "get_last_lr") or \
            getattr(lr_scheduler, "optimizer", None) is not optimizer:
        raise ValueError("ds.initialize: lr_scheduler must be a torch "
                         "lr_scheduler built on the optimizer passed in")
    if getattr(lr_scheduler, "cycle_momentum", False):
        raise ValueError("ds.initialize: the lr_scheduler cycles momentum "
                         "(OneCycleLR/CyclicLR: give cycle_momentum=False); "
                         "ds follows the learning rate only")
    _scheduler_lr(lr_scheduler)
    return lr_scheduler


def add_config_arguments(parser):
    """DeepSpeed's command-line arguments (--deepspeed, --deepspeed_config)
    on an argparse parser."""
    group = parser.add_argument_group("DeepSpeed", "DeepSpeed configurations")
    group.add_argument("--deepspeed", default=False, action="store_true",
                       help="enable DeepSpeed (ds: always on)")
    group.add_argument("--deepspeed_config", default=None, type=str,
                       help="DeepSpeed json configuration file")
    return parser


def initialize(args=None, model=None, optimizer=None, model_parameters=None,
               training_data=None, lr_scheduler=None, distributed_port=None,
               mpu=None, dist_init_required=None, collate_fn=None,
               config=None, mesh_param=None, config_params=None,
               deepspeed_config=None, example_inputs=None, plan_path=None,
               threads=None):
    """DeepSpeed's `deepspeed.initialize`, compiled by ds.

    Returns ``(engine, optimizer, dataloader, lr_scheduler)``. `model` is a
    torch module whose forward returns the scalar loss; `example_inputs` (a
    dict, optional) compiles at once, else the first `engine(batch)` does.
    The optimizer comes from the config's optimizer section or from a torch
    Adam, AdamW or SGD passed as `optimizer` (not both). `plan_path` also
    writes the plan to a file (for ds-run); `threads` sets the kernels'
    threads (default: the cores over the local ranks)."""
    if model is None:
        raise ValueError("ds.initialize: give model")
    if mpu is not None or mesh_param is not None:
        raise ValueError("ds.initialize: mpu and mesh_param are not "
                         "supported (ds plans the parallel layout)")
    native = _native.load()
    chosen = _first_config(args, config, config_params, deepspeed_config)
    folder = tempfile.mkdtemp(prefix="ds-config-")
    weakref.finalize(initialize, shutil.rmtree, folder, True)
    config_path, config_dict = _load_config(chosen, folder)
    flags = [("world-size", str(native.world_size()))]
    trainable, groups = None, []
    if optimizer is not None:
        if "optimizer" in config_dict:
            raise ValueError(
                "ds.initialize: the config has an optimizer section and an "
                "optimizer was passed too; give one")
        opt_flags, trainable, groups = _optimizer_flags(optimizer)
        flags += opt_flags
    elif model_parameters is not None:
        trainable, groups = _parameter_ids(model_parameters)
    scheduler = None
    if lr_scheduler is not None:
        scheduler = _client_scheduler(lr_scheduler, optimizer, config_dict)
    setup = _Setup(flags=flags, config_path=config_path, config=config_dict,
                   config_origin=chosen, trainable=trainable, groups=groups,
                   plan_path=plan_path, threads=threads, scheduler=scheduler)
    engine = DeepSpeedEngine(model, setup, example_inputs)
    loader = None
    if training_data is not None:
        import torch.utils.data as tud
        sampler = None
        if engine.world_size > 1:
            sampler = tud.distributed.DistributedSampler(
                training_data, num_replicas=engine.world_size,
                rank=engine.global_rank)
        # drop_last: the compiled step has a fixed batch.
        loader = tud.DataLoader(
            training_data, batch_size=engine.train_micro_batch_size_per_gpu(),
            sampler=sampler, collate_fn=collate_fn, drop_last=True)
    return engine, _PlanOptimizer(engine), loader, \
        scheduler if scheduler is not None else _PlanScheduler(engine)
