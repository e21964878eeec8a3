// The verifier rules of ds.resize and ds.resize_grad.
// RUN: ds-opt %s -split-input-file -verify-diagnostics

func.func @cubic(%x: tensor<1x2x4x4xf32>) -> tensor<1x2x8x8xf32> {
  // expected-error @+1 {{unknown mode 'cubic'}}
  %y = ds.resize %x {mode = "cubic", coordinate_transformation_mode = "half_pixel", nearest_mode = "floor", scales = array<f64: 2.0, 2.0>} : tensor<1x2x4x4xf32> -> tensor<1x2x8x8xf32>
  return %y : tensor<1x2x8x8xf32>
}

// -----

func.func @crop(%x: tensor<1x2x4x4xf32>) -> tensor<1x2x8x8xf32> {
  // expected-error @+1 {{unknown coordinate_transformation_mode 'tf_crop_and_resize'}}
  %y = ds.resize %x {mode = "linear", coordinate_transformation_mode = "tf_crop_and_resize", nearest_mode = "floor", scales = array<f64: 2.0, 2.0>} : tensor<1x2x4x4xf32> -> tensor<1x2x8x8xf32>
  return %y : tensor<1x2x8x8xf32>
}

// -----

func.func @scales(%x: tensor<1x2x4x4xf32>) -> tensor<1x2x8x8xf32> {
  // expected-error @+1 {{expects 2 scales, got 1}}
  %y = ds.resize %x {mode = "linear", coordinate_transformation_mode = "half_pixel", nearest_mode = "floor", scales = array<f64: 2.0>} : tensor<1x2x4x4xf32> -> tensor<1x2x8x8xf32>
  return %y : tensor<1x2x8x8xf32>
}

// -----

func.func @channels(%g: tensor<1x3x8x8xf32>) -> tensor<1x2x4x4xf32> {
  // expected-error @+1 {{expects the resized tensor to keep N and C}}
  %y = ds.resize_grad %g {mode = "linear", coordinate_transformation_mode = "half_pixel", nearest_mode = "floor", scales = array<f64: 2.0, 2.0>} : tensor<1x3x8x8xf32> -> tensor<1x2x4x4xf32>
  return %y : tensor<1x2x4x4xf32>
}

// -----

func.func @negative(%x: tensor<1x2x4x4xf32>) -> tensor<1x2x8x8xf32> {
  // expected-error @+1 {{expects positive scales}}
  %y = ds.resize %x {mode = "nearest", coordinate_transformation_mode = "asymmetric", nearest_mode = "floor", scales = array<f64: 2.0, -2.0>} : tensor<1x2x4x4xf32> -> tensor<1x2x8x8xf32>
  return %y : tensor<1x2x8x8xf32>
}
