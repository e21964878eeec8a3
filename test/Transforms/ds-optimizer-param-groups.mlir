// Parameter groups: the export record's ds.param_groups gives a parameter
// its own learning rate and weight decay (the HF Trainer's no-decay group);
// the others keep the pass options'.
// RUN: ds-opt %s --ds-autodiff '--ds-optimizer=optimizer=adamw lr=0.01 weight-decay=0.1' -split-input-file -verify-diagnostics | FileCheck %s

// CHECK-LABEL: func.func @forward
// CHECK-DAG: ds.adam %{{.*}} {{{.*}}lr = 1.000000e-02 : f64, weight_decay = 1.000000e-01 : f64}
// CHECK-DAG: ds.adam %{{.*}} {{{.*}}lr = 2.000000e-02 : f64, weight_decay = 0.000000e+00 : f64}
module attributes {ds.export_record = {"ds.param_groups" = "{\22b\22: {\22weight_decay\22: 0.0, \22lr\22: 0.02}}"}} {
func.func @forward(%x: tensor<2x4xf32> {ds.input = "x"}, %w: tensor<4x3xf32> {ds.param = "w", ds.trainable},
                   %b: tensor<3xf32> {ds.param = "b", ds.trainable},
                   %y: tensor<2xi64> {ds.input = "y"}) -> (tensor<f32> {ds.output = "loss", ds.loss}) {
  %h = ds.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %hb = ds.add %h, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %l = ds.softmax_cross_entropy_loss %hb, %y {reduction = "mean"} : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<f32>
  return %l : tensor<f32>
}
}

// -----

// A group naming no trained parameter is refused by name.
module attributes {ds.export_record = {"ds.param_groups" = "{\22nope\22: {\22weight_decay\22: 0.0}}"}} {
// expected-error @+1 {{the export's metadata 'ds.param_groups' names 'nope', which is not a trained parameter}}
func.func @forward(%x: tensor<2x4xf32> {ds.input = "x"}, %w: tensor<4x3xf32> {ds.param = "w", ds.trainable},
                   %y: tensor<2xi64> {ds.input = "y"}) -> (tensor<f32> {ds.output = "loss", ds.loss}) {
  %h = ds.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %l = ds.softmax_cross_entropy_loss %h, %y {reduction = "mean"} : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<f32>
  return %l : tensor<f32>
}
}

// -----

// An unknown setting is refused by name.
// expected-error @+1 {{the export's metadata 'ds.param_groups' of 'w' has the unknown setting 'momentum' (lr and weight_decay are supported)}}
module attributes {ds.export_record = {"ds.param_groups" = "{\22w\22: {\22momentum\22: 0.5}}"}} {
func.func @forward(%x: tensor<2x4xf32> {ds.input = "x"}, %w: tensor<4x3xf32> {ds.param = "w", ds.trainable},
                   %y: tensor<2xi64> {ds.input = "y"}) -> (tensor<f32> {ds.output = "loss", ds.loss}) {
  %h = ds.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %l = ds.softmax_cross_entropy_loss %h, %y {reduction = "mean"} : (tensor<2x3xf32>, tensor<2xi64>) -> tensor<f32>
  return %l : tensor<f32>
}
}
