// The split-axis rules (SplitAxisOpInterface) that tensor and sequence
// parallelism propagate: for each operand, where a split of each of its
// axes lands in the result ('-': it cannot pass). Broadcasting aligns from
// the right; a matmul passes batch, rows and columns but not the
// contraction; reshapes pass an axis kept, split into (blocks, rest) or
// merged with the next; reductions, softmax and layer_norm pass the other
// axes; slices and concats pass the axes they keep whole.
// RUN: ds-opt %s --ds-print-split-axes 2>&1 | FileCheck %s

// CHECK: remark: split axes: [0 1 2] [2]
// CHECK-NEXT: ds.add
// CHECK: remark: split axes: [0 1 -] [- 2]
// CHECK-NEXT: ds.matmul
// CHECK: remark: split axes: [0 1 2]
// CHECK-NEXT: ds.reshape
// CHECK: remark: split axes: [0 1 2 -]
// CHECK-NEXT: ds.reshape
// CHECK: remark: split axes: [0 - 1]
// CHECK-NEXT: ds.reshape
// CHECK: remark: split axes: [0 2 1 3]
// CHECK-NEXT: ds.transpose
// CHECK: remark: split axes: [0 1 -]
// CHECK-NEXT: ds.reduce_mean
// CHECK: remark: split axes: [0 1 -]
// CHECK-NEXT: ds.softmax
// CHECK: remark: split axes: [0 1 -] [-] [-]
// CHECK-NEXT: ds.layer_norm
// CHECK: remark: split axes: [0 1 -]
// CHECK-NEXT: ds.slice
// CHECK: remark: split axes: [0 1 -] [0 1 -]
// CHECK-NEXT: ds.concat
func.func @f(%a: tensor<2x4x8xf32>, %b: tensor<8xf32>, %w: tensor<8x6xf32>, %s: tensor<2x4x4x2xf32>) -> tensor<2x4x6xf32> {
  %0 = ds.add %a, %b : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %1 = ds.matmul %0, %w : (tensor<2x4x8xf32>, tensor<8x6xf32>) -> tensor<2x4x6xf32>
  %2 = ds.reshape %a : tensor<2x4x8xf32> -> tensor<2x4x4x2xf32>
  %3 = ds.reshape %s : tensor<2x4x4x2xf32> -> tensor<2x4x8xf32>
  %4 = ds.reshape %a : tensor<2x4x8xf32> -> tensor<8x8xf32>
  %5 = ds.transpose %s {perm = array<i64: 0, 2, 1, 3>} : tensor<2x4x4x2xf32> -> tensor<2x4x4x2xf32>
  %6 = ds.reduce_mean %a {axes = array<i64: 2>, keepdims = false} : tensor<2x4x8xf32> -> tensor<2x4xf32>
  %7 = ds.softmax %a {axis = 2 : i64} : tensor<2x4x8xf32>
  %8 = ds.layer_norm %a, %b, %b {axis = 2 : i64, epsilon = 1.0e-05 : f32} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %9 = ds.slice %a {starts = array<i64: 0, 0, 4>, steps = array<i64: 1, 1, 1>} : tensor<2x4x8xf32> -> tensor<2x4x4xf32>
  %10 = ds.concat %9, %9 {axis = 2 : i64} : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x8xf32>
  return %1 : tensor<2x4x6xf32>
}
