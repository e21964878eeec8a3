// ZeRO++ in the ZeRO pass (docs/zeropp.md): qwZ turns stage 3's parameter
// gathers into ds.quantized_all_gather (the shards themselves stay f32
// arguments updated by Adam), qgZ the gradient reduce-scatters into
// ds.quantized_reduce_scatter; both together; and the refusals.
// RUN: ds-opt %S/Inputs/two-layers.mlir --ds-autodiff '--ds-zero=world-size=2 stage=3 quantize-weights=true quantize-block-size=4' --ds-optimizer | FileCheck %s
// RUN: ds-opt %S/Inputs/two-layers.mlir --ds-autodiff '--ds-zero=world-size=2 stage=2 quantize-gradients=true gradient-bits=4' --ds-optimizer | FileCheck %s --check-prefix=QG
// RUN: ds-opt %S/Inputs/two-layers.mlir --ds-autodiff '--ds-zero=world-size=2 stage=3 quantize-weights=true quantize-gradients=true' --ds-optimizer | FileCheck %s --check-prefix=BOTH
// RUN: not ds-opt %S/Inputs/two-layers.mlir --ds-autodiff '--ds-zero=world-size=2 stage=2 quantize-weights=true' 2>&1 | FileCheck %s --check-prefix=QW2
// RUN: not ds-opt %S/Inputs/two-layers.mlir --ds-autodiff '--ds-zero=world-size=2 stage=0 quantize-gradients=true' 2>&1 | FileCheck %s --check-prefix=QG0
// RUN: not ds-opt %S/Inputs/two-layers.mlir --ds-autodiff '--ds-zero=world-size=2 stage=2 quantize-gradients=true gradient-bits=2' 2>&1 | FileCheck %s --check-prefix=BITS
// RUN: not ds-opt %S/Inputs/two-layers.mlir --ds-autodiff '--ds-zero=world-size=2 stage=2 quantize-gradients=true comm-dtype=bf16' 2>&1 | FileCheck %s --check-prefix=QGBF16

// qwZ (8 bits, the default, is not printed): both passes gather the bucket (w's 6 and v's 5 elements per rank)
// quantized; the reduce-scatter stays plain; Adam updates the f32 shards.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: %arg1: tensor<6xf32> {ds.full_shape = array<i64: 4, 3>, ds.param = "w", ds.trainable}
// CHECK: %[[C:.*]] = ds.concat %arg1, %arg2 {axis = 0 : i64} : (tensor<6xf32>, tensor<5xf32>) -> tensor<11xf32>
// CHECK-NEXT: ds.quantized_all_gather %[[C]] {block_size = 4 : i64, group = 0 : i64} : tensor<11xf32> -> tensor<22xf32>
// CHECK: ds.loss_grad
// CHECK: ds.quantized_all_gather %{{.*}} {block_size = 4 : i64, group = 0 : i64} : tensor<11xf32> -> tensor<22xf32>
// CHECK: ds.reduce_scatter %{{.*}} {group = 0 : i64, reduction = "mean"} : tensor<22xf32> -> tensor<11xf32>
// CHECK: ds.adam %arg1,
// CHECK: ds.adam %arg2,
// CHECK-NOT: ds.all_gather
// CHECK-NOT: ds.quantized_reduce_scatter

// qgZ at stage 2, 4 bits, the default block of 2048.
// QG-LABEL: func.func @forward
// QG: ds.quantized_reduce_scatter %{{.*}} {bits = 4 : i64, block_size = 2048 : i64, group = 0 : i64, reduction = "mean"} : tensor<22xf32> -> tensor<11xf32>
// QG-NOT: ds.reduce_scatter
// QG: ds.all_gather
// QG-NOT: ds.quantized_all_gather

// BOTH-LABEL: func.func @forward
// BOTH-COUNT-2: ds.quantized_all_gather
// BOTH: ds.quantized_reduce_scatter %{{.*}} {block_size = 2048 : i64
// BOTH-NOT: ds.all_gather
// BOTH-NOT: ds.reduce_scatter

// QW2: error: quantize-weights needs ZeRO stage 3 (it quantizes the parameter gathers)
// QG0: error: quantize-gradients needs ZeRO stage 1-3 and fp32 gradient communication
// BITS: error: gradient-bits must be 8 or 4, got 2
// QGBF16: error: quantize-gradients needs ZeRO stage 1-3 and fp32 gradient communication
