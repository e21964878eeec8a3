// ds tensors to dsrt buffers: inputs and parameters become buffers, reshape
// a view, constants const buffers, each other op one kernel call.
// RUN: ds-opt %s --ds-lower-to-dsrt | FileCheck %s

// CHECK-LABEL: func.func @forward()
// CHECK-SAME: attributes {dsrt.loss = "loss"}
// CHECK-NEXT: %[[X:.*]] = dsrt.input {index = 0 : i64, name = "x"} : memref<4x8xf32>
// CHECK-NEXT: %[[Y:.*]] = dsrt.input {index = 1 : i64, name = "y"} : memref<4xi64>
// CHECK-NEXT: %[[W:.*]] = dsrt.param {index = 0 : i64, name = "w", trainable} : memref<8x3xf32>
// CHECK-NEXT: %[[M:.*]] = dsrt.param {index = 1 : i64, name = "m"} : memref<3xf32>
// CHECK-NEXT: %[[H:.*]] = dsrt.alloc : memref<4x3xf32>
// CHECK-NEXT: dsrt.kernel "matmul"(%[[X]], %[[W]]) -> (%[[H]]) {params = {}}
// CHECK-NEXT: %[[C:.*]] = dsrt.const dense<2.000000e+00> : tensor<f32> : memref<f32>
// CHECK-NEXT: %[[S:.*]] = dsrt.alloc : memref<4x3xf32>
// CHECK-NEXT: dsrt.kernel "mul"(%[[H]], %[[C]]) -> (%[[S]]) {inplace = array<i64: 0>, params = {}}
// CHECK-NEXT: %[[V:.*]] = dsrt.view %[[S]] : memref<4x3xf32> -> memref<12xf32>
// CHECK-NEXT: %[[L:.*]] = dsrt.alloc : memref<f32>
// CHECK-NEXT: dsrt.kernel "softmax_cross_entropy_loss"(%[[S]], %[[Y]]) -> (%[[L]]) {params = {reduction = "mean"}}
// CHECK-NEXT: dsrt.output %[[L]] {index = 0 : i64, name = "loss"} : memref<f32>
// CHECK-NEXT: dsrt.output %[[V]] {index = 1 : i64, name = "flat"} : memref<12xf32>
// CHECK-NEXT: return
func.func @forward(%x: tensor<4x8xf32> {ds.input = "x"}, %y: tensor<4xi64> {ds.input = "y"},
                   %w: tensor<8x3xf32> {ds.param = "w", ds.trainable}, %m: tensor<3xf32> {ds.param = "m"})
    -> (tensor<f32> {ds.output = "loss", ds.loss}, tensor<12xf32> {ds.output = "flat"}) {
  %h = ds.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %c = ds.constant dense<2.0> : tensor<f32>
  %s = ds.mul %h, %c : (tensor<4x3xf32>, tensor<f32>) -> tensor<4x3xf32>
  %v = ds.reshape %s : tensor<4x3xf32> -> tensor<12xf32>
  %l = ds.softmax_cross_entropy_loss %s, %y {reduction = "mean"} : (tensor<4x3xf32>, tensor<4xi64>) -> tensor<f32>
  return %l, %v : tensor<f32>, tensor<12xf32>
}
