// The verifier rules of ds.adam and ds.sgd: one type for the parameter,
// gradient, state and accumulator; a scalar step; the clip coefficient (an
// f32 scalar) only with an accumulator.
// RUN: ds-opt %s -split-input-file -verify-diagnostics

func.func @clip_without_accumulator(%p: tensor<4xf32>, %g: tensor<4xf32>, %m: tensor<4xf32>, %v: tensor<4xf32>, %t: tensor<i64>, %c: tensor<f32>) -> tensor<4xf32> {
  // expected-error @+1 {{a clip coefficient needs a gradient accumulator}}
  %np, %nm, %nv = ds.adam %p, %g, %m, %v, %t clip %c {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = false, eps = 1.0e-08 : f64, lr = 1.0e-03 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>, tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %np : tensor<4xf32>
}

// -----

func.func @clip_not_scalar(%p: tensor<4xf32>, %g: tensor<4xf32>, %b: tensor<4xf32>, %t: tensor<i64>, %a: tensor<4xf32>, %c: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{the clip coefficient must be a scalar}}
  %np, %nb, %na = ds.sgd %p, %g, %b, %t, %a clip %c {accum_steps = 2 : i64, dampening = 0.0 : f64, lr = 1.0e-03 : f64, momentum = 0.9 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %np : tensor<4xf32>
}

// -----

func.func @clip_accepted(%p: tensor<4xf32>, %g: tensor<4xf32>, %b: tensor<4xf32>, %t: tensor<i64>, %a: tensor<4xf32>, %c: tensor<f32>) -> tensor<4xf32> {
  %np, %nb, %na = ds.sgd %p, %g, %b, %t, %a clip %c {accum_steps = 2 : i64, dampening = 0.0 : f64, lr = 1.0e-03 : f64, momentum = 0.9 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>, tensor<4xf32>, tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %np : tensor<4xf32>
}

// -----

func.func @wrong_state_type(%p: tensor<4xf32>, %g: tensor<4xf32>, %m: tensor<3xf32>, %v: tensor<4xf32>, %t: tensor<i64>) -> tensor<4xf32> {
  // expected-error @+1 {{parameter, gradient and state must have one type}}
  %np, %nm, %nv = ds.adam %p, %g, %m, %v, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = false, eps = 1.0e-08 : f64, lr = 1.0e-03 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<3xf32>, tensor<4xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %np : tensor<4xf32>
}

// -----

// The whole-tensor trust ratio over ZeRO partitions is Lamb's alone.
func.func @norm_over_ranks_without_lamb(%p: tensor<4xf32>, %g: tensor<4xf32>, %m: tensor<4xf32>, %v: tensor<4xf32>, %t: tensor<i64>) -> tensor<4xf32> {
  // expected-error @+1 {{norm_over_ranks is only for lamb = true}}
  %np, %nm, %nv = ds.adam %p, %g, %m, %v, %t {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = false, eps = 1.0e-08 : f64, lr = 1.0e-03 : f64, weight_decay = 0.0 : f64, norm_over_ranks = true} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %np : tensor<4xf32>
}
