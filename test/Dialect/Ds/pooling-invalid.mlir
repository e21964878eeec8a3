// The verifier rules of the pooling ops.
// RUN: ds-opt %s -split-input-file -verify-diagnostics

func.func @wrong_size(%x: tensor<1x2x8x8xf32>) -> tensor<1x2x5x4xf32> {
  // expected-error @+1 {{spatial dimension 0 of the pooled tensor is 5, the window gives 4}}
  %y = ds.max_pool %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>} : tensor<1x2x8x8xf32> -> tensor<1x2x5x4xf32>
  return %y : tensor<1x2x5x4xf32>
}

// -----

func.func @wrong_pads(%x: tensor<1x2x8xf32>) -> tensor<1x2x4xf32> {
  // expected-error @+1 {{expects kernel_shape, strides and dilations of 1 values and pads of 2}}
  %y = ds.avg_pool %x {kernel_shape = array<i64: 2>, strides = array<i64: 2>, pads = array<i64: 0>} : tensor<1x2x8xf32> -> tensor<1x2x4xf32>
  return %y : tensor<1x2x4xf32>
}
