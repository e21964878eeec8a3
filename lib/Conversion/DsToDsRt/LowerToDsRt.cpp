//===- LowerToDsRt.cpp - ds tensors to dsrt buffers and kernels -----------===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#include "ds/Transforms/Passes.h"

#include "mlir/IR/IRMapping.h"

namespace mlir::ds {
#define GEN_PASS_DEF_LOWERTODSRTPASS
#include "ds/Transforms/Passes.h.inc"

namespace {

MemRefType bufferType(Type tensor) {
  auto t = cast<RankedTensorType>(tensor);
  return MemRefType::get(t.getShape(), t.getElementType());
}

/// Inputs whose storage the (single) output of `op` may take: elementwise
/// ops read element i before writing element i.
SmallVector<int64_t> inplaceOperands(Operation *op) {
  bool elementwise =
      op->hasTrait<OpTrait::SameOperandsAndResultType>() ||
      isa<AddOp, SubOp, MulOp, DivOp, PowOp, MaxOp, MinOp, EqualOp, LessOp,
          LessOrEqualOp, GreaterOp, GreaterOrEqualOp, AndOp, OrOp, XorOp,
          WhereOp, CastOp, AllReduceOp>(op);
  // Ops whose result type equals their operand's but that mix elements.
  if (isa<SoftmaxOp, LogSoftmaxOp, TriluOp>(op))
    elementwise = false;
  SmallVector<int64_t> out;
  if (!elementwise || op->getNumResults() != 1)
    return out;
  Type result = op->getResult(0).getType();
  for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
    auto t = cast<ShapedType>(operand.getType());
    auto r = cast<ShapedType>(result);
    if (t.getShape() == r.getShape() &&
        detail::tensorBytes(t) == detail::tensorBytes(r))
      out.push_back(i);
  }
  return out;
}

/// True if `t` swaps the last two dimensions only and every user is a
/// matmul taking it as the right operand: the matmul kernel then reads the
/// source transposed (`trans_b`) and no copy is made. PyTorch exports every
/// Linear layer as Transpose(W) + MatMul.
bool foldsIntoMatMul(TransposeOp t) {
  ArrayRef<int64_t> perm = t.getPerm();
  int64_t rank = perm.size();
  if (rank < 2 || perm[rank - 1] != rank - 2 || perm[rank - 2] != rank - 1)
    return false;
  for (int64_t i = 0; i + 2 < rank; ++i)
    if (perm[i] != i)
      return false;
  // Either operand of a matmul (trans_a / trans_b); the backward pass's
  // weight gradients are A^T @ G.
  return llvm::all_of(t->getUses(), [](OpOperand &use) {
    return isa<MatMulOp>(use.getOwner());
  });
}

struct LowerToDsRtPass : impl::LowerToDsRtPassBase<LowerToDsRtPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>("forward");
    if (!func) {
      module.emitError("no func.func @forward to lower");
      return signalPassFailure();
    }
    if (failed(lower(func)))
      signalPassFailure();
  }

  LogicalResult lower(func::FuncOp func) {
    Block &body = func.getBody().front();
    OpBuilder b(func.getContext());
    b.setInsertionPointToStart(&body);
    IRMapping map;
    llvm::DenseMap<Value, Value> transposedFrom;
    llvm::StringMap<Value> storage; // parameter and state buffers by name
    int64_t inputIndex = 0, paramIndex = 0;
    for (BlockArgument arg : body.getArguments()) {
      Location loc = func.getLoc();
      MemRefType type = bufferType(arg.getType());
      unsigned i = arg.getArgNumber();
      Value buffer;
      auto state = func.getArgAttrOfType<StringAttr>(i, "ds.state");
      if (auto name = func.getArgAttrOfType<StringAttr>(i, attrs::kParam);
          name || state) {
        auto op = dsrt::ParamOp::create(
            b, loc, type, b.getI64IntegerAttr(paramIndex++),
            name ? name : state,
            func.getArgAttr(i, attrs::kTrainable) ? b.getUnitAttr() : nullptr,
            state ? b.getUnitAttr() : nullptr,
            func.getArgAttrOfType<DenseI64ArrayAttr>(i, "ds.full_shape"),
            func.getArgAttrOfType<StringAttr>(i, "ds.master_of"));
        if (auto space = func.getArgAttrOfType<StringAttr>(i, "ds.space"))
          op->setAttr("dsrt.space", space);
        if (auto tp = func.getArgAttrOfType<DenseI64ArrayAttr>(i, "ds.tp_split"))
          op->setAttr("dsrt.tp_split", tp);
        buffer = op;
        storage[(name ? name : state).getValue()] = buffer;
      } else if (func.getArgAttr(i, "ds.step")) {
        buffer = dsrt::InputOp::create(b, loc, type,
                                       b.getI64IntegerAttr(inputIndex++),
                                       b.getStringAttr("ds.step"));
      } else {
        auto inName = func.getArgAttrOfType<StringAttr>(i, attrs::kInput);
        buffer = dsrt::InputOp::create(
            b, loc, type, b.getI64IntegerAttr(inputIndex++),
            inName ? inName : b.getStringAttr("arg" + std::to_string(i)));
      }
      map.map(arg, buffer);
    }

    SmallVector<Operation *> toErase;
    for (Operation &op : llvm::make_early_inc_range(body)) {
      if (op.getDialect() && isa<dsrt::DsRtDialect>(op.getDialect()))
        continue;
      b.setInsertionPoint(&op);
      Location loc = op.getLoc();
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
          // An update is written into the storage of what it updates.
          if (auto target =
                  func.getResultAttrOfType<StringAttr>(i, "ds.update")) {
            Value into = storage.lookup(target.getValue());
            // The update may be a view (a whole parameter rebuilt from
            // ZeRO shards is reshaped): the kernel writes the storage
            // through a view of it with the written buffer's shape.
            Value written = map.lookup(v);
            while (auto view = written.getDefiningOp<dsrt::ViewOp>())
              written = view.getSource();
            auto alloc = written.getDefiningOp<dsrt::AllocOp>();
            if (into && alloc && alloc.getType() != into.getType()) {
              OpBuilder vb(into.getContext());
              vb.setInsertionPointAfterValue(into);
              into = dsrt::ViewOp::create(vb, loc, alloc.getType(), into);
            }
            if (!into || !alloc)
              return func.emitError("update of '")
                     << target.getValue()
                     << "' is not an optimizer result for a parameter";
            // The update writes the storage in place: nothing after the
            // writing kernel may read the old value.
            Operation *writer = nullptr;
            for (Operation *user : alloc->getUsers())
              if (auto k = dyn_cast<dsrt::KernelOp>(user);
                  k && llvm::is_contained(k.getOuts(), alloc.getResult()))
                writer = user;
            Value stored = storage.lookup(target.getValue());
            SmallVector<Operation *> readers(stored.getUsers());
            if (into != stored)
              llvm::append_range(readers, into.getUsers());
            if (writer)
              for (Operation *user : readers)
                if (user->getBlock() == writer->getBlock() &&
                    writer->isBeforeInBlock(user))
                  return user->emitOpError("reads '")
                         << target.getValue()
                         << "' after its update; ds cannot update it in place";
            alloc.getResult().replaceAllUsesWith(into);
            alloc.erase();
            continue;
          }
          auto name = func.getResultAttrOfType<StringAttr>(i, attrs::kOutput);
          dsrt::OutputOp::create(
              b, loc, map.lookup(v), b.getI64IntegerAttr(i),
              name ? name : b.getStringAttr("result" + std::to_string(i)));
          if (func.getResultAttr(i, attrs::kLoss) && name)
            func->setAttr("dsrt.loss", name);
        }
        continue;
      }
      if (auto c = dyn_cast<ConstantOp>(op)) {
        map.map(c.getResult(), dsrt::ConstOp::create(
                                   b, loc, bufferType(c.getType()),
                                   c.getValue()));
        toErase.push_back(&op);
        continue;
      }
      if (isa<ShapeOp, ConstantOfShapeOp>(op)) {
        // Always foldable (static shapes): lower the folded constant.
        SmallVector<OpFoldResult> folded;
        if (failed(op.fold(folded)) || folded.size() != 1 ||
            !isa<Attribute>(folded[0]))
          return op.emitOpError("should have folded to a constant");
        map.map(op.getResult(0),
                dsrt::ConstOp::create(b, loc,
                                      bufferType(op.getResult(0).getType()),
                                      cast<ElementsAttr>(
                                          cast<Attribute>(folded[0]))));
        toErase.push_back(&op);
        continue;
      }
      if (auto t = dyn_cast<TransposeOp>(op); t && foldsIntoMatMul(t)) {
        transposedFrom[t.getResult()] = map.lookup(t.getInput());
        toErase.push_back(&op);
        continue;
      }
      if (auto f = dyn_cast<TpIdentityOp>(op)) {
        map.map(f.getResult(), map.lookup(f.getInput()));
        toErase.push_back(&op);
        continue;
      }
      if (auto reshape = dyn_cast<ReshapeOp>(op)) {
        map.map(reshape.getResult(),
                dsrt::ViewOp::create(b, loc, bufferType(reshape.getType()),
                                     map.lookup(reshape.getInput())));
        toErase.push_back(&op);
        continue;
      }
      if (!isa<DsDialect>(op.getDialect()))
        return op.emitOpError("cannot be lowered to dsrt");

      SmallVector<Value> ins, outs;
      NamedAttrList params(op.getAttrDictionary());
      params.erase("ds.recompute"); // a compiler mark, not a kernel parameter
      params.erase("ds.needs_grad");
      // Offload: a host op's results live in the host arena, and so does
      // what a transfer to the host makes.
      bool onHost = params.erase("ds.on_host") != nullptr;
      auto transfer = dyn_cast<TransferOp>(op);
      bool hostResults = onHost || (transfer && transfer.getTo() == "host");
      for (auto [index, v] : llvm::enumerate(op.getOperands())) {
        if (Value source = transposedFrom.lookup(v)) {
          ins.push_back(source);
          params.set(index == 0 ? "trans_a" : "trans_b", b.getBoolAttr(true));
          continue;
        }
        Value m = map.lookupOrNull(v);
        if (!m)
          return op.emitOpError("operand was not lowered");
        ins.push_back(m);
      }
      for (Value r : op.getResults()) {
        auto alloc = dsrt::AllocOp::create(b, loc, bufferType(r.getType()),
                                           IntegerAttr());
        if (hostResults)
          alloc->setAttr("dsrt.host", b.getUnitAttr());
        map.map(r, alloc);
        outs.push_back(alloc);
      }
      // 16-bit GEMMs convert through an f32 workspace: A, B and the result.
      if (isa<MatMulOp, GemmOp>(op) &&
          !cast<ShapedType>(op.getResult(0).getType())
               .getElementType()
               .isF32()) {
        int64_t elems = 0;
        for (Value v : op.getOperands())
          elems += detail::numElements(v.getType());
        elems += detail::numElements(op.getResult(0).getType());
        outs.push_back(dsrt::AllocOp::create(
            b, loc, MemRefType::get({elems}, b.getF32Type()), IntegerAttr()));
      }
      StringRef kernel = op.getName().stripDialect();
      if (isa<TpAllReduceOp>(op)) { // the sum over the tensor-parallel group
        kernel = "all_reduce";
        params.set("reduction", b.getStringAttr("sum"));
      }
      // Sequence parallelism: row blocks of the leading dimension (or of
      // a later one after leading dimensions of 1) are the collectives'
      // contiguous rank shards; others take the kernels that reorder.
      if (isa<SpAllGatherOp, SpReduceScatterOp, SpSliceOp>(op)) {
        auto t = cast<RankedTensorType>(op.getOperand(0).getType());
        int64_t axis = cast<IntegerAttr>(op.getAttr("axis")).getInt();
        bool contiguous = llvm::all_of(t.getShape().take_front(axis),
                                       [](int64_t d) { return d == 1; });
        params.erase("partial_grad");
        if (isa<SpAllGatherOp>(op))
          kernel = contiguous ? "all_gather" : "sp_all_gather";
        else if (isa<SpReduceScatterOp>(op))
          kernel = contiguous ? "reduce_scatter" : "sp_reduce_scatter";
        else
          kernel = "tp_rows";
        if (isa<SpReduceScatterOp>(op))
          params.set("reduction", b.getStringAttr("sum"));
      }
      SmallVector<int64_t> inplace = inplaceOperands(&op);
      auto kernelOp = dsrt::KernelOp::create(
          b, loc, b.getStringAttr(kernel), ins, outs,
          params.getDictionary(b.getContext()),
          inplace.empty() ? DenseI64ArrayAttr()
                          : b.getDenseI64ArrayAttr(inplace));
      if (onHost)
        kernelOp->setAttr("dsrt.host", b.getUnitAttr());
      toErase.push_back(&op);
    }
    // Erase the tensor program, users first.
    Operation *ret = body.getTerminator();
    ret->setOperands({});
    for (Operation *op : llvm::reverse(toErase))
      op->erase();
    body.eraseArguments(0, body.getNumArguments());
    func.setType(FunctionType::get(func.getContext(), {}, {}));
    func.setAllArgAttrs(ArrayRef<DictionaryAttr>{});
    func.setAllResultAttrs(ArrayRef<DictionaryAttr>{});
    return success();
  }
};
} // namespace
} // namespace mlir::ds
