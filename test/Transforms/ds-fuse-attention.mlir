// Attention fused into ds.fused_attention (issue 24 item 2).
// RUN: ds-opt %s --ds-fuse-attention -split-input-file | FileCheck %s
// RUN: ds-opt %s --ds-fuse-attention -split-input-file | ds-opt -split-input-file | FileCheck %s
// RUN: ds-opt %s --ds-fuse-attention --ds-autodiff -split-input-file | FileCheck %s --check-prefix=GRAD

// GPT's causal attention as imported: K^T is the head transpose of K with
// the last two dimensions swapped (composed back to [0, 2, 1, 3]), the
// scale a splat mul, the causal mask a where filling -inf.
// CHECK-LABEL: func.func @forward
// CHECK: %[[M:.*]] = ds.equal %arg3
// CHECK: %[[K:.*]] = ds.transpose %arg1 {perm = array<i64: 0, 2, 1, 3>} : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
// CHECK-NEXT: %[[O:.*]], %[[L:.*]] = ds.fused_attention %arg0, %[[K]], %arg2, %[[M]] {fill = 0xFFF0000000000000 : f64, mask_kind = "fill_true", scale = 2.500000e-01 : f64} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<1x1x8x8xi1>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8xf32>)
// CHECK-NOT: ds.softmax
// CHECK-NOT: ds.matmul
// CHECK: ds.reduce_sum %[[O]]
// GRAD-LABEL: func.func @forward
// GRAD: %[[O:.*]], %[[L:.*]] = ds.fused_attention
// GRAD: ds.fused_attention_grad %arg0, %{{.*}}, %arg2, %[[O]], %[[L]], %{{.*}}, %{{.*}} {fill = 0xFFF0000000000000 : f64, mask_kind = "fill_true", scale = 2.500000e-01 : f64}
// GRAD-NOT: ds.softmax_grad
func.func @forward(%q: tensor<2x4x8x16xf32> {ds.param = "q", ds.trainable},
               %k4: tensor<2x8x4x16xf32> {ds.param = "k", ds.trainable},
               %v: tensor<2x4x8x16xf32> {ds.param = "v", ds.trainable},
               %tril: tensor<1x1x8x8xf32> {ds.param = "bias"})
    -> (tensor<f32> {ds.loss, ds.output = "loss"}) {
  %scale = ds.constant dense<2.500000e-01> : tensor<f32>
  %zero = ds.constant dense<0.000000e+00> : tensor<f32>
  %ninf = ds.constant dense<0xFF800000> : tensor<f32>
  %kt = ds.transpose %k4 {perm = array<i64: 0, 2, 3, 1>} : tensor<2x8x4x16xf32> -> tensor<2x4x16x8xf32>
  %s = ds.matmul %q, %kt : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %t = ds.mul %s, %scale : (tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %m = ds.equal %tril, %zero : (tensor<1x1x8x8xf32>, tensor<f32>) -> tensor<1x1x8x8xi1>
  %u = ds.where %m, %ninf, %t : (tensor<1x1x8x8xi1>, tensor<f32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %p = ds.softmax %u {axis = 3 : i64} : tensor<2x4x8x8xf32>
  %o = ds.matmul %p, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  %l = ds.reduce_sum %o {axes = array<i64: 0, 1, 2, 3>, keepdims = false} : tensor<2x4x8x16xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// BERT's padding mask: an additive bias from an input (no trainable
// parameter), after a scale by division; nn.MultiheadAttention's rank-3
// [batch*heads, T, D] form with K^T a plain transpose of K (used as is).
// CHECK-LABEL: func.func @bert
// CHECK-NOT: ds.transpose
// CHECK: %[[O:.*]], %{{.*}} = ds.fused_attention %arg0, %arg1, %arg2, %arg3 {mask_kind = "add", scale = 1.250000e-01 : f64} : (tensor<8x6x16xf32>, tensor<8x6x16xf32>, tensor<8x6x32xf32>, tensor<8x1x6xf32>) -> (tensor<8x6x32xf32>, tensor<8x6xf32>)
// CHECK-NEXT: return %[[O]]
func.func @bert(%q: tensor<8x6x16xf32>, %k: tensor<8x6x16xf32>,
                %v: tensor<8x6x32xf32>, %bias: tensor<8x1x6xf32> {ds.input = "keep"})
    -> tensor<8x6x32xf32> {
  %c8 = ds.constant dense<8.0> : tensor<f32>
  %kt = ds.transpose %k {perm = array<i64: 0, 2, 1>} : tensor<8x6x16xf32> -> tensor<8x16x6xf32>
  %s = ds.matmul %q, %kt : (tensor<8x6x16xf32>, tensor<8x16x6xf32>) -> tensor<8x6x6xf32>
  %t = ds.div %s, %c8 : (tensor<8x6x6xf32>, tensor<f32>) -> tensor<8x6x6xf32>
  %u = ds.add %t, %bias : (tensor<8x6x6xf32>, tensor<8x1x6xf32>) -> tensor<8x6x6xf32>
  %p = ds.softmax %u {axis = 2 : i64} : tensor<8x6x6xf32>
  %o = ds.matmul %p, %v : (tensor<8x6x6xf32>, tensor<8x6x32xf32>) -> tensor<8x6x32xf32>
  return %o : tensor<8x6x32xf32>
}

// -----

// Dropout on the probabilities: left alone (the softmax feeds the dropout,
// not the matmul).
// CHECK-LABEL: func.func @dropout
// CHECK-NOT: ds.fused_attention
// CHECK: ds.softmax
// CHECK: ds.dropout
func.func @dropout(%q: tensor<8x6x16xf32>, %kt: tensor<8x16x6xf32>,
                   %v: tensor<8x6x16xf32>) -> tensor<8x6x16xf32> {
  %s = ds.matmul %q, %kt : (tensor<8x6x16xf32>, tensor<8x16x6xf32>) -> tensor<8x6x6xf32>
  %p = ds.softmax %s {axis = 2 : i64} : tensor<8x6x6xf32>
  %d, %mask = ds.dropout %p {ratio = 1.000000e-01 : f64, training = true} : tensor<8x6x6xf32> -> tensor<8x6x6xf32>, tensor<8x6x6xi1>
  %o = ds.matmul %d, %v : (tensor<8x6x6xf32>, tensor<8x6x16xf32>) -> tensor<8x6x16xf32>
  return %o : tensor<8x6x16xf32>
}

// -----

// Not attention: probabilities used twice (returned as weights), a
// trainable additive bias (its gradient is needed), a scale that is not
// a constant, a softmax over another axis.
// CHECK-LABEL: func.func @twice
// CHECK-NOT: ds.fused_attention
// CHECK: ds.softmax
func.func @twice(%q: tensor<8x6x16xf32>, %kt: tensor<8x16x6xf32>,
                 %v: tensor<8x6x16xf32>) -> (tensor<8x6x16xf32>, tensor<8x6x6xf32>) {
  %s = ds.matmul %q, %kt : (tensor<8x6x16xf32>, tensor<8x16x6xf32>) -> tensor<8x6x6xf32>
  %p = ds.softmax %s {axis = 2 : i64} : tensor<8x6x6xf32>
  %o = ds.matmul %p, %v : (tensor<8x6x6xf32>, tensor<8x6x16xf32>) -> tensor<8x6x16xf32>
  return %o, %p : tensor<8x6x16xf32>, tensor<8x6x6xf32>
}
// CHECK-LABEL: func.func @trainable_bias
// CHECK-NOT: ds.fused_attention
// CHECK: ds.softmax
func.func @trainable_bias(%q: tensor<8x6x16xf32>, %kt: tensor<8x16x6xf32>,
                          %v: tensor<8x6x16xf32>,
                          %rel: tensor<6x6xf32> {ds.param = "rel", ds.trainable}) -> tensor<8x6x16xf32> {
  %s = ds.matmul %q, %kt : (tensor<8x6x16xf32>, tensor<8x16x6xf32>) -> tensor<8x6x6xf32>
  %u = ds.add %s, %rel : (tensor<8x6x6xf32>, tensor<6x6xf32>) -> tensor<8x6x6xf32>
  %p = ds.softmax %u {axis = 2 : i64} : tensor<8x6x6xf32>
  %o = ds.matmul %p, %v : (tensor<8x6x6xf32>, tensor<8x6x16xf32>) -> tensor<8x6x16xf32>
  return %o : tensor<8x6x16xf32>
}
// CHECK-LABEL: func.func @scale_tensor
// CHECK-NOT: ds.fused_attention
// CHECK: ds.softmax
func.func @scale_tensor(%q: tensor<8x6x16xf32>, %kt: tensor<8x16x6xf32>,
                        %v: tensor<8x6x16xf32>, %c: tensor<f32>) -> tensor<8x6x16xf32> {
  %s = ds.matmul %q, %kt : (tensor<8x6x16xf32>, tensor<8x16x6xf32>) -> tensor<8x6x6xf32>
  %t = ds.mul %s, %c : (tensor<8x6x6xf32>, tensor<f32>) -> tensor<8x6x6xf32>
  %p = ds.softmax %t {axis = 2 : i64} : tensor<8x6x6xf32>
  %o = ds.matmul %p, %v : (tensor<8x6x6xf32>, tensor<8x6x16xf32>) -> tensor<8x6x16xf32>
  return %o : tensor<8x6x16xf32>
}
// CHECK-LABEL: func.func @other_axis
// CHECK-NOT: ds.fused_attention
// CHECK: ds.softmax
func.func @other_axis(%q: tensor<8x6x16xf32>, %kt: tensor<8x16x6xf32>,
                      %v: tensor<8x6x16xf32>) -> tensor<8x6x16xf32> {
  %s = ds.matmul %q, %kt : (tensor<8x6x16xf32>, tensor<8x16x6xf32>) -> tensor<8x6x6xf32>
  %p = ds.softmax %s {axis = 1 : i64} : tensor<8x6x6xf32>
  %o = ds.matmul %p, %v : (tensor<8x6x6xf32>, tensor<8x6x16xf32>) -> tensor<8x6x16xf32>
  return %o : tensor<8x6x16xf32>
}
