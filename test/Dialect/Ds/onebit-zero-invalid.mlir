// The verifier rules of ds.compressed_reduce_scatter and
// ds.onebit_adam_local.
// RUN: ds-opt %s -split-input-file -verify-diagnostics

func.func @not_chunks(%b: tensor<40xf32>, %t: tensor<i64>) {
  // expected-error @+1 {{input of 40 elements is not whole chunks of the 13-element result}}
  %g, %e = ds.compressed_reduce_scatter %b, %b, %t {freeze_step = 2 : i64} : (tensor<40xf32>, tensor<40xf32>, tensor<i64>) -> (tensor<13xf32>, tensor<40xf32>)
  return
}

// -----

func.func @short_error(%b: tensor<39xf32>, %we: tensor<13xf32>, %t: tensor<i64>) {
  // expected-error @+1 {{worker error and its new value must have the input's type 'tensor<39xf32>'}}
  %g, %e = ds.compressed_reduce_scatter %b, %we, %t {freeze_step = 2 : i64} : (tensor<39xf32>, tensor<13xf32>, tensor<i64>) -> (tensor<13xf32>, tensor<13xf32>)
  return
}

// -----

func.func @momentum_without_beta1(%b: tensor<39xf32>, %t: tensor<i64>) {
  // expected-error @+1 {{momentum, its new value and beta1 come together}}
  %g, %e, %m = ds.compressed_reduce_scatter %b, %b, %t momentum %b {freeze_step = 2 : i64} : (tensor<39xf32>, tensor<39xf32>, tensor<i64>, tensor<39xf32>) -> (tensor<13xf32>, tensor<39xf32>, tensor<39xf32>)
  return
}

// -----

func.func @short_momentum(%b: tensor<39xf32>, %mom: tensor<13xf32>, %t: tensor<i64>) {
  // expected-error @+1 {{momentum and its new value must have the input's type 'tensor<39xf32>'}}
  %g, %e, %m = ds.compressed_reduce_scatter %b, %b, %t momentum %mom {beta1 = 0.9 : f64, freeze_step = 2 : i64} : (tensor<39xf32>, tensor<39xf32>, tensor<i64>, tensor<13xf32>) -> (tensor<13xf32>, tensor<39xf32>, tensor<13xf32>)
  return
}

// -----

func.func @local_f16(%p: tensor<8xf16>, %t: tensor<i64>) {
  // expected-error @+1 {{expects f32 parameters and state, got 'tensor<8xf16>'}}
  %a, %b, %c = ds.onebit_adam_local %p, %p, %p, %p, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, freeze_step = 10 : i64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64} : (tensor<8xf16>, tensor<8xf16>, tensor<8xf16>, tensor<8xf16>, tensor<i64>) -> (tensor<8xf16>, tensor<8xf16>, tensor<8xf16>)
  return
}

// -----

func.func @local_negative_lr(%p: tensor<8xf32>, %t: tensor<i64>) {
  // expected-error @+1 {{learning rate and weight decay must not be negative}}
  %a, %b, %c = ds.onebit_adam_local %p, %p, %p, %p, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, freeze_step = 10 : i64, lr = -1.0e-3 : f64, weight_decay = 0.0 : f64} : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<i64>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
  return
}
