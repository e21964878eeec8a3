//===- DsOps.td - ds dialect operations --------------------*- tablegen -*-===//
//
// Tensor operations of the ds dialect. Shapes are static; the verifier of
// every op recomputes its result type from its operands and attributes with
// the same functions the ONNX importer uses (DsShapes.h), so the IR and the
// importer cannot disagree.
//
//===----------------------------------------------------------------------===//

#ifndef DS_DIALECT_DS_IR_DSOPS_TD
#define DS_DIALECT_DS_IR_DSOPS_TD

include "ds/Dialect/Ds/IR/DsBase.td"
include "ds/Dialect/Ds/IR/DsInterfaces.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/IR/CommonAttrConstraints.td"

class Ds_Op<string mnemonic, list<Trait> traits = []>
    : Op<Ds_Dialect, mnemonic,
         !listconcat(traits, [DeclareOpInterfaceMethods<Ds_CostOpInterface>])>;

//===----------------------------------------------------------------------===//
// Constants and shape arithmetic
//===----------------------------------------------------------------------===//

def Ds_ConstantOp : Ds_Op<"constant",
    [ConstantLike, Pure, AllTypesMatch<["value", "result"]>]> {
  let summary = "constant tensor";
  let description = [{
    A tensor constant. ONNX `Constant` nodes and folded shape arithmetic
    become `ds.constant`.

    ```mlir
    %0 = ds.constant dense<[4, 64]> : tensor<2xi64>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
}

def Ds_ShapeOp : Ds_Op<"shape", [Pure]> {
  let summary = "the shape of a tensor as a 1-D i64 tensor";
  let description = [{
    ONNX `Shape` with `start`/`end` already normalized to `0 <= start <= end
    <= rank`. Shapes are static, so it always folds to a constant.
  }];
  let arguments = (ins Ds_Tensor:$input, I64Attr:$start, I64Attr:$end);
  let results = (outs StaticShapeTensorOf<[I64]>:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Ds_RangeOp : Ds_Op<"range", [Pure]> {
  let summary = "ONNX Range: start, start + delta, ... below limit";
  let description = [{
    The operands are scalars. The result length is fixed by the result type;
    when the operands are constants the op folds, and the verifier checks
    the length against them.
  }];
  let arguments = (ins Ds_NumericTensor:$start, Ds_NumericTensor:$limit,
                       Ds_NumericTensor:$delta);
  let results = (outs Ds_NumericTensor:$result);
  let assemblyFormat = [{
    $start `,` $limit `,` $delta attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Ds_ConstantOfShapeOp : Ds_Op<"constant_of_shape", [Pure]> {
  let summary = "a tensor of the result shape filled with one value";
  let description = [{
    ONNX `ConstantOfShape`. The result shape is static, so it always folds
    to a splat `ds.constant`; the `shape` operand is kept only until then.
  }];
  let arguments = (ins StaticShapeTensorOf<[I64]>:$shape, TypedAttrInterface:$value);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "$shape attr-dict `:` type($shape) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

// Binary elementwise ops with ONNX (numpy) multidirectional broadcasting.
// `kind` names the BinaryKind enumerator the shared C++ helpers dispatch on.
class Ds_BinaryOp<string mnemonic, string kind, string flopsPerElement,
                  string desc, list<Trait> traits = []>
    : Ds_Op<mnemonic, !listconcat([Pure, Ds_Elementwise], traits)> {
  let summary = desc;
  let description = desc # [{ with ONNX multidirectional broadcasting.
    The verifier checks that the result shape is the broadcast of the operand
    shapes and the element types agree. Constant operands fold.
  }];
  let arguments = (ins Ds_Tensor:$lhs, Ds_Tensor:$rhs);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let hasFolder = 1;
  let extraClassDefinition = [{
    ::mlir::ds::BinaryKind $cppClass::getKind() {
      return ::mlir::ds::BinaryKind::}] # kind # [{;
    }
    ::llvm::LogicalResult $cppClass::verify() {
      return ::mlir::ds::detail::verifyBinaryOp(getOperation(), getKind());
    }
    ::mlir::OpFoldResult $cppClass::fold(FoldAdaptor adaptor) {
      return ::mlir::ds::detail::foldBinaryOp(getOperation(), getKind(),
                                              adaptor.getLhs(),
                                              adaptor.getRhs());
    }
    int64_t $cppClass::getFlops() {
      return ::mlir::ds::detail::numElements(getType()) * }] #
      flopsPerElement # [{;
    }
  }];
  let extraClassDeclaration = [{
    static ::mlir::ds::BinaryKind getKind();
  }];
}

def Ds_AddOp : Ds_BinaryOp<"add", "Add", "1", "elementwise sum",
                           [Commutative]>;
def Ds_SubOp : Ds_BinaryOp<"sub", "Sub", "1", "elementwise difference">;
def Ds_MulOp : Ds_BinaryOp<"mul", "Mul", "1", "elementwise product",
                           [Commutative]>;
def Ds_DivOp : Ds_BinaryOp<"div", "Div", "1",
    "elementwise quotient (integers truncate toward zero)">;
def Ds_PowOp : Ds_BinaryOp<"pow", "Pow", "1",
    "elementwise power; the exponent may have another element type">;
def Ds_MaxOp : Ds_BinaryOp<"max", "Max", "1", "elementwise maximum",
                           [Commutative]>;
def Ds_MinOp : Ds_BinaryOp<"min", "Min", "1", "elementwise minimum",
                           [Commutative]>;
def Ds_EqualOp : Ds_BinaryOp<"equal", "Equal", "1",
    "elementwise equality, i1 result", [Commutative]>;
def Ds_LessOp : Ds_BinaryOp<"less", "Less", "1",
    "elementwise lhs < rhs, i1 result">;
def Ds_LessOrEqualOp : Ds_BinaryOp<"less_or_equal", "LessOrEqual", "1",
    "elementwise lhs <= rhs, i1 result">;
def Ds_GreaterOp : Ds_BinaryOp<"greater", "Greater", "1",
    "elementwise lhs > rhs, i1 result">;
def Ds_GreaterOrEqualOp : Ds_BinaryOp<"greater_or_equal", "GreaterOrEqual",
    "1", "elementwise lhs >= rhs, i1 result">;
def Ds_AndOp : Ds_BinaryOp<"and", "And", "1", "elementwise logical and of i1",
                           [Commutative]>;
def Ds_OrOp : Ds_BinaryOp<"or", "Or", "1", "elementwise logical or of i1",
                          [Commutative]>;
def Ds_XorOp : Ds_BinaryOp<"xor", "Xor", "1", "elementwise logical xor of i1",
                           [Commutative]>;

// Unary elementwise ops: the result has the operand's type.
class Ds_UnaryOp<string mnemonic, string kind, string flopsPerElement,
                 Type operandType, string desc>
    : Ds_Op<mnemonic, [Pure, SameOperandsAndResultType, Ds_Elementwise]> {
  let summary = desc;
  let description = desc # [{; the result has the operand's type.
    A constant operand folds.
  }];
  let arguments = (ins operandType:$input);
  let results = (outs operandType:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasFolder = 1;
  let extraClassDefinition = [{
    ::mlir::ds::UnaryKind $cppClass::getKind() {
      return ::mlir::ds::UnaryKind::}] # kind # [{;
    }
    ::mlir::OpFoldResult $cppClass::fold(FoldAdaptor adaptor) {
      return ::mlir::ds::detail::foldUnaryOp(getOperation(), getKind(),
                                             adaptor.getInput());
    }
    int64_t $cppClass::getFlops() {
      return ::mlir::ds::detail::numElements(getType()) * }] #
      flopsPerElement # [{;
    }
  }];
  let extraClassDeclaration = [{
    static ::mlir::ds::UnaryKind getKind();
  }];
}

def Ds_NegOp : Ds_UnaryOp<"neg", "Neg", "1", Ds_NumericTensor, "negation">;
def Ds_AbsOp : Ds_UnaryOp<"abs", "Abs", "1", Ds_NumericTensor,
                          "absolute value">;
def Ds_ExpOp : Ds_UnaryOp<"exp", "Exp", "1", Ds_FloatTensor, "e to the x">;
def Ds_LogOp : Ds_UnaryOp<"log", "Log", "1", Ds_FloatTensor,
                          "natural logarithm">;
def Ds_SqrtOp : Ds_UnaryOp<"sqrt", "Sqrt", "1", Ds_FloatTensor, "square root">;
def Ds_ReciprocalOp : Ds_UnaryOp<"reciprocal", "Reciprocal", "1",
                                 Ds_FloatTensor, "1 / x">;
def Ds_ErfOp : Ds_UnaryOp<"erf", "Erf", "1", Ds_FloatTensor,
                          "Gauss error function">;
def Ds_TanhOp : Ds_UnaryOp<"tanh", "Tanh", "1", Ds_FloatTensor,
                           "hyperbolic tangent">;
def Ds_ReluOp : Ds_UnaryOp<"relu", "Relu", "1", Ds_NumericTensor,
                           "max(x, 0)">;
def Ds_SigmoidOp : Ds_UnaryOp<"sigmoid", "Sigmoid", "3", Ds_FloatTensor,
                              "1 / (1 + exp(-x))">;
def Ds_NotOp : Ds_UnaryOp<"not", "Not", "1", Ds_BoolTensor,
                          "logical negation of i1">;

def Ds_CastOp : Ds_Op<"cast", [Pure, Ds_Elementwise]> {
  let summary = "element type conversion";
  let description = [{
    ONNX `Cast`: converts each element to the result's element type (float
    to integer truncates toward zero; to i1 is `x != 0`). The shape is kept.
  }];
  let arguments = (ins Ds_Tensor:$input);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Ds_WhereOp : Ds_Op<"where", [Pure, Ds_Elementwise]> {
  let summary = "elementwise select with broadcasting";
  let description = [{
    ONNX `Where`: `condition ? x : y`, all three broadcast together. Causal
    attention masks are `ds.where(mask, -inf, scores)`.
  }];
  let arguments = (ins Ds_BoolTensor:$condition, Ds_Tensor:$x, Ds_Tensor:$y);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = [{
    $condition `,` $x `,` $y attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Ds_ActivationOp : Ds_Op<"activation",
    [Pure, Ds_Elementwise, SameOperandsAndResultType]> {
  let summary = "a parametrized elementwise activation";
  let description = [{
    `kind` is one of `include/ds/Support/Activation.h`'s table, with its
    two parameters: `clip` (`alpha` the minimum, `beta` the maximum),
    `leaky_relu`, `elu`, `celu` (`alpha`), `selu` (`alpha`, `beta` is
    gamma), `hard_sigmoid` (`alpha * x + beta` clamped to [0, 1]),
    `softplus`, `softsign`, `hard_swish`, `sin` and `cos` (none). ONNX's
    Clip (constant bounds), LeakyRelu, Elu, Selu, Celu, Softplus, Softsign,
    HardSigmoid, HardSwish, Sin and Cos import as it; the VJP is
    `ds.activation_grad` of the input.

    ```mlir
    %y = ds.activation "elu", %x {alpha = 1.0 : f32} : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Ds_FloatTensor:$input, StrAttr:$kind,
                       DefaultValuedAttr<F32Attr, "0.0">:$alpha,
                       DefaultValuedAttr<F32Attr, "0.0">:$beta);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "$kind `,` $input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Ds_ActivationGradOp : Ds_Op<"activation_grad",
    [Pure, Ds_Elementwise, SameOperandsAndResultType]> {
  let summary = "the gradient of ds.activation";
  let description = [{
    `grad * f'(input)` for the activation `f` that `kind`, `alpha` and
    `beta` name (as `ds.activation`'s): the derivative is a function of the
    activation's input, with PyTorch's choices at the kinks.
  }];
  let arguments = (ins Ds_FloatTensor:$input, Ds_FloatTensor:$grad,
                       StrAttr:$kind,
                       DefaultValuedAttr<F32Attr, "0.0">:$alpha,
                       DefaultValuedAttr<F32Attr, "0.0">:$beta);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = [{
    $kind `,` $input `,` $grad attr-dict `:` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Pooling (window geometry: include/ds/Support/Pooling.h)
//===----------------------------------------------------------------------===//

def Ds_MaxPoolOp : Ds_Op<"max_pool", [Pure]> {
  let summary = "the maximum over sliding windows of an (N, C, spatial...) tensor";
  let description = [{
    ONNX's MaxPool (one output; 1 to 3 spatial dimensions) and
    GlobalMaxPool (the window the whole plane). `pads` holds the begin
    paddings then the end ones; padding never wins. The result's spatial
    sizes follow `ceil_mode` as ONNX and PyTorch do. The VJP is
    `ds.max_pool_grad`, which recomputes each window's argmax (the first
    maximum, as PyTorch).

    ```mlir
    %y = ds.max_pool %x {kernel_shape = array<i64: 2, 2>,
        strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>,
        dilations = array<i64: 1, 1>} : tensor<1x3x8x8xf32> -> tensor<1x3x4x4xf32>
    ```
  }];
  let arguments = (ins Ds_FloatTensor:$input, DenseI64ArrayAttr:$kernel_shape,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                       DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<BoolAttr, "false">:$ceil_mode);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Ds_MaxPoolGradOp : Ds_Op<"max_pool_grad", [Pure]> {
  let summary = "the gradient of ds.max_pool";
  let description = [{
    Each element of `grad` (shaped as the pooling's result) added to the
    input position of its window's first maximum; zeros elsewhere. The
    attributes are the `ds.max_pool`'s.
  }];
  let arguments = (ins Ds_FloatTensor:$input, Ds_FloatTensor:$grad,
                       DenseI64ArrayAttr:$kernel_shape,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                       DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<BoolAttr, "false">:$ceil_mode);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $grad attr-dict `:` type($input) `,` type($grad) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Ds_AvgPoolOp : Ds_Op<"avg_pool", [Pure]> {
  let summary = "the mean over sliding windows of an (N, C, spatial...) tensor";
  let description = [{
    ONNX's AveragePool (1 to 3 spatial dimensions) and GlobalAveragePool.
    The divisor counts the taps inside the input, or with
    `count_include_pad` those inside the padded input (Support/Pooling.h).
    The VJP is `ds.avg_pool_grad`.
  }];
  let arguments = (ins Ds_FloatTensor:$input, DenseI64ArrayAttr:$kernel_shape,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                       DefaultValuedAttr<BoolAttr, "false">:$count_include_pad,
                       DefaultValuedAttr<BoolAttr, "false">:$ceil_mode);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Ds_AvgPoolGradOp : Ds_Op<"avg_pool_grad", [Pure]> {
  let summary = "the gradient of ds.avg_pool";
  let description = [{
    Each element of `grad` divided by its window's divisor and added to
    every input position of the window; the result has the pooling's input
    shape. The attributes are the `ds.avg_pool`'s.
  }];
  let arguments = (ins Ds_FloatTensor:$grad, DenseI64ArrayAttr:$kernel_shape,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                       DefaultValuedAttr<BoolAttr, "false">:$count_include_pad,
                       DefaultValuedAttr<BoolAttr, "false">:$ceil_mode);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "$grad attr-dict `:` type($grad) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// TopK (misc family, issue 22; lib/Dialect/Ds/IR/DsTopK.cpp)
//===----------------------------------------------------------------------===//

def Ds_TopKOp : Ds_Op<"topk", [Pure]> {
  let summary = "the k largest (or smallest) elements along an axis";
  let description = [{
    ONNX's TopK with a constant `k`: `values` and `indices` have the
    input's shape with `k` along `axis`. The elements come in order (the
    largest first, or with `largest = false` the smallest first); among
    equal values the lower index comes first, and a NaN counts as larger
    than any number (PyTorch's order). The VJP is `ds.topk_grad`, which
    adds the gradient of `values` at the positions `indices` names; the
    indices have no gradient.

    ```mlir
    %v, %i = ds.topk %x {axis = 1 : i64, k = 2 : i64}
        : tensor<3x4xf32> -> (tensor<3x2xf32>, tensor<3x2xi64>)
    ```
  }];
  let arguments = (ins Ds_FloatTensor:$input, I64Attr:$k, I64Attr:$axis,
                       DefaultValuedAttr<BoolAttr, "true">:$largest);
  let results = (outs Ds_FloatTensor:$values, Ds_IndexTensor:$indices);
  let assemblyFormat = [{
    $input attr-dict `:` type($input) `->` `(` type($values) `,` type($indices) `)`
  }];
  let hasVerifier = 1;
}

def Ds_TopKGradOp : Ds_Op<"topk_grad", [Pure]> {
  let summary = "the gradient of ds.topk";
  let description = [{
    A zero tensor of the ds.topk input's shape (the result type) with each
    element of `grad` (shaped as the values) added at the position along
    `axis` that the same element of `indices` names.
  }];
  let arguments = (ins Ds_FloatTensor:$grad, Ds_IndexTensor:$indices,
                       I64Attr:$axis);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $indices attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// EmbeddingBag with offsets (misc family, issue 22;
// lib/Dialect/Ds/IR/DsEmbeddingBag.cpp)
//===----------------------------------------------------------------------===//

def Ds_EmbeddingBagOp : Ds_Op<"embedding_bag", [Pure]> {
  let summary = "bags of embedding rows reduced by sum, mean or max";
  let description = [{
    torch's nn.EmbeddingBag / F.embedding_bag with 1-D indices and an
    offsets input (the Loop torch 1.13 exports for it, recognized at
    import). `offsets` holds the B + 1 bag bounds: bag `b` is
    `indices[offsets[b] : offsets[b+1]]` (the importer appends the number
    of indices to torch's offsets, or with include_last_offset takes them
    as they are). Row `b` of the result is the sum, the mean or the
    elementwise max of `weight`'s rows named by bag `b` (with
    `per_sample_weights`, mode sum only, each row scaled by its weight).
    An empty bag gives a zero row (as torch). The bounds are run-time
    data: the kernel checks that they do not decrease and lie in
    [0, N]. The VJP is `ds.embedding_bag_grad`.

    ```mlir
    %r = ds.embedding_bag %w, %idx, %off {mode = "mean"}
        : (tensor<10x4xf32>, tensor<7xi64>, tensor<3xi64>) -> tensor<2x4xf32>
    ```
  }];
  let arguments = (ins Ds_FloatTensor:$weight, Ds_IndexTensor:$indices,
                       Ds_IndexTensor:$offsets,
                       Optional<Ds_FloatTensor>:$per_sample_weights,
                       StrAttr:$mode);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = [{
    operands attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Ds_EmbeddingBagGradOp : Ds_Op<"embedding_bag_grad",
    [Pure, AttrSizedOperandSegments]> {
  let summary = "the gradient of ds.embedding_bag for its weight";
  let description = [{
    A zero tensor of the weight's shape (the result type) into which row
    `b` of `grad` is added at each row bag `b` names: times the index's
    per-sample weight (sum), divided by the bag's length (mean), or only
    at the row that gave each element's max (max; `weight` is given to
    find it, the first such row on ties). Empty bags add nothing.
  }];
  let arguments = (ins Ds_FloatTensor:$grad, Ds_IndexTensor:$indices,
                       Ds_IndexTensor:$offsets,
                       Optional<Ds_FloatTensor>:$per_sample_weights,
                       Optional<Ds_FloatTensor>:$weight, StrAttr:$mode);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $indices `,` $offsets
    (`per_sample_weights` $per_sample_weights^)? (`weight` $weight^)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

// Spatial: resize (sampling rule: include/ds/Support/Resize.h)
//===----------------------------------------------------------------------===//

def Ds_ResizeOp : Ds_Op<"resize", [Pure]> {
  let summary = "nearest or linear resampling of the spatial dimensions";
  let description = [{
    ONNX's Resize (and Upsample) in the `nearest` and `linear` modes over
    1 to 3 spatial dimensions of an (N, C, spatial...) tensor; N and C are
    kept. `coordinate_transformation_mode` is one of `half_pixel`,
    `pytorch_half_pixel`, `align_corners`, `asymmetric`,
    `tf_half_pixel_for_nn`; `nearest_mode` one of `round_prefer_floor`,
    `round_prefer_ceil`, `floor`, `ceil`; `scales` the scale of each
    spatial dimension that the coordinate mapping divides by (the given
    scale, or output / input size when ONNX gave sizes). Linear mode
    blends the two neighbours of each dimension, clamped to the input. The
    VJP is `ds.resize_grad`.

    ```mlir
    %y = ds.resize %x {mode = "linear", coordinate_transformation_mode =
        "half_pixel", nearest_mode = "floor", scales = array<f64: 2.0, 2.0>}
        : tensor<1x2x4x4xf32> -> tensor<1x2x8x8xf32>
    ```
  }];
  let arguments = (ins Ds_FloatTensor:$input, StrAttr:$mode,
                       StrAttr:$coordinate_transformation_mode,
                       StrAttr:$nearest_mode, DenseF64ArrayAttr:$scales);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Ds_ResizeGradOp : Ds_Op<"resize_grad", [Pure]> {
  let summary = "the gradient of ds.resize (its adjoint)";
  let description = [{
    Each element of `grad` (shaped as the resize's result) added, with the
    forward's weights, to the input elements it was sampled from; the
    result has the resize's input shape. The attributes are the
    `ds.resize`'s.
  }];
  let arguments = (ins Ds_FloatTensor:$grad, StrAttr:$mode,
                       StrAttr:$coordinate_transformation_mode,
                       StrAttr:$nearest_mode, DenseF64ArrayAttr:$scales);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "$grad attr-dict `:` type($grad) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Linear algebra and normalization
//===----------------------------------------------------------------------===//

def Ds_MatMulOp : Ds_Op<"matmul", [Pure]> {
  let summary = "numpy matmul with batch broadcasting";
  let description = [{
    ONNX `MatMul`: 1-D operands are promoted (and the added dimension
    removed from the result); leading dimensions broadcast.
  }];
  let arguments = (ins Ds_FloatTensor:$lhs, Ds_FloatTensor:$rhs);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Ds_GemmOp : Ds_Op<"gemm", [Pure]> {
  let summary = "alpha * op(A) * op(B) + beta * C";
  let description = [{
    ONNX `Gemm` on 2-D operands, `op` transposing when `trans_a`/`trans_b`
    is set; the optional `c` broadcasts to the result.
  }];
  let arguments = (ins Ds_FloatTensor:$a, Ds_FloatTensor:$b,
                       Optional<Ds_FloatTensor>:$c,
                       DefaultValuedAttr<F32Attr, "1.0">:$alpha,
                       DefaultValuedAttr<F32Attr, "1.0">:$beta,
                       DefaultValuedAttr<BoolAttr, "false">:$trans_a,
                       DefaultValuedAttr<BoolAttr, "false">:$trans_b);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = [{
    $a `,` $b (`,` $c^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

// Convolution (DsConv.cpp). The attributes of all three ops: `strides`,
// `dilations` (one per spatial dimension), `pads` (the begins, then the
// ends; the importer resolves ONNX's auto_pad) and `group`. The kernels
// are f32: `--ds-mixed-precision` keeps the three in f32.
class Ds_ConvBase<string mnemonic> : Ds_Op<mnemonic, [Pure, Ds_F32Island]> {
  let hasVerifier = 1;
}

def Ds_ConvOp : Ds_ConvBase<"conv"> {
  let summary = "N-D convolution (ONNX Conv)";
  let description = [{
    `input` is N x C x D1..Dk (k in 1..3), `weight` M x C/group x K1..Kk,
    the optional `bias` M; the result N x M x O1..Ok with
    `Oi = (Di + pad_begin + pad_end - dilation * (Ki - 1) - 1) / stride + 1`.
    ONNX's Conv imports as it and ConvTranspose as `ds.conv_grad_input`.

    ```mlir
    %y = ds.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>,
        dilations = array<i64: 1, 1>, group = 1 : i64}
        : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32>
    ```
  }];
  let arguments = (ins Ds_FloatTensor:$input, Ds_FloatTensor:$weight,
                       Optional<Ds_FloatTensor>:$bias,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                       DenseI64ArrayAttr:$dilations, I64Attr:$group);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
}

def Ds_ConvGradInputOp : Ds_ConvBase<"conv_grad_input"> {
  let summary = "the gradient of ds.conv with respect to its input";
  let description = [{
    The input-shaped result (its type gives the input's shape) of the
    convolution whose result gradient is `grad` and weight `weight`: the
    transposed convolution, which ONNX's ConvTranspose is too.
  }];
  let arguments = (ins Ds_FloatTensor:$grad, Ds_FloatTensor:$weight,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                       DenseI64ArrayAttr:$dilations, I64Attr:$group);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $weight attr-dict `:` functional-type(operands, results)
  }];
}

def Ds_ConvGradWeightOp : Ds_ConvBase<"conv_grad_weight"> {
  let summary = "the gradient of ds.conv with respect to its weight";
  let description = [{
    The weight-shaped result (its type gives the kernel's shape) of the
    convolution of `input` whose result gradient is `grad`.
  }];
  let arguments = (ins Ds_FloatTensor:$input, Ds_FloatTensor:$grad,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                       DenseI64ArrayAttr:$dilations, I64Attr:$group);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $grad attr-dict `:` functional-type(operands, results)
  }];
}

def Ds_SoftmaxOp : Ds_Op<"softmax", [Pure, SameOperandsAndResultType, Ds_F32Island]> {
  let summary = "softmax along one axis";
  let description = [{
    ONNX `Softmax` (opset 13 semantics) along the non-negative `axis`.
  }];
  let arguments = (ins Ds_FloatTensor:$input, I64Attr:$axis);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Ds_LogSoftmaxOp : Ds_Op<"log_softmax", [Pure, SameOperandsAndResultType, Ds_F32Island]> {
  let summary = "log of softmax along one axis";
  let description = [{
    ONNX `LogSoftmax` (opset 13 semantics) along the non-negative `axis`.
  }];
  let arguments = (ins Ds_FloatTensor:$input, I64Attr:$axis);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Ds_LayerNormOp : Ds_Op<"layer_norm", [Pure, Ds_F32Island]> {
  let summary = "layer normalization over the dimensions from axis on";
  let description = [{
    ONNX `LayerNormalization` (statistics in f32): normalizes over dimensions
    `axis..rank-1`; `scale` and the optional `bias` have exactly those
    dimensions.
  }];
  let arguments = (ins Ds_FloatTensor:$input, Ds_FloatTensor:$scale,
                       Optional<Ds_FloatTensor>:$bias, I64Attr:$axis,
                       F32Attr:$epsilon);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $scale (`,` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

def Ds_GatherOp : Ds_Op<"gather", [Pure]> {
  let summary = "gather slices of data along axis by indices";
  let description = [{
    ONNX `Gather`: result shape is `data[:axis] ++ indices ++ data[axis+1:]`.
    Negative indices count from the end. Embedding lookups are gathers.
  }];
  let arguments = (ins Ds_Tensor:$data, Ds_IndexTensor:$indices,
                       I64Attr:$axis);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = [{
    $data `,` $indices attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Ds_ReshapeOp : Ds_Op<"reshape", [Pure]> {
  let summary = "same elements, another static shape";
  let description = [{
    ONNX `Reshape`, `Flatten`, `Squeeze` and `Unsqueeze` all import as
    `ds.reshape`: the row-major element order is kept, the result type is the
    new shape.
  }];
  let arguments = (ins Ds_Tensor:$input);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

def Ds_ExpandOp : Ds_Op<"expand", [Pure]> {
  let summary = "broadcast to the result shape";
  let description = [{
    ONNX `Expand`: the operand broadcasts (numpy rules) to the result shape.
  }];
  let arguments = (ins Ds_Tensor:$input);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Ds_TransposeOp : Ds_Op<"transpose", [Pure]> {
  let summary = "permute dimensions";
  let description = [{
    ONNX `Transpose`: result dimension i is operand dimension `perm[i]`.
  }];
  let arguments = (ins Ds_Tensor:$input, DenseI64ArrayAttr:$perm);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Ds_ConcatOp : Ds_Op<"concat", [Pure]> {
  let summary = "concatenate along axis";
  let description = [{ ONNX `Concat` along the non-negative `axis`. }];
  let arguments = (ins Variadic<Ds_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "$inputs attr-dict `:` functional-type($inputs, $result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Ds_SplitOp : Ds_Op<"split", [Pure]> {
  let summary = "split along axis into the result sizes";
  let description = [{
    ONNX `Split`: the result types give the size of each part along `axis`;
    they add up to the operand's dimension.
  }];
  let arguments = (ins Ds_Tensor:$input, I64Attr:$axis);
  let results = (outs Variadic<Ds_Tensor>:$results);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($results)";
  let hasVerifier = 1;
}

def Ds_SliceOp : Ds_Op<"slice", [Pure]> {
  let summary = "strided slice with one start and step per dimension";
  let description = [{
    ONNX `Slice` normalized to every dimension: result element `i` along
    dimension `d` is operand element `starts[d] + i * steps[d]`; the result
    type gives the count. Steps may be negative, never zero.
  }];
  let arguments = (ins Ds_Tensor:$input, DenseI64ArrayAttr:$starts,
                       DenseI64ArrayAttr:$steps);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Ds_TriluOp : Ds_Op<"trilu", [Pure, SameOperandsAndResultType]> {
  let summary = "keep the upper or lower triangle of the last two dimensions";
  let description = [{
    ONNX `Trilu`: with `upper`, keeps elements with `j - i >= k`, else
    `j - i <= k`; the others become zero.
  }];
  let arguments = (ins Ds_Tensor:$input, BoolAttr:$upper, I64Attr:$k);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

class Ds_ReduceOp<string mnemonic, string desc>
    : Ds_Op<mnemonic, [Pure, Ds_F32Island, Ds_Reduction]> {
  let summary = desc;
  let description = desc # [{ over `axes` (sorted, non-negative, unique;
    never empty: "all axes" is spelled out). With `keepdims` the reduced
    dimensions stay as 1.
  }];
  let arguments = (ins Ds_NumericTensor:$input, DenseI64ArrayAttr:$axes,
                       BoolAttr:$keepdims);
  let results = (outs Ds_NumericTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() {
      return ::mlir::ds::detail::verifyReduceOp(getOperation(), getAxes(),
                                                getKeepdims());
    }
    int64_t $cppClass::getFlops() {
      return ::mlir::ds::detail::numElements(getInput().getType());
    }
  }];
}

def Ds_ReduceSumOp : Ds_ReduceOp<"reduce_sum", "sum">;
def Ds_ReduceMeanOp : Ds_ReduceOp<"reduce_mean", "mean">;
def Ds_ReduceMaxOp : Ds_ReduceOp<"reduce_max", "maximum">;

//===----------------------------------------------------------------------===//
// Training-graph ops
//===----------------------------------------------------------------------===//

def Ds_DropoutOp : Ds_Op<"dropout", [Pure]> {
  let summary = "dropout with its mask";
  let description = [{
    ONNX `Dropout`: in training, zeroes each element with probability `ratio`
    and scales the rest by `1 / (1 - ratio)`; the `mask` result says which
    were kept (the backward pass reuses it). With `ratio = 0` or without
    `training` the op is the identity and canonicalizes away once its mask is
    unused.
  }];
  let arguments = (ins Ds_FloatTensor:$input, F64Attr:$ratio,
                       BoolAttr:$training, OptionalAttr<I64Attr>:$seed);
  let results = (outs Ds_FloatTensor:$output, Ds_BoolTensor:$mask);
  let assemblyFormat = [{
    $input attr-dict `:` type($input) `->` type($output) `,` type($mask)
  }];
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
}

def Ds_SoftmaxCrossEntropyLossOp : Ds_Op<"softmax_cross_entropy_loss",
                                         [Pure, Ds_F32Island]> {
  let summary = "cross entropy of softmax(scores) against integer labels";
  let description = [{
    ONNX `SoftmaxCrossEntropyLoss`: `scores` is `N x C x d1..dk`, `labels`
    `N x d1..dk`; `reduction` is `none`, `sum` or `mean` (mean over the
    weights of the non-ignored labels); labels equal to `ignore_index` add
    nothing. The optional second result is log(softmax(scores)).
  }];
  let arguments = (ins Ds_FloatTensor:$scores, Ds_IndexTensor:$labels,
                       Optional<Ds_FloatTensor>:$weights, StrAttr:$reduction,
                       OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs Ds_FloatTensor:$loss,
                      Optional<Ds_FloatTensor>:$log_prob);
  let assemblyFormat = [{
    $scores `,` $labels (`,` $weights^)? attr-dict `:`
      functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Ds_NegativeLogLikelihoodLossOp : Ds_Op<"nll_loss", [Pure, Ds_F32Island]> {
  let summary = "negative log likelihood of log-probabilities";
  let description = [{
    ONNX `NegativeLogLikelihoodLoss`: `input` is `N x C x d1..dk`
    log-probabilities, `target` `N x d1..dk`; `reduction` and `ignore_index`
    as for `ds.softmax_cross_entropy_loss`.
  }];
  let arguments = (ins Ds_FloatTensor:$input, Ds_IndexTensor:$target,
                       Optional<Ds_FloatTensor>:$weight, StrAttr:$reduction,
                       OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs Ds_FloatTensor:$loss);
  let assemblyFormat = [{
    $input `,` $target (`,` $weight^)? attr-dict `:`
      functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Gradient ops (built by autodiff)
//===----------------------------------------------------------------------===//

def Ds_GatherGradOp : Ds_Op<"gather_grad", [Pure]> {
  let summary = "gradient of gather with respect to its data";
  let description = [{
    A zero tensor of the data's shape (the result type) into which each
    slice of `grad` is added at the row `indices` names along `axis`
    (repeated indices accumulate: tied and repeated embeddings).
  }];
  let arguments = (ins Ds_FloatTensor:$grad, Ds_IndexTensor:$indices,
                       I64Attr:$axis);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $indices attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Ds_LayerNormGradOp : Ds_Op<"layer_norm_grad", [Pure]> {
  let summary = "gradients of layer_norm: input, scale and bias";
  let description = [{
    From the output gradient, the input and the scale, recomputes the
    statistics and returns the gradients of the input, the scale and the
    bias (the last two reduced over the leading dimensions).
  }];
  let arguments = (ins Ds_FloatTensor:$grad, Ds_FloatTensor:$input,
                       Ds_FloatTensor:$scale, I64Attr:$axis, F32Attr:$epsilon);
  let results = (outs Ds_FloatTensor:$input_grad, Ds_FloatTensor:$scale_grad,
                      Ds_FloatTensor:$bias_grad);
  let assemblyFormat = [{
    $grad `,` $input `,` $scale attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Ds_SoftmaxGradOp : Ds_Op<"softmax_grad", [Pure]> {
  let summary = "gradient of softmax (or log_softmax) from its output";
  let description = [{
    With `log = false`: `dx = y * (dy - sum(dy * y))` along `axis`, `y` the
    softmax output. With `log = true`: `dx = dy - exp(y) * sum(dy)`, `y` the
    log_softmax output.
  }];
  let arguments = (ins Ds_FloatTensor:$grad, Ds_FloatTensor:$output,
                       I64Attr:$axis, BoolAttr:$log);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $output attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Ds_LossGradOp : Ds_Op<"loss_grad", [Pure]> {
  let summary = "gradient of softmax_cross_entropy_loss or nll_loss";
  let description = [{
    The gradient of the scores (`softmax = true`: softmax cross entropy,
    `softmax(scores) - onehot`) or of the log-probabilities (`softmax =
    false`: NLL, `-onehot`), times the label weight, zero at ignored labels,
    scaled by the loss gradient and the reduction (mean divides by the sum
    of the weights of the non-ignored labels).
  }];
  let arguments = (ins Ds_FloatTensor:$grad, Ds_FloatTensor:$scores,
                       Ds_IndexTensor:$labels, Optional<Ds_FloatTensor>:$weights,
                       StrAttr:$reduction, OptionalAttr<I64Attr>:$ignore_index,
                       BoolAttr:$softmax);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $scores `,` $labels (`,` $weights^)? attr-dict `:`
      functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Ds_SliceGradOp : Ds_Op<"slice_grad", [Pure]> {
  let summary = "gradient of slice: the slice's gradient placed in zeros";
  let arguments = (ins Ds_Tensor:$grad, DenseI64ArrayAttr:$starts,
                       DenseI64ArrayAttr:$steps);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "$grad attr-dict `:` type($grad) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Optimizers (built by --ds-optimizer)
//===----------------------------------------------------------------------===//

def Ds_AdamOp : Ds_Op<"adam", [Pure, Ds_OptimizerStep,
                                AttrSizedOperandSegments]> {
  let summary = "one Adam or AdamW step, PyTorch semantics";
  let description = [{
    With `t` = `step` (1 for the first step):
    `m = b1 m + (1-b1) g`, `v = b2 v + (1-b2) g^2`, and
    `p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)`.
    `weight_decay` adds `wd * p` to `g` (Adam) or, with `decoupled`, scales
    `p` by `1 - lr * wd` first (AdamW). Computed in f32 in torch's order.
    With `lamb`, the update `u = m_hat / (sqrt(v_hat) + eps) + wd p` is
    scaled by the trust ratio `||p|| / ||u||` clamped to [`min_coeff`,
    `max_coeff`] (1 when either norm is 0), as DeepSpeed's FusedLamb. With `bias_correction`
    false (DeepSpeed's option) the `1 - b^t` factors are 1.
    `lr` is scaled by the `schedule` at run time (docs/training.md). With
    `accum_steps` K > 1 and a `grad_accum` buffer, micro-steps add their
    gradient to it and every K-th applies the mean of the K gradients.
    A `clip` coefficient (an f32 scalar; only with `grad_accum`) scales
    that mean: gradient clipping over the accumulated gradient.

    `norm_over_ranks` (only with `lamb`; ZeRO 1-3): the operands are this
    rank's partition of each tensor, and the kernel all-gathers the
    partition's sums of squares so that the trust ratio is the whole
    tensor's (docs/compression.md).
  }];
  let arguments = (ins Ds_FloatTensor:$param, Ds_FloatTensor:$grad,
                       Ds_FloatTensor:$exp_avg, Ds_FloatTensor:$exp_avg_sq,
                       StaticShapeTensorOf<[I64]>:$step,
                       Optional<Ds_FloatTensor>:$grad_accum,
                       Optional<F32Tensor>:$clip_coef, F64Attr:$lr,
                       F64Attr:$beta1, F64Attr:$beta2, F64Attr:$eps,
                       F64Attr:$weight_decay, BoolAttr:$decoupled,
                       DefaultValuedAttr<BoolAttr, "false">:$lamb,
                       DefaultValuedAttr<StrAttr, "\"constant\"">:$schedule,
                       DefaultValuedAttr<I64Attr, "0">:$warmup_steps,
                       DefaultValuedAttr<I64Attr, "0">:$total_steps,
                       DefaultValuedAttr<F64Attr, "0.0">:$min_lr,
                       DefaultValuedAttr<I64Attr, "1">:$accum_steps,
                       DefaultValuedAttr<BoolAttr, "true">:$bias_correction,
                       DefaultValuedAttr<F64Attr, "10.0">:$max_coeff,
                       DefaultValuedAttr<F64Attr, "0.01">:$min_coeff,
                       DefaultValuedAttr<BoolAttr, "false">:$norm_over_ranks);
  let results = (outs Ds_FloatTensor:$new_param, Ds_FloatTensor:$new_exp_avg,
                      Ds_FloatTensor:$new_exp_avg_sq,
                      Optional<Ds_FloatTensor>:$new_grad_accum);
  let assemblyFormat = [{
    $param `,` $grad `,` $exp_avg `,` $exp_avg_sq `,` $step (`,` $grad_accum^)?
      (`clip` $clip_coef^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Ds_SgdOp : Ds_Op<"sgd", [Pure, Ds_OptimizerStep,
                              AttrSizedOperandSegments]> {
  let summary = "one SGD step with momentum and Nesterov, PyTorch semantics";
  let description = [{
    `d = g + wd p`; with momentum: `buf = d` at step 1, else
    `buf = momentum buf + (1 - dampening) d`, and `d = d + momentum buf`
    (Nesterov) or `d = buf`; `p -= lr d`. Accumulation (`grad_accum`,
    `accum_steps`) and the `clip` coefficient as for `ds.adam`.
  }];
  let arguments = (ins Ds_FloatTensor:$param, Ds_FloatTensor:$grad,
                       Ds_FloatTensor:$momentum_buffer,
                       StaticShapeTensorOf<[I64]>:$step,
                       Optional<Ds_FloatTensor>:$grad_accum,
                       Optional<F32Tensor>:$clip_coef, F64Attr:$lr,
                       F64Attr:$momentum, F64Attr:$dampening,
                       F64Attr:$weight_decay, BoolAttr:$nesterov,
                       DefaultValuedAttr<StrAttr, "\"constant\"">:$schedule,
                       DefaultValuedAttr<I64Attr, "0">:$warmup_steps,
                       DefaultValuedAttr<I64Attr, "0">:$total_steps,
                       DefaultValuedAttr<F64Attr, "0.0">:$min_lr,
                       DefaultValuedAttr<I64Attr, "1">:$accum_steps);
  let results = (outs Ds_FloatTensor:$new_param,
                      Ds_FloatTensor:$new_momentum_buffer,
                      Optional<Ds_FloatTensor>:$new_grad_accum);
  let assemblyFormat = [{
    $param `,` $grad `,` $momentum_buffer `,` $step (`,` $grad_accum^)?
      (`clip` $clip_coef^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Ds_OnnxUpdateOp : Ds_Op<"onnx_update", [Pure, Ds_OptimizerStep]> {
  let summary = "one parameter's update by an ONNX training op (ONNX semantics)";
  let description = [{
    The update rule of ONNX's `ai.onnx.preview.training` Adam, Adagrad or
    Momentum (`kind` = adam, adagrad, momentum, nesterov) for one tensor:
    operands R (learning rate), T (update count), X, G, then the states
    (Adam: V, H; Adagrad: H; Momentum: V); results X_new and the new states.
    ONNX's rules differ from PyTorch's (where eps sits, the learning-rate
    adjustment, `norm_coefficient`): these follow the ONNX operator spec.
  }];
  let arguments = (ins Variadic<Ds_Tensor>:$operands, StrAttr:$kind,
                       F64Attr:$alpha, F64Attr:$beta, F64Attr:$epsilon,
                       F64Attr:$decay_factor, F64Attr:$norm_coefficient,
                       F64Attr:$norm_coefficient_post);
  let results = (outs Variadic<Ds_FloatTensor>:$results);
  let assemblyFormat = "$operands attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Collectives (data parallel)
//===----------------------------------------------------------------------===//

// Collectives are not Pure: every rank must issue the same collectives in
// the same order, so CSE may not merge two of them (ZeRO-3 gathers a
// parameter again for the backward pass on purpose) and DCE may not drop one.
def Ds_Collective : MemoryEffects<[MemRead, MemWrite]>;
// The ops that communicate: kind and bytes (and the group where it is not
// the `group` attribute) per op, in DsCollectives.cpp.
class Ds_CollectiveOp<list<string> overrides = []>
    : DeclareOpInterfaceMethods<Ds_CollectiveOpInterface,
                                !listconcat(["getCollectiveKind"], overrides)>;

def Ds_AllReduceOp : Ds_Op<"all_reduce", [SameOperandsAndResultType,
    Ds_Elementwise, Ds_Collective, Ds_CollectiveOp<>]> {
  let summary = "reduce a tensor over the ranks of a group";
  let description = [{
    Every rank of communicator group `group` contributes its tensor; every
    rank receives the `sum` or `mean` (`reduction`). All ranks run the same
    plan, so collectives happen in the same order everywhere.
  }];
  let arguments = (ins Ds_FloatTensor:$input, StrAttr:$reduction,
                       I64Attr:$group);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Ds_AllGatherOp : Ds_Op<"all_gather", [Ds_Collective, Ds_CollectiveOp<>]> {
  let summary = "concatenate every rank's 1-D shard in rank order";
  let description = [{
    Every rank of group `group` contributes its 1-D shard of S elements;
    every rank receives the N*S elements of all shards, rank 0's first.
    ZeRO uses it to rebuild a parameter from its shards (stage 3, before each
    use) or from the updated shards (stages 1 and 2, after the optimizer).

    ```mlir
    %full = ds.all_gather %shard {group = 0 : i64} : tensor<8xf32> -> tensor<16xf32>
    ```
  }];
  let arguments = (ins Ds_FloatTensor:$input, I64Attr:$group);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Ds_ReduceScatterOp : Ds_Op<"reduce_scatter",
    [Ds_Collective, Ds_CollectiveOp<>]> {
  let summary = "reduce a 1-D tensor over the ranks, each keeping its shard";
  let description = [{
    The N*S elements of every rank of group `group` are reduced (`sum` or
    `mean`); rank r receives elements [r*S, (r+1)*S) of the result. ZeRO
    stages 1-3 reduce gradients with it.
  }];
  let arguments = (ins Ds_FloatTensor:$input, StrAttr:$reduction,
                       I64Attr:$group);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Ds_ShardOp : Ds_Op<"shard", [Pure]> {
  let summary = "this rank's slice of a 1-D tensor every rank holds whole";
  let description = [{
    Rank r of group `group` (N ranks) takes elements [r*S, (r+1)*S) of its
    own N*S-element operand; no communication. ZeRO stages 1 and 2 take the
    rank's part of a replicated parameter with it for the optimizer.
  }];
  let arguments = (ins Ds_FloatTensor:$input, I64Attr:$group);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Ds_CheckOverflowOp : Ds_Op<"check_overflow",
    [Ds_Collective, Ds_CollectiveOp<["getBytesPerRank"]>]> {
  let summary = "1 if any element of any operand is inf or NaN on any rank";
  let description = [{
    The loss scaler's overflow check: the result is 1.0 when a gradient
    holds inf or NaN on this rank or any other (a reduction over ranks),
    else 0.0. It also tells the runtime that this step overflowed: the
    optimizer kernels after it then leave parameters and state untouched,
    and the step does not count. Not `Pure`: it must run, once, before the
    optimizer.
  }];
  let arguments = (ins Variadic<Ds_FloatTensor>:$grads);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "$grads attr-dict `:` functional-type($grads, $result)";
  let hasVerifier = 1;
}

def Ds_TpIdentityOp : Ds_Op<"tp_identity", [SameOperandsAndResultType,
                                           Ds_Elementwise]> {
  let summary = "tensor parallelism: the input of a column-split matmul";
  let description = [{
    Megatron's `f`: the identity in the forward pass; its gradient is the
    sum over the ranks of tensor-parallel group `group` (each rank's
    column slice contributes part of the input's gradient). Inserted by
    `--ds-tensor-parallel` before autodiff.
  }];
  let arguments = (ins Ds_FloatTensor:$input, I64Attr:$group);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Ds_TpAllReduceOp : Ds_Op<"tp_all_reduce", [SameOperandsAndResultType,
    Ds_Elementwise, Ds_Collective, Ds_CollectiveOp<>]> {
  let summary = "tensor parallelism: the output of a row-split matmul";
  let description = [{
    Megatron's `g`: the sum of the ranks' partial results over
    tensor-parallel group `group` in the forward pass; its gradient is the
    identity (every rank holds the same output gradient). Lowered to an
    `all_reduce` kernel.
  }];
  let arguments = (ins Ds_FloatTensor:$input, I64Attr:$group);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Ds_SpAllGatherOp : Ds_Op<"sp_all_gather",
    [Ds_Collective, Ds_CollectiveOp<>]> {
  let summary = "sequence parallelism: the whole activation from its row blocks";
  let description = [{
    Every rank of tensor-parallel group `group` holds rows
    `[r*n, (r+1)*n)` of dimension `axis`; the result is the whole tensor on
    every rank (an all-gather). Its gradient: with
    `partial_grad` (the input of a column-split block, whose gradient is a
    partial sum on each rank) a reduce-scatter, Megatron's `g-bar`;
    without, the rank's own rows of the gradient (`ds.sp_slice`).
    Inserted by `--ds-tensor-parallel` with `sequence-parallel`.
  }];
  let arguments = (ins Ds_FloatTensor:$input, I64Attr:$axis, I64Attr:$group,
                       BoolAttr:$partial_grad);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Ds_SpReduceScatterOp : Ds_Op<"sp_reduce_scatter",
    [Ds_Collective, Ds_CollectiveOp<>]> {
  let summary = "sequence parallelism: a block's partial sums, each rank its rows";
  let description = [{
    The sum over tensor-parallel group `group` of every rank's partial
    result; rank r keeps rows `[r*n, (r+1)*n)` of dimension `axis` (a
    reduce-scatter, Megatron's `g` with sequence parallelism). Its
    gradient is the all-gather of the rows' gradients.
  }];
  let arguments = (ins Ds_FloatTensor:$input, I64Attr:$axis, I64Attr:$group);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Ds_SpSliceOp : Ds_Op<"sp_slice", [Pure]> {
  let summary = "sequence parallelism: this rank's rows of a replicated tensor";
  let description = [{
    Rows `[r*n, (r+1)*n)` of dimension `axis` of a tensor every rank of
    tensor-parallel group `group` holds whole (r: the rank in the group).
    No communication; its gradient is the all-gather of the rows'
    gradients.
  }];
  let arguments = (ins Ds_FloatTensor:$input, I64Attr:$axis, I64Attr:$group);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Ds_VocabGatherOp : Ds_Op<"vocab_gather", [Pure]> {
  let summary = "tensor parallelism: an embedding lookup in a vocabulary slice";
  let description = [{
    `table` is rank r's slice of rows `[r*n, (r+1)*n)` of the whole
    embedding table (n rows; r is the rank in tensor-parallel group
    `group`). Each index inside the slice gives its row, any other index a
    zero row, so the sum over the group (a `ds.tp_all_reduce` after it) is
    the whole table's lookup. An index outside `[0, vocab)` is an error
    (`vocab`: the table's true size when the slices are padded to split a
    vocabulary T does not divide, else n*T). Inserted by
    `--ds-tensor-parallel` for a vocabulary-parallel embedding.

    ```mlir
    %e = ds.vocab_gather %wte, %ids {group = 1 : i64}
        : (tensor<64x64xf32>, tensor<4x32xi64>) -> tensor<4x32x64xf32>
    ```
  }];
  let arguments = (ins Ds_FloatTensor:$table, Ds_IndexTensor:$indices,
                       I64Attr:$group, OptionalAttr<I64Attr>:$vocab);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = [{
    $table `,` $indices attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Ds_VocabGatherGradOp : Ds_Op<"vocab_gather_grad", [Pure]> {
  let summary = "gradient of vocab_gather with respect to its table slice";
  let description = [{
    A zero tensor of the slice's shape into which each row of `grad` is
    added at the row its index names, for the indices inside this rank's
    slice (see `ds.vocab_gather`).
  }];
  let arguments = (ins Ds_FloatTensor:$grad, Ds_IndexTensor:$indices,
                       I64Attr:$group, OptionalAttr<I64Attr>:$vocab);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $indices attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Ds_VocabCrossEntropyOp : Ds_Op<"vocab_cross_entropy",
    [Ds_Collective, Ds_F32Island, Ds_CollectiveOp<["getBytesPerRank"]>]> {
  let summary = "tensor parallelism: cross entropy over a split vocabulary";
  let description = [{
    `ds.softmax_cross_entropy_loss` of `N x C` scores whose classes are
    split over tensor-parallel group `group`: `scores` holds rank r's
    columns `[r*C, (r+1)*C)`, `labels` (`N`) the whole labels on every rank.
    The kernel exchanges each row's maximum (all-gather), then the sums of
    exponentials and the target scores (one all-reduce of 2N floats), so no
    rank ever holds the whole row. `loss` is the same on every rank of the
    group; `lse` is each row's log-sum-exp, kept for the gradient.
    `reduction` and `ignore_index` as for `ds.softmax_cross_entropy_loss`.
    With `vocab`, the classes from `vocab` on are padding (a vocabulary T
    does not divide): they take no part in the softmax.
    Not `Pure`: it communicates.
  }];
  let arguments = (ins Ds_FloatTensor:$scores, Ds_IndexTensor:$labels,
                       StrAttr:$reduction, OptionalAttr<I64Attr>:$ignore_index,
                       I64Attr:$group, OptionalAttr<I64Attr>:$vocab);
  let results = (outs Ds_FloatTensor:$loss, Ds_FloatTensor:$lse);
  let assemblyFormat = [{
    $scores `,` $labels attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Ds_VocabCrossEntropyGradOp : Ds_Op<"vocab_cross_entropy_grad", [Pure]> {
  let summary = "gradient of vocab_cross_entropy with respect to its scores";
  let description = [{
    `exp(scores - lse) - onehot` on this rank's columns (the label's column
    only on the rank that holds it), zero at ignored labels, times the loss
    gradient and divided by the count of non-ignored labels for `mean`. No
    communication: `lse` carries the whole row's statistics.
  }];
  let arguments = (ins Ds_FloatTensor:$grad, Ds_FloatTensor:$scores,
                       Ds_IndexTensor:$labels, Ds_FloatTensor:$lse,
                       StrAttr:$reduction, OptionalAttr<I64Attr>:$ignore_index,
                       I64Attr:$group, OptionalAttr<I64Attr>:$vocab);
  let results = (outs Ds_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $scores `,` $labels `,` $lse attr-dict `:`
      functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Ds_TransferOp : Ds_Op<"transfer", [AllTypesMatch<["input", "result"]>]> {
  let summary = "copy a tensor to another memory space (offload)";
  let description = [{
    The same tensor in memory space `to`: `host` (pinned host memory, the
    host arena), `device` (the device arena) or `nvme` (a file-backed
    parameter or state slot; only as an update's writer). Inserted by
    `--ds-offload`; the plan keeps it as an explicit, scheduled copy, so
    the report can tell how much of its time hides behind compute. Not
    `Pure`: where it is placed is the schedule.

    ```mlir
    %h = ds.transfer %g {to = "host"} : tensor<64xbf16>
    ```
  }];
  let arguments = (ins Ds_Tensor:$input, StrAttr:$to);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}


//===----------------------------------------------------------------------===//
// Pipeline parallelism
//===----------------------------------------------------------------------===//

def Ds_PipeSendOp : Ds_Op<"pipe_send",
    [Ds_Collective, Ds_CollectiveOp<["getCommGroup"]>]> {
  let summary = "pipeline parallelism: send a tensor to another stage";
  let description = [{
    Sends `input` to the rank of stage `this + peer` with the same
    data- and tensor-parallel index (`peer` is +1 for a forward
    activation, -1 for the gradient of a received one). `tag` orders the
    tensors one micro-batch sends. Inserted by the pipeline split; the
    runtime copies the tensor out and sends it without blocking.

    ```mlir
    ds.pipe_send %x {peer = 1 : i64, tag = 0 : i64} : tensor<2x8x32xf32>
    ```
  }];
  let arguments = (ins Ds_Tensor:$input, I64Attr:$peer, I64Attr:$tag);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Ds_PipeRecvOp : Ds_Op<"pipe_recv",
    [Ds_Collective, Ds_CollectiveOp<["getCommGroup", "getBytesPerRank"]>]> {
  let summary = "pipeline parallelism: receive a tensor from another stage";
  let description = [{
    The tensor the rank of stage `this + peer` sent with the same `tag`
    for this micro-batch: a forward activation (`peer = -1`) or the
    gradient of one this stage sent (`peer = 1`, the backward's seed).

    ```mlir
    %x = ds.pipe_recv {peer = -1 : i64, tag = 0 : i64} : tensor<2x8x32xf32>
    ```
  }];
  let arguments = (ins I64Attr:$peer, I64Attr:$tag);
  let results = (outs Ds_Tensor:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

def Ds_PipeMarkOp : Ds_Op<"pipe_mark", [Ds_Collective]> {
  let summary = "pipeline parallelism: where a stage's backward section starts";
  let description = [{
    Splits a stage's program into its forward section (run when the
    schedule says F for a micro-batch) and its backward section (B).
    No collective is in flight across it; what the forward leaves for
    the backward is kept per micro-batch by the runtime.
  }];
  let assemblyFormat = "attr-dict";
}

def Ds_TiedGradSumOp : Ds_Op<"tied_grad_sum", [Ds_Collective,
    Ds_CollectiveOp<["getCommGroup", "getBytesPerRank"]>]> {
  let summary = "pipeline parallelism: the gradient of a parameter several stages use";
  let description = [{
    A parameter used by more than one stage (GPT-2's tied embedding and
    output weights) is held by each; their optimizers must see the sum of
    every stage's gradient. On the last micro-batch of a step
    (`(step - 1) % accum_steps == accum_steps - 1`) this stage sends its
    total (`grad_accum` + `grad`) to the stages `this + d` for `d` in
    `peers`, and `result` is the sum of every stage's total in stage order
    (so each copy updates identically) with `new_grad_accum` zero; on the
    other micro-batches they are `grad` and `grad_accum`. `tied_id` tells
    the parameters apart on the wire.
  }];
  let arguments = (ins Ds_FloatTensor:$grad, Ds_Tensor:$step,
                       Optional<Ds_FloatTensor>:$grad_accum,
                       DenseI64ArrayAttr:$peers, I64Attr:$accum_steps,
                       I64Attr:$tied_id);
  let results = (outs Ds_FloatTensor:$result,
                      Optional<Ds_FloatTensor>:$new_grad_accum);
  let assemblyFormat = [{
    $grad `,` $step (`,` $grad_accum^)? attr-dict `:` functional-type(operands, results)
  }];
}

// Fusion (issue 24): ds.fused_elementwise.
include "ds/Dialect/Ds/IR/DsFused.td"
// Fused attention (issue 24 item 2).
include "ds/Dialect/Ds/IR/DsAttention.td"
// Multi-tensor optimizer steps (issue 24 item 3).
include "ds/Dialect/Ds/IR/DsMultiTensor.td"

#endif // DS_DIALECT_DS_IR_DSOPS_TD
