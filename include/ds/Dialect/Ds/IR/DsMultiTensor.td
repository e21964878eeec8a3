//===- DsMultiTensor.td - multi-tensor optimizer steps -----*- tablegen -*-===//
//
// Part of the ds project. Included from DsOps.td.
//
// Ops that `--ds-fuse-optimizer` makes from the per-parameter `ds.adam` and
// `ds.sgd` ops of one step (issue 24 item 3): one kernel call updates every
// parameter of the group. Their C++ is lib/Dialect/Ds/IR/DsMultiTensor.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef DS_DIALECT_DS_IR_DSMULTITENSOR_TD
#define DS_DIALECT_DS_IR_DSMULTITENSOR_TD

def Ds_MultiAdamOp : Ds_Op<"multi_adam", [Pure, Ds_OptimizerStep,
                                          AttrSizedOperandSegments]> {
  let summary = "one Adam or AdamW step of N parameters, PyTorch semantics";
  let description = [{
    The `ds.adam` step (same attributes, same per-element f32 arithmetic in
    torch's order) of N parameters at once: operands the N parameters, their
    N gradients, N `exp_avg` and N `exp_avg_sq` states and the shared
    step; results the N new parameters, then the N new `exp_avg` and the N
    new `exp_avg_sq`. Parameter i, its gradient and its states share one
    type; the parameters may differ in shape and size. The kernel walks
    all N tensors as one flat index space split over the run's threads, so
    that small tensors (biases, LayerNorm gains) cost no call of their own.
    Each new value is written into the storage of the argument its result
    updates, exactly as with N `ds.adam` ops.

    Not covered (left as `ds.adam`): Lamb, gradient accumulation
    (`grad_accum`), a clip coefficient operand, ZeRO 1-3 partitions'
    `norm_over_ranks`.
  }];
  let arguments = (ins Variadic<Ds_FloatTensor>:$params,
                       Variadic<Ds_FloatTensor>:$grads,
                       Variadic<Ds_FloatTensor>:$exp_avgs,
                       Variadic<Ds_FloatTensor>:$exp_avg_sqs,
                       StaticShapeTensorOf<[I64]>:$step, F64Attr:$lr,
                       F64Attr:$beta1, F64Attr:$beta2, F64Attr:$eps,
                       F64Attr:$weight_decay, BoolAttr:$decoupled,
                       DefaultValuedAttr<StrAttr, "\"constant\"">:$schedule,
                       DefaultValuedAttr<I64Attr, "0">:$warmup_steps,
                       DefaultValuedAttr<I64Attr, "0">:$total_steps,
                       DefaultValuedAttr<F64Attr, "0.0">:$min_lr,
                       DefaultValuedAttr<I64Attr, "1">:$accum_steps,
                       DefaultValuedAttr<BoolAttr, "true">:$bias_correction);
  let results = (outs Variadic<Ds_FloatTensor>:$results);
  let assemblyFormat = [{
    `params` `(` $params `)` `grads` `(` $grads `)` `exp_avgs` `(` $exp_avgs `)`
      `exp_avg_sqs` `(` $exp_avg_sqs `)` `step` `(` $step `)` attr-dict `:`
      functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Ds_MultiSgdOp : Ds_Op<"multi_sgd", [Pure, Ds_OptimizerStep,
                                        AttrSizedOperandSegments]> {
  let summary = "one SGD step of N parameters, PyTorch semantics";
  let description = [{
    The `ds.sgd` step (same attributes and per-element arithmetic) of N
    parameters at once: operands the N parameters, their N gradients, N
    momentum buffers (none when `momentum` is 0: `ds.sgd` then reads no
    buffer) and the shared step; results the N new parameters, then the N
    new momentum buffers (none without momentum). Not covered (left as
    `ds.sgd`): gradient accumulation and a clip coefficient operand.
  }];
  let arguments = (ins Variadic<Ds_FloatTensor>:$params,
                       Variadic<Ds_FloatTensor>:$grads,
                       Variadic<Ds_FloatTensor>:$momentum_buffers,
                       StaticShapeTensorOf<[I64]>:$step, F64Attr:$lr,
                       F64Attr:$momentum, F64Attr:$dampening,
                       F64Attr:$weight_decay, BoolAttr:$nesterov,
                       DefaultValuedAttr<StrAttr, "\"constant\"">:$schedule,
                       DefaultValuedAttr<I64Attr, "0">:$warmup_steps,
                       DefaultValuedAttr<I64Attr, "0">:$total_steps,
                       DefaultValuedAttr<F64Attr, "0.0">:$min_lr,
                       DefaultValuedAttr<I64Attr, "1">:$accum_steps);
  let results = (outs Variadic<Ds_FloatTensor>:$results);
  let assemblyFormat = [{
    `params` `(` $params `)` `grads` `(` $grads `)`
      `momentum_buffers` `(` $momentum_buffers `)` `step` `(` $step `)`
      attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

#endif // DS_DIALECT_DS_IR_DSMULTITENSOR_TD
