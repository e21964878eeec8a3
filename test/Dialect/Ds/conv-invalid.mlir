// The verifier rules of the convolution ops.
// RUN: ds-opt %s -split-input-file -verify-diagnostics

func.func @channels(%x: tensor<1x4x5x5xf32>, %w: tensor<2x3x3x3xf32>) -> tensor<1x2x3x3xf32> {
  // expected-error @+1 {{convolution channels do not match: input 4, weight 2 x 3, group 1}}
  %0 = ds.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64}
      : (tensor<1x4x5x5xf32>, tensor<2x3x3x3xf32>) -> tensor<1x2x3x3xf32>
  return %0 : tensor<1x2x3x3xf32>
}

// -----

func.func @output(%x: tensor<1x3x5x5xf32>, %w: tensor<2x3x3x3xf32>) -> tensor<1x2x4x3xf32> {
  // expected-error @+1 {{the convolution's output shape does not match}}
  %0 = ds.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64}
      : (tensor<1x3x5x5xf32>, tensor<2x3x3x3xf32>) -> tensor<1x2x4x3xf32>
  return %0 : tensor<1x2x4x3xf32>
}

// -----

func.func @pads(%g: tensor<1x2x3x3xf32>, %w: tensor<2x3x3x3xf32>) -> tensor<1x3x5x5xf32> {
  // expected-error @+1 {{convolution expects 2 strides and dilations and 4 pads}}
  %0 = ds.conv_grad_input %g, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64}
      : (tensor<1x2x3x3xf32>, tensor<2x3x3x3xf32>) -> tensor<1x3x5x5xf32>
  return %0 : tensor<1x3x5x5xf32>
}

// -----

func.func @bias(%x: tensor<1x3x5x5xf32>, %w: tensor<2x3x3x3xf32>, %b: tensor<3xf32>) -> tensor<1x2x3x3xf32> {
  // expected-error @+1 {{bias must be 1-D with one element per output channel}}
  %0 = ds.conv %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 1 : i64}
      : (tensor<1x3x5x5xf32>, tensor<2x3x3x3xf32>, tensor<3xf32>) -> tensor<1x2x3x3xf32>
  return %0 : tensor<1x2x3x3xf32>
}
