//===- DsAttention.td - fused attention ---------------------*- tablegen -*-===//
//
// Part of the ds project. Included from DsOps.td.
//
// The ops `--ds-fuse-attention` makes from softmax(Q K^T * scale + mask) V
// (issue 24 item 2): a tiled kernel with an online softmax that saves the
// output and the per-row logsumexp instead of the T x T probabilities, and
// its gradient, which recomputes the probabilities block by block.
//
//===----------------------------------------------------------------------===//

#ifndef DS_DIALECT_DS_IR_DSATTENTION_TD
#define DS_DIALECT_DS_IR_DSATTENTION_TD

def Ds_FusedAttentionOp : Ds_Op<"fused_attention",
    [Pure, DeclareOpInterfaceMethods<Ds_VJPOpInterface>]> {
  let summary = "softmax(scale * Q K^T, masked) V in one tiled kernel";
  let description = [{
    With scores `s[..., i, j] = scale * sum_c query[..., i, c] * key[..., j, c]`
    and the mask applied as `mask_kind` says:
    - `none`: no mask operand;
    - `fill_true`: `s = fill` where the i1 mask is true (ONNX Where(mask,
      fill, s), PyTorch's masked_fill);
    - `fill_false`: `s = fill` where the i1 mask is false (Where(mask, s,
      fill));
    - `add`: `s = s + mask` (an f32 additive mask, BERT's padding bias);
    the result is `softmax(s, last axis) value` and `lse` the logsumexp of
    each row of `s` (what the gradient needs to recompute the
    probabilities; -inf for a row the mask fills entirely with -inf, whose
    result is NaN as the unfused softmax's). The mask broadcasts (numpy
    rules) to the scores' shape `[batch..., Tq, Tk]`. The VJP is
    `ds.fused_attention_grad`; the mask gets no gradient (the pass fuses an
    additive mask only when it depends on no trainable parameter).

    Constraints (the verifier): query `[batch..., Tq, D]`, key
    `[batch..., Tk, D]`, value `[batch..., Tk, Dv]`, all f32 of one rank
    >= 3 and the same batch dimensions; result `[batch..., Tq, Dv]`, lse
    `[batch..., Tq]`; a mask exactly when `mask_kind` is not `none`, i1 for
    the fill kinds and f32 for `add`, broadcasting to the scores.

    ```mlir
    %o, %lse = ds.fused_attention %q, %k, %v, %m {mask_kind = "fill_true",
        fill = 0xFFF0000000000000 : f64, scale = 0.25 : f64}
      : (tensor<2x4x32x16xf32>, tensor<2x4x32x16xf32>, tensor<2x4x32x16xf32>,
         tensor<1x1x32x32xi1>) -> (tensor<2x4x32x16xf32>, tensor<2x4x32xf32>)
    ```
  }];
  let arguments = (ins Ds_FloatTensor:$query, Ds_FloatTensor:$key,
                       Ds_FloatTensor:$value, Optional<Ds_Tensor>:$mask,
                       F64Attr:$scale, StrAttr:$mask_kind,
                       DefaultValuedAttr<F64Attr, "0.0">:$fill);
  let results = (outs Ds_FloatTensor:$result, Ds_FloatTensor:$lse);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`,` $mask^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Ds_FusedAttentionGradOp : Ds_Op<"fused_attention_grad", [Pure]> {
  let summary = "the gradient of ds.fused_attention (FlashAttention-2 style)";
  let description = [{
    Given the forward's operands, its `result` and `lse` and the gradient
    `grad` of its result, the gradients of query, key and value. The
    probabilities are recomputed block by block from `lse` (never stored
    whole); positions a `fill` mask sets get no score gradient. The
    attributes are the forward's.
  }];
  let arguments = (ins Ds_FloatTensor:$query, Ds_FloatTensor:$key,
                       Ds_FloatTensor:$value, Ds_FloatTensor:$result,
                       Ds_FloatTensor:$lse, Ds_FloatTensor:$grad,
                       Optional<Ds_Tensor>:$mask,
                       F64Attr:$scale, StrAttr:$mask_kind,
                       DefaultValuedAttr<F64Attr, "0.0">:$fill);
  let results = (outs Ds_FloatTensor:$grad_query, Ds_FloatTensor:$grad_key,
                      Ds_FloatTensor:$grad_value);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $result `,` $lse `,` $grad (`,` $mask^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

#endif // DS_DIALECT_DS_IR_DSATTENTION_TD
