// ZeRO++'s hpZ in the ZeRO pass (docs/zeropp.md): on 4 ranks with a
// partition of 2, the forward gathers the bucket over every rank (group 0)
// and keeps this rank's half of each padded parameter (w: 12 elements, v: 9
// padded to 12; ds.sp_slice over group 2, the node); the backward gathers
// those halves over group 2 only (2 x 12 elements of the node's 2 ranks);
// and the refusals.
// RUN: ds-opt %S/Inputs/two-layers.mlir --ds-autodiff '--ds-zero=world-size=4 stage=3 hpz-partition-size=2' --ds-optimizer | FileCheck %s
// RUN: ds-opt %S/Inputs/two-layers.mlir --ds-autodiff '--ds-zero=world-size=4 stage=3 hpz-partition-size=2 quantize-weights=true' | FileCheck %s --check-prefix=QW
// RUN: not ds-opt %S/Inputs/two-layers.mlir --ds-autodiff '--ds-zero=world-size=4 stage=3 hpz-partition-size=3' 2>&1 | FileCheck %s --check-prefix=WORLD
// RUN: not ds-opt %S/Inputs/two-layers.mlir --ds-autodiff '--ds-zero=world-size=4 stage=2 hpz-partition-size=2' 2>&1 | FileCheck %s --check-prefix=STAGE

// CHECK-LABEL: func.func @forward
// CHECK-SAME: ds.hpz_partition_size = 2
// CHECK: %[[C:.*]] = ds.concat %arg1, %arg2 {axis = 0 : i64} : (tensor<3xf32>, tensor<3xf32>) -> tensor<6xf32>
// CHECK-NEXT: ds.all_gather %[[C]] {group = 0 : i64} : tensor<6xf32> -> tensor<24xf32>
// CHECK: %[[W:.*]] = ds.sp_slice %{{.*}} {axis = 0 : i64, group = 2 : i64} : tensor<12xf32> -> tensor<6xf32>
// CHECK: %[[V:.*]] = ds.sp_slice %{{.*}} {axis = 0 : i64, group = 2 : i64} : tensor<12xf32> -> tensor<6xf32>
// CHECK: ds.loss_grad
// CHECK: %[[B:.*]] = ds.concat %[[V]], %[[W]] {axis = 0 : i64} : (tensor<6xf32>, tensor<6xf32>) -> tensor<12xf32>
// CHECK-NEXT: ds.all_gather %[[B]] {group = 2 : i64} : tensor<12xf32> -> tensor<24xf32>
// CHECK: ds.reduce_scatter %{{.*}} {group = 0 : i64, reduction = "mean"}
// CHECK: ds.adam %arg1,
// CHECK-NOT: ds.all_gather

// With qwZ the forward gather is quantized; the backward's node-group
// gather stays plain.
// QW-LABEL: func.func @forward
// QW: ds.quantized_all_gather %{{.*}} {block_size = 2048 : i64, group = 0 : i64} : tensor<6xf32> -> tensor<24xf32>
// QW: ds.loss_grad
// QW: ds.all_gather %{{.*}} {group = 2 : i64} : tensor<12xf32> -> tensor<24xf32>

// WORLD: error: hpz-partition-size must be 1, or at ZeRO stage 3 divide the world size, got 3
// STAGE: error: hpz-partition-size must be 1, or at ZeRO stage 3 divide the world size, got 2
