// ds.resize and ds.resize_grad: the round trip (sampling rule:
// Support/Resize.h).
// RUN: ds-opt %s | ds-opt | FileCheck %s
// RUN: ds-opt %s --mlir-print-op-generic | ds-opt | FileCheck %s

// CHECK-LABEL: func.func @resizes
func.func @resizes(%x: tensor<1x2x4x5xf32>, %g: tensor<1x2x8x10xf32>, %v: tensor<2x3x7xbf16>) -> (tensor<1x2x8x10xf32>, tensor<1x2x4x5xf32>, tensor<2x3x10xbf16>) {
  // CHECK: ds.resize %{{.*}} {coordinate_transformation_mode = "half_pixel", mode = "linear", nearest_mode = "floor", scales = array<f64: 2.000000e+00, 2.000000e+00>} : tensor<1x2x4x5xf32> -> tensor<1x2x8x10xf32>
  %y = ds.resize %x {mode = "linear", coordinate_transformation_mode = "half_pixel", nearest_mode = "floor", scales = array<f64: 2.0, 2.0>} : tensor<1x2x4x5xf32> -> tensor<1x2x8x10xf32>
  // CHECK: ds.resize_grad %{{.*}} {{.*}} : tensor<1x2x8x10xf32> -> tensor<1x2x4x5xf32>
  %dx = ds.resize_grad %g {mode = "linear", coordinate_transformation_mode = "half_pixel", nearest_mode = "floor", scales = array<f64: 2.0, 2.0>} : tensor<1x2x8x10xf32> -> tensor<1x2x4x5xf32>
  // CHECK: ds.resize %{{.*}} {coordinate_transformation_mode = "asymmetric", mode = "nearest", nearest_mode = "round_prefer_ceil", scales = array<f64: 1.500000e+00>} : tensor<2x3x7xbf16> -> tensor<2x3x10xbf16>
  %n = ds.resize %v {mode = "nearest", coordinate_transformation_mode = "asymmetric", nearest_mode = "round_prefer_ceil", scales = array<f64: 1.5>} : tensor<2x3x7xbf16> -> tensor<2x3x10xbf16>
  return %y, %dx, %n : tensor<1x2x8x10xf32>, tensor<1x2x4x5xf32>, tensor<2x3x10xbf16>
}
