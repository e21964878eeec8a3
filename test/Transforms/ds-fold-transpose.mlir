// Transposes folded into GEMM operands (issue 24 item 2).
// RUN: ds-opt %s --ds-fold-transpose -split-input-file | FileCheck %s
// RUN: ds-opt %s --ds-fold-transpose --ds-lower-to-dsrt -split-input-file | FileCheck %s --check-prefix=LOWER

// A Linear weight's gradient as autodiff writes it, (x^T g)^T: the product
// of the transposed operands, g^T x; the two transposes of x cancel and g's
// is read as trans_a. No transpose kernel is left.
// CHECK-LABEL: func.func @forward
// CHECK-NEXT: %[[GT:.*]] = ds.transpose %arg1 {perm = array<i64: 1, 0>} : tensor<16x6xf32> -> tensor<6x16xf32>
// CHECK-NEXT: %[[DW:.*]] = ds.matmul %[[GT]], %arg0 : (tensor<6x16xf32>, tensor<16x4xf32>) -> tensor<6x4xf32>
// CHECK-NEXT: return %[[DW]]
// LOWER-LABEL: func.func @forward
// LOWER-NOT: "transpose"
// LOWER: dsrt.kernel "matmul"(%{{.*}}, %{{.*}}) -> (%{{.*}}) {params = {trans_a = true}} : (memref<16x6xf32>, memref<16x4xf32>) -> (memref<6x4xf32>)
func.func @forward(%x: tensor<16x4xf32> {ds.input = "x"}, %g: tensor<16x6xf32> {ds.input = "g"})
    -> (tensor<6x4xf32> {ds.output = "dw"}) {
  %xt = ds.transpose %x {perm = array<i64: 1, 0>} : tensor<16x4xf32> -> tensor<4x16xf32>
  %dwt = ds.matmul %xt, %g : (tensor<4x16xf32>, tensor<16x6xf32>) -> tensor<4x6xf32>
  %dw = ds.transpose %dwt {perm = array<i64: 1, 0>} : tensor<4x6xf32> -> tensor<6x4xf32>
  return %dw : tensor<6x4xf32>
}

// -----

// Attention's head transposes: [B, T, H, d] read as [B, H, T, d] (q) and as
// [B, H, d, T] (k^T) by the matmul kernel, a strided batched GEMM.
// CHECK-LABEL: func.func @forward
// CHECK: ds.transpose %arg0 {ds.gemm_operand, perm = array<i64: 0, 2, 1, 3>}
// CHECK: ds.transpose %arg1 {ds.gemm_operand, perm = array<i64: 0, 2, 3, 1>}
// LOWER-LABEL: func.func @forward
// LOWER-NOT: "transpose"
// LOWER: dsrt.kernel "matmul"(%{{.*}}, %{{.*}}) -> (%{{.*}}) {params = {perm_a = array<i64: 0, 2, 1, 3>, perm_b = array<i64: 0, 2, 3, 1>}} : (memref<2x8x4x16xf32>, memref<2x8x4x16xf32>) -> (memref<2x4x8x8xf32>)
func.func @forward(%q: tensor<2x8x4x16xf32> {ds.input = "q"}, %k: tensor<2x8x4x16xf32> {ds.input = "k"})
    -> (tensor<2x4x8x8xf32> {ds.output = "s"}) {
  %qt = ds.transpose %q {perm = array<i64: 0, 2, 1, 3>} : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
  %kt = ds.transpose %k {perm = array<i64: 0, 2, 3, 1>} : tensor<2x8x4x16xf32> -> tensor<2x4x16x8xf32>
  %s = ds.matmul %qt, %kt : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  return %s : tensor<2x4x8x8xf32>
}

// -----

// Not folded: a transpose another op reads too, one that moves the
// innermost dimension out of the last two, a 16-bit one, and a transposed
// product whose matmul has another user.
// CHECK-LABEL: func.func @forward
// CHECK-NOT: ds.gemm_operand
// CHECK: ds.matmul %{{.*}}, %{{.*}} : (tensor<4x16xf32>, tensor<16x6xf32>) -> tensor<4x6xf32>
// CHECK-NOT: ds.gemm_operand
// LOWER-LABEL: func.func @forward
// LOWER-COUNT-4: dsrt.kernel "transpose"
// LOWER-NOT: dsrt.kernel "transpose"
func.func @forward(%a: tensor<2x8x4x16xf32> {ds.input = "a"}, %b: tensor<2x4x16x8xf32> {ds.input = "b"},
                %c: tensor<2x16x4x8xf32> {ds.input = "c"},
                %h: tensor<2x8x4x16xbf16> {ds.input = "h"}, %hb: tensor<2x4x16x8xbf16> {ds.input = "hb"},
                %x: tensor<16x4xf32> {ds.input = "x"}, %g: tensor<16x6xf32> {ds.input = "g"})
    -> (tensor<2x4x8x8xf32> {ds.output = "s"}, tensor<2x4x8x16xf32> {ds.output = "e"},
        tensor<2x16x8x8xf32> {ds.output = "u"}, tensor<2x4x8x8xbf16> {ds.output = "v"},
        tensor<6x4xf32> {ds.output = "dw"}, tensor<4x6xf32> {ds.output = "dwt"}) {
  %at = ds.transpose %a {perm = array<i64: 0, 2, 1, 3>} : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
  %s = ds.matmul %at, %b : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %e = ds.exp %at : tensor<2x4x8x16xf32>
  %au = ds.transpose %a {perm = array<i64: 0, 3, 1, 2>} : tensor<2x8x4x16xf32> -> tensor<2x16x8x4xf32>
  %u = ds.matmul %au, %c : (tensor<2x16x8x4xf32>, tensor<2x16x4x8xf32>) -> tensor<2x16x8x8xf32>
  %ht = ds.transpose %h {perm = array<i64: 0, 2, 1, 3>} : tensor<2x8x4x16xbf16> -> tensor<2x4x8x16xbf16>
  %v = ds.matmul %ht, %hb : (tensor<2x4x8x16xbf16>, tensor<2x4x16x8xbf16>) -> tensor<2x4x8x8xbf16>
  %xt = ds.transpose %x {perm = array<i64: 1, 0>} : tensor<16x4xf32> -> tensor<4x16xf32>
  %dwt = ds.matmul %xt, %g : (tensor<4x16xf32>, tensor<16x6xf32>) -> tensor<4x6xf32>
  %dw = ds.transpose %dwt {perm = array<i64: 1, 0>} : tensor<4x6xf32> -> tensor<6x4xf32>
  return %s, %e, %u, %v, %dw, %dwt : tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>, tensor<2x16x8x8xf32>, tensor<2x4x8x8xbf16>, tensor<6x4xf32>, tensor<4x6xf32>
}

// The GPT example's training step: 31 transpose kernels without the pass
// (--fold-transpose=false), 8 with it (the attention outputs' transposes back
// to [B, T, H, d], which would need a strided GEMM result, are left).
// RUN: ds-opt %ds_src/examples/gpt/gpt.onnx --optimizer=adam --emit=dsrt -o %t.on.dsrt 2>/dev/null
// RUN: ds-opt %ds_src/examples/gpt/gpt.onnx --optimizer=adam --fold-transpose=false --emit=dsrt -o %t.off.dsrt 2>/dev/null
// RUN: grep -c 'kernel "transpose"' %t.on.dsrt | FileCheck %s --check-prefix=ON
// RUN: grep -c 'kernel "transpose"' %t.off.dsrt | FileCheck %s --check-prefix=OFF
// RUN: grep -c 'perm_b = array<i64: 0, 2, 3, 1>' %t.on.dsrt | FileCheck %s --check-prefix=KT
// RUN: not grep -q perm_a %t.off.dsrt
// ON: {{^}}8{{$}}
// OFF: {{^}}31{{$}}
// KT: {{^}}4{{$}}
// With --fuse-attention the same 8: the fused ops read Q, K, V and the
// output gradient through their head transposes (2 layers: 2 forward and
// 2 gradient kernels, each with perm_q; the gradients with perm_grad).
// RUN: ds-opt %ds_src/examples/gpt/gpt.onnx --optimizer=adam --fuse-attention --emit=dsrt -o %t.fa.dsrt 2>/dev/null
// RUN: grep -c 'kernel "transpose"' %t.fa.dsrt | FileCheck %s --check-prefix=ON
// RUN: grep -c 'perm_q = array<i64: 0, 2, 1, 3>' %t.fa.dsrt | FileCheck %s --check-prefix=KT
// RUN: grep -c 'perm_grad = array<i64: 0, 2, 1, 3>' %t.fa.dsrt | FileCheck %s --check-prefix=FAG
// FAG: {{^}}2{{$}}

// -----

// A matmul with a 1-D operand is no strided GEMM: the transpose stays.
// CHECK-LABEL: func.func @forward
// CHECK-NOT: ds.gemm_operand
// LOWER-LABEL: func.func @forward
// LOWER: dsrt.kernel "transpose"
func.func @forward(%a: tensor<2x8x4x16xf32> {ds.input = "a"}, %v: tensor<16xf32> {ds.input = "v"})
    -> (tensor<2x4x8xf32> {ds.output = "s"}) {
  %at = ds.transpose %a {perm = array<i64: 0, 2, 1, 3>} : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
  %s = ds.matmul %at, %v : (tensor<2x4x8x16xf32>, tensor<16xf32>) -> tensor<2x4x8xf32>
  return %s : tensor<2x4x8xf32>
}

// -----

// Fused attention reads query, key, value and (its gradient) the output
// gradient through the head transposes: perm_q, perm_k, perm_v, perm_grad,
// no copy. The key's transpose feeds a matmul too (a strided operand of
// both). A transpose that moves the innermost dimension out of the last
// place (%vt here) stays a copy.
// CHECK-LABEL: func.func @forward
// CHECK: ds.transpose %arg0 {ds.gemm_operand, perm = array<i64: 0, 2, 1, 3>}
// CHECK: ds.transpose %arg1 {ds.gemm_operand, perm = array<i64: 0, 2, 1, 3>}
// CHECK-NOT: ds.gemm_operand
// CHECK: ds.transpose %arg3 {ds.gemm_operand, perm = array<i64: 0, 2, 1, 3>}
// LOWER-LABEL: func.func @forward
// LOWER-COUNT-1: dsrt.kernel "transpose"
// LOWER-NOT: dsrt.kernel "transpose"
// LOWER: dsrt.kernel "fused_attention"({{.*}}) -> ({{.*}}) {params = {fill = 0.000000e+00 : f64, mask_kind = "none", perm_k = array<i64: 0, 2, 1, 3>, perm_q = array<i64: 0, 2, 1, 3>, scale = 2.500000e-01 : f64}} : (memref<2x8x4x16xf32>, memref<2x8x4x16xf32>, memref<2x4x8x16xf32>)
// LOWER: dsrt.kernel "fused_attention_grad"({{.*}}) -> ({{.*}}) {params = {fill = 0.000000e+00 : f64, mask_kind = "none", perm_grad = array<i64: 0, 2, 1, 3>, perm_k = array<i64: 0, 2, 1, 3>, perm_q = array<i64: 0, 2, 1, 3>, scale = 2.500000e-01 : f64}}
// LOWER: dsrt.kernel "matmul"({{.*}}) -> ({{.*}}) {params = {perm_a = array<i64: 0, 2, 1, 3>}}
func.func @forward(%q: tensor<2x8x4x16xf32> {ds.input = "q"}, %k: tensor<2x8x4x16xf32> {ds.input = "k"},
                   %v: tensor<2x4x16x8xf32> {ds.input = "v"}, %g: tensor<2x8x4x16xf32> {ds.input = "g"})
    -> (tensor<2x4x8x16xf32> {ds.output = "o"}, tensor<2x4x8x16xf32> {ds.output = "dq"},
        tensor<2x4x8x8xf32> {ds.output = "s"}) {
  %qt = ds.transpose %q {perm = array<i64: 0, 2, 1, 3>} : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
  %kt = ds.transpose %k {perm = array<i64: 0, 2, 1, 3>} : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
  %vt = ds.transpose %v {perm = array<i64: 0, 1, 3, 2>} : tensor<2x4x16x8xf32> -> tensor<2x4x8x16xf32>
  %gt = ds.transpose %g {perm = array<i64: 0, 2, 1, 3>} : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
  %o, %lse = ds.fused_attention %qt, %kt, %vt {mask_kind = "none", scale = 0.25 : f64}
    : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8xf32>)
  %dq, %dk, %dv = ds.fused_attention_grad %qt, %kt, %vt, %o, %lse, %gt {mask_kind = "none", scale = 0.25 : f64}
    : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8xf32>, tensor<2x4x8x16xf32>)
      -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>)
  %s = ds.matmul %kt, %v : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  return %o, %dq, %s : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x8xf32>
}
