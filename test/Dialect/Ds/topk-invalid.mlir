// The verifier rules of ds.topk and ds.topk_grad.
// RUN: ds-opt %s -split-input-file -verify-diagnostics

func.func @k_too_large(%x: tensor<3x5xf32>) -> tensor<3x6xf32> {
  // expected-error @+1 {{k = 6 is outside [1, 5]}}
  %v, %i = ds.topk %x {axis = 1 : i64, k = 6 : i64} : tensor<3x5xf32> -> (tensor<3x6xf32>, tensor<3x6xi64>)
  return %v : tensor<3x6xf32>
}

// -----

func.func @wrong_shape(%x: tensor<3x5xf32>) -> tensor<3x2xf32> {
  // expected-error @+1 {{expects indices of shape 'tensor<3x5xf32>' with 2 along axis 1, got 'tensor<2x2xi64>'}}
  %v, %i = ds.topk %x {axis = 1 : i64, k = 2 : i64} : tensor<3x5xf32> -> (tensor<3x2xf32>, tensor<2x2xi64>)
  return %v : tensor<3x2xf32>
}

// -----

func.func @grad_shape(%g: tensor<3x2xf32>, %i: tensor<3x2xi64>) -> tensor<4x5xf32> {
  // expected-error @+1 {{expects grad of shape 'tensor<4x5xf32>' with 2 along axis 1, got 'tensor<3x2xf32>'}}
  %d = ds.topk_grad %g, %i {axis = 1 : i64} : (tensor<3x2xf32>, tensor<3x2xi64>) -> tensor<4x5xf32>
  return %d : tensor<4x5xf32>
}
