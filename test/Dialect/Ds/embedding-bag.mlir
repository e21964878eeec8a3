// ds.embedding_bag and ds.embedding_bag_grad: the round trip.
// RUN: ds-opt %s | ds-opt | FileCheck %s
// RUN: ds-opt %s --mlir-print-op-generic | ds-opt | FileCheck %s

// CHECK-LABEL: func.func @bags
func.func @bags(%w: tensor<10x4xf32>, %idx: tensor<7xi64>, %off: tensor<3xi64>, %psw: tensor<7xf32>, %g: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>, tensor<10x4xf32>, tensor<10x4xf32>) {
  // CHECK: ds.embedding_bag %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {mode = "sum"} : (tensor<10x4xf32>, tensor<7xi64>, tensor<3xi64>, tensor<7xf32>) -> tensor<2x4xf32>
  %s = ds.embedding_bag %w, %idx, %off, %psw {mode = "sum"} : (tensor<10x4xf32>, tensor<7xi64>, tensor<3xi64>, tensor<7xf32>) -> tensor<2x4xf32>
  // CHECK: ds.embedding_bag %{{.*}}, %{{.*}}, %{{.*}} {mode = "max"} : (tensor<10x4xf32>, tensor<7xi64>, tensor<3xi64>) -> tensor<2x4xf32>
  %m = ds.embedding_bag %w, %idx, %off {mode = "max"} : (tensor<10x4xf32>, tensor<7xi64>, tensor<3xi64>) -> tensor<2x4xf32>
  // CHECK: ds.embedding_bag_grad %{{.*}}, %{{.*}}, %{{.*}} per_sample_weights %{{.*}} {mode = "sum"}
  %ds = ds.embedding_bag_grad %g, %idx, %off per_sample_weights %psw {mode = "sum"} : (tensor<2x4xf32>, tensor<7xi64>, tensor<3xi64>, tensor<7xf32>) -> tensor<10x4xf32>
  // CHECK: ds.embedding_bag_grad %{{.*}}, %{{.*}}, %{{.*}} weight %{{.*}} {mode = "max"}
  %dm = ds.embedding_bag_grad %g, %idx, %off weight %w {mode = "max"} : (tensor<2x4xf32>, tensor<7xi64>, tensor<3xi64>, tensor<10x4xf32>) -> tensor<10x4xf32>
  return %s, %m, %ds, %dm : tensor<2x4xf32>, tensor<2x4xf32>, tensor<10x4xf32>, tensor<10x4xf32>
}
