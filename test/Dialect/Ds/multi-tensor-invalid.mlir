// The verifier rules of ds.multi_adam and ds.multi_sgd.
// RUN: ds-opt %s -split-input-file -verify-diagnostics

func.func @counts(%p: tensor<4xf32>, %step: tensor<i64>) -> tensor<4xf32> {
  // expected-error @+1 {{expects as many gradients and states as parameters (2), got 1}}
  %r:6 = ds.multi_adam params(%p, %p) grads(%p) exp_avgs(%p, %p) exp_avg_sqs(%p, %p) step(%step) {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = false, eps = 1.0e-8 : f64, lr = 0.01 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %r#0 : tensor<4xf32>
}

// -----

func.func @results(%p: tensor<4xf32>, %step: tensor<i64>) -> tensor<4xf32> {
  // expected-error @+1 {{expects 3 results (new parameters, then states), got 2}}
  %r:2 = ds.multi_adam params(%p) grads(%p) exp_avgs(%p) exp_avg_sqs(%p) step(%step) {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = false, eps = 1.0e-8 : f64, lr = 0.01 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>)
  return %r#0 : tensor<4xf32>
}

// -----

func.func @types(%p: tensor<4xf32>, %g: tensor<3xf32>, %step: tensor<i64>) -> tensor<4xf32> {
  // expected-error @+1 {{parameter 0, its gradient and states must have one type}}
  %r:3 = ds.multi_adam params(%p) grads(%g) exp_avgs(%p) exp_avg_sqs(%p) step(%step) {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = false, eps = 1.0e-8 : f64, lr = 0.01 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %r#0 : tensor<4xf32>
}

// -----

func.func @f16(%p: tensor<4xf16>, %step: tensor<i64>) -> tensor<4xf16> {
  // expected-error @+1 {{parameter 0 is not f32: 'tensor<4xf16>'}}
  %r:3 = ds.multi_adam params(%p) grads(%p) exp_avgs(%p) exp_avg_sqs(%p) step(%step) {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = false, eps = 1.0e-8 : f64, lr = 0.01 : f64, weight_decay = 0.0 : f64} : (tensor<4xf16>, tensor<4xf16>, tensor<4xf16>, tensor<4xf16>, tensor<i64>) -> (tensor<4xf16>, tensor<4xf16>, tensor<4xf16>)
  return %r#0 : tensor<4xf16>
}

// -----

func.func @empty(%step: tensor<i64>) {
  // expected-error @+1 {{expects at least one parameter}}
  ds.multi_adam params() grads() exp_avgs() exp_avg_sqs() step(%step) {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = false, eps = 1.0e-8 : f64, lr = 0.01 : f64, weight_decay = 0.0 : f64} : (tensor<i64>) -> ()
  return
}

// -----

func.func @sgd_buffers(%p: tensor<4xf32>, %step: tensor<i64>) -> tensor<4xf32> {
  // expected-error @+1 {{has momentum buffers but momentum 0}}
  %r:2 = ds.multi_sgd params(%p) grads(%p) momentum_buffers(%p) step(%step) {dampening = 0.0 : f64, lr = 0.1 : f64, momentum = 0.0 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> (tensor<4xf32>, tensor<4xf32>)
  return %r#0 : tensor<4xf32>
}

// -----

func.func @sgd_no_buffers(%p: tensor<4xf32>, %step: tensor<i64>) -> tensor<4xf32> {
  // expected-error @+1 {{expects a momentum buffer per parameter}}
  %r = ds.multi_sgd params(%p) grads(%p) momentum_buffers() step(%step) {dampening = 0.0 : f64, lr = 0.1 : f64, momentum = 0.9 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @lr(%p: tensor<4xf32>, %step: tensor<i64>) -> tensor<4xf32> {
  // expected-error @+1 {{learning rate -1.000000e+00 is negative}}
  %r = ds.multi_sgd params(%p) grads(%p) momentum_buffers() step(%step) {dampening = 0.0 : f64, lr = -1.0 : f64, momentum = 0.0 : f64, nesterov = false, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<i64>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}
