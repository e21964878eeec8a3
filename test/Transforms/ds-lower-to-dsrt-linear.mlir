// PyTorch's Linear (Transpose(W) + MatMul): the transpose folds into the
// matmul kernel as trans_b, with no copy of W. A transpose with another
// user, or one that is not a swap of the last two dimensions, stays.
// RUN: ds-opt %s --ds-lower-to-dsrt | FileCheck %s

// CHECK-LABEL: func.func @forward()
// CHECK: %[[X:.*]] = dsrt.input {index = 0 : i64, name = "x"} : memref<2x4x8xf32>
// CHECK: %[[W:.*]] = dsrt.param {index = 0 : i64, name = "w"} : memref<16x8xf32>
// CHECK: %[[V:.*]] = dsrt.param {index = 1 : i64, name = "v"} : memref<8x8xf32>
// CHECK-NOT: "transpose"(%[[W]])
// CHECK: dsrt.kernel "matmul"(%[[X]], %[[W]]) -> (%{{.*}}) {params = {trans_b = true}}
// CHECK: dsrt.kernel "transpose"(%[[V]])
// CHECK: dsrt.kernel "matmul"(%[[X]], %{{.*}}) -> (%{{.*}}) {params = {}}
func.func @forward(%x: tensor<2x4x8xf32> {ds.input = "x"}, %w: tensor<16x8xf32> {ds.param = "w"},
                   %v: tensor<8x8xf32> {ds.param = "v"})
    -> (tensor<2x4x16xf32> {ds.output = "y"}, tensor<2x4x8xf32> {ds.output = "z"}, tensor<8x8xf32> {ds.output = "vt"}) {
  %wt = ds.transpose %w {perm = array<i64: 1, 0>} : tensor<16x8xf32> -> tensor<8x16xf32>
  %y = ds.matmul %x, %wt : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  // %vt is also an output: it must exist, so it is not folded.
  %vt = ds.transpose %v {perm = array<i64: 1, 0>} : tensor<8x8xf32> -> tensor<8x8xf32>
  %z = ds.matmul %x, %vt : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  return %y, %z, %vt : tensor<2x4x16xf32>, tensor<2x4x8xf32>, tensor<8x8xf32>
}
