// ds.conv, ds.conv_grad_input and ds.conv_grad_weight: the round trip
// (custom and generic forms).
// RUN: ds-opt %s | ds-opt | FileCheck %s
// RUN: ds-opt %s --mlir-print-op-generic | ds-opt | FileCheck %s

// CHECK-LABEL: func.func @conv
func.func @conv(%x: tensor<2x4x7x6xf32>, %w: tensor<6x2x3x2xf32>, %b: tensor<6xf32>, %g: tensor<2x6x4x5xf32>)
    -> (tensor<2x6x4x5xf32>, tensor<2x4x7x6xf32>, tensor<6x2x3x2xf32>) {
  // CHECK: ds.conv %{{.*}}, %{{.*}}, %{{.*}} {dilations = array<i64: 1, 2>, group = 2 : i64, pads = array<i64: 1, 0, 2, 1>, strides = array<i64: 2, 1>}
  %y = ds.conv %x, %w, %b {strides = array<i64: 2, 1>, pads = array<i64: 1, 0, 2, 1>, dilations = array<i64: 1, 2>, group = 2 : i64}
      : (tensor<2x4x7x6xf32>, tensor<6x2x3x2xf32>, tensor<6xf32>) -> tensor<2x6x4x5xf32>
  // CHECK: ds.conv_grad_input
  %dx = ds.conv_grad_input %g, %w {strides = array<i64: 2, 1>, pads = array<i64: 1, 0, 2, 1>, dilations = array<i64: 1, 2>, group = 2 : i64}
      : (tensor<2x6x4x5xf32>, tensor<6x2x3x2xf32>) -> tensor<2x4x7x6xf32>
  // CHECK: ds.conv_grad_weight
  %dw = ds.conv_grad_weight %x, %g {strides = array<i64: 2, 1>, pads = array<i64: 1, 0, 2, 1>, dilations = array<i64: 1, 2>, group = 2 : i64}
      : (tensor<2x4x7x6xf32>, tensor<2x6x4x5xf32>) -> tensor<6x2x3x2xf32>
  return %y, %dx, %dw : tensor<2x6x4x5xf32>, tensor<2x4x7x6xf32>, tensor<6x2x3x2xf32>
}
