//===- DsZeroPP.td - ZeRO++'s quantized collectives ---------*- tablegen -*-===//
//
// ZeRO++ (issue 26 item 4, docs/zeropp.md): ZeRO-3's parameter all-gather
// and the gradients' reduce-scatter sent as block-wise quantized integers
// (include/ds/Support/Quantize.h). Kept apart from DsOps.td so that the
// family's ops are generated on their own (DsZeroPP.h).
//
//===----------------------------------------------------------------------===//

#ifndef DS_DIALECT_DS_IR_DSZEROPP_TD
#define DS_DIALECT_DS_IR_DSZEROPP_TD

include "ds/Dialect/Ds/IR/DsBase.td"
include "ds/Dialect/Ds/IR/DsInterfaces.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

class Ds_QuantizedCollective<string mnemonic>
    : Op<Ds_Dialect, mnemonic,
         [MemoryEffects<[MemRead, MemWrite]>,
          DeclareOpInterfaceMethods<Ds_CostOpInterface>,
          DeclareOpInterfaceMethods<Ds_CollectiveOpInterface,
                                    ["getCollectiveKind", "getBytesPerRank"]>]> {
  let cppNamespace = "::mlir::ds";
  let hasVerifier = 1;
}

def Ds_QuantizedAllGatherOp : Ds_QuantizedCollective<"quantized_all_gather"> {
  let summary = "an all-gather that sends block-wise quantized integers "
                "(ZeRO++'s qwZ)";
  let description = [{
    ZeRO-3's parameter gather with `zero_quantized_weights`: every rank of
    group `group` (N ranks) quantizes its 1-D shard of S elements in
    blocks of `block_size` (the last may be shorter) to `bits`-bit
    symmetric integers with one f32 scale per block (`max|x| / 127` at 8
    bits; round half to even), the N records are all-gathered, and every
    rank dequantizes them into the N*S-element result, rank 0's first. The
    shard itself (the rank's master copy) is only read: what is quantized
    is the copy used for compute. The kernel's packed records are a
    workspace of the memory plan ((N + 1) records,
    `ds::quant::gatherWorkspaceBytes`).

    ```mlir
    %full = ds.quantized_all_gather %shard {block_size = 2048 : i64, bits = 8 : i64, group = 0 : i64}
      : tensor<8xf32> -> tensor<16xf32>
    ```

    Constraints: 1-D input and result of one float type; the result is a
    whole multiple (N >= 1) of the input; `bits` is 8 or 4.
  }];
  let arguments = (ins Ds_FloatTensor:$input,
                       ConfinedAttr<I64Attr, [IntPositive]>:$block_size,
                       DefaultValuedAttr<I64Attr, "8">:$bits,
                       I64Attr:$group);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Ds_QuantizedReduceScatterOp
    : Ds_QuantizedCollective<"quantized_reduce_scatter"> {
  let summary = "a reduce-scatter by all-to-all of block-wise quantized "
                "chunks, accumulated in f32 (ZeRO++'s qgZ)";
  let description = [{
    The gradients' reduce-scatter with `zero_quantized_gradients`: the
    input holds N chunks of c elements (chunk j for rank j of group
    `group`); each rank quantizes every chunk in blocks of `block_size` to
    `bits`-bit symmetric integers with one f32 scale per block, sends
    chunk j's record to rank j (one all-to-all), and rank j dequantizes
    the N records it receives and adds them in f32 in rank order (`mean`
    divides by N). A block holding inf or NaN keeps it (its scale is not
    finite), so the loss scaler's overflow check still sees it. The
    records sent and received are a workspace of the memory plan (2N
    records, `ds::quant::reduceScatterWorkspaceBytes`).

    Constraints: 1-D f32 input and result, the input a whole multiple of
    the result; `reduction` is `sum` or `mean`; `bits` is 8 or 4.
  }];
  let arguments = (ins Ds_FloatTensor:$input, StrAttr:$reduction,
                       ConfinedAttr<I64Attr, [IntPositive]>:$block_size,
                       DefaultValuedAttr<I64Attr, "8">:$bits,
                       I64Attr:$group);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

#endif // DS_DIALECT_DS_IR_DSZEROPP_TD
