//===- AttentionGeometry.h - a fused attention's geometry -------*- C++ -*-===//
//
// Part of the ds project (runtime: no MLIR or LLVM; also compiled by nvcc).
//
// The CPU (Cpu/Attention.cpp) and CUDA (Cuda/Attention.cu) kernels of
// fused_attention and fused_attention_grad read their instruction the same
// way: query [batch..., Tq, D], key [batch..., Tk, D], value [batch..., Tk,
// Dv] flattened to `batch` heads (each possibly read through a folded
// transpose: HeadOperand), and the mask read through broadcast strides
// (the attributes scale, mask_kind, fill: DsAttention.td).
//
//===----------------------------------------------------------------------===//

#ifndef DS_RUNTIME_ATTENTIONGEOMETRY_H
#define DS_RUNTIME_ATTENTIONGEOMETRY_H

#include "Kernel.h"

#include <string>
#include <vector>

namespace ds::rt {

/// How the scores are masked (mask_kind).
enum class AttentionMask { None, FillTrue, FillFalse, Add };

/// How the kernels read query, key, value or the output gradient: element
/// (head n, row t, column c) at base[n] + t * row + c. Head-major
/// [batch..., T, D] unless --ds-fold-transpose handed the untransposed
/// buffer and its permutation (perm_q, perm_k, perm_v, perm_grad): then
/// the head transpose is a stride, not a copy.
struct HeadOperand {
  std::vector<int64_t> base;
  int64_t row = 0;
};

struct AttentionGeometry {
  int64_t batch = 0, tq = 0, tk = 0, d = 0, dv = 0;
  AttentionMask kind = AttentionMask::None;
  float scale = 1.0f, fill = 0.0f;
  /// The mask element of (head n, row i, column j) is
  /// maskBase[n] + i * maskRow + j * maskCol (0 strides: broadcast).
  std::vector<int64_t> maskBase;
  int64_t maskRow = 0, maskCol = 0;
  /// Whether a masked score is -inf: a tile the mask fills entirely
  /// contributes nothing and is skipped.
  bool fillsMinusInf() const {
    return (kind == AttentionMask::FillTrue ||
            kind == AttentionMask::FillFalse) &&
           fill == -INFINITY;
  }
  /// Operand shapes: [batch..., rows, cols] of the head-major tensors.
  std::vector<int64_t> shapeOf(int64_t rows, int64_t cols) const {
    std::vector<int64_t> s = lead;
    s.push_back(rows);
    s.push_back(cols);
    return s;
  }
  std::vector<int64_t> lead; // the batch dimensions
  HeadOperand q, k, v, dout; // dout: the gradient's only
};

/// Reads `t` as transpose(t, perm) with perm the attribute `permName`
/// (absent: as is): `t`'s shape becomes the permuted one and `h` its
/// layout. The permutation must keep the innermost dimension last.
inline bool headOperand(KernelContext &ctx, const char *what,
                        const char *permName, TensorView &t, HeadOperand &h) {
  int64_t r = t.rank();
  std::vector<int64_t> perm = ctx.attrs.getInts(permName);
  if (perm.empty() && r < 3)
    return true; // attentionGeometryOf names the rank
  if (perm.empty())
    for (int64_t i = 0; i < r; ++i)
      perm.push_back(i);
  std::vector<bool> seen(r, false);
  bool valid = static_cast<int64_t>(perm.size()) == r;
  for (int64_t i = 0; valid && i < r; ++i) {
    valid = perm[i] >= 0 && perm[i] < r && !seen[perm[i]];
    if (valid)
      seen[perm[i]] = true;
  }
  if (!valid || r < 3 || perm[r - 1] != r - 1)
    return ctx.fail(std::string(what) + ": " + permName +
                    " is not a permutation keeping the innermost dimension "
                    "last");
  std::vector<int64_t> bufStride(r, 1), shape(r), stride(r);
  for (int64_t d = r - 1; d > 0; --d)
    bufStride[d - 1] = bufStride[d] * t.shape[d];
  for (int64_t d = 0; d < r; ++d)
    shape[d] = t.shape[perm[d]], stride[d] = bufStride[perm[d]];
  int64_t heads = 1;
  for (int64_t d = 0; d + 2 < r; ++d)
    heads *= shape[d];
  h.row = stride[r - 2];
  h.base.assign(heads, 0);
  for (int64_t n = 0; n < heads; ++n) {
    int64_t rest = n, off = 0;
    for (int64_t d = r - 3; d >= 0; --d) {
      off += (rest % shape[d]) * stride[d];
      rest /= shape[d];
    }
    h.base[n] = off;
  }
  t.shape = std::move(shape);
  return true;
}

/// Fills `g` from query, key, value and the optional mask (null when
/// mask_kind is none); fails the kernel naming what does not match.
inline bool attentionGeometryOf(KernelContext &ctx, const char *what,
                                const TensorView &q, const TensorView &k,
                                const TensorView &v, const TensorView *mask,
                                AttentionGeometry &g) {
  std::string name = what;
  int64_t r = q.rank();
  if (r < 3 || k.rank() != r || v.rank() != r)
    return ctx.fail(name + ": query, key and value need one rank >= 3");
  if (q.dtype != DType::F32 || k.dtype != DType::F32 || v.dtype != DType::F32)
    return ctx.fail(name + ": query, key and value must be f32");
  g.lead.assign(q.shape.begin(), q.shape.end() - 2);
  g.batch = 1;
  for (int64_t i = 0; i < r - 2; ++i) {
    if (k.shape[i] != q.shape[i] || v.shape[i] != q.shape[i])
      return ctx.fail(name + ": query, key and value differ in batch "
                             "dimension " + std::to_string(i));
    g.batch *= q.shape[i];
  }
  g.tq = q.shape[r - 2], g.d = q.shape[r - 1];
  g.tk = k.shape[r - 2], g.dv = v.shape[r - 1];
  if (k.shape[r - 1] != g.d || v.shape[r - 2] != g.tk)
    return ctx.fail(name + ": key or value does not fit the query");
  g.scale = static_cast<float>(ctx.attrs.getFloat("scale", 1.0));
  g.fill = static_cast<float>(ctx.attrs.getFloat("fill", 0.0));
  std::string kind = ctx.attrs.getString("mask_kind", "none");
  if (kind == "none")
    g.kind = AttentionMask::None;
  else if (kind == "fill_true")
    g.kind = AttentionMask::FillTrue;
  else if (kind == "fill_false")
    g.kind = AttentionMask::FillFalse;
  else if (kind == "add")
    g.kind = AttentionMask::Add;
  else
    return ctx.fail(name + ": unknown mask_kind '" + kind + "'");
  g.maskBase.assign(g.batch, 0);
  g.maskRow = g.maskCol = 0;
  if ((g.kind == AttentionMask::None) != (mask == nullptr))
    return ctx.fail(name + ": a mask operand is needed exactly when "
                           "mask_kind is not none");
  if (!mask)
    return true;
  DType want = g.kind == AttentionMask::Add ? DType::F32 : DType::Bool;
  if (mask->dtype != want || mask->rank() > r)
    return ctx.fail(name + ": the mask must be " +
                    (want == DType::F32 ? "f32" : "bool") + " of rank <= " +
                    std::to_string(r));
  // Strides of the mask aligned to the scores [batch..., Tq, Tk].
  std::vector<int64_t> scores = g.lead;
  scores.push_back(g.tq);
  scores.push_back(g.tk);
  std::vector<int64_t> strides(r, 0);
  int64_t step = 1;
  for (int64_t i = mask->rank() - 1; i >= 0; --i) {
    int64_t dim = mask->shape[i], at = i + (r - mask->rank());
    if (dim != 1 && dim != scores[at])
      return ctx.fail(name + ": the mask does not broadcast to the scores");
    strides[at] = dim == 1 ? 0 : step;
    step *= dim;
  }
  g.maskRow = strides[r - 2], g.maskCol = strides[r - 1];
  for (int64_t n = 0; n < g.batch; ++n) {
    int64_t rest = n, off = 0;
    for (int64_t i = r - 3; i >= 0; --i) {
      off += (rest % scores[i]) * strides[i];
      rest /= scores[i];
    }
    g.maskBase[n] = off;
  }
  return true;
}

/// The forward's results: [batch..., Tq, Dv] and lse [batch..., Tq].
inline bool checkAttentionResult(KernelContext &ctx, const char *what,
                                 const AttentionGeometry &g,
                                 const TensorView &out, const TensorView &lse) {
  std::vector<int64_t> l = g.lead;
  l.push_back(g.tq);
  if (out.shape != g.shapeOf(g.tq, g.dv) || lse.shape != l ||
      out.dtype != DType::F32 || lse.dtype != DType::F32)
    return ctx.fail(std::string(what) +
                    ": result or lse does not have the query's rows");
  return true;
}

/// The forward's operands (q, k, v[, mask]; out, lse): `g` and the mask
/// (null when none).
inline bool attentionForwardOperands(KernelContext &ctx, AttentionGeometry &g,
                                     const TensorView *&mask) {
  const char *what = "fused_attention";
  mask = ctx.in.size() > 3 ? &ctx.in[3] : nullptr;
  TensorView q = ctx.in[0], k = ctx.in[1], v = ctx.in[2];
  return headOperand(ctx, what, "perm_q", q, g.q) &&
         headOperand(ctx, what, "perm_k", k, g.k) &&
         headOperand(ctx, what, "perm_v", v, g.v) &&
         attentionGeometryOf(ctx, what, q, k, v, mask, g) &&
         checkAttentionResult(ctx, what, g, ctx.out[0], ctx.out[1]);
}

/// The gradient's operands (q, k, v, out, lse, dout[, mask]; dq, dk, dv).
inline bool attentionGradOperands(KernelContext &ctx, AttentionGeometry &g,
                                  const TensorView *&mask) {
  const char *what = "fused_attention_grad";
  mask = ctx.in.size() > 6 ? &ctx.in[6] : nullptr;
  TensorView in[3] = {ctx.in[0], ctx.in[1], ctx.in[2]}, dout = ctx.in[5];
  if (!headOperand(ctx, what, "perm_q", in[0], g.q) ||
      !headOperand(ctx, what, "perm_k", in[1], g.k) ||
      !headOperand(ctx, what, "perm_v", in[2], g.v) ||
      !headOperand(ctx, what, "perm_grad", dout, g.dout) ||
      !attentionGeometryOf(ctx, what, in[0], in[1], in[2], mask, g) ||
      !checkAttentionResult(ctx, what, g, ctx.in[3], ctx.in[4]))
    return false;
  if (dout.shape != ctx.in[3].shape || dout.dtype != DType::F32)
    return ctx.fail("fused_attention_grad: the gradient does not have the "
                    "result's shape");
  for (int i = 0; i < 3; ++i)
    if (ctx.out[i].shape != in[i].shape || ctx.out[i].dtype != DType::F32)
      return ctx.fail("fused_attention_grad: gradient " + std::to_string(i) +
                      " does not have its operand's shape");
  return true;
}

} // namespace ds::rt

#endif // DS_RUNTIME_ATTENTIONGEOMETRY_H
