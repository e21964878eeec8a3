// ds.activation and ds.activation_grad: the round trip (custom and generic
// forms) and the verifier's rules.
// RUN: ds-opt %s --split-input-file | ds-opt --split-input-file | FileCheck %s
// RUN: ds-opt %s --split-input-file --mlir-print-op-generic | ds-opt --split-input-file | FileCheck %s

// CHECK-LABEL: func.func @activations
func.func @activations(%x: tensor<2x3xf32>, %g: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xbf16>) {
  // CHECK: %[[C:.*]] = ds.activation "clip", %{{.*}} {alpha = -1.500000e+00 : f32, beta = 6.000000e+00 : f32} : tensor<2x3xf32>
  %c = ds.activation "clip", %x {alpha = -1.5 : f32, beta = 6.0 : f32} : tensor<2x3xf32>
  // CHECK: ds.activation "sin", %[[C]] : tensor<2x3xf32>
  %s = ds.activation "sin", %c : tensor<2x3xf32>
  // CHECK: ds.activation_grad "elu", %{{.*}}, %{{.*}} {alpha = 1.000000e+00 : f32} : tensor<2x3xf32>
  %d = ds.activation_grad "elu", %x, %g {alpha = 1.0 : f32} : tensor<2x3xf32>
  %b = ds.cast %x : tensor<2x3xf32> -> tensor<2x3xbf16>
  // CHECK: ds.activation "hard_swish", %{{.*}} : tensor<2x3xbf16>
  %h = ds.activation "hard_swish", %b : tensor<2x3xbf16>
  return %s, %d, %h : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xbf16>
}
