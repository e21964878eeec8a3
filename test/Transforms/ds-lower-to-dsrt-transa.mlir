// A weight gradient A^T @ G (how autodiff writes it) reads A transposed:
// the matmul kernel gets trans_a and no transpose copy is made.
// RUN: ds-opt %s --ds-lower-to-dsrt | FileCheck %s

// CHECK-LABEL: func.func @forward
// CHECK-NOT: "transpose"
// CHECK: dsrt.kernel "matmul"(%{{.*}}, %{{.*}}) -> (%{{.*}}) {params = {trans_a = true}} : (memref<2x4xf32>, memref<2x3xf32>) -> (memref<4x3xf32>)
func.func @forward(%a: tensor<2x4xf32> {ds.input = "a"}, %g: tensor<2x3xf32> {ds.input = "g"})
    -> (tensor<4x3xf32> {ds.output = "dw"}) {
  %at = ds.transpose %a {perm = array<i64: 1, 0>} : tensor<2x4xf32> -> tensor<4x2xf32>
  %dw = ds.matmul %at, %g : (tensor<4x2xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  return %dw : tensor<4x3xf32>
}
