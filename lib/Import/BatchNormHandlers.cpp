//===- BatchNormHandlers.cpp - ONNX BatchNormalization to ds --------------===//
//
// Part of the ds project.
//
// BatchNormalization is spelled with existing ds ops, so that its gradient
// (dX, dScale, dBias exactly as torch's) comes from the parts' VJPs and
// every backend, ZeRO stage, precision and recompute takes it as it is.
// With C the channel axis 1 and A the other axes, n the count over A:
//
//   training_mode=1:  S1 = ReduceSum_A(x)           mean = S1 / n
//                     d  = x - mean                 S2 = ReduceSum_A(d * d)
//                     var = S2 / n (biased)
//   eval:             mean, var = the running statistics (constants of the
//                     step; only with --allow-eval-export)
//   y = d * (1 / sqrt(var + epsilon)) * scale + bias
//
// Every op of it computes in f32 (`ds.f32_island`: the mixed-precision
// pass treats it as an f32 island), so the statistics are f32 under
// bf16/fp16. The two partial sums carry `ds.batch_stat` and the divisions
// by n `ds.batch_count` (0, or 1 for the unbiased variance's n - 1):
// `--ds-sync-batchnorm` all-reduces the sums over the data-parallel ranks
// and divides by the global count.
//
// The running statistics: when input 3 and 4 are initializers (buffers),
// their new values are step results that write them (`ds.update`; only
// when the compile trains: ImportOptions::updateRunningStats), by
// torch's rule running = m * running + (1 - m) * batch with m the ONNX
// momentum (torch's 1 - momentum) and the unbiased batch variance for
// running_var, as torch updates them. The node's own outputs 1 and 2 keep
// the ONNX operator's definition (the biased variance), for graphs that
// read them.
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

namespace mlir::ds::onnx_import {
namespace {

/// The ops of one BatchNormalization node, in f32.
class BatchNormBuilder {
public:
  explicit BatchNormBuilder(NodeContext &n) : n(n), b(n.builder()) {}

  /// Marks `v`'s op as computed in f32 and returns `v`.
  Value f32(Value v, StringRef extra = {}, Attribute value = {}) {
    Operation *op = v.getDefiningOp();
    op->setAttr("ds.f32_island", b.getUnitAttr());
    if (!extra.empty())
      op->setAttr(extra, value ? value : b.getUnitAttr());
    return v;
  }
  Value cast(Value v, Type elt) {
    auto t = cast_type(v);
    if (t.getElementType() == elt)
      return v;
    return f32(CastOp::create(b, n.loc, t.clone(elt), v));
  }
  Value scalar(double v) {
    auto t = RankedTensorType::get({}, b.getF32Type());
    return n.constant(
        t, DenseElementsAttr::get(t, ArrayRef<float>(static_cast<float>(v))));
  }
  template <typename OpTy> Value binary(Value x, Value y) {
    auto tx = cast_type(x), ty = cast_type(y);
    FailureOr<shapes::Shape> shape =
        shapes::broadcast(tx.getShape(), ty.getShape(), n.emitFn());
    return f32(OpTy::create(b, n.loc,
                            RankedTensorType::get(*shape, b.getF32Type()), x, y));
  }
  /// A per-channel vector (C) as 1 x C x 1 ... for broadcasting against x.
  Value channels(Value v, int64_t rank) {
    v = cast(v, b.getF32Type());
    SmallVector<int64_t> shape(rank, 1);
    shape[1] = cast_type(v).getDimSize(0);
    return f32(ReshapeOp::create(b, n.loc,
                                 RankedTensorType::get(shape, b.getF32Type()), v));
  }
  /// The sum of `x` over every axis but 1, kept: one batch statistic.
  Value batchSum(Value x) {
    auto t = cast_type(x);
    SmallVector<int64_t> axes{0}, shape(t.getRank(), 1);
    for (int64_t d = 2; d < t.getRank(); ++d)
      axes.push_back(d);
    shape[1] = t.getDimSize(1);
    return f32(ReduceSumOp::create(b, n.loc, RankedTensorType::get(shape, b.getF32Type()),
                                   x, b.getDenseI64ArrayAttr(axes),
                                   b.getBoolAttr(true)),
               "ds.batch_stat");
  }
  /// `sum / (count - offset)`, the division that sync-batchnorm rescales.
  Value perCount(Value sum, int64_t count, int64_t offset) {
    Value d = binary<DivOp>(sum, scalar(static_cast<double>(count - offset)));
    return f32(d, "ds.batch_count", b.getI64IntegerAttr(offset));
  }
  /// `m * running + (1 - m) * batch` for a C vector `running` and a
  /// 1 x C x 1... `batch`, as a C vector of `running`'s type.
  Value momentum(Value running, Value batch, double m) {
    auto rt = cast_type(running);
    Value flat = f32(ReshapeOp::create(
        b, n.loc, RankedTensorType::get(rt.getShape(), b.getF32Type()), batch));
    Value old = binary<MulOp>(cast(running, b.getF32Type()), scalar(m));
    Value mixed = binary<AddOp>(old, binary<MulOp>(flat, scalar(1.0 - m)));
    return cast(mixed, rt.getElementType());
  }

  static RankedTensorType cast_type(Value v) {
    return llvm::cast<RankedTensorType>(v.getType());
  }

private:
  NodeContext &n;
  OpBuilder &b;
};

/// Checks the node's inputs, attributes and outputs; returns n (the count
/// over every axis but the channel axis).
FailureOr<int64_t> checkBatchNorm(NodeContext &n, bool training) {
  if (failed(n.expectInputs(5, 5)) || failed(n.requireFloat(0)))
    return failure();
  ArrayRef<int64_t> x = n.shape(0);
  if (x.size() < 2)
    return n.error() << "expects an input of rank >= 2 (N x C x ...), got "
                     << shapeStr(x);
  for (size_t i = 1; i < 5; ++i) {
    if (failed(n.requireFloat(i)))
      return failure();
    if (n.shape(i).size() != 1 || n.shape(i)[0] != x[1])
      return n.error() << "input " << i << " must be 1-D of the " << x[1]
                       << " channels, got " << shapeStr(n.shape(i));
  }
  if (n.opset() < 9 && n.intAttr("spatial", 1) != 1)
    return n.error() << "spatial=0 (statistics per element) is not supported";
  if (n.opset() < 14 && n.numOutputs() > 1)
    return n.error() << "the training outputs of BatchNormalization before "
                        "opset 14 (saved mean and variance) are not "
                        "supported; export with opset 14 or later";
  if (!training && n.numOutputs() > 1)
    return n.error() << "has " << n.numOutputs()
                     << " outputs without training_mode=1 (ONNX allows 1)";
  int64_t count = 1;
  for (size_t d = 0; d < x.size(); ++d)
    if (d != 1)
      count *= x[d];
  if (training && count < 2)
    return n.error() << "training mode needs more than one value per channel "
                        "(the input "
                     << shapeStr(x)
                     << " has one), as torch requires";
  return count;
}

/// The initializer name of input `i` when it is a parameter argument (a
/// buffer the step can update; marked `ds.running_stat`, which the
/// importer never finds trainable), else empty.
std::string bufferName(NodeContext &n, size_t i) {
  auto arg = dyn_cast<BlockArgument>(n.input(i));
  if (!arg || !n.importer.paramData.count(arg))
    return "";
  auto func = cast<func::FuncOp>(arg.getOwner()->getParentOp());
  func.setArgAttr(arg.getArgNumber(), "ds.running_stat",
                  n.builder().getUnitAttr());
  return n.node.input(i);
}

LogicalResult batchNorm(NodeContext &n) {
  bool training = n.intAttr("training_mode", 0) == 1;
  FailureOr<int64_t> count = checkBatchNorm(n, training);
  if (failed(count))
    return failure();
  for (size_t stat : {3, 4})
    for (size_t affine : {1, 2})
      if (n.input(stat) == n.input(affine))
        return n.error() << "input " << stat << " (the running "
                         << (stat == 3 ? "mean" : "variance")
                         << ") is the same tensor as input " << affine
                         << " (the " << (affine == 1 ? "scale" : "bias")
                         << "): the export merged initializers of equal "
                            "value (torch's eval-mode export does); export "
                            "for training with ds.export";
  BatchNormBuilder bn(n);
  OpBuilder &b = n.builder();
  Type f32 = b.getF32Type();
  auto xType = BatchNormBuilder::cast_type(n.input(0));
  int64_t rank = xType.getRank();
  double eps = n.floatAttr("epsilon", 1e-5f);
  double m = n.floatAttr("momentum", 0.9f);
  Value x = bn.cast(n.input(0), f32);

  Value mean, centered, var, sumSq;
  // The plan's eval section refuses batch statistics (EvalSection.cpp).
  if (Operation *at = b.getInsertionBlock()->getParentOp(); training && at)
    if (auto module = at->getParentOfType<ModuleOp>())
      module->setAttr("ds.batch_statistics", b.getUnitAttr());
  if (training) {
    mean = bn.perCount(bn.batchSum(x), *count, 0);
    centered = bn.binary<SubOp>(x, mean);
    sumSq = bn.batchSum(bn.binary<MulOp>(centered, centered));
    var = bn.perCount(sumSq, *count, 0);
  } else {
    (void)bufferName(n, 3); // constants of the step, never trained
    (void)bufferName(n, 4);
    mean = bn.channels(n.input(3), rank);
    var = bn.channels(n.input(4), rank);
    centered = bn.binary<SubOp>(x, mean);
  }
  Value invStd = bn.f32(ReciprocalOp::create(
      b, n.loc, bn.f32(SqrtOp::create(b, n.loc, bn.binary<AddOp>(var, bn.scalar(eps))))));
  Value y = bn.binary<MulOp>(bn.binary<MulOp>(centered, invStd),
                             bn.channels(n.input(1), rank));
  y = bn.binary<AddOp>(y, bn.channels(n.input(2), rank));
  SmallVector<Value> outs{bn.cast(y, xType.getElementType())};
  if (!training)
    return n.bind(outs);

  // The node's outputs 1 and 2 (ONNX's definition: the biased variance).
  outs.push_back(bn.momentum(n.input(3), mean, m));
  outs.push_back(bn.momentum(n.input(4), var, m));
  outs.resize(std::min<size_t>(outs.size(), n.numOutputs()));

  // The buffers' new values (torch's rule: the unbiased variance); a
  // compile that does not train leaves them as they are.
  std::string meanName = bufferName(n, 3), varName = bufferName(n, 4);
  if (!n.importer.options.updateRunningStats)
    return n.bind(outs);
  auto &updates = n.importer.stateUpdates;
  for (const std::string &name : {meanName, varName})
    if (!name.empty() && llvm::any_of(updates, [&](const auto &u) {
          return u.first == name;
        }))
      return n.error() << "running statistic '" << name
                       << "' is updated by two BatchNormalization nodes";
  if (!meanName.empty())
    updates.push_back({meanName, bn.momentum(n.input(3), mean, m)});
  if (!varName.empty()) {
    Value unbiased = bn.perCount(sumSq, *count, 1);
    updates.push_back({varName, bn.momentum(n.input(4), unbiased, m)});
  }
  return n.bind(outs);
}

} // namespace

void registerBatchNormHandlers(HandlerTable &t) {
  t.add("BatchNormalization", batchNorm);
}

} // namespace mlir::ds::onnx_import
