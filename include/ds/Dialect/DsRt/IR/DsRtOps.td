//===- DsRtOps.td - the ds runtime dialect -----------------*- tablegen -*-===//
//
// The buffer program of one rank: what plan.bin holds, as IR.
//
//===----------------------------------------------------------------------===//

#ifndef DS_DIALECT_DSRT_IR_DSRTOPS_TD
#define DS_DIALECT_DSRT_IR_DSRTOPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def DsRt_Dialect : Dialect {
  let name = "dsrt";
  let cppNamespace = "::mlir::dsrt";
  let summary = "Buffers, kernel calls, copies, collectives and events";
  let description = [{
    The runtime dialect is the program `ds-run` executes, one per rank: every
    value is a statically shaped buffer (`memref`) that lives in a memory
    space (the planned arena, parameter storage, graph inputs, constants),
    and every step is a kernel call by kernel id, a copy, a collective or an
    event. `--ds-lower-to-dsrt` produces it from the `ds` dialect;
    `--dsrt-plan-memory` places the arena buffers; the plan writer
    serializes it to plan.bin.
  }];
}

def DsRt_Buffer : StaticShapeMemRefOf<[F32, F16, BF16, I64, I32, I1]>;

class DsRt_Op<string mnemonic, list<Trait> traits = []>
    : Op<DsRt_Dialect, mnemonic, traits>;

//===----------------------------------------------------------------------===//
// Buffers
//===----------------------------------------------------------------------===//

def DsRt_AllocOp : DsRt_Op<"alloc", [Pure]> {
  let summary = "a buffer in the planned arena";
  let description = [{
    A buffer of the arena. `offset` (bytes) is set by `--dsrt-plan-memory`;
    a plan cannot be written before every alloc has one.
  }];
  let arguments = (ins OptionalAttr<I64Attr>:$offset);
  let results = (outs DsRt_Buffer:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

def DsRt_ParamOp : DsRt_Op<"param", [Pure]> {
  let summary = "the storage of parameter `index`";
  let description = [{
    Parameter storage, loaded from the weights source at start-up. `name`
    is the ONNX initializer name (the checkpoint key). With `state` it is
    optimizer state instead (`<param>.exp_avg` ...), zero at the start.
    With `full_shape` it holds this rank's ZeRO shard (1-D, padded) of a
    tensor of that shape. With `master_of` it is the f32 master copy of
    that (16-bit) parameter: optimizer state that starts as the
    parameter's initializer, cast to f32, instead of zero.
  }];
  let arguments = (ins I64Attr:$index, StrAttr:$name, UnitAttr:$trainable,
                       UnitAttr:$state,
                       OptionalAttr<DenseI64ArrayAttr>:$full_shape,
                       OptionalAttr<StrAttr>:$master_of);
  let results = (outs DsRt_Buffer:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

def DsRt_InputOp : DsRt_Op<"input", [Pure]> {
  let summary = "graph input `index`, provided by the caller";
  let arguments = (ins I64Attr:$index, StrAttr:$name);
  let results = (outs DsRt_Buffer:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

def DsRt_ConstOp : DsRt_Op<"const", [Pure]> {
  let summary = "constant data carried in the plan";
  let arguments = (ins ElementsAttr:$value);
  let results = (outs DsRt_Buffer:$result);
  let assemblyFormat = "attr-dict $value `:` type($result)";
  let hasVerifier = 1;
}

def DsRt_ViewOp : DsRt_Op<"view", [Pure]> {
  let summary = "the same bytes under another static shape";
  let description = [{
    Reinterprets a row-major buffer with another shape of the same element
    type and count (what `ds.reshape` lowers to: no copy).
  }];
  let arguments = (ins DsRt_Buffer:$source);
  let results = (outs DsRt_Buffer:$result);
  let assemblyFormat = "$source attr-dict `:` type($source) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Work
//===----------------------------------------------------------------------===//

def DsRt_KernelOp : DsRt_Op<"kernel", [AttrSizedOperandSegments]> {
  let summary = "one call of a registered kernel";
  let description = [{
    Calls kernel `kernel` (the runtime's registry id) reading `ins` and
    writing `outs`; shapes come from the buffer types, everything else from
    `params`. `inplace` lists the inputs whose storage an output may share
    (elementwise kernels read each element before writing it).

    Syntax: `dsrt.kernel "id"(ins) -> (outs) {params = {...}, inplace = ...}
    : (types) -> (types)`, then `attributes {...}` with the annotations.

    `--ds-lower-to-dsrt` annotates each call with discardable attributes
    for the plan writer and the reports, printed after the signature:
    - `ds.flops` (i64): the FLOPs of the ds op the kernel runs
      (CostOpInterface: a multiply-add counts two);
    - `ds.bytes` (i64): the bytes that op reads plus those it writes;
    - `ds.phase` (string): the part of the training step, "forward",
      "backward", "optimizer" (the optimizer steps and what follows the
      first), "communication" (collectives, pipeline sends and receives)
      or "transfer" (offload copies between memory spaces).

    ```mlir
    dsrt.kernel "add"(%a, %b) -> (%c) {params = {}} : (memref<4xf32>, memref<4xf32>) -> (memref<4xf32>)
        attributes {ds.bytes = 48 : i64, ds.flops = 4 : i64, ds.phase = "forward"}
    ```
  }];
  let arguments = (ins StrAttr:$kernel, Variadic<DsRt_Buffer>:$ins,
                       Variadic<DsRt_Buffer>:$outs, DictionaryAttr:$params,
                       OptionalAttr<DenseI64ArrayAttr>:$inplace);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
}

def DsRt_OutputOp : DsRt_Op<"output"> {
  let summary = "marks a buffer as graph output `index`";
  let arguments = (ins DsRt_Buffer:$buffer, I64Attr:$index, StrAttr:$name);
  let assemblyFormat = "$buffer attr-dict `:` type($buffer)";
}

def DsRt_CopyOp : DsRt_Op<"copy"> {
  let summary = "copy one buffer into another of the same type";
  let arguments = (ins DsRt_Buffer:$source, DsRt_Buffer:$target);
  let assemblyFormat = "$source `,` $target attr-dict `:` type($source) `,` type($target)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Events (streams, for the CUDA backend). Collectives are `dsrt.kernel`s
// ("all_reduce", "all_gather", "reduce_scatter", "shard"): see design.md.
//===----------------------------------------------------------------------===//

def DsRt_RecordEventOp : DsRt_Op<"record_event"> {
  let summary = "record event `event` on stream `stream`";
  let arguments = (ins I64Attr:$event, StrAttr:$stream);
  let assemblyFormat = "attr-dict";
}

def DsRt_WaitEventOp : DsRt_Op<"wait_event"> {
  let summary = "make stream `stream` wait for event `event`";
  let arguments = (ins I64Attr:$event, StrAttr:$stream);
  let assemblyFormat = "attr-dict";
}

#endif // DS_DIALECT_DSRT_IR_DSRTOPS_TD
