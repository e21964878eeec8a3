//===- RecurrentHandlers.cpp - ONNX LSTM and GRU expanded into ds ops -----===//
//
// Part of the ds project.
//
// LSTM and GRU have no ds op: the importer unrolls them over the (static)
// sequence into ops ds already has, so autodiff, ZeRO, mixed precision,
// recompute and the tensor plans apply to them unchanged, with no kernel of
// their own. Per direction:
//   * the input projection of every time step at once, one MatMul
//     X[seq*batch, input] x W^T[input, gates*hidden] (+ the biases), split
//     into the steps;
//   * per step the recurrent MatMul H x R^T, a Split into the gates,
//     Sigmoid/Tanh and the elementwise updates of ONNX's equations
//     (LSTM gates i, o, f, c with optional peepholes P; GRU gates z, r, h
//     with linear_before_reset 0 or 1: torch exports 1, which applies the
//     reset gate to (H x Rh^T + Rbh) rather than to H);
//   * Y [seq, num_directions, batch, hidden] (layout 0) or
//     [batch, seq, num_directions, hidden] (layout 1), Y_h and Y_c.
// The reverse direction walks the steps backwards; bidirectional does both.
// Missing initial states are zeros, a missing B is no bias.
//
// Refused, each with an error naming the node and the attribute or input:
// activations other than the defaults (and activation_alpha/beta), clip,
// LSTM's input_forget=1, and sequence_lens unless it is a constant giving
// every batch entry the full length. The sequence axis is static because
// every ds shape is (a dynamic input dimension is refused at the graph
// input, with the --input-shape flag that fixes it).
//
//===----------------------------------------------------------------------===//

#include "ImporterImpl.h"

namespace mlir::ds::onnx_import {
namespace {

enum class Cell { Lstm, Gru };

/// What one LSTM or GRU node computes, its attributes checked.
struct RnnSpec {
  Cell cell;
  int64_t gates = 0, hidden = 0, dirs = 1, seq = 0, batch = 0, input = 0;
  bool reverse = false, batchFirst = false, linearBeforeReset = false;
  Type elt;
};

/// Builds the unrolled ops of one node: typed helpers over OpBuilder.
class Expander {
public:
  Expander(NodeContext &n, const RnnSpec &s)
      : n(n), b(n.builder()), loc(n.loc), s(s) {}

  RankedTensorType type(ArrayRef<int64_t> shape) const {
    return RankedTensorType::get(shape, s.elt);
  }
  ArrayRef<int64_t> shapeOf(Value v) const {
    return cast<RankedTensorType>(v.getType()).getShape();
  }
  /// `len` entries of `x` along `axis` from `start`.
  Value slice(Value x, int64_t axis, int64_t start, int64_t len) {
    SmallVector<int64_t> starts(shapeOf(x).size(), 0), steps(starts.size(), 1);
    SmallVector<int64_t> shape(shapeOf(x));
    starts[axis] = start;
    shape[axis] = len;
    return SliceOp::create(b, loc, type(shape), x,
                           b.getDenseI64ArrayAttr(starts),
                           b.getDenseI64ArrayAttr(steps));
  }
  Value reshape(Value x, ArrayRef<int64_t> shape) {
    return ReshapeOp::create(b, loc, type(shape), x);
  }
  Value transpose(Value x, ArrayRef<int64_t> perm) {
    SmallVector<int64_t> shape;
    for (int64_t p : perm)
      shape.push_back(shapeOf(x)[p]);
    return TransposeOp::create(b, loc, type(shape), x,
                               b.getDenseI64ArrayAttr(perm));
  }
  /// Direction `d` of a [dirs, rows, cols] operand, as [rows, cols].
  Value direction(Value x, int64_t d) {
    ArrayRef<int64_t> sh = shapeOf(x);
    SmallVector<int64_t> rest(sh.drop_front());
    return reshape(slice(x, 0, d, 1), rest);
  }
  /// [m, k] x [k, n].
  Value matmul(Value x, Value y) {
    return MatMulOp::create(b, loc, type({shapeOf(x)[0], shapeOf(y)[1]}), x,
                            y);
  }
  /// `x` + `y` where `y` is `x`'s shape or broadcasts to it.
  Value add(Value x, Value y) { return AddOp::create(b, loc, x.getType(), x, y); }
  Value sub(Value x, Value y) { return SubOp::create(b, loc, x.getType(), x, y); }
  Value mul(Value x, Value y) { return MulOp::create(b, loc, x.getType(), x, y); }
  Value sigmoid(Value x) { return SigmoidOp::create(b, loc, x); }
  Value tanh(Value x) { return TanhOp::create(b, loc, x); }
  /// `parts` equal pieces of `x` along `axis`.
  SmallVector<Value> split(Value x, int64_t axis, int64_t parts) {
    SmallVector<int64_t> shape(shapeOf(x));
    shape[axis] /= parts;
    SmallVector<Type> types(parts, type(shape));
    auto op = SplitOp::create(b, loc, types, x, b.getI64IntegerAttr(axis));
    return SmallVector<Value>(op.getResults());
  }
  Value concat(ArrayRef<Value> xs, int64_t axis) {
    if (xs.size() == 1)
      return xs[0];
    SmallVector<int64_t> shape(shapeOf(xs[0]));
    shape[axis] = 0;
    for (Value x : xs)
      shape[axis] += shapeOf(x)[axis];
    return ConcatOp::create(b, loc, type(shape), xs,
                            b.getI64IntegerAttr(axis));
  }
  Value zeros(ArrayRef<int64_t> shape) {
    RankedTensorType t = type(shape);
    Attribute zero = FloatAttr::get(s.elt, 0.0);
    return n.constant(t, DenseElementsAttr::get(t, ArrayRef<Attribute>(zero)));
  }

  NodeContext &n;
  OpBuilder &b;
  Location loc;
  const RnnSpec &s;
};

/// One direction's weights, as [rows, cols] values ready for the steps.
struct DirWeights {
  Value wT, rT;     // W^T [input, G*h], R^T [h, G*h]
  Value wb, rb;     // [G*h] each, null without B
  Value peephole;   // LSTM's P [3h], null without it
  Value h0, c0;     // [batch, h]
};

/// Each step's input projection X_t W^T + bias, [batch, G*h].
SmallVector<Value> projectInputs(Expander &e, Value x, Value wT, Value bias) {
  const RnnSpec &s = e.s;
  Value x2 = e.reshape(x, {s.seq * s.batch, s.input});
  Value proj = e.matmul(x2, wT);
  if (bias)
    proj = e.add(proj, bias);
  if (s.seq == 1)
    return {proj};
  return e.split(proj, 0, s.seq);
}

/// The hidden states of one LSTM direction, in step order; `cLast` gets
/// the final cell state.
SmallVector<Value> lstmDirection(Expander &e, Value x, const DirWeights &w,
                                 Value &cLast) {
  const RnnSpec &s = e.s;
  int64_t h = s.hidden;
  Value bias = w.wb ? e.add(w.wb, w.rb) : Value();
  SmallVector<Value> xs = projectInputs(e, x, w.wT, bias);
  Value pi, po, pf;
  if (w.peephole) {
    pi = e.slice(w.peephole, 0, 0, h);
    po = e.slice(w.peephole, 0, h, h);
    pf = e.slice(w.peephole, 0, 2 * h, h);
  }
  SmallVector<Value> ys(s.seq);
  Value hPrev = w.h0, cPrev = w.c0;
  for (int64_t k = 0; k < s.seq; ++k) {
    int64_t t = s.reverse ? s.seq - 1 - k : k;
    Value g = e.add(xs[t], e.matmul(hPrev, w.rT));
    SmallVector<Value> gate = e.split(g, 1, 4); // i, o, f, c
    Value gi = gate[0], go = gate[1], gf = gate[2], gc = gate[3];
    if (w.peephole) {
      gi = e.add(gi, e.mul(cPrev, pi));
      gf = e.add(gf, e.mul(cPrev, pf));
    }
    Value c = e.add(e.mul(e.sigmoid(gf), cPrev),
                    e.mul(e.sigmoid(gi), e.tanh(gc)));
    if (w.peephole)
      go = e.add(go, e.mul(c, po));
    hPrev = e.mul(e.sigmoid(go), e.tanh(c));
    cPrev = c;
    ys[t] = hPrev;
  }
  cLast = cPrev;
  return ys;
}

/// The hidden states of one GRU direction, in step order.
SmallVector<Value> gruDirection(Expander &e, Value x, const DirWeights &w) {
  const RnnSpec &s = e.s;
  int64_t h = s.hidden;
  SmallVector<Value> xs = projectInputs(e, x, w.wT, w.wb);
  // linear_before_reset=0 multiplies r * H by Rh alone: split R^T and Rb.
  Value rZr, rH, bZr, bH;
  if (!s.linearBeforeReset) {
    rZr = e.slice(w.rT, 1, 0, 2 * h);
    rH = e.slice(w.rT, 1, 2 * h, h);
    if (w.rb) {
      bZr = e.slice(w.rb, 0, 0, 2 * h);
      bH = e.slice(w.rb, 0, 2 * h, h);
    }
  }
  SmallVector<Value> ys(s.seq);
  Value hPrev = w.h0;
  for (int64_t k = 0; k < s.seq; ++k) {
    int64_t t = s.reverse ? s.seq - 1 - k : k;
    SmallVector<Value> xg = e.split(xs[t], 1, 3); // z, r, h
    Value rec = e.matmul(hPrev, s.linearBeforeReset ? w.rT : rZr);
    Value rb = s.linearBeforeReset ? w.rb : bZr;
    if (rb)
      rec = e.add(rec, rb);
    SmallVector<Value> rg = e.split(rec, 1, s.linearBeforeReset ? 3 : 2);
    Value z = e.sigmoid(e.add(xg[0], rg[0]));
    Value r = e.sigmoid(e.add(xg[1], rg[1]));
    Value hn;
    if (s.linearBeforeReset) {
      hn = e.mul(r, rg[2]);
    } else {
      hn = e.matmul(e.mul(r, hPrev), rH);
      if (bH)
        hn = e.add(hn, bH);
    }
    Value cand = e.tanh(e.add(xg[2], hn));
    // (1 - z) * cand + z * H  ==  cand + z * (H - cand)
    hPrev = e.add(cand, e.mul(z, e.sub(hPrev, cand)));
    ys[t] = hPrev;
  }
  return ys;
}

//===----------------------------------------------------------------------===//
// Checking the node
//===----------------------------------------------------------------------===//

LogicalResult refuseAttr(NodeContext &n, StringRef key, StringRef value) {
  return n.error() << "attribute '" << key << "'" << value
                   << " is not supported: ds expands LSTM and GRU with the "
                      "default activations, no clip and input_forget=0";
}

/// Only the default activations (or none given), no alpha/beta, no clip.
LogicalResult checkActivations(NodeContext &n, const RnnSpec &s) {
  if (const onnx::AttributeProto *a = n.attr("activations")) {
    SmallVector<StringRef> want = {"Sigmoid", "Tanh"};
    if (s.cell == Cell::Lstm)
      want.push_back("Tanh");
    bool ok = a->strings_size() == static_cast<int>(want.size() * s.dirs);
    std::string given;
    for (int i = 0; i < a->strings_size(); ++i) {
      given += (i ? ", " : "") + a->strings(i);
      ok = ok && StringRef(a->strings(i))
                     .equals_insensitive(want[i % want.size()]);
    }
    if (!ok)
      return refuseAttr(n, "activations", " = [" + given + "]");
  }
  for (StringRef key : {"activation_alpha", "activation_beta", "clip"})
    if (n.attr(key))
      return refuseAttr(n, key, "");
  if (s.cell == Cell::Lstm && n.intAttr("input_forget", 0) != 0)
    return refuseAttr(n, "input_forget", " = 1");
  return success();
}

/// Checks the operand shapes against the attributes.
LogicalResult checkShapes(NodeContext &n, const RnnSpec &s) {
  int64_t gh = s.gates * s.hidden;
  auto expect = [&](size_t i, StringRef what,
                    ArrayRef<int64_t> want) -> LogicalResult {
    if (!n.input(i))
      return success();
    if (n.elementTypeOf(i) != s.elt)
      return n.error() << what << " has element type " << n.elementTypeOf(i)
                       << ", X has " << s.elt;
    if (n.shape(i) != want)
      return n.error() << what << " has shape " << shapeStr(n.shape(i))
                       << ", expected " << shapeStr(want);
    return success();
  };
  SmallVector<int64_t> state = {s.dirs, s.batch, s.hidden};
  if (s.batchFirst)
    state = {s.batch, s.dirs, s.hidden};
  if (failed(expect(1, "W", {s.dirs, gh, s.input})) ||
      failed(expect(2, "R", {s.dirs, gh, s.hidden})) ||
      failed(expect(3, "B", {s.dirs, 2 * gh})) ||
      failed(expect(5, "initial_h", state)))
    return failure();
  if (s.cell == Cell::Lstm &&
      (failed(expect(6, "initial_c", state)) ||
       failed(expect(7, "P", {s.dirs, 3 * s.hidden}))))
    return failure();
  return success();
}

/// sequence_lens must be a constant giving every entry the full length.
LogicalResult checkSequenceLens(NodeContext &n, const RnnSpec &s) {
  if (!n.input(4))
    return success();
  DenseElementsAttr lens = constantValue(n.importer, n.input(4));
  bool full = lens && isa<IntegerType>(lens.getElementType()) &&
              lens.getNumElements() == s.batch;
  if (full)
    for (APInt v : lens.getValues<APInt>())
      full = full && v.getSExtValue() == s.seq;
  if (!full)
    return n.error() << "input 'sequence_lens' must be a constant equal to "
                        "the sequence length "
                     << s.seq
                     << " for every batch entry (ds does not support "
                        "sequences of varying length; pad them and mask the "
                        "loss instead)";
  return success();
}

FailureOr<RnnSpec> readSpec(NodeContext &n, Cell cell) {
  size_t maxInputs = cell == Cell::Lstm ? 8 : 6;
  if (failed(n.expectInputs(3, maxInputs)) || failed(n.requireFloat(0)))
    return failure();
  RnnSpec s;
  s.cell = cell;
  s.gates = cell == Cell::Lstm ? 4 : 3;
  s.elt = n.elementTypeOf(0);
  // hidden_size is optional in ONNX: R's last dimension gives it.
  if (n.shape(2).size() != 3)
    return n.error() << "R must have rank 3, got " << shapeStr(n.shape(2));
  s.hidden = n.intAttr("hidden_size", n.shape(2)[2]);
  if (s.hidden <= 0)
    return n.error() << "attribute 'hidden_size' must be positive";
  std::string dir = n.stringAttr("direction", "forward");
  if (dir == "bidirectional")
    s.dirs = 2;
  else if (dir == "reverse")
    s.reverse = true;
  else if (dir != "forward")
    return n.error() << "attribute 'direction' is '" << dir
                     << "', expected forward, reverse or bidirectional";
  int64_t layout = n.intAttr("layout", 0);
  if (layout != 0 && layout != 1)
    return n.error() << "attribute 'layout' is " << layout
                     << ", expected 0 or 1";
  s.batchFirst = layout == 1;
  s.linearBeforeReset = n.intAttr("linear_before_reset", 0) != 0;
  ArrayRef<int64_t> x = n.shape(0);
  if (x.size() != 3)
    return n.error() << "X must have rank 3, got " << shapeStr(x);
  s.seq = s.batchFirst ? x[1] : x[0];
  s.batch = s.batchFirst ? x[0] : x[1];
  s.input = x[2];
  if (failed(checkActivations(n, s)) || failed(checkShapes(n, s)) ||
      failed(checkSequenceLens(n, s)))
    return failure();
  // The initial states hold the batch on axis 1 (layout 0), which ds-run
  // must know to give each data-parallel rank its part.
  for (size_t i : {5, 6})
    if (n.input(i))
      recordBatchAxis(n.input(i), s.batchFirst ? 0 : 1);
  return s;
}

//===----------------------------------------------------------------------===//
// The expansion
//===----------------------------------------------------------------------===//

DirWeights dirWeights(Expander &e, NodeContext &n, int64_t d,
                      Value h0All, Value c0All) {
  const RnnSpec &s = e.s;
  int64_t gh = s.gates * s.hidden;
  DirWeights w;
  w.wT = e.transpose(e.direction(n.input(1), d), {1, 0});
  w.rT = e.transpose(e.direction(n.input(2), d), {1, 0});
  if (Value bAll = n.input(3)) {
    Value bd = e.reshape(e.slice(bAll, 0, d, 1), {2 * gh});
    w.wb = e.slice(bd, 0, 0, gh);
    w.rb = e.slice(bd, 0, gh, gh);
  }
  if (s.cell == Cell::Lstm && n.input(7))
    w.peephole = e.reshape(e.slice(n.input(7), 0, d, 1), {3 * s.hidden});
  w.h0 = h0All ? e.direction(h0All, d) : e.zeros({s.batch, s.hidden});
  if (s.cell == Cell::Lstm)
    w.c0 = c0All ? e.direction(c0All, d) : e.zeros({s.batch, s.hidden});
  return w;
}

LogicalResult expand(NodeContext &n, Cell cell) {
  FailureOr<RnnSpec> spec = readSpec(n, cell);
  if (failed(spec))
    return failure();
  const RnnSpec &s = *spec;
  if (n.numOutputs() > (cell == Cell::Lstm ? 3u : 2u))
    return n.error() << "has " << n.numOutputs() << " outputs, expected at "
                     << "most " << (cell == Cell::Lstm ? 3 : 2);
  Expander e(n, s);
  // Time-major X and [dirs, batch, hidden] states.
  Value x = s.batchFirst ? e.transpose(n.input(0), {1, 0, 2}) : n.input(0);
  auto stateIn = [&](size_t i) -> Value {
    if (!n.input(i))
      return Value();
    return s.batchFirst ? e.transpose(n.input(i), {1, 0, 2}) : n.input(i);
  };
  Value h0All = stateIn(5);
  Value c0All = cell == Cell::Lstm ? stateIn(6) : Value();

  SmallVector<Value> yDirs, hLast, cLast;
  for (int64_t d = 0; d < s.dirs; ++d) {
    RnnSpec dirSpec = s;
    dirSpec.reverse = s.reverse || d == 1;
    Expander de(n, dirSpec);
    DirWeights w = dirWeights(de, n, d, h0All, c0All);
    Value c;
    SmallVector<Value> ys = cell == Cell::Lstm ? lstmDirection(de, x, w, c)
                                               : gruDirection(de, x, w);
    Value last = ys[dirSpec.reverse ? 0 : s.seq - 1];
    hLast.push_back(e.reshape(last, {1, s.batch, s.hidden}));
    if (c)
      cLast.push_back(e.reshape(c, {1, s.batch, s.hidden}));
    if (n.outputUsed(0))
      yDirs.push_back(e.reshape(e.concat(ys, 0),
                                {s.seq, 1, s.batch, s.hidden}));
  }
  SmallVector<Value> outs(3);
  if (n.outputUsed(0)) {
    outs[0] = e.concat(yDirs, 1); // [seq, dirs, batch, hidden]
    if (s.batchFirst)
      outs[0] = e.transpose(outs[0], {2, 0, 1, 3});
  }
  outs[1] = e.concat(hLast, 0);
  if (s.batchFirst)
    outs[1] = e.transpose(outs[1], {1, 0, 2});
  if (cell == Cell::Lstm) {
    outs[2] = e.concat(cLast, 0);
    if (s.batchFirst)
      outs[2] = e.transpose(outs[2], {1, 0, 2});
  }
  for (size_t i = 0; i < n.numOutputs(); ++i)
    if (n.outputUsed(i))
      n.importer.values[n.node.output(i)] = outs[i];
  return success();
}

} // namespace

void registerRecurrentHandlers(HandlerTable &t) {
  t.add("LSTM", [](NodeContext &n) { return expand(n, Cell::Lstm); });
  t.add("GRU", [](NodeContext &n) { return expand(n, Cell::Gru); });
}

} // namespace mlir::ds::onnx_import
