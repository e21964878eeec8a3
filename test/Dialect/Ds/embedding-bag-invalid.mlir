// The verifier rules of ds.embedding_bag and ds.embedding_bag_grad.
// RUN: ds-opt %s -split-input-file -verify-diagnostics

func.func @mode(%w: tensor<10x4xf32>, %idx: tensor<7xi64>, %off: tensor<3xi64>) -> tensor<2x4xf32> {
  // expected-error @+1 {{mode must be "sum", "mean" or "max", got 'min'}}
  %r = ds.embedding_bag %w, %idx, %off {mode = "min"} : (tensor<10x4xf32>, tensor<7xi64>, tensor<3xi64>) -> tensor<2x4xf32>
  return %r : tensor<2x4xf32>
}

// -----

func.func @bags(%w: tensor<10x4xf32>, %idx: tensor<7xi64>, %off: tensor<3xi64>) -> tensor<3x4xf32> {
  // expected-error @+1 {{expects a [V, D] weight and [B, D] bags for B + 1 offsets}}
  %r = ds.embedding_bag %w, %idx, %off {mode = "sum"} : (tensor<10x4xf32>, tensor<7xi64>, tensor<3xi64>) -> tensor<3x4xf32>
  return %r : tensor<3x4xf32>
}

// -----

func.func @weighted_mean(%w: tensor<10x4xf32>, %idx: tensor<7xi64>, %off: tensor<3xi64>, %psw: tensor<7xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{per_sample_weights are for mode "sum" only}}
  %r = ds.embedding_bag %w, %idx, %off, %psw {mode = "mean"} : (tensor<10x4xf32>, tensor<7xi64>, tensor<3xi64>, tensor<7xf32>) -> tensor<2x4xf32>
  return %r : tensor<2x4xf32>
}

// -----

func.func @max_grad_without_table(%g: tensor<2x4xf32>, %idx: tensor<7xi64>, %off: tensor<3xi64>) -> tensor<10x4xf32> {
  // expected-error @+1 {{takes the weight in mode "max"}}
  %r = ds.embedding_bag_grad %g, %idx, %off {mode = "max"} : (tensor<2x4xf32>, tensor<7xi64>, tensor<3xi64>) -> tensor<10x4xf32>
  return %r : tensor<10x4xf32>
}
