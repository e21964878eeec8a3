//===- DsCompression.td - compressed-communication ops -----*- tablegen -*-===//
//
// Optimizers that exchange compressed tensors between the data-parallel
// ranks (issue 26, docs/compression.md). Kept apart from DsOps.td so that
// the family's ops are generated on their own (DsCompression.h).
//
//===----------------------------------------------------------------------===//

#ifndef DS_DIALECT_DS_IR_DSCOMPRESSION_TD
#define DS_DIALECT_DS_IR_DSCOMPRESSION_TD

include "ds/Dialect/Ds/IR/DsBase.td"
include "ds/Dialect/Ds/IR/DsInterfaces.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Ds_OneBitAdamOp : Op<Ds_Dialect, "onebit_adam",
    [Ds_OptimizerStep, DeclareOpInterfaceMethods<Ds_CostOpInterface>]> {
  let summary = "one step of DeepSpeed's 1-bit Adam with its own exchange";
  let description = [{
    One parameter's step of DeepSpeed's `OneBitAdam`, with the
    data-parallel exchange inside (so `grad` is this rank's own gradient).
    With `t` = `step`:

    - `t <= freeze_step` (warm-up): `g` = the mean of `grad` over the
      ranks (an all-reduce), `m = b1 m + (1-b1) g`,
      `v = b2 v + (1-b2) g^2`.
    - `t > freeze_step`: `v` is frozen; `m = b1 m + (1-b1) grad` with the
      local gradient, then `m` is replaced by its compressed all-reduce:
      `x = pad(m) + worker_error`, the worker sends sign(x) (0 counts as
      +1) as bits and `||x|| / sqrt(len x)`, `worker_error = x - scale
      sign(x)`; rank j averages chunk j of every rank's decompressed `x`,
      adds `server_error`, compresses it the same way (`server_error`
      keeps the rest) and every rank gathers the chunks.

    In both phases `p -= lr (m / (sqrt(v) + eps) + weight_decay p)`: no
    bias correction. `worker_error` holds the padded length (a multiple of
    N lcm(N, 8) for N ranks), `server_error` its N-th part. The op
    communicates, so it is not pure.
  }];
  let arguments = (ins Ds_FloatTensor:$param, Ds_FloatTensor:$grad,
                       Ds_FloatTensor:$exp_avg, Ds_FloatTensor:$exp_avg_sq,
                       Ds_FloatTensor:$worker_error,
                       Ds_FloatTensor:$server_error,
                       StaticShapeTensorOf<[I64]>:$step, F64Attr:$lr,
                       F64Attr:$beta1, F64Attr:$beta2, F64Attr:$eps,
                       F64Attr:$weight_decay,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$freeze_step,
                       DefaultValuedAttr<StrAttr, "\"constant\"">:$schedule,
                       DefaultValuedAttr<I64Attr, "0">:$warmup_steps,
                       DefaultValuedAttr<I64Attr, "0">:$total_steps,
                       DefaultValuedAttr<F64Attr, "0.0">:$min_lr);
  let results = (outs Ds_FloatTensor:$new_param, Ds_FloatTensor:$new_exp_avg,
                      Ds_FloatTensor:$new_exp_avg_sq,
                      Ds_FloatTensor:$new_worker_error,
                      Ds_FloatTensor:$new_server_error);
  let assemblyFormat = [{
    $param `,` $grad `,` $exp_avg `,` $exp_avg_sq `,` $worker_error `,`
      $server_error `,` $step attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let cppNamespace = "::mlir::ds";
}

def Ds_CompressedReduceScatterOp : Op<Ds_Dialect, "compressed_reduce_scatter",
    [DeclareOpInterfaceMethods<Ds_CostOpInterface>]> {
  let summary = "a reduce-scatter (mean) that compresses to 1 bit after a "
                "freeze step, with error feedback per partition";
  let description = [{
    The data-parallel exchange of 1-bit Adam under ZeRO stages 1-3
    (docs/compression.md): it takes the place of the `ds.reduce_scatter`
    of a gradient bucket. `input` holds N chunks of `c` elements (chunk j
    is rank j's partition, N ranks), `worker_error` has the input's
    length; the result is this rank's chunk of the mean over the ranks.

    - `step <= freeze_step`: a plain reduce-scatter (mean); the worker
      error passes through.
    - `step > freeze_step`: each rank compresses chunk j of
      `x = input + worker_error` to its signs (0 counts as +1) and the
      chunk's scale `||x_j|| / sqrt(c)`, keeps `x_j - scale sign(x_j)` as
      its worker error for that partition, and sends the packed signs and
      the scale to rank j (all-to-all); rank j's result is
      `sum_i scale_i sign_i / N`.

    With `momentum` (1-bit Adam, the input's length) and `beta1` the op
    exchanges this rank's momentum instead of its gradient, as DeepSpeed's
    1-bit Adam does: every step `momentum = beta1 momentum + (1 - beta1)
    input` (this rank's own gradients); until the freeze the result is
    still the gradient's mean, after it the compressed mean of
    `momentum + worker_error` (the momentum itself is not replaced).

    No all-gather follows: each rank updates its partition and ZeRO's
    all-gather of the parameters runs as before. The op communicates, so
    it is not pure; 0/1 Adam and 1-bit LAMB can use it the same way.
  }];
  let arguments = (ins Ds_FloatTensor:$input, Ds_FloatTensor:$worker_error,
                       StaticShapeTensorOf<[I64]>:$step,
                       Optional<Ds_FloatTensor>:$momentum,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$freeze_step,
                       OptionalAttr<F64Attr>:$beta1);
  let results = (outs Ds_FloatTensor:$result,
                      Ds_FloatTensor:$new_worker_error,
                      Optional<Ds_FloatTensor>:$new_momentum);
  let assemblyFormat = [{
    $input `,` $worker_error `,` $step (`momentum` $momentum^)? attr-dict
      `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let cppNamespace = "::mlir::ds";
}

def Ds_OneBitAdamLocalOp : Op<Ds_Dialect, "onebit_adam_local",
    [Pure, Ds_OptimizerStep]> {
  let summary = "1-bit Adam's update of an already exchanged gradient";
  let description = [{
    The update of 1-bit Adam under ZeRO stages 1-3: `grad` is this rank's
    partition of the gradient's mean, made by `ds.compressed_reduce_scatter`
    (uncompressed until `freeze_step`, compressed after it). With `t` =
    `step`: `m = b1 m + (1-b1) g`; `v = b2 v + (1-b2) g^2` while
    `t <= freeze_step`, frozen afterwards; `p -= lr (m / (sqrt(v) + eps) +
    weight_decay p)` (no bias correction, as `ds.onebit_adam`). With
    `momentum_exchange`, after the freeze `grad` is the exchanged momentum
    (the reduce-scatter's `momentum` form) and `m = grad`.
  }];
  let arguments = (ins Ds_FloatTensor:$param, Ds_FloatTensor:$grad,
                       Ds_FloatTensor:$exp_avg, Ds_FloatTensor:$exp_avg_sq,
                       StaticShapeTensorOf<[I64]>:$step, F64Attr:$lr,
                       F64Attr:$beta1, F64Attr:$beta2, F64Attr:$eps,
                       F64Attr:$weight_decay,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$freeze_step,
                       DefaultValuedAttr<StrAttr, "\"constant\"">:$schedule,
                       DefaultValuedAttr<I64Attr, "0">:$warmup_steps,
                       DefaultValuedAttr<I64Attr, "0">:$total_steps,
                       DefaultValuedAttr<F64Attr, "0.0">:$min_lr,
                       DefaultValuedAttr<BoolAttr, "false">:$momentum_exchange);
  let results = (outs Ds_FloatTensor:$new_param, Ds_FloatTensor:$new_exp_avg,
                      Ds_FloatTensor:$new_exp_avg_sq);
  let assemblyFormat = [{
    $param `,` $grad `,` $exp_avg `,` $exp_avg_sq `,` $step attr-dict `:`
      functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let cppNamespace = "::mlir::ds";
}

def Ds_CompressedAllGatherOp : Op<Ds_Dialect, "compressed_all_gather",
    [DeclareOpInterfaceMethods<Ds_CostOpInterface>]> {
  let summary = "an all-gather of updated partitions that sends int8 "
                "update deltas after a freeze step, with error feedback";
  let description = [{
    1-bit Adam's parameter exchange under ZeRO stages 1-2
    (docs/compression.md), in place of ZeRO's all-gather of one updated
    parameter. `base` is the whole parameter before the update, flattened
    and padded to N chunks of `c` elements (every rank holds the same);
    `input` is this rank's updated chunk, `error` its gather error (`c`
    elements). The result is the whole padded parameter after the update.

    - `step <= freeze_step`: a plain all-gather of `input`; the error
      passes through.
    - `step > freeze_step`: `x = input - base[chunk r] + error` (0 for the
      padding, elements at or past `valid`) is quantized in blocks of 256
      elements: scale `s = max |x| / 127`, `q = round(x / s)` in int8;
      `new_error = x - q s` (0 for the padding); the int8 values and block
      scales are all-gathered and chunk j of the result is
      `base[chunk j] + q_j s_j` on every rank, its owner included, so the
      replicas stay identical.

    The op communicates, so it is not pure.
  }];
  let arguments = (ins Ds_FloatTensor:$input, Ds_FloatTensor:$base,
                       Ds_FloatTensor:$error,
                       StaticShapeTensorOf<[I64]>:$step,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$freeze_step,
                       ConfinedAttr<I64Attr, [IntPositive]>:$valid);
  let results = (outs Ds_FloatTensor:$result, Ds_FloatTensor:$new_error);
  let assemblyFormat = [{
    $input `,` $base `,` $error `,` $step attr-dict `:`
      functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let cppNamespace = "::mlir::ds";
}

def Ds_OneBitQuantizedAllGatherOp : Op<Ds_Dialect, "onebit_quantized_all_gather",
    [DeclareOpInterfaceMethods<Ds_CostOpInterface>]> {
  let summary = "an all-gather of parameter shards that sends block-wise "
                "int8 values after a freeze step";
  let description = [{
    1-bit Adam's parameter gathers under ZeRO stage 3 (docs/compression.md),
    in place of ZeRO's `ds.all_gather` of a bucket of shards: `input` is
    this rank's shards of the bucket's parameters one after another
    (`pieces`: their sizes; `valid`: each parameter's whole element count,
    so the elements of piece k at or past `valid[k]` in the whole are
    padding), the result every rank's input in rank order.

    - `step <= freeze_step`: a plain all-gather.
    - `step > freeze_step`: each piece is cut into blocks of 256 elements;
      a block with scale `s = max |x| / 127` is sent as `round(x / s)` in
      int8 (padding as 0) and `s` in f32; every rank, this one included,
      receives `q s`.

    Nothing accumulates (each gather quantizes the exact shards afresh), so
    there is no error feedback. The op communicates, so it is not pure.
  }];
  let arguments = (ins Ds_FloatTensor:$input,
                       StaticShapeTensorOf<[I64]>:$step,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$freeze_step,
                       DenseI64ArrayAttr:$pieces, DenseI64ArrayAttr:$valid);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $step attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let cppNamespace = "::mlir::ds";
}

// 0/1 Adam (docs/compression.md; lib/Dialect/Ds/IR/DsZeroOne.cpp).
def Ds_ZeroOneAdamOp : Op<Ds_Dialect, "zero_one_adam",
    [Ds_OptimizerStep, DeclareOpInterfaceMethods<Ds_CostOpInterface>]> {
  let summary = "one step of DeepSpeed's 0/1 Adam with its own exchange";
  let description = [{
    One parameter's step of DeepSpeed's `ZeroOneAdam` (Lu et al. 2022),
    with the data-parallel exchange inside (`grad` is this rank's own
    gradient). Which exchange step `t` runs follows DeepSpeed's policy
    (include/ds/Support/ZeroOne.h; its counter is `t + 1`):

    - variance steps (before `var_freeze_step`, where `var_interval`
      divides `t + 1`): the gradient's mean over the ranks (an
      all-reduce), `m = b1 m + (1-b1) g`, `v = b2 v + (1-b2) g^2`;
    - the other steps before the freeze: the gradient's 1-bit compressed
      all-reduce (worker and server error feedback, as `ds.onebit_adam`),
      `m = b1 m + (1-b1) g`, `v` kept;
    - after the freeze (`t > var_freeze_step`, `t >= 2`): local steps with
      the local gradient and the frozen `v`; `momentum_acc` accumulates
      `-lr update` and `lrs` the learning rates; where
      `local_step_interval` divides `t + 1` the ranks synchronise: the
      parameter goes back by `momentum_acc`, which is scaled by
      `sqrt(v) + eps`, all-reduced 1-bit compressed, becomes
      `m = -momentum_acc / lrs` and is applied as
      `p += momentum_acc / (sqrt(v) + eps)`. The error buffers are zeroed
      at the first frozen step.

    In every step `p -= lr (m / (sqrt(v) + eps) + weight_decay p)` (no
    bias correction). `counters` holds DeepSpeed's `var_interval`,
    `var_counter`, `local_step_interval`, `local_step_counter` and the
    double `lrs` (its bits), checked against the policy at every step.
  }];
  let arguments = (ins Ds_FloatTensor:$param, Ds_FloatTensor:$grad,
                       Ds_FloatTensor:$exp_avg, Ds_FloatTensor:$exp_avg_sq,
                       Ds_FloatTensor:$worker_error,
                       Ds_FloatTensor:$server_error,
                       Ds_FloatTensor:$momentum_acc,
                       StaticShapeTensorOf<[I64]>:$counters,
                       StaticShapeTensorOf<[I64]>:$step, F64Attr:$lr,
                       F64Attr:$beta1, F64Attr:$beta2, F64Attr:$eps,
                       F64Attr:$weight_decay,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$var_freeze_step,
                       ConfinedAttr<I64Attr, [IntPositive]>:$var_update_scaler,
                       ConfinedAttr<I64Attr, [IntPositive]>:$local_step_scaler,
                       ConfinedAttr<I64Attr, [IntPositive]>:$local_step_clipper,
                       DefaultValuedAttr<StrAttr, "\"constant\"">:$schedule,
                       DefaultValuedAttr<I64Attr, "0">:$warmup_steps,
                       DefaultValuedAttr<I64Attr, "0">:$total_steps,
                       DefaultValuedAttr<F64Attr, "0.0">:$min_lr);
  let results = (outs Ds_FloatTensor:$new_param, Ds_FloatTensor:$new_exp_avg,
                      Ds_FloatTensor:$new_exp_avg_sq,
                      Ds_FloatTensor:$new_worker_error,
                      Ds_FloatTensor:$new_server_error,
                      Ds_FloatTensor:$new_momentum_acc,
                      StaticShapeTensorOf<[I64]>:$new_counters);
  let assemblyFormat = [{
    $param `,` $grad `,` $exp_avg `,` $exp_avg_sq `,` $worker_error `,`
      $server_error `,` $momentum_acc `,` $counters `,` $step attr-dict `:`
      functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let cppNamespace = "::mlir::ds";
}

// 1-bit LAMB (docs/compression.md; lib/Dialect/Ds/IR/DsOneBitLamb.cpp).
def Ds_OneBitLambOp : Op<Ds_Dialect, "onebit_lamb",
    [Ds_OptimizerStep, DeclareOpInterfaceMethods<Ds_CostOpInterface>]> {
  let summary = "one step of DeepSpeed's 1-bit LAMB with its own exchange";
  let description = [{
    One parameter's step of DeepSpeed's `OneBitLamb` (Li et al. 2021),
    with the data-parallel exchange inside (`grad` is this rank's own
    gradient). With `t` = `step`:

    - `t <= freeze_step` (warm-up): Lamb without bias correction on the
      gradient's mean over the ranks (an all-reduce): `m = b1 m + (1-b1)
      g`, `v = b2 v + (1-b2) g^2`, `u = m / (sqrt(v) + eps) + wd p`, the
      trust ratio `c = ||p|| / ||u||` clamped to [`min_coeff`,
      `max_coeff`] (1 when a norm is 0), `p -= lr c u`. Where `c != 1`
      the frozen coefficient `coeffs[0]` takes `coeff_beta coeffs[0] +
      (1 - coeff_beta) c`.
    - `t > freeze_step`: `v` is frozen. At the first such step
      `v_fresh = v` and the last factor `coeffs[1]` is 1. `m = b1 m +
      (1-b1) grad` with the local gradient, then `m` is replaced by its
      compressed all-reduce (as `ds.onebit_adam`'s, with the worker and
      server errors). The gradient the exchanged momentum implies,
      `(m - b1 m_prev) / (1-b1)`, updates `v_fresh` as `v` would be; the
      factor `max_i (sqrt(v) + eps) / (sqrt(v_fresh) + eps)` (mixed with
      1 by the share of the update that is not weight decay when `wd > 0`)
      is clamped to [`factor_min`, `factor_max`] and to within
      `factor_threshold` of the last factor, and `p -= lr coeffs[0]
      factor u` with `u = m / (sqrt(v) + eps) + wd p`.

    `worker_error` holds the padded length (a multiple of N lcm(N, 8) for N
    ranks), `server_error` its N-th part; `coeffs` is two f32: the frozen
    Lamb coefficient and the last factor. The op communicates, so it is
    not pure.
  }];
  let arguments = (ins Ds_FloatTensor:$param, Ds_FloatTensor:$grad,
                       Ds_FloatTensor:$exp_avg, Ds_FloatTensor:$exp_avg_sq,
                       Ds_FloatTensor:$exp_avg_sq_fresh,
                       Ds_FloatTensor:$worker_error,
                       Ds_FloatTensor:$server_error,
                       Ds_FloatTensor:$coeffs,
                       StaticShapeTensorOf<[I64]>:$step, F64Attr:$lr,
                       F64Attr:$beta1, F64Attr:$beta2, F64Attr:$eps,
                       F64Attr:$weight_decay,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$freeze_step,
                       F64Attr:$max_coeff, F64Attr:$min_coeff,
                       F64Attr:$coeff_beta, F64Attr:$factor_max,
                       F64Attr:$factor_min, F64Attr:$factor_threshold,
                       DefaultValuedAttr<StrAttr, "\"constant\"">:$schedule,
                       DefaultValuedAttr<I64Attr, "0">:$warmup_steps,
                       DefaultValuedAttr<I64Attr, "0">:$total_steps,
                       DefaultValuedAttr<F64Attr, "0.0">:$min_lr);
  let results = (outs Ds_FloatTensor:$new_param, Ds_FloatTensor:$new_exp_avg,
                      Ds_FloatTensor:$new_exp_avg_sq,
                      Ds_FloatTensor:$new_exp_avg_sq_fresh,
                      Ds_FloatTensor:$new_worker_error,
                      Ds_FloatTensor:$new_server_error,
                      Ds_FloatTensor:$new_coeffs);
  let assemblyFormat = [{
    $param `,` $grad `,` $exp_avg `,` $exp_avg_sq `,` $exp_avg_sq_fresh `,`
      $worker_error `,` $server_error `,` $coeffs `,` $step attr-dict `:`
      functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let cppNamespace = "::mlir::ds";
}

// 1-bit LAMB under ZeRO 1-3 (docs/compression.md; DsOneBitLamb.cpp).
def Ds_OneBitLambLocalOp : Op<Ds_Dialect, "onebit_lamb_local",
    [Ds_OptimizerStep, DeclareOpInterfaceMethods<Ds_CostOpInterface>]> {
  let summary = "1-bit LAMB's update of this rank's partition of an "
                "exchanged gradient";
  let description = [{
    The update of 1-bit LAMB under ZeRO stages 1-3: `grad` is this rank's
    partition of the gradient's mean, made by `ds.compressed_reduce_scatter`
    (plain until `freeze_step`, 1-bit with worker error feedback after it),
    and `param` and the state are this rank's partition of one tensor
    (zeros in the padding). The whole-tensor norms and maxima the rule
    needs come from one all-gather of this rank's partial sums (four f64
    per rank: the sums of squares of `p`, of `u` and of
    `m / (sqrt(v) + eps)`, and the largest `(sqrt(v) + eps) /
    (sqrt(v_fresh) + eps)`), combined in rank order on every rank, so the
    figures are the whole tensor's and identical everywhere. With `t` =
    `step`:

    - `t <= freeze_step`: Lamb without bias correction (`ds.onebit_lamb`'s
      warm-up) on `grad`, with the trust ratio of the whole tensor; where
      it is not 1 the frozen coefficient `coeffs[0]` takes `coeff_beta
      coeffs[0] + (1 - coeff_beta) c`.
    - `t > freeze_step`: `v` is frozen; at the first such step `v_fresh =
      v` and the last factor `coeffs[1]` is 1. `m = b1 m + (1-b1) grad`,
      `v_fresh = b2 v_fresh + (1-b2) grad^2`; the factor (the whole
      tensor's maximum, mixed with 1 by the share of the update that is
      not weight decay when `wd > 0`) is clamped as `ds.onebit_lamb`'s and
      `p -= lr coeffs[0] factor u`.

    `valid` is the tensor's element count: the partition's elements at or
    past it (rank r holds elements [r c, (r+1) c) of the flattened, padded
    tensor) are padding and take no part in the maximum. `coeffs` is two
    f32, the same on every rank. The op communicates, so it is not pure.
  }];
  let arguments = (ins Ds_FloatTensor:$param, Ds_FloatTensor:$grad,
                       Ds_FloatTensor:$exp_avg, Ds_FloatTensor:$exp_avg_sq,
                       Ds_FloatTensor:$exp_avg_sq_fresh,
                       Ds_FloatTensor:$coeffs,
                       StaticShapeTensorOf<[I64]>:$step, F64Attr:$lr,
                       F64Attr:$beta1, F64Attr:$beta2, F64Attr:$eps,
                       F64Attr:$weight_decay,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$freeze_step,
                       F64Attr:$max_coeff, F64Attr:$min_coeff,
                       F64Attr:$coeff_beta, F64Attr:$factor_max,
                       F64Attr:$factor_min, F64Attr:$factor_threshold,
                       ConfinedAttr<I64Attr, [IntPositive]>:$valid,
                       DefaultValuedAttr<StrAttr, "\"constant\"">:$schedule,
                       DefaultValuedAttr<I64Attr, "0">:$warmup_steps,
                       DefaultValuedAttr<I64Attr, "0">:$total_steps,
                       DefaultValuedAttr<F64Attr, "0.0">:$min_lr);
  let results = (outs Ds_FloatTensor:$new_param, Ds_FloatTensor:$new_exp_avg,
                      Ds_FloatTensor:$new_exp_avg_sq,
                      Ds_FloatTensor:$new_exp_avg_sq_fresh,
                      Ds_FloatTensor:$new_coeffs);
  let assemblyFormat = [{
    $param `,` $grad `,` $exp_avg `,` $exp_avg_sq `,` $exp_avg_sq_fresh `,`
      $coeffs `,` $step attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let cppNamespace = "::mlir::ds";
}

#endif // DS_DIALECT_DS_IR_DSCOMPRESSION_TD
