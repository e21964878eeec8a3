// The tensor-parallel pass: an MLP block (matmul by a transposed weight,
// bias, elementwise activation, Gemm contracting over the width) split over
// 2 ranks: first weight and bias by columns, second weight by rows, Megatron's
// f before the block and g (a sum over the group) before the second bias.
// Autodiff then gives f's gradient as that sum.
// RUN: ds-opt %s '--ds-tensor-parallel=size=2' | FileCheck %s --check-prefix=CHECK
// RUN: ds-opt %s '--ds-tensor-parallel=size=2' --ds-autodiff | FileCheck %s --check-prefix=GRAD
// RUN: not ds-opt %s '--ds-tensor-parallel=size=3' 2>&1 | FileCheck %s --check-prefix=WIDTH
// Without the vocabulary split (nothing to split here either): the same.
// RUN: ds-opt %s '--ds-tensor-parallel=size=2 vocab-parallel=false' | FileCheck %s --check-prefix=CHECK

// CHECK-LABEL: func.func @forward
// CHECK-SAME: tensor<4x4xf32> {ds.param = "w1", ds.tp_split = array<i64: 0, 2>, ds.trainable}
// CHECK-SAME: tensor<4xf32> {ds.param = "b1", ds.tp_split = array<i64: 0, 2>, ds.trainable}
// CHECK-SAME: tensor<3x4xf32> {ds.param = "w2", ds.tp_split = array<i64: 1, 2>, ds.trainable}
// CHECK-SAME: tensor<3xf32> {ds.param = "b2", ds.trainable}
// CHECK-SAME: attributes {ds.tensor_parallel = 2 : i64}
// CHECK: %[[X:.*]] = ds.tanh
// CHECK: %[[F:.*]] = ds.tp_identity %[[X]] {group = 1 : i64} : tensor<2x4xf32>
// CHECK: ds.matmul %[[F]], %{{.*}} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
// CHECK: ds.relu %{{.*}} : tensor<2x4xf32>
// CHECK: %[[P:.*]] = ds.gemm %{{.*}}, %arg3 {trans_b = true} : (tensor<2x4xf32>, tensor<3x4xf32>) -> tensor<2x3xf32>
// CHECK: %[[S:.*]] = ds.tp_all_reduce %[[P]] {group = 1 : i64} : tensor<2x3xf32>
// CHECK: ds.add %[[S]], %arg4 : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>

// GRAD-LABEL: func.func @forward
// GRAD: ds.tp_all_reduce %{{.*}} {group = 1 : i64} : tensor<2x3xf32>
// GRAD: ds.tp_all_reduce %{{.*}} {group = 1 : i64} : tensor<2x4xf32>

// WIDTH: error: --tensor-parallel=3 does not divide this MLP's width 8
func.func @forward(%x: tensor<2x4xf32> {ds.input = "x"}, %w1: tensor<8x4xf32> {ds.param = "w1", ds.trainable},
                   %b1: tensor<8xf32> {ds.param = "b1", ds.trainable}, %w2: tensor<3x8xf32> {ds.param = "w2", ds.trainable},
                   %b2: tensor<3xf32> {ds.param = "b2", ds.trainable}, %y: tensor<2xi64> {ds.input = "y"}) -> (tensor<f32> {ds.output = "loss", ds.loss}) {
  %h0 = ds.tanh %x : tensor<2x4xf32>
  %t1 = ds.transpose %w1 {perm = array<i64: 1, 0>} : tensor<8x4xf32> -> tensor<4x8xf32>
  %m1 = ds.matmul %h0, %t1 : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %a1 = ds.add %b1, %m1 : (tensor<8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %r = ds.relu %a1 : tensor<2x8xf32>
  %h = ds.gemm %r, %w2, %b2 {trans_b = true} : (tensor<2x8xf32>, tensor<3x8xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %l = ds.softmax_cross_entropy_loss %h, %y {reduction = "mean"} : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<f32>
  return %l : tensor<f32>
}
