//===- FuseElementwise.cpp - chains of elementwise ops as one kernel ------===//
//
// Part of the ds project.
//
// Issue 24 item 1 (see the pass description in Passes.td): each f32
// elementwise op whose operand is produced by another fusable op used only
// by it, with the same shape, absorbs that producer; the chain becomes one
// `ds.fused_elementwise` whose program (include/ds/Support/FusedProgram.h)
// the kernel evaluates per block of elements, with no intermediate tensor.
// Splat f32 constants become the program's immediates.
//
//===----------------------------------------------------------------------===//

#include "ds/Transforms/Passes.h"

#include "ds/Dialect/Ds/IR/DsOps.h"
#include "ds/Support/FusedProgram.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::ds {
#define GEN_PASS_DEF_FUSEELEMENTWISEPASS
#include "ds/Transforms/Passes.h.inc"

namespace {

using ::ds::FusedOp;

/// Registers a fused kernel may hold (inputs and instruction results): the
/// CUDA twin keeps them in a fixed per-thread array.
constexpr int64_t kMaxRegisters = 64;

/// The opcode of a plain elementwise op the program can express.
std::optional<FusedOp> opcodeOf(Operation *op) {
  return llvm::TypeSwitch<Operation *, std::optional<FusedOp>>(op)
      .Case([](AddOp) { return FusedOp::Add; })
      .Case([](SubOp) { return FusedOp::Sub; })
      .Case([](MulOp) { return FusedOp::Mul; })
      .Case([](DivOp) { return FusedOp::Div; })
      .Case([](PowOp) { return FusedOp::Pow; })
      .Case([](MaxOp) { return FusedOp::Max; })
      .Case([](MinOp) { return FusedOp::Min; })
      .Case([](NegOp) { return FusedOp::Neg; })
      .Case([](AbsOp) { return FusedOp::Abs; })
      .Case([](ExpOp) { return FusedOp::Exp; })
      .Case([](LogOp) { return FusedOp::Log; })
      .Case([](SqrtOp) { return FusedOp::Sqrt; })
      .Case([](ReciprocalOp) { return FusedOp::Reciprocal; })
      .Case([](ErfOp) { return FusedOp::Erf; })
      .Case([](TanhOp) { return FusedOp::Tanh; })
      .Case([](ReluOp) { return FusedOp::Relu; })
      .Case([](SigmoidOp) { return FusedOp::Sigmoid; })
      .Case([](WhereOp) { return FusedOp::Where; })
      .Default([](Operation *) { return std::nullopt; });
}

bool isF32(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType().isF32();
}

/// An op the pass may fuse: a program opcode (or a fused op) over f32
/// values (where's condition i1), carrying no mark but the ones fusion
/// keeps (ds.recompute, equal on both sides of a merge) or drops.
bool isFusable(Operation *op) {
  if (op->getNumResults() != 1 || !isa<RankedTensorType>(op->getResult(0).getType()) ||
      !isF32(op->getResult(0)))
    return false;
  bool fused = isa<FusedElementwiseOp>(op);
  if (!fused && !opcodeOf(op))
    return false;
  for (NamedAttribute a : op->getAttrs()) {
    StringRef n = a.getName().getValue();
    if (n != "ds.recompute" && n != "ds.needs_grad" &&
        !(fused && (n == "program" || n == "constants")))
      return false;
  }
  if (fused)
    return true;
  for (auto [i, v] : llvm::enumerate(op->getOperands()))
    if (!(isa<WhereOp>(op) && i == 0) && !isF32(v))
      return false;
  return true;
}

/// An op's computation as a program over its own inputs.
struct Expr {
  SmallVector<Value> inputs;
  SmallVector<int64_t> program;
  SmallVector<double> constants;
};

/// The splat f32 value of a constant operand.
std::optional<double> splatValue(Value v) {
  DenseElementsAttr attr;
  if (!matchPattern(v, m_Constant(&attr)) || !attr.isSplat() ||
      !attr.getElementType().isF32())
    return std::nullopt;
  return static_cast<double>(attr.getSplatValue<float>());
}

Expr exprOf(Operation *op) {
  Expr e;
  if (auto f = dyn_cast<FusedElementwiseOp>(op)) {
    e.inputs.assign(f.getInputs().begin(), f.getInputs().end());
    e.program.assign(f.getProgram().begin(), f.getProgram().end());
    e.constants.assign(f.getConstants().begin(), f.getConstants().end());
    return e;
  }
  int64_t refs[3] = {0, 0, 0};
  for (auto [i, v] : llvm::enumerate(op->getOperands())) {
    if (std::optional<double> c = splatValue(v); c && isF32(v)) {
      e.constants.push_back(*c);
      refs[i] = -static_cast<int64_t>(e.constants.size());
      continue;
    }
    auto *it = llvm::find(e.inputs, v);
    refs[i] = it - e.inputs.begin();
    if (it == e.inputs.end())
      e.inputs.push_back(v);
  }
  e.program = {static_cast<int64_t>(*opcodeOf(op)), refs[0], refs[1],
               refs[2]};
  return e;
}

/// Appends `part`'s program to `out`, its inputs mapped by `inputReg`; the
/// register of its result.
int64_t append(Expr &out, int64_t numInputs, const Expr &part,
               function_ref<int64_t(Value)> inputReg) {
  int64_t base = numInputs + static_cast<int64_t>(out.program.size()) / 4;
  int64_t constBase = out.constants.size();
  int64_t partInputs = part.inputs.size();
  for (size_t k = 0; k < part.program.size(); k += 4) {
    out.program.push_back(part.program[k]);
    int arity = ::ds::fusedArity(static_cast<FusedOp>(part.program[k]));
    for (int j = 0; j < 3; ++j) {
      int64_t r = part.program[k + 1 + j];
      if (j >= arity)
        out.program.push_back(0);
      else if (r < 0)
        out.program.push_back(r - constBase);
      else if (r < partInputs)
        out.program.push_back(inputReg(part.inputs[r]));
      else
        out.program.push_back(base + (r - partInputs));
    }
  }
  llvm::append_range(out.constants, part.constants);
  return numInputs + static_cast<int64_t>(out.program.size()) / 4 - 1;
}

struct FuseElementwisePass
    : impl::FuseElementwisePassBase<FuseElementwisePass> {
  using FuseElementwisePassBase::FuseElementwisePassBase;

  /// Ops a fusion never crosses: the optimizer's first step and a pipeline
  /// stage's marks (the phases of the plan are positions relative to them).
  SmallVector<Operation *> boundaries;

  /// True if `p` may be computed inside `c`: used by `c` alone, of its
  /// shape (no value recomputed per broadcast element), on the same side
  /// of every boundary and of recompute's copies.
  bool canAbsorb(Operation *c, Operation *p) {
    if (!p || p->getBlock() != c->getBlock() || !isFusable(p))
      return false;
    Value v = p->getResult(0);
    if (!llvm::all_of(v.getUsers(), [&](Operation *u) { return u == c; }))
      return false;
    if (v.getType() != c->getResult(0).getType() ||
        p->hasAttr("ds.recompute") != c->hasAttr("ds.recompute"))
      return false;
    return llvm::all_of(boundaries, [&](Operation *b) {
      return p->isBeforeInBlock(b) == c->isBeforeInBlock(b);
    });
  }

  /// Replaces `c` and the producers it absorbs by one fused op; false if
  /// it absorbs none.
  bool fuse(Operation *c) {
    Expr ce = exprOf(c);
    SmallVector<Operation *> producers;
    SmallVector<Expr> parts;
    for (Value v : ce.inputs)
      if (canAbsorb(c, v.getDefiningOp())) {
        producers.push_back(v.getDefiningOp());
        parts.push_back(exprOf(producers.back()));
      }
    // Lifetimes: the fused op runs at `c`, so a producer's inputs live until
    // then. A producer is absorbed only when nothing but constants and the
    // other absorbed producers lies between it and `c` (else a tensor made
    // in between would share the arena with inputs that used to be freed).
    for (bool dropped = true; dropped;) {
      dropped = false;
      for (size_t i = 0; i < producers.size(); ++i) {
        bool adjacent = true;
        for (Operation *x = producers[i]->getNextNode(); x && x != c && adjacent;
             x = x->getNextNode())
          adjacent = isa<ConstantOp>(x) || llvm::is_contained(producers, x);
        if (!adjacent) {
          producers.erase(producers.begin() + i);
          parts.erase(parts.begin() + i);
          dropped = true;
          break;
        }
      }
    }
    if (producers.empty())
      return false;
    // The inputs: the producers' and the consumer's other operands.
    SmallVector<Value> inputs;
    auto addInput = [&](Value v) {
      if (!llvm::is_contained(inputs, v))
        inputs.push_back(v);
    };
    int64_t instructions = ce.program.size() / 4;
    for (const Expr &p : parts) {
      llvm::for_each(p.inputs, addInput);
      instructions += p.program.size() / 4;
    }
    for (Value v : ce.inputs)
      if (!llvm::is_contained(producers, v.getDefiningOp()))
        addInput(v);
    int64_t n = inputs.size();
    if (n + instructions > kMaxRegisters)
      return false;
    auto inputReg = [&](Value v) -> int64_t {
      return llvm::find(inputs, v) - inputs.begin();
    };
    Expr out;
    DenseMap<Value, int64_t> produced;
    for (auto [p, part] : llvm::zip(producers, parts))
      produced[p->getResult(0)] = append(out, n, part, inputReg);
    append(out, n, ce, [&](Value v) {
      auto it = produced.find(v);
      return it != produced.end() ? it->second : inputReg(v);
    });
    OpBuilder b(c);
    auto fused = FusedElementwiseOp::create(
        b, c->getLoc(), c->getResult(0).getType(), inputs,
        b.getDenseI64ArrayAttr(out.program),
        b.getDenseF64ArrayAttr(out.constants));
    if (c->hasAttr("ds.recompute"))
      fused->setAttr("ds.recompute", b.getUnitAttr());
    c->getResult(0).replaceAllUsesWith(fused.getResult());
    c->erase();
    for (Operation *p : producers)
      p->erase();
    return true;
  }

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (!func.getBody().hasOneBlock())
      return;
    Block &body = func.getBody().front();
    boundaries.clear();
    for (Operation &op : body)
      if (isa<PipeMarkOp>(op) ||
          (op.hasTrait<DsOptimizerStep>() &&
           llvm::none_of(boundaries, [](Operation *b) {
             return b->hasTrait<DsOptimizerStep>();
           })))
        boundaries.push_back(&op);
    // Program order: a producer is fused (into a fused op at its place)
    // before its consumer is visited. Until nothing changes: a value with
    // several users (GELU's input) becomes one input of the op that
    // absorbed all of them, and fuses in the next sweep.
    for (bool changed = true; changed;) {
      changed = false;
      SmallVector<Operation *> ops;
      for (Operation &op : body)
        if (isFusable(&op))
          ops.push_back(&op);
      for (Operation *op : ops)
        changed |= fuse(op);
    }
    // Splat constants only the fused programs read.
    for (Operation &op : llvm::make_early_inc_range(body))
      if (isa<ConstantOp>(op) && op.use_empty())
        op.erase();
  }
};

} // namespace
} // namespace mlir::ds
