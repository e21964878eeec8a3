// The verifier rules of ds.onebit_lamb_local (docs/compression.md).
// RUN: ds-opt %s -split-input-file -verify-diagnostics

func.func @bad_state(%p: tensor<4xf32>, %v: tensor<5xf32>, %c: tensor<2xf32>, %t: tensor<i64>) {
  // expected-error @+1 {{parameter, gradient, moments and fresh variance must have one type}}
  %r:5 = ds.onebit_lamb_local %p, %p, %p, %v, %p, %c, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64, freeze_step = 10 : i64, max_coeff = 10.0 : f64, min_coeff = 0.01 : f64, coeff_beta = 0.9 : f64, factor_max = 4.0 : f64, factor_min = 0.5 : f64, factor_threshold = 0.1 : f64, valid = 10 : i64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<5xf32>, tensor<4xf32>, tensor<2xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<5xf32>, tensor<4xf32>, tensor<2xf32>)
  return
}

// -----

func.func @bad_coeffs(%p: tensor<4xf32>, %c: tensor<3xf32>, %t: tensor<i64>) {
  // expected-error @+1 {{coeffs must be 2 f32, got 'tensor<3xf32>'}}
  %r:5 = ds.onebit_lamb_local %p, %p, %p, %p, %p, %c, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64, freeze_step = 10 : i64, max_coeff = 10.0 : f64, min_coeff = 0.01 : f64, coeff_beta = 0.9 : f64, factor_max = 4.0 : f64, factor_min = 0.5 : f64, factor_threshold = 0.1 : f64, valid = 10 : i64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<3xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<3xf32>)
  return
}

// -----

func.func @bad_factors(%p: tensor<4xf32>, %c: tensor<2xf32>, %t: tensor<i64>) {
  // expected-error @+1 {{expects 0 < factor_min <= factor_max, 0 < min_coeff <= max_coeff, 0 <= coeff_beta < 1 and factor_threshold >= 0}}
  %r:5 = ds.onebit_lamb_local %p, %p, %p, %p, %p, %c, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64, freeze_step = 10 : i64, max_coeff = 10.0 : f64, min_coeff = 0.01 : f64, coeff_beta = 1.0 : f64, factor_max = 4.0 : f64, factor_min = 0.5 : f64, factor_threshold = 0.1 : f64, valid = 10 : i64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2xf32>)
  return
}

// -----

func.func @bad_valid(%p: tensor<4xf32>, %c: tensor<2xf32>, %t: tensor<i64>) {
  // expected-error @+1 {{attribute 'valid' failed to satisfy constraint}}
  %r:5 = ds.onebit_lamb_local %p, %p, %p, %p, %p, %c, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64, freeze_step = 10 : i64, max_coeff = 10.0 : f64, min_coeff = 0.01 : f64, coeff_beta = 0.9 : f64, factor_max = 4.0 : f64, factor_min = 0.5 : f64, factor_threshold = 0.1 : f64, valid = 0 : i64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2xf32>)
  return
}
