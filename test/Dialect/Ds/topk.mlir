// ds.topk and ds.topk_grad: the round trip.
// RUN: ds-opt %s | ds-opt | FileCheck %s
// RUN: ds-opt %s --mlir-print-op-generic | ds-opt | FileCheck %s

// CHECK-LABEL: func.func @topk
func.func @topk(%x: tensor<3x7x2xf32>, %g: tensor<3x4x2xf32>) -> (tensor<3x4x2xf32>, tensor<3x4x2xi64>, tensor<3x7x2xf32>) {
  // CHECK: %[[V:.*]], %[[I:.*]] = ds.topk %{{.*}} {axis = 1 : i64, k = 4 : i64, largest = false} : tensor<3x7x2xf32> -> (tensor<3x4x2xf32>, tensor<3x4x2xi64>)
  %v, %i = ds.topk %x {axis = 1 : i64, k = 4 : i64, largest = false} : tensor<3x7x2xf32> -> (tensor<3x4x2xf32>, tensor<3x4x2xi64>)
  // CHECK: ds.topk_grad %{{.*}}, %[[I]] {axis = 1 : i64} : (tensor<3x4x2xf32>, tensor<3x4x2xi64>) -> tensor<3x7x2xf32>
  %d = ds.topk_grad %g, %i {axis = 1 : i64} : (tensor<3x4x2xf32>, tensor<3x4x2xi64>) -> tensor<3x7x2xf32>
  return %v, %i, %d : tensor<3x4x2xf32>, tensor<3x4x2xi64>, tensor<3x7x2xf32>
}
