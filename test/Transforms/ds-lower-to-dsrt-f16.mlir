// 16-bit GEMMs get an f32 workspace for A, B and the result.
// RUN: ds-opt %s --ds-lower-to-dsrt | FileCheck %s

// CHECK-LABEL: func.func @forward()
// CHECK: %[[O:.*]] = dsrt.alloc : memref<4x2xf16>
// CHECK-NEXT: %[[WS:.*]] = dsrt.alloc : memref<32xf32>
// CHECK-NEXT: dsrt.kernel "matmul"(%{{.*}}, %{{.*}}) -> (%[[O]], %[[WS]])
func.func @forward(%x: tensor<4x4xf16> {ds.input = "x"}, %w: tensor<4x2xf16> {ds.param = "w"}) -> (tensor<4x2xf16> {ds.output = "y"}) {
  %0 = ds.matmul %x, %w : (tensor<4x4xf16>, tensor<4x2xf16>) -> tensor<4x2xf16>
  return %0 : tensor<4x2xf16>
}
