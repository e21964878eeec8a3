//===- DsBase.td - ds dialect definition -------------------*- tablegen -*-===//
//
// The `ds` dialect: the tensor program of one training step, at ONNX level,
// with static shapes.
//
//===----------------------------------------------------------------------===//

#ifndef DS_DIALECT_DS_IR_DSBASE_TD
#define DS_DIALECT_DS_IR_DSBASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Ds_Dialect : Dialect {
  let name = "ds";
  let cppNamespace = "::mlir::ds";
  let summary = "Tensor-level training programs for the ds compiler";
  let description = [{
    The `ds` dialect holds the training graph imported from ONNX: one
    `func.func @forward` whose arguments are the graph inputs (attribute
    `ds.input = "<onnx name>"`) and parameters (`ds.param = "<onnx name>"`),
    and whose results are the graph outputs (`ds.output = "<onnx name>"`,
    the loss marked `ds.loss`). Every tensor is ranked with a static shape;
    element types are f32, f16, bf16, i64, i32 and i1.

    Shape arithmetic (`ds.shape`, `ds.range`, `ds.constant_of_shape`, integer
    elementwise ops on constants, ...) folds to `ds.constant`, so that after
    canonicalization only the compute of the step remains.
  }];
  let hasConstantMaterializer = 1;
  let useDefaultAttributePrinterParser = 0;
}

// Element types ds computes in.
def Ds_Float : AnyTypeOf<[F32, F16, BF16]>;
def Ds_Int : AnyTypeOf<[I64, I32]>;
def Ds_Element : AnyTypeOf<[F32, F16, BF16, I64, I32, I1]>;

def Ds_Tensor : StaticShapeTensorOf<[F32, F16, BF16, I64, I32, I1]>;
def Ds_FloatTensor : StaticShapeTensorOf<[F32, F16, BF16]>;
def Ds_IntTensor : StaticShapeTensorOf<[I64, I32]>;
def Ds_IndexTensor : StaticShapeTensorOf<[I64, I32]>;
def Ds_NumericTensor : StaticShapeTensorOf<[F32, F16, BF16, I64, I32]>;
def Ds_BoolTensor : StaticShapeTensorOf<[I1]>;

// Ops whose results are unstable in 16 bits (softmax, LayerNorm
// statistics, losses, reductions): `--ds-mixed-precision` computes them in
// f32, casting 16-bit operands up.
def Ds_F32Island : NativeOpTrait<"DsF32Island"> {
  let cppNamespace = "::mlir::ds";
}

// Ops whose result element i is computed from element i of each operand
// (after broadcasting) and of nothing else: the elementwise arithmetic,
// comparisons, casts and selects, and the sums over ranks that combine the
// same element of every rank's tensor (`ds.all_reduce`). Their kernels may
// write the result over an operand of the same shape and size (the
// `inplace` inputs `--ds-lower-to-dsrt` lists).
def Ds_Elementwise : NativeOpTrait<"DsElementwise"> {
  let cppNamespace = "::mlir::ds";
}

// Reductions of a tensor over some of its axes (`ds.reduce_*`).
def Ds_Reduction : NativeOpTrait<"DsReduction"> {
  let cppNamespace = "::mlir::ds";
}

// One optimizer step of a parameter and its state (`ds.adam`, `ds.sgd`,
// `ds.onnx_update`): the optimizer phase of the step starts at the first.
def Ds_OptimizerStep : NativeOpTrait<"DsOptimizerStep"> {
  let cppNamespace = "::mlir::ds";
}

#endif // DS_DIALECT_DS_IR_DSBASE_TD
