//===- Passes.td - ds passes -------------------------------*- tablegen -*-===//
//
// Part of the ds project.
//
//===----------------------------------------------------------------------===//

#ifndef DS_TRANSFORMS_PASSES_TD
#define DS_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def PrintCostPass : Pass<"ds-print-cost", "func::FuncOp"> {
  let summary = "Report the cost model's FLOPs and bytes of every ds op";
  let description = [{
    Emits a remark on every op that implements `CostOpInterface` with its
    FLOPs, bytes read and bytes written, and one on the function with the
    totals. It changes nothing; it shows what the recompute and schedule
    passes will see.

    ```mlir
    %0 = ds.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
    // remark: flops=1024 read=640 written=256
    ```
  }];
  let dependentDialects = ["::mlir::ds::DsDialect"];
}

#endif // DS_TRANSFORMS_PASSES_TD
