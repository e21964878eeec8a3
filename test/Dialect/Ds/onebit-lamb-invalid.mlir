// The verifier rules of ds.onebit_lamb (docs/compression.md).
// RUN: ds-opt %s -split-input-file -verify-diagnostics

func.func @bad_padding(%p: tensor<100xf32>, %we: tensor<100xf32>, %se: tensor<50xf32>, %c: tensor<2xf32>, %t: tensor<i64>) {
  // expected-error @+1 {{worker error of 100 elements and server error of 50 are not the padding of 100 elements over any world size}}
  %r:7 = ds.onebit_lamb %p, %p, %p, %p, %p, %we, %se, %c, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64, freeze_step = 10 : i64, max_coeff = 10.0 : f64, min_coeff = 0.01 : f64, coeff_beta = 0.9 : f64, factor_max = 4.0 : f64, factor_min = 0.5 : f64, factor_threshold = 0.1 : f64} : (tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<50xf32>, tensor<2xf32>, tensor<i64>) -> (tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<50xf32>, tensor<2xf32>)
  return
}

// -----

func.func @bad_coeffs(%p: tensor<100xf32>, %we: tensor<104xf32>, %se: tensor<104xf32>, %c: tensor<3xf32>, %t: tensor<i64>) {
  // expected-error @+1 {{coeffs must be 2 f32, got 'tensor<3xf32>'}}
  %r:7 = ds.onebit_lamb %p, %p, %p, %p, %p, %we, %se, %c, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64, freeze_step = 10 : i64, max_coeff = 10.0 : f64, min_coeff = 0.01 : f64, coeff_beta = 0.9 : f64, factor_max = 4.0 : f64, factor_min = 0.5 : f64, factor_threshold = 0.1 : f64} : (tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<104xf32>, tensor<104xf32>, tensor<3xf32>, tensor<i64>) -> (tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<104xf32>, tensor<104xf32>, tensor<3xf32>)
  return
}

// -----

func.func @bad_factors(%p: tensor<100xf32>, %we: tensor<104xf32>, %se: tensor<104xf32>, %c: tensor<2xf32>, %t: tensor<i64>) {
  // expected-error @+1 {{expects 0 < factor_min <= factor_max, 0 < min_coeff <= max_coeff, 0 <= coeff_beta < 1 and factor_threshold >= 0}}
  %r:7 = ds.onebit_lamb %p, %p, %p, %p, %p, %we, %se, %c, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64, freeze_step = 10 : i64, max_coeff = 10.0 : f64, min_coeff = 0.01 : f64, coeff_beta = 0.9 : f64, factor_max = 0.4 : f64, factor_min = 0.5 : f64, factor_threshold = 0.1 : f64} : (tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<104xf32>, tensor<104xf32>, tensor<2xf32>, tensor<i64>) -> (tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<104xf32>, tensor<104xf32>, tensor<2xf32>)
  return
}

// -----

func.func @negative_freeze(%p: tensor<100xf32>, %we: tensor<104xf32>, %se: tensor<104xf32>, %c: tensor<2xf32>, %t: tensor<i64>) {
  // expected-error @+1 {{attribute 'freeze_step' failed to satisfy constraint}}
  %r:7 = ds.onebit_lamb %p, %p, %p, %p, %p, %we, %se, %c, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64, freeze_step = -1 : i64, max_coeff = 10.0 : f64, min_coeff = 0.01 : f64, coeff_beta = 0.9 : f64, factor_max = 4.0 : f64, factor_min = 0.5 : f64, factor_threshold = 0.1 : f64} : (tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<104xf32>, tensor<104xf32>, tensor<2xf32>, tensor<i64>) -> (tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<100xf32>, tensor<104xf32>, tensor<104xf32>, tensor<2xf32>)
  return
}
