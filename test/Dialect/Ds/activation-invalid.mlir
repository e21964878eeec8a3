// The verifier rules of ds.activation and ds.activation_grad.
// RUN: ds-opt %s -split-input-file -verify-diagnostics

func.func @unknown_kind(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{unknown activation kind 'swish'}}
  %0 = ds.activation "swish", %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @celu_zero_alpha(%x: tensor<4xf32>, %g: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{expects a non-zero alpha for celu}}
  %0 = ds.activation_grad "celu", %x, %g : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @integer_input(%x: tensor<4xi64>) -> tensor<4xi64> {
  // expected-error @+1 {{statically shaped tensor of 32-bit float or 16-bit float or bfloat16 type}}
  %0 = ds.activation "elu", %x : tensor<4xi64>
  return %0 : tensor<4xi64>
}
