// The gradient of a weight a matmul shares over batch dimensions (issue 24):
// one GEMM with the batch folded into the contraction, x as [T*B, K] read
// transposed, never a per-position [T, K, N] product summed afterwards.
// RUN: ds-opt %s --ds-autodiff -split-input-file | FileCheck %s
// RUN: ds-opt %s --ds-autodiff --ds-lower-to-dsrt -split-input-file | FileCheck %s --check-prefix=LOWER

// nn.MultiheadAttention's sequence-first input projection: x [T, B, K].
// CHECK-LABEL: func.func @forward
// CHECK-NOT: ds.reduce_sum {{.*}} tensor<8x4x6xf32>
// CHECK-DAG: %[[X2:.*]] = ds.reshape %arg0 : tensor<8x2x4xf32> -> tensor<16x4xf32>
// CHECK-DAG: %[[G2:.*]] = ds.reshape %{{.*}} : tensor<8x2x6xf32> -> tensor<16x6xf32>
// CHECK: %[[XT:.*]] = ds.transpose %[[X2]] {perm = array<i64: 1, 0>} : tensor<16x4xf32> -> tensor<4x16xf32>
// CHECK: %[[GW:.*]] = ds.matmul %[[XT]], %[[G2]] : (tensor<4x16xf32>, tensor<16x6xf32>) -> tensor<4x6xf32>
// CHECK: return %{{.*}}, %[[GW]]
// LOWER-LABEL: func.func @forward
// LOWER-NOT: memref<8x4x6xf32>
// LOWER: dsrt.kernel "matmul"(%{{.*}}, %{{.*}}) -> (%{{.*}}) {params = {trans_a = true}} : (memref<16x4xf32>, memref<16x6xf32>) -> (memref<4x6xf32>)
func.func @forward(%x: tensor<8x2x4xf32> {ds.input = "x"}, %w: tensor<4x6xf32> {ds.param = "w", ds.trainable})
    -> (tensor<f32> {ds.output = "loss", ds.loss}) {
  %h = ds.matmul %x, %w : (tensor<8x2x4xf32>, tensor<4x6xf32>) -> tensor<8x2x6xf32>
  %l = ds.reduce_mean %h {axes = array<i64: 0, 1, 2>, keepdims = false} : tensor<8x2x6xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A weight with a leading broadcast dimension of 1: the same GEMM, reshaped
// back to [1, K, N].
// CHECK-LABEL: func.func @forward
// CHECK-NOT: ds.reduce_sum
// CHECK: %[[GW:.*]] = ds.matmul %{{.*}}, %{{.*}} : (tensor<4x24xf32>, tensor<24x6xf32>) -> tensor<4x6xf32>
// CHECK: %[[R:.*]] = ds.reshape %[[GW]] : tensor<4x6xf32> -> tensor<1x4x6xf32>
// CHECK: return %{{.*}}, %[[R]]
func.func @forward(%x: tensor<2x3x4x4xf32> {ds.input = "x"}, %w: tensor<1x4x6xf32> {ds.param = "w", ds.trainable})
    -> (tensor<f32> {ds.output = "loss", ds.loss}) {
  %h = ds.matmul %x, %w : (tensor<2x3x4x4xf32>, tensor<1x4x6xf32>) -> tensor<2x3x4x6xf32>
  %l = ds.reduce_mean %h {axes = array<i64: 0, 1, 2, 3>, keepdims = false} : tensor<2x3x4x6xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A batched right operand (attention's K or V) keeps the batched product:
// its gradient is per batch.
// CHECK-LABEL: func.func @forward
// CHECK: ds.matmul %{{.*}}, %{{.*}} : (tensor<3x4x5xf32>, tensor<3x5x6xf32>) -> tensor<3x4x6xf32>
func.func @forward(%x: tensor<3x5x4xf32> {ds.input = "x"}, %w: tensor<3x4x6xf32> {ds.param = "w", ds.trainable})
    -> (tensor<f32> {ds.output = "loss", ds.loss}) {
  %h = ds.matmul %x, %w : (tensor<3x5x4xf32>, tensor<3x4x6xf32>) -> tensor<3x5x6xf32>
  %l = ds.reduce_mean %h {axes = array<i64: 0, 1, 2>, keepdims = false} : tensor<3x5x6xf32> -> tensor<f32>
  return %l : tensor<f32>
}
